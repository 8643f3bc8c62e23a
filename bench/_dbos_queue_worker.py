"""A DBOS queue worker for ``bench_queue``: ``python _dbos_queue_worker.py URL SCHEMA STAMPS``.

One DBOS executor (``DBOS__VMID`` names it) with the queue ``bench`` (worker concurrency 1,
polling every 0.1 s) and the workflow ``bench_wf``: three steps, the first writing the time it
started to ``STAMPS/<workflow id>``. Prints ``ready`` once launched; runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

from dbos import DBOS

url, schema, stamps = sys.argv[1], sys.argv[2], sys.argv[3]
DBOS(
    config={
        "name": "phaselog-bench-queue",
        "system_database_url": url,
        "dbos_system_schema": schema,
        "run_admin_server": False,
        "log_level": "WARNING",
    }
)
logging.getLogger("dbos").setLevel(logging.WARNING)


@DBOS.step()
def first(wf: str) -> int:
    with open(os.path.join(stamps, wf), "w") as f:
        f.write(repr(time.time()))
    return 0


@DBOS.step()
def noop(i: int) -> int:
    return i


@DBOS.workflow()
def bench_wf(wf: str) -> None:
    first(wf)
    noop(1)
    noop(2)


signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
DBOS.launch()
DBOS.register_queue("bench", worker_concurrency=1, polling_interval_sec=0.1)
print("ready", flush=True)
signal.sigwait({signal.SIGTERM, signal.SIGINT})
DBOS.destroy()
