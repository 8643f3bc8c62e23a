"""A runner process for the crash and race tests: a 5-phase pipeline, Python or shell phases.

    python runner_worker.py STORE KIND TICKET RUN WORKDIR [--wait] [--barrier]
    python runner_worker.py --zygote STORE KIND TICKET     # then, on stdin: run RUN WORKDIR | wait PID

The zygote imports phaselog once and forks a fresh runner process per ``run`` (printing ``pid N``),
so a crash test can SIGKILL hundreds of real runner processes without paying an interpreter's
start-up for each; ``wait PID`` prints ``exit PID CODE`` (CODE -9: killed by SIGKILL).

Each phase appends ``<phase> start <exec>`` and ``<phase> done <exec>`` to WORKDIR/effects.log
(its side effect) and returns ``{"exec": <exec>}``; <exec> is unique per attempt process.
Prints ``ready`` once imported, then runs; exits with the run's exit code (75 when held).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import phaselog
from zygote_support import serve

PHASES = [f"p{i}" for i in range(1, 6)]
SHELL = (
    'echo "$PHASELOG_PHASE start $$-$PHASELOG_ATTEMPT" >> effects.log; sleep 0.00{d}; '
    'echo "$PHASELOG_PHASE done $$-$PHASELOG_ATTEMPT" >> effects.log; '
    'echo "{{\\"exec\\": \\"$$-$PHASELOG_ATTEMPT\\"}}"'
)


def log(workdir: Path, line: str) -> None:
    fd = os.open(workdir / "effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def python_pipeline(workdir: Path) -> phaselog.PipelineRunner:
    pipe = phaselog.pipeline("crash5", phases=PHASES)

    def make(name: str):
        def phase(ctx):
            exec_id = f"{os.getpid()}-{ctx.attempt}"
            log(workdir, f"{name} start {exec_id}")
            time.sleep(random.uniform(0, 0.008))
            log(workdir, f"{name} done {exec_id}")
            return {"exec": exec_id}

        return phase

    for name in PHASES:
        pipe.phase(name)(make(name))
    return pipe


def shell_pipeline(workdir: Path) -> phaselog.PipelineRunner:
    manifest = workdir / "crash5-shell.json"
    if not manifest.exists():
        doc = {
            "name": "crash5-shell",
            "version": "1",
            "phases": [{"name": n, "run": SHELL.format(d=i + 2)} for i, n in enumerate(PHASES)],
        }
        tmp = manifest.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, manifest)
    return phaselog.pipeline(manifest)


def pipeline_of(kind: str, workdir: Path) -> phaselog.PipelineRunner:
    """The 5-phase pipeline of ``kind`` (python or shell) whose side effects go to ``workdir``."""
    return python_pipeline(workdir) if kind == "python" else shell_pipeline(workdir)


def run_once(store: str, kind: str, ticket: str, run: str, folder: Path, *, wait: bool = False) -> int:
    pipe = pipeline_of(kind, folder)
    try:
        result = pipe.run(ticket, run, store=store, workdir=folder, wait=wait, start_event_after=0.004)
    except phaselog.RunHeld:
        return 75
    if result.exit_code != 0:  # said on stderr, for the test's failure report
        print(json.dumps(result.to_json()), file=sys.stderr, flush=True)
    return result.exit_code


def zygote(store: str, kind: str, ticket: str) -> int:
    return serve(lambda run, folder: run_once(store, kind, ticket, run, folder),
                 lambda run, folder: run_once(store, kind, f"{ticket}-WARMUP", run, folder))  # fmt: skip


def main() -> int:
    if sys.argv[1] == "--zygote":
        return zygote(*sys.argv[2:5])
    store, kind, ticket, run, workdir = sys.argv[1:6]
    wait = "--wait" in sys.argv[6:]
    folder = Path(workdir)
    go = folder / "go"
    print("ready", flush=True)
    if "--barrier" in sys.argv[6:]:
        while not go.exists():
            time.sleep(0.001)
    return run_once(store, kind, ticket, run, folder, wait=wait)


if __name__ == "__main__":
    sys.exit(main())
