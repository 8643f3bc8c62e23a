"""One decision of an attempt's state (D86), used by status, the timeline and the attempts pages.

The run that shows it is real: a runner process SIGKILLed in the middle of a phase, and a rerun
that completes the run (tests/killed_run.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import phaselog
from helpers import T0
from killed_run import killed_then_completed
from phaselog.ledger.attempts import Liveness, attempt_state
from phaselog.model.entries import ProgressEvent
from phaselog.views.run_page import attempts_page
from phaselog.views.timeline import run_timeline

PHASELOG = str(Path(sys.executable).parent / "phaselog")


@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_a_sigkilled_attempt_is_abandoned_in_every_view_after_the_run_completed(kind: str, tmp_path: Path) -> None:
    store = str(tmp_path / "store") if kind == "files" else f"sqlite:///{tmp_path}/ledger.db"
    pid = killed_then_completed(store, "KILL-1", "r1", tmp_path / "work")
    url = f"file://{store}" if kind == "files" else store
    out = subprocess.run(
        [PHASELOG, "status", "--store", url, "--ticket-id", "KILL-1", "--run-id", "r1"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    gather = next(p for p in json.loads(out.stdout)["phases"] if p["phase"] == "gather")
    assert (gather["state"], gather["latest_attempt"]) == ("completed", 2)
    assert gather["attempts"] == 2  # the killed attempt 1 is an attempt too, as "newest: attempt 2" says
    ledger = phaselog.open(store)
    try:
        spans = {(s.phase, s.attempt): s for s in run_timeline(ledger, "KILL-1", "r1")}
        killed = spans[("gather", 1)]
        assert killed.state == "abandoned"
        assert killed.reason is not None
        assert f"process {pid} " in killed.reason
        assert spans[("gather", 2)].state == "completed"
        page = {(s.phase, s.attempt): s for s in attempts_page(ledger, "KILL-1", "r1").spans}
        assert page[("gather", 1)].state == "abandoned"
        assert page[("gather", 1)].reason == killed.reason
        assert ledger.status("KILL-1", "r1").phase("gather").attempts == 2
    finally:
        ledger.close()


def _event(attempt: int, seq: int, event: str, *, pid: int | None = None, at: float = 0.0) -> ProgressEvent:
    return ProgressEvent(
        ticket_id="T-1",
        run_id="00000000-0000-0000-0000-000000000001",
        phase="gather",
        phase_ordinal=1,
        attempt_number=attempt,
        seq=seq,
        event=event,
        timestamp=T0 + timedelta(seconds=at),
        host="box" if pid is not None else None,
        pid=pid,
        process_start=100.0 if pid is not None else None,
    )


ALIVE = Liveness(T0 + timedelta(seconds=5), timedelta(hours=1), "box", lambda pid: 100.0)
GONE = Liveness(T0 + timedelta(seconds=5), timedelta(hours=1), "box", lambda pid: None)


def test_an_attempt_without_a_checkpoint_below_a_newer_one_is_abandoned_even_if_its_process_lives() -> None:
    events = [_event(1, 1, "start", pid=7)]
    alone = attempt_state(attempt=1, outcome=None, events=events, live=ALIVE)
    assert alone is not None
    assert alone.state == "in_progress"
    superseded = attempt_state(attempt=1, outcome=None, events=events, newer=2, live=ALIVE)
    assert superseded is not None
    assert superseded.state == "abandoned"
    assert superseded.reason is not None
    assert "attempt 2" in superseded.reason
    gone = attempt_state(attempt=1, outcome=None, events=events, newer=2, live=GONE)
    assert gone is not None
    assert gone.reason == "process 7 on box is gone"  # the provable reason first
    assert attempt_state(attempt=1, outcome=None, events=[], live=ALIVE) is None


def test_a_gated_attempt_awaits_approval_only_while_it_is_the_newest_and_unjudged() -> None:
    def state(**kw: object) -> str | None:
        got = attempt_state(attempt=1, outcome="completed", gated=True, **kw)  # type: ignore[arg-type]
        return got.state if got is not None else None

    assert state() == "awaiting_approval"
    assert state(verdict="approved") == "completed"
    assert state(verdict="rejected") == "completed"  # the verdict is shown beside it
    assert state(newer=2) == "completed"
    assert attempt_state(attempt=1, outcome="failed", error="boom") is not None
    assert attempt_state(attempt=1, outcome=None, damaged=True).state == "damaged"  # type: ignore[union-attr]
