"""A queued run finished by hand (``phaselog run``, ``write``) is retired by the next claim (D119).

Issue 20: such a run stayed ``queued``, and the worker that claimed it later marked it ``done``
as if it had run it. Now the claim runs nothing and the row says why it is done. Real worker
processes on a real PostgreSQL (a schema per test).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from queue_support import base_env, cli, effects
from test_workers import burst, entry, setup, submit

__all__ = ["setup"]  # the fixture, shared with test_workers.py


def test_a_queued_run_finished_by_hand_is_retired_by_the_next_claim_without_running(
    setup: tuple[str, Path, Path],
) -> None:
    url, pipelines, work = setup
    manifest = str(pipelines / "three.yaml")
    by_run = submit(url, "H-1", "--pipeline-file", manifest)["run_id"]
    by_write = submit(url, "H-2", "--pipeline-file", manifest)["run_id"]
    untouched = submit(url, "H-3", "--pipeline-file", manifest)["run_id"]
    env = base_env({"PYTHONPATH": f"{pipelines}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    hand = ["--store", url, "--pipeline-file", manifest]
    ran = cli("run", *hand, "--ticket-id", "H-1", "--run-id", by_run, cwd=work, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for phase in ("one", "two", "three"):
        wrote = cli(
            "write", *hand, "--ticket-id", "H-2", "--run-id", by_write, "--phase", phase,
            "--payload", json.dumps({"exec": "by-hand"}),
        )  # fmt: skip
        assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    # The row is the workers' to-do list, not the run's truth: until a worker claims it, it says queued.
    assert entry(url, "H-1", by_run)["state"] == "queued"
    by_hand = len(effects(work))
    assert by_hand == 6  # H-1's three phases, each a start and a done line

    summary = burst(url, pipelines, work)
    assert summary["outcomes"] == {"done": 3}
    for ticket, rid in (("H-1", by_run), ("H-2", by_write)):
        row = entry(url, ticket, rid)
        assert row["state"] == "done"
        assert row["reason"].startswith("completed outside the queue"), row
        assert "nothing ran" in row["reason"]
        assert row["phase"] is None  # no phase was started by a worker
    assert entry(url, "H-3", untouched)["reason"] is None  # run by the worker: an ordinary done
    ran_by_worker = [e for e in effects(work)[by_hand:] if e[2] == "start"]
    assert {e[0] for e in ran_by_worker} == {untouched}  # nothing of H-1 or H-2 ran again
