"""The event feed: events derived from the store, in a stable order, with a cursor that never skips.

Over real stores (files, SQLite, PostgreSQL): the feed's ids are the ids raised in process, stable
across reads; a run's events come in append order; paging with cursors gives the whole feed, no
gaps, no repeats (hypothesis); a writer SIGKILLed right after its write still has its events.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from phaselog.ledger.facade import Ledger
from phaselog.ledger.feed import FeedEvent, advance, decode_cursor
from phaselog.model import events
from phaselog.model.errors import PhaselogError, UsageError
from phaselog.model.events import Event
from phaselog.model.pipelines import Pipeline, pipeline_from_dict
from phaselog.stores import Store, open_store

T = "FEED-1"
SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "docs" / "event.schema.json").read_text())


def _schema_valid(got: list[FeedEvent]) -> None:
    """Every event matches docs/event.schema.json (and the schema itself is valid)."""
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    validator = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    for event in got:
        validator.validate(event.to_json())
    with pytest.raises(jsonschema.ValidationError):  # the schema does check the data of each type
        validator.validate({**got[0].to_json(), "data": {"unexpected": 1}})


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _pipeline() -> Pipeline:
    return pipeline_from_dict(
        {
            "name": "three",
            "version": "1",
            "phases": [{"name": "draft"}, {"name": "review", "requires_approval": True}, {"name": "ship"}],
        }
    )


def _free() -> Pipeline:
    return pipeline_from_dict(
        {"name": "free", "version": "1", "order": "free", "phases": [{"name": "a"}, {"name": "b"}]}
    )


@pytest.mark.all_stores
def test_feed_ids_are_the_emitted_ids_stable_and_in_append_order(store: Store) -> None:
    seen: list[Event] = []
    stop = events.subscribe(lambda event, origin: seen.append(event))
    ledger = Ledger(store)
    pl = _pipeline()
    try:
        ledger.write(T, "r1", "draft", {}, pipeline=pl)
        ledger.write(T, "r1", "review", None, pipeline=pl, status="failed", error="the model timed out")
        ledger.write(T, "r1", "review", {}, pipeline=pl)
        ledger.reject(T, "r1", "review", by="bo", pipeline=pl)
        ledger.write(T, "r1", "review", {}, pipeline=pl)
        ledger.approve(T, "r1", "review", by="ana", pipeline=pl)
        ledger.write(T, "r1", "ship", {}, pipeline=pl)
    finally:
        stop()
    page = ledger.feed(ticket_id=T)
    _schema_valid(page.events)
    assert [e.event_id for e in page.events] == [e.id for e in seen]  # what was raised in process, in order
    assert [e.type for e in page.events] == [
        "checkpoint.written",
        "checkpoint.written",
        "phase.failed",
        "checkpoint.written",
        "phase.awaiting_approval",
        "phase.rejected",
        "checkpoint.written",
        "phase.awaiting_approval",
        "phase.approved",
        "checkpoint.written",
        "run.completed",
    ]
    again = Ledger(store).feed(ticket_id=T)  # a second reader, nothing remembered
    assert [e.to_json() for e in again.events] == [e.to_json() for e in page.events]
    first = page.events[0].to_json()
    assert (first["ticket_id"], first["run_name"], first["pipeline"], first["phase"], first["attempt"]) == (
        T,
        "r1",
        "three",
        "draft",
        1,
    )
    assert ledger.feed(ticket_id=T, after=page.cursor).events == []
    assert [e.type for e in ledger.feed(ticket_id=T, types=["phase.approved", "run.completed"]).events] == [
        "phase.approved",
        "run.completed",
    ]
    linked = ledger.feed(ticket_id=T, run_id="r1", base_url="http://127.0.0.1:8765/", limit=1).events
    assert linked[0].url == f"http://127.0.0.1:8765/tickets/{T}/runs/{linked[0].run_id}"


@pytest.mark.all_stores
def test_a_later_write_with_an_earlier_clock_is_still_delivered_after_the_cursor(store: Store) -> None:
    ledger = Ledger(store)
    pl = _free()
    ledger.write(T, "r1", "a", {}, pipeline=pl, timestamp=T0 + timedelta(hours=2))
    ledger.write(T, "r2", "a", {}, pipeline=pl, timestamp=T0 + timedelta(hours=3))
    page = ledger.feed(ticket_id=T)
    assert len(page.events) == 2
    # Another writer whose clock is hours behind: its records sort before what was already read.
    late = ledger.write(T, "r1", "a", {}, pipeline=pl, timestamp=T0)
    other = ledger.write(T, "r3", "b", {}, pipeline=pl, timestamp=T0)
    got = ledger.feed(ticket_id=T, after=page.cursor).events
    assert {e.event_id for e in got} == {
        f"checkpoint.written:{late.record.content_hash}",
        f"checkpoint.written:{other.record.content_hash}",
    }
    # Within a run the order stays the append order: attempt 2 after attempt 1 despite its clock.
    r1 = [e.attempt for e in ledger.feed(ticket_id=T, run_id="r1").events]
    assert r1 == [1, 2]


# Writes over several runs, interleaved at random with reads of random page sizes: every event comes
# exactly once (no gap, no repeat), and paging a settled store gives exactly the full feed.
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("w"), st.sampled_from(["r1", "r2", "r3"]), st.sampled_from(["a", "b"]), st.booleans()),
        st.tuples(st.just("r"), st.integers(1, 4)),
        st.tuples(st.just("j"), st.sampled_from(["r1", "r2", "r3"]), st.booleans()),  # judge b, the gate
    ),
    min_size=1,
    max_size=14,
)


def _gated_free() -> Pipeline:
    return pipeline_from_dict(
        {
            "name": "gated-free",
            "version": "1",
            "order": "free",
            "phases": [{"name": "a"}, {"name": "b", "requires_approval": True}],
        }
    )


@pytest.mark.all_stores
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, pages=st.lists(st.integers(1, 5), min_size=1, max_size=6), skew=st.lists(st.integers(-3, 3)))
# Found by this test: the last phase written first, an earlier one after it at the same time. The run's
# completion was once derived by replaying the run in time order, which put the later write first.
@example(
    ops=[("w", "r2", "b", True), ("w", "r2", "b", False), ("r", 1), ("r", 1), ("w", "r2", "a", True)],
    pages=[1],
    skew=[],
)
def test_paging_with_cursors_never_skips_nor_repeats(
    store: Store, ops: list[tuple[object, ...]], pages: list[int], skew: list[int]
) -> None:
    ticket = f"FEED-{uuid.uuid4().hex[:8]}"
    ledger = Ledger(store)
    pl = _gated_free()
    got: list[str] = []
    cursor: str | None = None
    for i, op in enumerate(ops):
        if op[0] == "w":
            _, run, phase, ok = op
            minutes = (skew[i % len(skew)] if skew else 0) * 10  # writers' clocks disagree
            ledger.write(
                ticket,
                str(run),
                str(phase),
                {} if ok else None,
                pipeline=pl,
                status="completed" if ok else "failed",
                error=None if ok else "no",
                timestamp=T0 + timedelta(minutes=minutes),
            )
        elif op[0] == "j":
            _, run, approve = op
            judge = ledger.approve if approve else ledger.reject
            with contextlib.suppress(PhaselogError):  # nothing to judge, rejected already …: no record
                judge(ticket, str(run), "b", by="ana", pipeline=pl)
        else:
            page = ledger.feed(ticket_id=ticket, after=cursor, limit=int(op[1]))  # type: ignore[call-overload]
            got.extend(e.event_id for e in page.events)
            cursor = page.cursor
    while True:  # drain
        page = ledger.feed(ticket_id=ticket, after=cursor, limit=3)
        if not page.events:
            break
        got.extend(e.event_id for e in page.events)
        cursor = page.cursor
    full = [e.event_id for e in ledger.feed(ticket_id=ticket).events]
    assert sorted(got) == sorted(full)  # every event once
    assert len(set(got)) == len(got)
    # A settled store read in pages of random sizes: exactly the full feed, in its order.
    paged: list[str] = []
    cursor = None
    for n in [*pages, *([2] * len(full))]:
        page = ledger.feed(ticket_id=ticket, after=cursor, limit=n)
        paged.extend(e.event_id for e in page.events)
        cursor = page.cursor
    assert paged == full
    # advance() one event at a time gives the same cursor positions as pages of one.
    cursor = None
    one_by_one: list[str] = []
    for _ in full:
        (event,) = ledger.feed(ticket_id=ticket, after=cursor, limit=1).events
        one_by_one.append(event.event_id)
        cursor = advance(cursor, event)
    assert one_by_one == full


@pytest.mark.all_stores
def test_a_writer_killed_right_after_its_write_still_has_its_events(store: Store, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        import phaselog
        from phaselog.model import events
        from phaselog.stores import open_store
        # The first subscriber kills the process: the write is durable, nothing after it ran.
        events.subscribe(lambda event, origin: os.kill(os.getpid(), signal.SIGKILL))
        ledger = phaselog.Ledger(open_store({store.url!r}))
        ledger.write("{T}", "killed", "implement", {{"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []}})
        sys.exit(3)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120, check=False)
    assert done.returncode == -9, done.stderr.decode()
    got = Ledger(store).feed(ticket_id=T).events
    assert [(e.type, e.run_name, e.phase) for e in got] == [("checkpoint.written", "killed", "implement")]


def test_bad_filters_are_usage_errors_naming_the_field(ledger: Ledger) -> None:
    with pytest.raises(UsageError, match=r"types: unknown event type 'phase\.done'") as err:
        ledger.feed(ticket_id=T, types=["phase.done"])
    assert err.value.context["field"] == "types"
    with pytest.raises(UsageError, match="after: not a cursor"):
        ledger.feed(ticket_id=T, after="v1.garbage!")
    with pytest.raises(UsageError, match="limit"):
        ledger.feed(ticket_id=T, limit=0)
    assert decode_cursor(None) == {}


def test_a_guard_s_failed_passes_and_breaker_are_in_the_store_feed(tmp_path: Path) -> None:
    from helpers import Clock
    from phaselog.guard import Guard, GuardConfig
    from phaselog.guard.liveness import Environment
    from phaselog.stores.files.store import FilesStore

    seen: list[Event] = []
    stop = events.subscribe(lambda event, origin: seen.append(event))
    clock = Clock(datetime(2026, 1, 1, tzinfo=UTC))
    g = Guard(tmp_path / "store", "nightly", Environment(clock=clock))
    try:
        for code in (0, 5, 5):
            clock.advance(minutes=15)
            g.run(["sh", "-c", f"exit {code}"], GuardConfig(max_failures=2))
    finally:
        stop()
    reader = Ledger(FilesStore(tmp_path / "store"))
    page = reader.feed()
    got = page.events
    assert [e.type for e in got] == ["guard.pass_failed", "guard.pass_failed", "guard.breaker_opened"]
    _schema_valid(got)
    opened = [e.id for e in seen if e.type == "guard.breaker_opened"]
    assert [e.event_id for e in got if e.type == "guard.breaker_opened"] == opened
    assert got[1].data["consecutive_failures"] == 2
    assert reader.feed(after=page.cursor).events == []  # remembered: the guard's state did not move
    g.reset(by="ana")
    clock.advance(minutes=15)
    g.run(["sh", "-c", "exit 7"], GuardConfig(max_failures=2))  # the state moved: read again
    more = reader.feed(after=page.cursor).events
    assert [(e.type, e.data["consecutive_failures"]) for e in more] == [("guard.pass_failed", 1)]


def test_a_dead_queue_row_is_run_dead_with_the_emitted_id(pg_schema_url: str) -> None:
    from phaselog.runner import queue
    from phaselog.stores import open_store
    from phaselog.stores.sql.queue import claim as flow
    from phaselog.stores.sql.queue.rows import SqlQueue

    seen: list[Event] = []
    stop = events.subscribe(lambda event, origin: seen.append(event))
    store = open_store(pg_schema_url, migrate=True)
    try:
        queue.submit(store, ticket_id="T-1", pipeline="job")
        q = SqlQueue(store)
        claimed = flow.claim(q, "w2", queue="default")
        assert claimed is not None
        assert flow.finish(q, claimed, "dead", reason="phase one failed") is True
        got = Ledger(store).feed(ticket_id="T-1").events
    finally:
        stop()
        store.close()
    dead = [e for e in got if e.type == "run.dead"]
    _schema_valid(dead)
    assert [e.event_id for e in dead] == [e.id for e in seen if e.type == "run.dead"]
    assert dead[0].data["reason"] == "phase one failed"


@pytest.mark.all_stores
def test_phase_failed_comes_once_when_the_runner_s_retries_are_spent(store: Store, tmp_path: Path) -> None:
    import phaselog

    seen: list[Event] = []
    stop = events.subscribe(lambda event, origin: seen.append(event))
    ledger = Ledger(store)
    pipe = phaselog.pipeline("flaky", phases=["fetch"])

    @pipe.phase("fetch", retries=2, retry_delay=0)
    def fetch(ctx: object) -> object:
        raise ConnectionError("refused")

    try:
        with pytest.raises(phaselog.PhaseFailed):
            pipe.run("FL-1", "r", store=ledger, workdir=tmp_path)
    finally:
        stop()
    got = ledger.feed(ticket_id="FL-1").events
    assert [(e.type, e.attempt) for e in got] == [
        ("checkpoint.written", 1),
        ("checkpoint.written", 2),
        ("checkpoint.written", 3),
        ("phase.failed", 3),  # only the attempt with no retry left
    ]
    assert [e.event_id for e in got] == [e.id for e in seen]
    lefts = [r.record.phase_payload["failure"]["retries_left"] for r in ledger.list("FL-1").items]  # type: ignore[index]
    assert lefts == [2, 1, 0]


@pytest.mark.all_stores
def test_follow_yields_what_was_there_then_each_new_event_until_stopped(store: Store) -> None:
    import queue
    import threading

    ledger = Ledger(store)
    pl = _free()
    first = ledger.write(T, "r1", "a", {}, pipeline=pl)
    got: queue.Queue[str] = queue.Queue()
    stop = threading.Event()
    follower = Ledger(store)

    def follow() -> None:
        for event in follower.follow(ticket_id=T, poll=0.05, stop=stop):
            got.put(event.event_id)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        assert got.get(timeout=60) == f"checkpoint.written:{first.record.content_hash}"
        later = ledger.write(T, "r2", "a", {}, pipeline=pl)
        assert got.get(timeout=60) == f"checkpoint.written:{later.record.content_hash}"
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert got.empty()  # each event once


def test_guard_storage_without_passes_is_read_once_and_gives_no_events(tmp_path: Path) -> None:
    from phaselog.stores.base import guard_keeper
    from phaselog.stores.files.store import FilesStore

    store = FilesStore(tmp_path / "store")
    keeper = guard_keeper(store)
    assert keeper is not None
    storage = keeper.guard_storage("notify.hooks")  # another user of guard storage: entries, no passes
    storage.append_history({"kind": "cursor", "cursor": "v1.x"})
    reader = Ledger(store)
    assert reader.feed().events == []
    calls: list[str] = []
    real = type(storage).history

    def counted(self: object) -> list[dict[str, object]]:
        calls.append("history")
        return real(self)  # type: ignore[arg-type]  # the storage itself

    type(storage).history = counted  # type: ignore[method-assign]  # count reads of a real storage
    try:
        storage.append_history({"kind": "cursor", "cursor": "v1.y"})
        assert reader.feed().events == []
    finally:
        type(storage).history = real  # type: ignore[method-assign]
    assert calls == []  # its state did not move: its history was not read again


def test_the_feed_of_a_postgresql_store_nothing_was_written_to_is_empty(pg_schema_url: str) -> None:
    # The queue's tables come with the first write: reading the feed (and the queue) before must not fail.
    led = Ledger(open_store(pg_schema_url))
    try:
        assert led.feed(ticket_id="X-1").events == []
        assert led.feed().events == []
        from phaselog.stores.sql.queue.rows import SqlQueue

        q = SqlQueue(led.store)
        assert q.entries() == []
        assert set(q.counts().values()) == {0}
        assert q.workers() == []
    finally:
        led.close()
