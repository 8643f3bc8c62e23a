"""``phaselog worker --concurrency N``: N worker processes under one supervisor.

Each child is a plain ``phaselog worker`` (concurrency 1) with the same options: one run at a
time in its main thread, its own heartbeat row and connections. The supervisor forwards
SIGTERM/SIGINT to every child and waits for them (each finishes its phase, releases its run);
a child that dies while the pool is not stopping is started again after a short pause (its run
is recovered by the queue's rules). With ``--burst`` children that exit 0 are not replaced.

Each child writes its JSON summary into a file of the supervisor's (``--summary-file``), not on
stdout: the pool prints one JSON document, its own summary with every child's in ``workers``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phaselog.runner.worker import WorkerOptions

RESTART_PAUSE_S = 1.0


def run_pool(
    store_url: str, options: WorkerOptions, n: int, *, quiet: bool, echo: Callable[[str], None] = lambda _t: None
) -> dict[str, Any]:
    """Run ``n`` worker processes with ``options`` on the store at ``store_url`` until they end
    (:func:`supervise`'s summary)."""
    return supervise(child_command(child_args(store_url, options, quiet=quiet)), n, burst=options.burst, echo=echo)


def child_args(store_url: str, options: WorkerOptions, *, quiet: bool) -> list[str]:
    """The ``phaselog worker`` arguments of one child: the pool's options, one run at a time.

    Durations go as plain seconds (``repr`` of a float reads back as the same float), folders as
    absolute paths (a child may start elsewhere)."""
    args = ["worker", "--store", store_url, "--queue", options.queue]
    args += ["--grace", repr(options.grace), "--lease-ttl", repr(options.ttl), "--poll", repr(options.poll)]
    args += ["--max-recoveries", str(options.max_recoveries)]
    args += ["--log-cap", str(options.log_cap)] if options.log_cap is not None else []
    args += ["--max-parallel", str(options.max_parallel)] if options.max_parallel != 1 else []
    for flag, value in (
        ("--pipelines", options.pipelines),
        ("--workdir", options.workdir),
        ("--log-dir", options.log_dir),
    ):
        if value is not None:
            args += [flag, str(Path(value).absolute())]
    args += (["--burst"] if options.burst else []) + (["--quiet"] if quiet else [])
    args += ["--max-runs", str(options.max_runs)] if options.max_runs else []
    return args


def supervise(
    child_argv: Sequence[str], n: int, *, burst: bool, echo: Callable[[str], None] = lambda _t: None
) -> dict[str, Any]:
    """Run ``n`` children of ``child_argv`` (a ``phaselog worker`` command line) until they end.

    Returns the pool's summary: ``exit_code``, ``runs`` and ``outcomes`` summed over the children,
    and ``workers``: each child's summary (``worker``, ``pid``, ``runs``, ``outcomes``,
    ``exit_code``; a child killed before it could write one has ``worker`` None), in start order.
    """
    with tempfile.TemporaryDirectory(prefix="phaselog-pool-") as folder:
        started: list[tuple[int, Path]] = []
        code = _supervise(child_argv, n, burst=burst, echo=echo, folder=Path(folder), started=started)
        workers = [_summary_of(pid, path) for pid, path in started]
    outcomes: dict[str, int] = {}
    for w in workers:
        for state, count in (w["outcomes"] or {}).items():
            outcomes[state] = outcomes.get(state, 0) + count
    return {
        "exit_code": code,
        "runs": sum(w["runs"] or 0 for w in workers),
        "outcomes": outcomes,
        "workers": workers,
    }


def _summary_of(pid: int, path: Path) -> dict[str, Any]:
    """A child's summary from its file (None fields when it died before writing it)."""
    found: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        found = json.loads(path.read_text(encoding="utf-8"))
    return {
        "worker": found.get("worker"),
        "pid": pid,
        "runs": found.get("runs"),
        "outcomes": found.get("outcomes"),
        "exit_code": found.get("exit_code"),
    }


def _supervise(
    child_argv: Sequence[str],
    n: int,
    *,
    burst: bool,
    echo: Callable[[str], None],
    folder: Path,
    started: list[tuple[int, Path]],
) -> int:
    stopping: list[int] = []
    children: dict[int, subprocess.Popen[bytes]] = {}

    def start(slot: int) -> None:
        summary = folder / f"worker-{len(started) + 1}.json"
        children[slot] = subprocess.Popen([*child_argv, "--summary-file", str(summary)])
        started.append((children[slot].pid, summary))
        echo(f"worker {slot + 1}/{n}: pid {children[slot].pid}")

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)
        for proc in children.values():
            if proc.poll() is None:
                proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    codes: dict[int, int] = {}
    try:
        for slot in range(n):
            start(slot)
        while children:
            time.sleep(0.2)
            for slot, proc in list(children.items()):
                code = proc.poll()
                if code is None:
                    continue
                del children[slot]
                codes[slot] = code
                if stopping or (burst and code == 0):
                    continue
                echo(f"worker {slot + 1}/{n} (pid {proc.pid}) exited {code}; starting another in {RESTART_PAUSE_S:g} s")
                time.sleep(RESTART_PAUSE_S)
                if not stopping:
                    start(slot)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if stopping:
        return 0 if all(c == 0 for c in codes.values()) else 128 + stopping[0]
    return max(codes.values(), default=0)


def child_command(args: Sequence[str]) -> list[str]:
    """The command line of one child: this interpreter running ``phaselog`` with ``args``."""
    return [sys.executable, "-m", "phaselog", *args]
