"""`ctx.step_done(n)` says step n is done, `ctx.resume_after` is the last step done: a phase killed
(SIGKILL, a real process) inside step 4 resumes at step 4 and never redoes steps 1-3."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.stores import open_store

PHASE = """
import sys, time
from pathlib import Path
import phaselog

pipe = phaselog.pipeline("chunks", phases=["work"])

@pipe.phase("work")
def work(ctx):
    effects = ctx.workdir / "effects.log"
    def note(text):
        with effects.open("a") as f:
            f.write(text + "\\n")
    note(f"attempt {ctx.attempt} resume_after {ctx.resume_after}")
    for i in range(ctx.resume_after + 1, 7):
        note(f"start {i}")
        if i == 4 and ctx.attempt == 1:
            (ctx.workdir / "inside-step-4").write_text("")
            time.sleep(300)  # killed here
        note(f"done {i}")
        ctx.step_done(i, output=f"chunk {i}")
    return {"chunks": 6}

pipe.run(sys.argv[1], sys.argv[2], store=sys.argv[3], workdir=sys.argv[4], quiet=True)
"""


def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "files":
        return str(tmp_path / "store")
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    url: str = request.getfixturevalue("pg_schema_url")
    return url


@pytest.mark.all_stores
def test_a_phase_killed_in_step_4_resumes_at_step_4_and_never_redoes_steps_1_to_3(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = store_url(backend, tmp_path, request)
    script = tmp_path / "chunks.py"
    script.write_text(PHASE)
    work = tmp_path / "work"
    work.mkdir()
    args = [sys.executable, str(script), "STEP-1", "r1", url, str(work)]
    first = subprocess.Popen(args, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (work / "inside-step-4").exists():
        assert first.poll() is None, "the runner ended before step 4"
        assert time.monotonic() < deadline, "step 4 never started"
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait(timeout=30) == -signal.SIGKILL

    ledger = Ledger(open_store(url))
    pl = phaselog.pipeline("chunks", phases=["work"]).pipeline  # the script's pipeline
    try:
        st = ledger.status("STEP-1", "r1", pipeline=pl)
        flight = st.phase("work").in_flight
        assert flight is not None
        assert flight["resume_after"] == 3  # the last step recorded done
        second = subprocess.run(args, stdin=subprocess.DEVNULL, timeout=120, check=False)
        assert second.returncode == 0
        assert ledger.status("STEP-1", "r1", pipeline=pl).phase("work").state == "completed"
        steps = [e.step for e in ledger.progress_events("STEP-1", "r1", "work", 1, pipeline=pl) if e.event == "step"]
        assert steps == [1, 2, 3]
    finally:
        ledger.close()
    assert (work / "effects.log").read_text().splitlines() == [
        "attempt 1 resume_after 0",
        *[f"{what} {i}" for i in (1, 2, 3) for what in ("start", "done")],
        "start 4",  # killed inside step 4
        "attempt 2 resume_after 3",
        *[f"{what} {i}" for i in (4, 5, 6) for what in ("start", "done")],
    ]


def test_step_done_takes_a_step_from_1(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("steps", phases=["work"])

    @pipe.phase("work")
    def work(ctx: Any) -> Any:
        ctx.step_done(0)
        return {}

    with pytest.raises(phaselog.PhaseFailed, match=r"step must be an integer ≥ 1, got 0"):
        pipe.run("STEP-2", "r", store=ledger, workdir=tmp_path, quiet=True)


def test_the_old_names_still_work_and_say_they_are_deprecated(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("steps", phases=["work"])
    seen: list[Any] = []

    @pipe.phase("work")
    def work(ctx: Any) -> Any:
        with pytest.warns(DeprecationWarning, match="ctx.resume_after"):
            seen.append(ctx.resume_from_step)
        with pytest.warns(DeprecationWarning, match=r"ctx.step_done\(n\)"):
            ctx.step(2, output="old style")
        return {}

    pipe.run("STEP-3", "r", store=ledger, workdir=tmp_path, quiet=True)
    assert seen == [None]
    events = ledger.progress_events("STEP-3", "r", "work", 1, pipeline=pipe.pipeline)
    assert [(e.event, e.step) for e in events] == [("start", None), ("step", 2)]
