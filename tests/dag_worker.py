"""A runner process for the DAG crash test: the 5-phase DAG of shell phases, side by side.

    python dag_worker.py --zygote STORE TICKET     # then, on stdin: run RUN WORKDIR | wait PID

As tests/runner_worker.py: the zygote imports phaselog once and forks a fresh runner process per
``run`` (printing ``pid N``); ``wait PID`` prints ``exit PID CODE`` (CODE -9: killed by SIGKILL).
Each runner runs what ``phaselog run --pipeline-file dag.json --max-parallel 4`` runs (the same
``pipe.run``). Each phase appends ``<phase> start <exec> <runner>`` and ``<phase> done <exec> <runner>``
to WORKDIR/effects.log and returns ``{"exec": <exec>}``; <exec> is unique per attempt process,
<runner> is the runner process's pid (the command's parent).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import phaselog
from zygote_support import serve

NEEDS: dict[str, list[str]] = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"], "e": ["b", "c"]}
SHELL = (
    'echo "$PHASELOG_PHASE start $$-$PHASELOG_ATTEMPT $PPID" >> effects.log; '
    'echo "$PHASELOG_PHASE done $$-$PHASELOG_ATTEMPT $PPID" >> effects.log; '
    'echo "{\\"exec\\": \\"$$-$PHASELOG_ATTEMPT\\"}"'
)


def pipeline_of(workdir: Path) -> phaselog.PipelineRunner:
    manifest = workdir / "dag.json"
    if not manifest.exists():
        phases = [{"name": n, "needs": w, "run": SHELL} for n, w in NEEDS.items()]
        tmp = manifest.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"name": "dag5-crash", "version": "1", "phases": phases}))
        os.replace(tmp, manifest)
    return phaselog.pipeline(manifest)


def run_once(store: str, ticket: str, run: str, folder: Path) -> int:
    pipe = pipeline_of(folder)
    try:
        result = pipe.run(ticket, run, store=store, workdir=folder, quiet=True, max_parallel=4, start_event_after=0.004)
    except phaselog.RunHeld:
        return 75
    if result.exit_code != 0:
        print(json.dumps(result.to_json()), file=sys.stderr, flush=True)
    return result.exit_code


def zygote(store: str, ticket: str) -> int:
    return serve(lambda run, folder: run_once(store, ticket, run, folder),
                 lambda run, folder: run_once(store, f"{ticket}-WARMUP", run, folder))  # fmt: skip


if __name__ == "__main__":
    sys.exit(zygote(sys.argv[2], sys.argv[3]))
