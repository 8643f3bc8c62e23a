"""A runner that is SIGKILLed in the middle of a phase, then a rerun that completes the run.

    python killed_run.py STORE TICKET RUN WORKDIR

Phase ``gather`` records a step with some output text; on the first run (no WORKDIR/second) it
then touches WORKDIR/ready and sleeps until it is killed. The rerun (WORKDIR/second exists)
records its step and completes; ``build`` completes at once. :func:`killed_then_completed` does
both with real processes and a real SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OUTPUT = "downloaded 3 files <b>&amp;</b> a long tail: " + "x" * 400


def main() -> int:
    import phaselog

    store, ticket, run, workdir = sys.argv[1:5]
    folder = Path(workdir)
    pipe = phaselog.pipeline("killed", phases=["gather", "build"])

    @pipe.phase("gather")
    def gather(ctx):  # type: ignore[no-untyped-def]
        ctx.step(1, output=OUTPUT)
        if not (folder / "second").exists():
            (folder / "ready").touch()
            time.sleep(120)
        return {"ok": 1}

    @pipe.phase("build")
    def build(ctx):  # type: ignore[no-untyped-def]
        return {"ok": 2}

    return pipe.run(ticket, run, store=store, workdir=folder, start_event_after=0).exit_code


def killed_then_completed(store: str, ticket: str, run: str, workdir: Path) -> int:
    """Run, SIGKILL the runner while ``gather`` attempt 1 sleeps, rerun to the end; the killed pid."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, store, ticket, run, str(workdir)]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (workdir / "ready").exists():
        assert first.poll() is None, "the first runner ended before it was killed"
        assert time.monotonic() < deadline, "the first runner never reached its sleep"
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait(timeout=30) == -signal.SIGKILL
    (workdir / "second").touch()
    second = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    return first.pid


if __name__ == "__main__":
    sys.exit(main())
