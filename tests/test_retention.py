"""Retention (``prune``) on every store: what it removes, what it never removes, and that every
link check (validate, resume, fork, verify) honours its notes afterwards.

The races with writers and the crash tests are in tests/test_prune_races.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from conftest import IMPLEMENT
from phaselog.ids import normalize_run_id
from phaselog.ledger import Ledger
from phaselog.pipelines import Pipeline, pipeline_from_dict
from phaselog.retention import prune
from phaselog.stores.base import Store

pytestmark = pytest.mark.all_stores

T = "RET-1"
R1 = "run-a"
RUN1 = normalize_run_id(R1)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

DATA = pipeline_from_dict(
    {
        "name": "data-job",
        "version": "1",
        "order": "free",
        "phases": [
            {"name": "data_ingest", "payload_schema": {"type": "object"}},
            {"name": "data_analysis", "payload_schema": {"type": "object"}},
            {"name": "an_a_a", "payload_schema": {"type": "object"}},
        ],
    }
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def led(store: Store, clock: Clock) -> Ledger:
    return Ledger(store, clock=clock)


def impl(i: int) -> dict[str, Any]:
    return {**IMPLEMENT, "files_changed": [f"src/f{i}.py"]}


def event_names(store: Store) -> list[str]:
    return store.entry_names("progress", T, RUN1)


def test_keep_last_removes_the_events_of_phases_whose_name_holds_a_(led: Ledger, store: Store) -> None:
    # Issue 9: "data_analysis" was split at its first "_a"; its events stayed behind while the
    # checkpoints they belong to went, so status showed a pruned attempt in progress.
    pl: Pipeline = DATA
    for phase in ("data_analysis", "an_a_a"):
        for _ in range(3):
            led.progress(T, R1, phase, "start", pipeline=pl)
            led.progress(T, R1, phase, "step", step=1, pipeline=pl)
            led.write(T, R1, phase, {"rows": 1}, pipeline=pl)
    before = event_names(store)
    assert len(before) == 12
    rep = prune(led, T, keep_last=1)
    gone = sorted((r["phase"], r["attempt_number"]) for r in rep.removed if "attempt_number" in r)
    assert gone == [("an_a_a", 1), ("an_a_a", 2), ("data_analysis", 1), ("data_analysis", 2)]
    left = event_names(store)
    assert len(left) == 4, left
    assert all("_a000003_" in n for n in left), left
    assert {p.phase: p.state for p in led.status(T, R1, pipeline=pl).phases} == {
        "data_ingest": "pending",
        "data_analysis": "completed",
        "an_a_a": "completed",
    }
    assert led.verify(T).ok, led.verify(T).problems
