"""The runner's result and heartbeat, as cheap as they are now, say what they said before.

``RunResult.status`` is derived from the snapshot the run was planned from plus the records the
run wrote (no second read): it must equal what a fresh ``status`` derives, whatever the run did —
retries, a gate, a rejection, an abandoned attempt taken over, a phase that fails for good. One
heartbeat thread serves every run of a process, and still writes a slow attempt's start event.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.ledger.facade import Ledger

pytestmark = pytest.mark.all_stores


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _same_as_a_fresh_read(ledger: Ledger, result: phaselog.RunResult, pipe: Any) -> None:
    fresh = ledger.status(result.ticket_id, result.run_id, pipeline=pipe.pipeline)
    assert result.status is not None
    assert result.status.to_json() == fresh.to_json()
    assert result.status == fresh


def test_the_result_state_is_what_a_fresh_read_derives(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline(
        "result-job", phases=["fetch", "clean", {"name": "review", "requires_approval": True}, "ship"]
    )
    flaky = {"fetch": 1}

    @pipe.phase("fetch", retries=2)
    def fetch(ctx: Any) -> Any:
        if flaky["fetch"]:
            flaky["fetch"] -= 1
            raise RuntimeError("network down")
        return {"rows": 3}

    @pipe.phase("clean")
    def clean(ctx: Any) -> Any:
        return {"rows": ctx.payload("fetch")["rows"]}

    @pipe.phase("review")
    def review(ctx: Any) -> Any:
        return {"cut": ctx.attempt}

    @pipe.phase("ship")
    def ship(ctx: Any) -> Any:
        return {}

    pl = pipe.pipeline
    # A runner that died inside `clean` before this one started: its attempt is abandoned.
    ledger.progress("RES-1", "r", "clean", "start", pid=_dead_pid(), pipeline=pl)
    first = pipe.run("RES-1", "r", store=ledger, workdir=tmp_path)
    assert first.waiting == "review"
    assert first.outcome("fetch").attempts == (1, 2)
    _same_as_a_fresh_read(ledger, first, pipe)
    assert first.state("clean") == "completed"

    again = pipe.run("RES-1", "r", store=ledger, workdir=tmp_path)  # nothing runs: the plan's state
    assert [p.outcome for p in again.phases] == ["skipped", "skipped", "waiting", "not_reached"]
    _same_as_a_fresh_read(ledger, again, pipe)

    ledger.reject("RES-1", "r", "review", by="ana", comment="shorter", pipeline=pl)
    redo = pipe.run("RES-1", "r", store=ledger, workdir=tmp_path)
    assert redo.outcome("review").attempts == (2,)
    _same_as_a_fresh_read(ledger, redo, pipe)

    ledger.approve("RES-1", "r", "review", by="ana", pipeline=pl)
    done = pipe.run("RES-1", "r", store=ledger, workdir=tmp_path)
    assert done.exit_code == 0
    _same_as_a_fresh_read(ledger, done, pipe)
    assert done.states == {"fetch": "completed", "clean": "completed", "review": "completed", "ship": "completed"}


def test_the_result_of_a_phase_that_fails_for_good_is_what_a_fresh_read_derives(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("failing-job", phases=["a", "b", "c"])
    pipe.phase("a")(lambda ctx: {})

    @pipe.phase("b", retries=1)
    def b(ctx: Any) -> Any:
        raise ValueError("bad input")

    pipe.phase("c")(lambda ctx: {})
    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("RES-2", "r", store=ledger, workdir=tmp_path)
    result = info.value.result
    assert result.failed == "b"
    assert result.state("b") == "failed"
    _same_as_a_fresh_read(ledger, result, pipe)


def test_one_heartbeat_thread_serves_every_run_and_still_writes_start_events(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("beat-job", phases=["quick", "slow"])
    pipe.phase("quick")(lambda ctx: {})

    @pipe.phase("slow")
    def slow(ctx: Any) -> Any:
        time.sleep(1.0)  # past start_event_after below: the heartbeat writes its start event
        return {}

    for n in range(3):
        pipe.run("BEAT-1", f"r{n}", store=ledger, workdir=tmp_path, start_event_after=0.25)
        beats = [t for t in threading.enumerate() if t.name == "phaselog-heartbeat"]
        assert len(beats) == 1, beats
        slow_events = ledger.progress_events("BEAT-1", f"r{n}", "slow", 1, pipeline=pipe.pipeline)
        assert [e.event for e in slow_events] == ["start"]
        assert ledger.progress_events("BEAT-1", f"r{n}", "quick", 1, pipeline=pipe.pipeline) == []
