"""Library views the dashboard renders: timeline spans, run summaries, the approval queue, the
hash-bound judgement, guard listing, and the run fingerprint used for live refresh."""

from __future__ import annotations

from pathlib import Path

import pytest

import phaselog
import ui_data
from phaselog.guard import guard_names
from phaselog.ledger.derive import RUN_SUMMARIES
from phaselog.ledger.facade import Ledger
from phaselog.ledger.gates import GateRefused, approval_queue
from phaselog.stores.base import Store
from phaselog.views.timeline import run_timeline, run_version


@pytest.fixture
def sample(store: Store) -> tuple[Ledger, dict[str, str]]:
    ledger = phaselog.Ledger(store, clock=ui_data.Clock())
    return ledger, ui_data.build(ledger)


@pytest.mark.all_stores
def test_spans_take_durations_from_progress_events_only(sample: tuple[Ledger, dict[str, str]]) -> None:
    ledger, runs = sample
    spans = {(s.phase, s.attempt): s for s in run_timeline(ledger, "PROJ-1234", runs["proj"])}
    assert set(spans) == {("implement", 1), ("implement", 2), ("local_review", 1), ("create_pr", 1)}
    failed = spans[("implement", 1)]
    assert failed.state == "failed"
    assert failed.error == "tests failed: 3 of 40"
    assert failed.started_at is not None
    assert failed.ended_at is not None
    events = ledger.event_index("PROJ-1234", runs["proj"])[(1, 1)]
    start = next(e.timestamp for e in events if e.event == "start")
    cp = ledger.read("PROJ-1234", runs["proj"], "implement", 1).record
    assert failed.duration_sec == round((cp.timestamp_utc - start).total_seconds(), 3)
    assert spans[("implement", 2)].last_step == 2
    flight = spans[("create_pr", 1)]
    assert flight.state == "in_progress"  # this process wrote its events and is alive
    assert flight.content_hash is None
    # an attempt without progress events has no start and no duration (never a guess)
    vid = {(s.phase, s.attempt): s for s in run_timeline(ledger, "VID-7", runs["vid"])}
    assert vid[("proposal", 1)].started_at is None
    assert vid[("proposal", 1)].duration_sec is None
    assert vid[("proposal", 1)].approval == "rejected"
    assert vid[("proposal", 2)].approval is None
    assert vid[("research", 1)].approval is None  # not gated


def test_a_span_in_flight_is_abandoned_when_its_process_is_gone(tmp_path: Path) -> None:
    ledger = phaselog.Ledger(phaselog.open_store(str(tmp_path / "s")), clock=ui_data.Clock())
    ledger.progress("T-1", "r", "implement", "start", pid=2**22 + 12345)  # no such process
    (span,) = run_timeline(ledger, "T-1", "r")
    assert span.state == "abandoned"
    assert ledger.status("T-1", "r").summary == "stuck"


@pytest.mark.all_stores
def test_run_summaries(sample: tuple[Ledger, dict[str, str]]) -> None:
    ledger, runs = sample
    assert ledger.status("VID-7", runs["vid"]).summary == "awaiting_approval"
    assert ledger.status("PROJ-1234", runs["proj"]).summary == "running"
    assert ledger.status("XSS-1", runs["xss"]).summary == "pending"
    ledger.reject("VID-7", runs["vid"], "proposal", by="ana", comment="no")
    assert ledger.status("VID-7", runs["vid"]).summary == "failed"
    ledger.run("XSS-1", runs["xss"]).fail("local_review", error="boom")
    assert ledger.status("XSS-1", runs["xss"]).summary == "failed"
    run = ledger.run("DONE-1", "r")
    for name, payload in ui_data.PAYLOADS.items():
        run.write(name, payload)
    st = run.status()
    assert st.summary == "complete"
    assert st.summary in RUN_SUMMARIES
    assert st.last_activity == max(p.latest_timestamp for p in st.phases if p.latest_timestamp)
    assert st.to_json()["summary"] == "complete"


@pytest.mark.all_stores
def test_the_approval_queue_lists_what_waits_oldest_first(sample: tuple[Ledger, dict[str, str]]) -> None:
    ledger, runs = sample
    queue, problems = approval_queue(ledger)
    assert problems == []
    assert [(a.ticket_id, a.phase, a.attempt_number) for a in queue] == [("VID-7", "proposal", 2)]
    assert queue[0].content_hash == ledger.read("VID-7", runs["vid"], "proposal", 2).record.content_hash
    ledger.approve("VID-7", runs["vid"], "proposal", by="ana")
    assert approval_queue(ledger)[0] == []


def test_a_judgement_is_refused_unless_the_hash_shown_is_the_checkpoints(tmp_path: Path) -> None:
    ledger = phaselog.Ledger(phaselog.open_store(str(tmp_path / "s")), clock=ui_data.Clock())
    runs = ui_data.build(ledger)
    real = ledger.read("VID-7", runs["vid"], "proposal", 2).record.content_hash
    with pytest.raises(GateRefused) as err:
        ledger.approve("VID-7", runs["vid"], "proposal", by="ana", attempt=2, checkpoint_hash="f" * 64)
    assert err.value.context["rule"] == "hash_mismatch"
    assert len(ledger.approvals("VID-7", runs["vid"])) == 1  # nothing recorded
    approval, _ = ledger.approve("VID-7", runs["vid"], "proposal", by="ana", attempt=2, checkpoint_hash=real)
    assert approval.checkpoint_hash == real


@pytest.mark.all_stores
def test_guard_names_lists_every_guard_of_the_store(store: Store, tmp_path: Path) -> None:
    assert guard_names(store) == []
    ui_data.failing_guard(store, "closeout", passes=1)
    ui_data.failing_guard(store, "nightly.sync", passes=1)
    assert guard_names(store) == ["closeout", "nightly.sync"]


def test_guard_names_ignores_files_that_are_not_guards(tmp_path: Path) -> None:
    folder = tmp_path / "pipeline_checkpoints"
    folder.mkdir()
    (folder / "x-state.yaml").write_text("pass_count: 0\n")
    (folder / "README").write_text("notes\n")
    (folder / ".x.mutex").write_text("")
    (folder / "-bad.lock").write_text("")
    assert guard_names(tmp_path) == ["x"]


@pytest.mark.all_stores
def test_run_version_changes_with_every_new_record(sample: tuple[Ledger, dict[str, str]]) -> None:
    ledger, runs = sample
    seen = {run_version(ledger, "VID-7", runs["vid"])}
    assert run_version(ledger, "VID-7", runs["vid"]) in seen  # stable while nothing changes
    ledger.progress("VID-7", runs["vid"], "script", "start")
    seen.add(run_version(ledger, "VID-7", runs["vid"]))
    ledger.approve("VID-7", runs["vid"], "proposal", by="ana")
    seen.add(run_version(ledger, "VID-7", runs["vid"]))
    assert len(seen) == 3
