"""Store errors while recording never kill a phase that succeeded: retried, then reported.

A real PostgreSQL behind a TCP proxy that cuts the connection at COMMIT and then refuses every
reconnection for a while (a database restarting): the phase ran once, and its checkpoint is
recorded exactly once when the database is back.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from tests.test_sql_crash import raw, through_cutter

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.stores import open_store


@pytest.mark.parametrize("mode", ["after", "before"])
def test_a_store_outage_while_recording_is_retried_and_the_phase_runs_once(pg_schema_url: str, mode: str) -> None:
    cutter, store = through_cutter(pg_schema_url)
    ledger = Ledger(store)
    ran: list[int] = []
    pipe = phaselog.pipeline("outage", phases=["work", "after"])

    @pipe.phase("work")
    def work(ctx: Any) -> Any:
        ran.append(ctx.attempt)
        cutter.arm(mode, refuse=100_000)  # the checkpoint's COMMIT is cut, and the database "restarts"
        threading.Timer(4.0, lambda: setattr(cutter, "refuse", 0)).start()  # back after 4 s
        return {"rows": 7}

    pipe.phase("after")(lambda ctx: {})
    try:
        result = pipe.run("OUT-1", "r", store=ledger, handle_signals=False)
    finally:
        store.close()
        cutter.close()
    assert ran == [1]  # the phase was not run again because recording it failed for a while
    assert result.done
    assert cutter.cuts == 1
    run = phaselog.normalize_run_id("r")
    rows = raw(
        pg_schema_url,
        "SELECT phase, attempt, status FROM phaselog_checkpoints WHERE run_id = ? ORDER BY phase_ordinal, attempt",
        (run,),
    )
    assert rows == [("work", 1, "completed"), ("after", 1, "completed")]
    check = Ledger(open_store(pg_schema_url))
    try:
        assert check.verify("OUT-1").ok
    finally:
        check.close()


def test_a_store_that_stays_down_is_reported_with_the_phase_output(pg_schema_url: str) -> None:
    cutter, store = through_cutter(pg_schema_url)
    ledger = Ledger(store)
    pipe = phaselog.pipeline("outage", phases=["work"])

    @pipe.phase("work")
    def work(ctx: Any) -> Any:
        cutter.arm("before", refuse=100_000_000)
        return {"rows": 7}

    from phaselog.runner import engine

    saved = engine.RECORD_RETRY_DELAYS
    engine.RECORD_RETRY_DELAYS = (0.1, 0.2)  # fewer tries: the outcome is the same, sooner
    try:
        with pytest.raises(phaselog.RecordingFailed) as info:
            pipe.run("OUT-2", "r", store=ledger, handle_signals=False)
    finally:
        engine.RECORD_RETRY_DELAYS = saved
        store.close()
        cutter.close()
    assert info.value.context["payload"] == {"rows": 7}
    assert info.value.context["phase"] == "work"
    assert "could not be recorded" in info.value.message
