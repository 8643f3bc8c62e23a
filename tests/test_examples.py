"""`make demo` and the examples run as a user runs them (slow: the demo simulates real work)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_demo_kills_the_ticket_agent_in_phase_3_and_the_rerun_skips_phases_1_and_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "demo.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    first, rest = out.split("== 2.", 1)
    second = rest.split("== 3.", 1)[1].split("== 4.", 1)[0]
    assert "▶ phase 3 create_pr (attempt 1)" in first
    assert "killed by signal 9 in the middle of phase 3" in first
    assert "abandoned: process" in rest.split("== 3.", 1)[0]  # status and explain say why
    assert "▶ phase 1" not in second
    assert "▶ phase 2" not in second
    assert "skip implement" in second
    assert "skip local_review" in second
    assert "▶ phase 3 create_pr (attempt 2)" in second
    assert "attempt 2 resumes create_pr after step 2" in second  # steps 1-2 were done: not redone
    assert "open the pull request (1/5)" not in second
    assert "open the pull request (3/5)" in second
    assert "pipeline finished" in second
    assert "verified" in out
    assert ": ok" in out
    data = out.split("== 5.", 1)[1].split("== 6.", 1)[0]
    explained = data.split("phaselog explain", 1)[1]
    assert re.search(r"fetch\s*│\s*skip", explained)  # explain: the edited artifact's phase and after it run
    assert re.search(r"clean\s*│\s*run", explained)
    assert re.search(r"report\s*│\s*run", explained)
    video = out.split("== 6.", 1)[1]
    assert "redone after a rejection: 'too long: one idea only'" in video
    assert video.count("waiting for approval") == 3
    assert '"publish": "completed"' in video
    dag = out.split("== 7.", 1)[1].split("== 8.", 1)[0]  # the video DAG: voice-over and b-roll side by side
    assert re.search(
        r"voice_over ran [\d.]+-[\d.]+ s and b_roll [\d.]+-[\d.]+ s after the run began: side by side", dag
    )
    # After the demo, a newcomer is told how to put `phaselog` on the PATH, and the commands shown work as
    # printed (the virtualenv is not active in the shell that ran `make demo`).
    told = out.split("try it yourself", 1)[1]
    activate = re.search(r"^\s+(\. \S+/bin/activate)$", told, re.MULTILINE)
    assert activate is not None, told
    shown = re.findall(r"^\s+(phaselog .+)$", told, re.MULTILINE)
    assert len(shown) >= 2
    for line in shown:
        ran = subprocess.run(
            ["bash", "-c", f"{activate.group(1)} && {line}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert ran.returncode == 0, (line, ran.stdout[-2000:], ran.stderr[-2000:])
        assert "create_pr" in ran.stdout  # the demo run's phase 3, in status's table and in history
        assert "stale" not in ran.stdout  # status checks the artifacts where the demo's agent wrote them
