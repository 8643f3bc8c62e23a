"""The event seam: typed events after the durable write, through one subscription point.

Each write or judgement raises its events once, in order, after the record is stored (a subscriber
can read it back); every id is stable (derived from the record); a subscriber that raises costs a
warning, never the write.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaselog.ledger import events as ledger_events
from phaselog.ledger.facade import Ledger
from phaselog.model import events
from phaselog.model.events import (
    AwaitingApproval,
    BreakerOpened,
    CheckpointWritten,
    Event,
    Judged,
    PhaseFailed,
    RunCompleted,
    RunDead,
)
from phaselog.model.pipelines import Pipeline, pipeline_from_dict
from phaselog.stores import Store
from phaselog.stores.files.store import FilesStore

T, R = "EV-1", "r1"


def _pipeline(order: str = "strict") -> Pipeline:
    return pipeline_from_dict(
        {
            "name": "three",
            "version": "1",
            "order": order,
            "phases": [{"name": "draft"}, {"name": "review", "requires_approval": True}, {"name": "ship"}],
        }
    )


class Seen:
    """A subscriber that records what it saw, and whether the record was readable then."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.durable: list[bool] = []

    def __call__(self, event: Event, origin: object) -> None:
        self.events.append(event)
        if isinstance(event, CheckpointWritten) and isinstance(origin, Store):
            found = [r for r in origin.attempts(event.ticket_id, event.run_id) if r.phase == event.phase]
            self.durable.append(any(r.attempt_number == event.attempt_number for r in found))

    def kinds(self) -> list[str]:
        return [e.type for e in self.events]


@pytest.fixture
def seen() -> Iterator[Seen]:
    s = Seen()
    stop = events.subscribe(s)
    yield s
    stop()


@pytest.mark.all_stores
def test_a_run_raises_each_event_once_in_order_after_the_record_is_stored(store: Store, seen: Seen) -> None:
    ledger = Ledger(store)
    pl = _pipeline()
    first = ledger.write(T, R, "draft", {}, pipeline=pl)
    failed = ledger.write(T, R, "review", None, pipeline=pl, status="failed", error="the model timed out")
    review = ledger.write(T, R, "review", {}, pipeline=pl)
    approval, warnings = ledger.approve(T, R, "review", by="ana", pipeline=pl)
    last = ledger.write(T, R, "ship", {}, pipeline=pl)
    assert warnings == []
    assert seen.kinds() == [
        "checkpoint.written",
        "checkpoint.written",
        "phase.failed",
        "checkpoint.written",
        "phase.awaiting_approval",
        "phase.approved",
        "checkpoint.written",
        "run.completed",
    ]
    assert seen.durable == [True, True, True, True]  # each checkpoint was readable when its event came
    h = [first, failed, review, last]
    assert [e.content_hash for e in seen.events if isinstance(e, CheckpointWritten)] == [
        w.record.content_hash for w in h
    ]
    assert seen.events[2] == PhaseFailed(
        T, failed.record.run_id, "review", 1, "the model timed out", h[1].record.content_hash
    )
    judged = seen.events[5]
    assert isinstance(judged, Judged)
    assert (judged.approved, judged.by, judged.checkpoint_hash) == (True, "ana", review.record.content_hash)
    assert judged.id == f"phase.approved:{approval.content_hash}"
    assert seen.events[-1] == RunCompleted(T, last.record.run_id, "ship", last.record.content_hash)
    assert len({e.id for e in seen.events}) == len(seen.events)  # every id names one event


def test_approving_the_last_gate_completes_the_run(tmp_path: Path, seen: Seen) -> None:
    pl = pipeline_from_dict(
        {"name": "two", "version": "1", "phases": [{"name": "draft"}, {"name": "sign", "requires_approval": True}]}
    )
    ledger = Ledger(FilesStore(tmp_path))
    ledger.write(T, R, "draft", {}, pipeline=pl)
    ledger.write(T, R, "sign", {}, pipeline=pl)
    rejection, _ = ledger.reject(T, R, "sign", by="bo", pipeline=pl)
    assert "run.completed" not in seen.kinds()
    again = ledger.write(T, R, "sign", {}, pipeline=pl)
    approval, _ = ledger.approve(T, R, "sign", by="ana", pipeline=pl)
    assert seen.kinds()[-2:] == ["phase.approved", "run.completed"]
    assert seen.events[-1] == RunCompleted(T, again.record.run_id, "sign", approval.content_hash)
    assert [e.approved for e in seen.events if isinstance(e, Judged)] == [False, True]
    assert rejection.content_hash != approval.content_hash


def test_a_raising_subscriber_never_loses_the_write(tmp_path: Path, seen: Seen) -> None:
    def broken(event: Event, origin: object) -> None:
        raise RuntimeError("the notifier is down")

    stop = events.subscribe(broken)
    after: list[str] = []
    stop_after = events.subscribe(lambda event, origin: after.append(event.id))
    try:
        ledger = Ledger(FilesStore(tmp_path))
        result = ledger.write(T, R, "implement", {"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []})
    finally:
        stop()
        stop_after()
    assert ledger.read(T, R, "implement").record == result.record  # written, and kept
    assert result.warnings == ("recorded, but a subscriber failed on checkpoint.written: the notifier is down",)
    assert after == [f"checkpoint.written:{result.record.content_hash}"]  # the next subscriber still heard it
    assert seen.kinds() == ["checkpoint.written"]


def test_subscriber_warnings_join_the_result_and_unsubscribe_stops_delivery(tmp_path: Path) -> None:
    stop = events.subscribe(lambda event, origin: [f"saw {event.KIND}"])
    ledger = Ledger(FilesStore(tmp_path))
    payload = {"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []}
    try:
        assert ledger.write(T, R, "implement", payload).warnings == ("saw checkpoint.written",)
    finally:
        stop()
    stop()  # twice is harmless
    assert ledger.write(T, R, "implement", payload).warnings == ()


def test_events_are_plain_frozen_data_with_ids_from_their_records() -> None:
    made: list[Event] = [
        CheckpointWritten(T, R, "draft", 1, "completed", "h1"),
        PhaseFailed(T, R, "draft", 2, "boom", "h2"),
        AwaitingApproval(T, R, "review", 1, "h3"),
        Judged(T, R, "review", 1, True, "ana", "h3", "h4"),
        RunCompleted(T, R, "ship", "h5"),
        RunDead(T, R, "recovered 3 times", 3, 7),
        BreakerOpened("nightly", 5, "2026-01-01T00:00:00Z"),
    ]
    for e in made:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(e, dataclasses.fields(e)[0].name, "X")
        assert e.to_json()["id"] == e.id
        assert e.id.startswith(e.type + ":")
    assert len({e.id for e in made}) == len(made)
    assert CheckpointWritten(T, R, "draft", 1, "completed", "h1").id == "checkpoint.written:h1"  # stable
    assert RunDead(T, R, "again", 3, 7).id == RunDead(T, R, "recovered 3 times", 3, 7).id  # one claim, one death
    assert RunDead(T, R, "again", 3, 8).id != RunDead(T, R, "again", 3, 7).id  # retried, died again


def test_checkpoint_events_say_what_a_checkpoint_means() -> None:
    from phaselog.model.records import Checkpoint

    def cp(status: str, **kw: Any) -> Checkpoint:
        from datetime import UTC, datetime

        return Checkpoint(
            ticket_id=T,
            run_id="00000000-0000-5000-8000-000000000000",
            phase="draft",
            phase_ordinal=1,
            attempt_number=1,
            timestamp_utc=datetime(2026, 1, 1, tzinfo=UTC),
            phase_payload=None if status == "failed" else {"phase": "draft"},
            status=status,  # type: ignore[arg-type]  # the two statuses, as strings
            **kw,
        )

    kinds = lambda evs: [e.type for e in evs]
    assert kinds(ledger_events.checkpoint_events(cp("failed", error="x"), gated=True, completes_run=True)) == [
        "checkpoint.written",
        "phase.failed",
    ]
    assert kinds(ledger_events.checkpoint_events(cp("completed"), gated=True, completes_run=True)) == [
        "checkpoint.written",
        "phase.awaiting_approval",
    ]
    assert kinds(ledger_events.checkpoint_events(cp("completed"), gated=False, completes_run=True)) == [
        "checkpoint.written",
        "run.completed",
    ]


# Any sequence of completed and failed writes over a loose pipeline: one CheckpointWritten per write, in
# the order written, each id the checkpoint's hash; PhaseFailed exactly for the failed ones; the run
# completes at most once per write of its last phase, and only when it builds on a completed attempt of
# every earlier phase (D206).
WRITES = st.lists(st.tuples(st.sampled_from(["draft", "ship"]), st.booleans()), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=WRITES)
def test_every_write_raises_its_events_once_in_order(writes: list[tuple[str, bool]]) -> None:
    pl = pipeline_from_dict(
        {"name": "free", "version": "1", "order": "free", "phases": [{"name": "draft"}, {"name": "ship"}]}
    )
    s = Seen()
    stop = events.subscribe(s)
    try:
        with tempfile.TemporaryDirectory() as root:
            ledger = Ledger(FilesStore(Path(root)))
            results = []
            for phase, ok in writes:
                status = "completed" if ok else "failed"
                results.append(
                    ledger.write(
                        T, R, phase, {} if ok else None, pipeline=pl, status=status, error=None if ok else "no"
                    )
                )
    finally:
        stop()
    written = [e for e in s.events if isinstance(e, CheckpointWritten)]
    assert [e.id for e in written] == [f"checkpoint.written:{r.record.content_hash}" for r in results]
    assert [e.content_hash for e in s.events if isinstance(e, PhaseFailed)] == [
        r.record.content_hash for r in results if r.record.status == "failed"
    ]
    assert all(s.durable)
    completed = [e for e in s.events if isinstance(e, RunCompleted)]
    drafted = False  # a completed draft exists: the ship checkpoint builds on it (its basis, D206)
    expected = []
    for (phase, ok), r in zip(writes, results, strict=True):
        if ok and phase == "ship" and drafted:
            expected.append(r.record.content_hash)
        drafted = drafted or (phase == "draft" and ok)
    assert [e.content_hash for e in completed] == expected


# -- the guard and the queue raise through the same seam ---------------------------------------------
def test_a_guard_raises_breaker_opened_once_when_its_breaker_opens(tmp_path: Path) -> None:
    from helpers import Clock
    from phaselog.guard import Guard, GuardConfig
    from phaselog.guard.liveness import Environment

    got: list[Event] = []
    stop = events.subscribe(lambda event, origin: got.append(event))
    clock = Clock(datetime(2026, 1, 1, tzinfo=UTC))
    g = Guard(tmp_path / "store", "nightly", Environment(clock=clock))
    try:
        codes = []
        for _ in range(4):
            clock.advance(minutes=15)
            codes.append(g.run(["sh", "-c", "exit 5"], GuardConfig(max_failures=2)).exit_code)
    finally:
        stop()
    assert codes == [5, 5, 1, 1]  # the breaker opened with the second failure; it halts after
    opened = [e for e in got if isinstance(e, BreakerOpened)]
    assert [(e.guard, e.consecutive_failures) for e in opened] == [("nightly", 2)]
    assert opened[0].id == f"guard.breaker_opened:nightly/2/{opened[0].at}"


def test_the_queue_raises_run_dead_once_per_death(pg_schema_url: str) -> None:
    from phaselog.runner import queue
    from phaselog.stores import open_store
    from phaselog.stores.sql.queue import claim as flow
    from phaselog.stores.sql.queue.rows import SqlQueue

    got: list[Event] = []
    stop = events.subscribe(lambda event, origin: got.append(event))
    store = open_store(pg_schema_url, migrate=True)
    try:
        queue.submit(store, ticket_id="T-1", pipeline="job")
        q = SqlQueue(store)
        q.register("w0", "default", "elsewhere", 1, None, 30.0)
        first = flow.claim(q, "w0", queue="default", max_recoveries=0)
        assert first is not None
        assert flow.claim(q, "w1", queue="default", dead_local=["w0"], max_recoveries=0) is None  # w0 died
        queue.retry(store, "T-1", first.entry.run_id)
        second = flow.claim(q, "w2", queue="default")
        assert second is not None
        assert flow.finish(q, second, "dead", reason="phase one failed") is True
    finally:
        stop()
        store.close()
    dead = [e for e in got if isinstance(e, RunDead)]
    assert [(e.ticket_id, e.reason[:22], e.claim_token) for e in dead] == [
        ("T-1", "its worker died 1 time", first.token),
        ("T-1", "phase one failed", second.token),
    ]
    assert len({e.id for e in dead}) == 2


def test_a_queue_that_cannot_requeue_costs_the_approval_a_warning_not_the_record(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phaselog.model.errors import StoreError
    from phaselog.stores import open_store
    from phaselog.stores.sql.queue import claim as flow

    def refuse(store: object, ticket_id: str, run_id: str) -> bool:
        raise StoreError("the queue table is locked")

    monkeypatch.setattr(flow, "after_judgement", refuse)
    assert flow.requeue_after_judgement in events.subscribers()  # subscribed when the PostgreSQL store loaded
    pl = pipeline_from_dict(
        {"name": "two", "version": "1", "phases": [{"name": "draft"}, {"name": "sign", "requires_approval": True}]}
    )
    with Ledger(open_store(pg_schema_url, migrate=True)) as ledger:
        ledger.write(T, R, "draft", {}, pipeline=pl)
        ledger.write(T, R, "sign", {}, pipeline=pl)
        approval, warnings = ledger.approve(T, R, "sign", by="ana", pipeline=pl)
        assert warnings == ["recorded, but the run could not be put back in the queue: the queue table is locked"]
        assert ledger.approvals(T, R) == [approval]  # recorded all the same
