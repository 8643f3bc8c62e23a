"""A run is read once: a write is one snapshot plus one append, a status one snapshot (every store).

A counting proxy stands between the Ledger and a real store and records every call the Ledger
makes on the store contract. Calls the store makes on itself inside ``snapshot`` are not counted:
they are the backend's business (one directory walk, one or two queries).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import phaselog
from phaselog.stores import Store

pytestmark = pytest.mark.all_stores

IMPLEMENT = {"branch_name": "feat/x", "commit_sha": "a1b2c3d", "files_changed": ["src/x.py"]}
REVIEW = {"iteration_count": 1, "issue_fingerprints": [], "last_clean_sha": "a1b2c3d"}


class Counting:
    """Forwards every attribute to ``inner``; counts the calls made through it."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def counted(*args: Any, **kw: Any) -> Any:
            # A write's read of the run: the carried snapshot where the store carries runs (D163);
            # a status's: the same snapshot, uncopied (D192).
            self.calls["snapshot" if name in ("premise_snapshot", "state_snapshot") else name] += 1
            return attr(*args, **kw)

        return counted


def _ledger(store: Store) -> tuple[phaselog.Ledger, Counting]:
    counting = Counting(store)
    return phaselog.Ledger(counting), counting  # type: ignore[arg-type]


def _fill(store: Store, attempts: int) -> None:
    """A run with ``attempts`` failed tries of implement, one completed, and a local_review."""
    led = phaselog.Ledger(store)
    for _ in range(attempts):
        led.write("T-1", "r1", "implement", None, status="failed", error="flaky")
    led.write("T-1", "r1", "implement", IMPLEMENT)
    led.write("T-1", "r1", "local_review", REVIEW)


@pytest.mark.parametrize("history", [1, 40])
def test_a_write_is_one_snapshot_and_one_append(store: Store, history: int) -> None:
    _fill(store, history)
    led, counting = _ledger(store)
    led.write("T-1", "r1", "local_review", REVIEW)
    assert dict(counting.calls) == {"snapshot": 1, "append": 1}
    led.write("T-1", "r1", "create_pr", {"pr_url": "https://x.test/pull/1", "pr_number": 1, "head_sha": "a1b2c3d"})
    assert dict(counting.calls) == {"snapshot": 2, "append": 2}


def test_a_first_write_and_a_failure_are_one_snapshot_and_one_append(store: Store) -> None:
    led, counting = _ledger(store)
    led.write("T-2", "new-run", "implement", IMPLEMENT)
    led.write("T-2", "new-run", "local_review", None, status="failed", error="boom")
    assert dict(counting.calls) == {"snapshot": 2, "append": 2}


def test_a_first_write_records_its_pipelines_manifest_in_its_one_append(store: Store) -> None:
    """The manifest travels inside the append (stores/manifests.py), once per store handle."""
    from phaselog.ledger import recorded_pipelines as pipeline_shelf
    from phaselog.model.pipelines import pipeline_from_dict

    custom = pipeline_from_dict({"name": "custom", "version": "1", "phases": [{"name": "one"}, {"name": "two"}]})
    led, counting = _ledger(store)
    led.write("T-3", "r1", "one", {}, pipeline=custom)
    led.write("T-3", "r2", "one", {}, pipeline=custom)  # a new run, same handle: not recorded again
    led.write("T-3", "r1", "two", {}, pipeline=custom)
    assert dict(counting.calls) == {"snapshot": 3, "append": 3}
    assert pipeline_shelf.keys(store) == [("custom", custom.manifest_hash)]


@pytest.mark.parametrize("history", [1, 40])
def test_status_is_one_snapshot(store: Store, history: int) -> None:
    _fill(store, history)
    led, counting = _ledger(store)
    st = led.status("T-1", "r1")
    assert dict(counting.calls) == {"snapshot": 1}
    implement = st.phase("implement")
    assert (implement.state, implement.attempts, implement.latest_attempt) == ("completed", history + 1, history + 1)
    assert st.next_phase == "create_pr"


def test_a_strict_write_checks_prerequisites_from_the_same_snapshot(store: Store) -> None:
    video = {"research": {"summary": "s", "sources": ["https://x.test/a"]}}
    led, counting = _ledger(store)
    led.write("V-1", "r1", "research", video["research"], pipeline="video-pipeline")
    assert dict(counting.calls) == {"snapshot": 1, "append": 1}
    with pytest.raises(phaselog.PhaselogError) as err:
        led.write("V-1", "r1", "script", {"script": "x"}, pipeline="video-pipeline")
    assert err.value.error_code == "prerequisite"  # proposal is missing
    assert counting.calls["append"] == 1  # refused: nothing appended
    assert counting.calls["snapshot"] == 2


def test_the_status_of_a_long_history_reads_what_the_state_depends_on(store: Store) -> None:
    """With 40 failed attempts before the completed one, status reads the newest record of each
    phase and the newest completed one: not the failed history (O(phases), not O(attempts))."""
    _fill(store, 40)
    snap = store.snapshot("T-1", phaselog.normalize_run_id("r1"))
    assert snap.attempts == ()  # no ref per attempt: a summary per phase
    assert [(s.ordinal, s.count, s.newest.attempt_number) for s in snap.summaries] == [(1, 41, 41), (2, 1, 1)]
    assert sorted(snap.records) == [(1, 41), (2, 1)]
    full = store.snapshot("T-1", phaselog.normalize_run_id("r1"), history=True)
    assert len(full.records) == len(full.attempts) == 42
    assert full.summaries == snap.summaries


def test_a_backends_snapshot_is_the_one_the_contract_builds(store: Store) -> None:
    """Whatever shortcut a backend takes (one walk, two queries), its snapshot is the generic one:
    records, in-flight events, approvals, marker — with and without history."""
    from phaselog.stores.snapshot import build_snapshot

    led = phaselog.Ledger(store)
    led.init_ticket("V-9", title="Launch", pipeline="video-pipeline")
    led.write("V-9", "r1", "research", {"summary": "s", "sources": ["https://x.test/a"]})
    led.write("V-9", "r1", "research", None, status="failed", error="boom")
    led.write("V-9", "r1", "research", {"summary": "t", "sources": ["https://x.test/b"]})
    led.write("V-9", "r1", "proposal", {"title": "T", "concept": "C"})
    led.reject("V-9", "r1", "proposal", by="ana", comment="no")
    led.progress("V-9", "r1", "proposal", "start")
    led.progress("V-9", "r1", "proposal", "step", step=2, output="half")
    led.progress("V-9", "new-run", "research", "start")  # a run with events only: marker needed
    for run in ("r1", "new-run", "nothing-here"):
        rid = phaselog.normalize_run_id(run)
        for history in (False, True):
            mine = store.snapshot("V-9", rid, history=history)
            generic = build_snapshot(store, "V-9", rid, history=history)
            assert mine.summaries == generic.summaries
            assert mine.attempts == generic.attempts
            assert mine.records == generic.records
            assert mine.event_names == generic.event_names
            assert sorted(mine.events) == sorted(generic.events)
            assert mine.approvals == generic.approvals
            assert mine.markers == generic.markers
    st = led.status("V-9", "r1")
    assert st.phase("proposal").state == "in_progress"
    assert st.phase("research").attempts == 3


def test_approve_a_progress_event_and_a_skip_check_never_list_every_attempt(store: Store) -> None:
    """They start from one snapshot (O(phases)); listing every attempt is for rare paths only."""
    led = phaselog.Ledger(store)
    led.write("V-2", "r1", "research", {"summary": "s", "sources": ["https://x.test/a"]}, pipeline="video-pipeline")
    for _ in range(3):
        led.write("V-2", "r1", "proposal", {"title": "T", "concept": "C"})
    led, counting = _ledger(store)
    led.approve("V-2", "r1", "proposal", by="ana")
    assert counting.calls["snapshot"] == 1
    assert counting.calls["attempts"] == 0
    led.progress("V-2", "r1", "script", "start")
    led.progress("V-2", "r1", "script", "step", step=1)
    assert counting.calls["snapshot"] == 3
    assert counting.calls["attempts"] == 0
    decision = led.can_skip_to("V-2", "r1", "script")
    assert decision.allowed, decision.blockers
    assert counting.calls["snapshot"] == 4
    assert counting.calls["attempts"] == 0


def test_a_read_of_the_latest_checkpoint_is_one_store_call_where_the_store_reads_a_phase(store: Store) -> None:
    """SQL stores declare PHASE_READ: read is one call; the others list attempts, then get."""
    from phaselog.stores.base import Capability

    _fill(store, 2)
    led, counting = _ledger(store)
    phase_read = Capability.PHASE_READ in store.capabilities
    for phase in ("implement", 1, "1"):
        counting.calls.clear()
        got = led.read("T-1", "r1", phase)
        assert (got.record.phase, got.record.attempt_number, got.record.completed) == ("implement", 3, True)
        assert dict(counting.calls) == ({"read_phase": 1} if phase_read else {"attempts": 1, "get": 1})
    counting.calls.clear()
    assert led.read("T-1", "r1", "implement", attempt=2).record.status == "failed"
    assert dict(counting.calls) == ({"read_phase": 1} if phase_read else {"attempts": 1, "get": 1})


def test_a_read_that_finds_no_checkpoint_still_explains_itself(store: Store) -> None:
    led = phaselog.Ledger(store)
    led.write("T-4", "r1", "implement", None, status="failed", error="flaky")
    with pytest.raises(phaselog.NotFound, match=r"failed attempts: \[1\]"):
        led.read("T-4", "r1", "implement")
    with pytest.raises(phaselog.NotFound):
        led.read("T-4", "r1", "implement", attempt=7)
    with pytest.raises(phaselog.PhaselogError, match=r"no_such_phase"):
        led.read("T-4", "r1", "no_such_phase")
