"""The contract of writes and reads: round trips, stable order and paging, duplicates refused,
attempts numbered, hashes linked (every store, through the Ledger API)."""

from __future__ import annotations

import pytest

from phaselog.ledger.facade import Ledger
from phaselog.model.errors import AlreadyExists, Conflict, InvalidRecord, NotFound, NotMonotonic, TooLarge, UsageError
from phaselog.model.records import Checkpoint
from phaselog.stores.base import Store
from phaselog.testing._harness import Fixtures, StoreFactory, missing
from phaselog.testing.data import (
    CREATE_PR,
    IMPLEMENT,
    LOCAL_REVIEW,
    R1,
    R2,
    RUN1,
    RUN2,
    T0,
    Clock,
    T,
    contents,
    impl,
    keys,
)


class RecordTests(Fixtures):
    """Writes and reads: the same records, order, errors and attempt numbers on every store."""

    def test_write_then_read_round_trips_the_record(self, led: Ledger, store: Store) -> None:
        res = led.write(
            T,
            R1,
            "implement",
            IMPLEMENT,
            repo_commit_map={"app": "a1b2c3d"},
            artifact_paths=["src/foo.py"],
        )
        assert res.record.attempt_number == 1
        assert res.location == f"{T}/{RUN1}/phase_1_implement_a1.yaml"
        got = led.read(T, R1, "implement")
        assert got.record == res.record
        assert got.record.content_hash == res.record.content_hash
        assert got.recorded_hash == res.record.content_hash
        assert got.location == res.location
        assert got.record.phase_payload == {"phase": "implement", **IMPLEMENT}
        assert got.record.repo_commit_map == {"app": "a1b2c3d"}
        assert got.warnings == ()
        assert store.tickets() == [T]
        assert store.runs(T) == [RUN1]
        with pytest.raises(NotFound):
            led.read(T, R1, "local_review")
        with pytest.raises(NotFound):
            led.read(T, R1, "implement", 2)
        with pytest.raises(NotFound):
            led.read(T, R2, "implement")

    def test_list_is_ordered_by_run_phase_attempt_and_pages_with_a_cursor(
        self, led: Ledger, store: Store, clock: Clock
    ) -> None:
        # Written out of order: later run first, later phase first, a failed attempt among them.
        first, second = sorted([RUN1, RUN2])
        led.write(T, second, "local_review", LOCAL_REVIEW)
        clock.tick()
        led.write(T, second, "implement", impl(1))
        clock.tick()
        led.write(T, first, "create_pr", CREATE_PR)
        clock.tick()
        led.write(T, first, "implement", None, status="failed", error="boom")
        clock.tick()
        led.write(T, first, "implement", impl(2))
        clock.tick()
        led.write(T, second, "implement", impl(3))
        want = [
            (first, "implement", 1, "failed"),
            (first, "implement", 2, "completed"),
            (first, "create_pr", 1, "completed"),
            (second, "implement", 1, "completed"),
            (second, "implement", 2, "completed"),
            (second, "local_review", 1, "completed"),
        ]
        page = led.list(T)
        assert keys(page.items) == want
        assert page.damaged == []
        assert page.next_after is None
        assert keys(page.completed) == [k for k in want if k[3] == "completed"]
        assert keys(page.failed) == [want[0]]
        # Pages of two, following next_after, give the same sequence and then stop.
        seen: list[tuple[str, str, int, str]] = []
        after = None
        pages = 0
        while True:
            p = led.list(T, after=after, limit=2)
            pages += 1
            seen.extend(keys(p.items))
            if p.next_after is None:
                break
            after = p.next_after
        assert seen == want
        assert pages == 3
        assert keys(led.list(T, R2).items) == [k for k in want if k[0] == RUN2]
        assert store.runs(T) == [first, second]
        assert [(r.phase_ordinal, r.attempt_number, r.completed) for r in store.attempts(T, first)] == [
            (1, 1, False),
            (1, 2, True),
            (3, 1, True),
        ]
        with pytest.raises(UsageError):
            led.list(T, after="not-a-cursor")
        with pytest.raises(UsageError):
            led.list(T, limit=0)
        assert led.list("NO-SUCH-1").items == []

    def test_tickets_and_runs_count_audit_only_tickets_and_runs(self, led: Ledger, store: Store) -> None:
        led.init_ticket("ONLY-1", title="a marker and nothing else")
        led.progress(T, R2, "implement", "start")  # a run with events but no checkpoint yet
        led.write(T, R1, "implement", impl(1))
        assert store.tickets() == sorted(["ONLY-1", T])
        assert store.runs("ONLY-1") == []
        assert store.runs(T) == sorted([RUN1, RUN2])
        assert store.attempts(T, RUN2) == []
        assert list(store.iter_records("NOPE-1")) == []
        with pytest.raises(NotFound):
            store.get(T, RUN1, 2, "local_review", 1)
        with pytest.raises(NotFound):
            store.get(T, RUN1, 1, "local_review", 1)  # the key matches, the phase name does not
        with pytest.raises(AlreadyExists):
            store.put_entry("markers", "ONLY-1", None, "rev_000001", b"{}\n")
        assert store.entry_names("markers", "ONLY-1", None) == ["rev_000001"]

    def test_seals_are_ticket_level_entries_kept_beside_the_runs(self, led: Ledger, store: Store) -> None:
        # Anchoring's seals (docs/anchoring.md, D320): kind "tree", no run; a prune of a run keeps them.
        led.write(T, R1, "implement", impl(1))
        store.put_entry("tree", T, None, "000001", b'{"x":1}\n')
        with pytest.raises(AlreadyExists):
            store.put_entry("tree", T, None, "000001", b"{}\n")
        assert store.entry_names("tree", T, None) == ["000001"]
        assert [(n, b) for n, _, b in store.entries("tree", T, None)] == [("000001", b'{"x":1}\n')]
        assert store.runs(T) == [RUN1]  # not a run

    def test_values_with_sql_metacharacters_are_stored_exactly(self, led: Ledger, store: Store) -> None:
        # Every value is a bound parameter: text that looks like SQL (or like a placeholder) is data.
        nasty = [
            "'; DROP TABLE phaselog_checkpoints; --",
            "%s %(x)s ? $1 :name",
            'quote"d \\ back\\slash',
            "nul\x00byte",
            "emoji \U0001f600 and \u2028 separator",
        ]
        written = []
        for i, text in enumerate(nasty):
            written.append(led.write(T, R1, "implement", {**impl(i), "branch_name": text}).record)
            led.write(T, R1, "local_review", None, status="failed", error=text)
        led.init_ticket(T, title=nasty[0], meta={"k'ey": nasty[1]})
        for i, rec in enumerate(written, start=1):
            got = led.read(T, R1, "implement", i).record
            assert got == rec
            assert got.phase_payload is not None
            assert got.phase_payload["branch_name"] == nasty[i - 1]
        assert [led.read(T, R1, "local_review", i).record.error for i in range(1, 6)] == nasty
        marker = led.marker(T)
        assert marker is not None
        assert marker.title == nasty[0]
        assert dict(marker.meta) == {"k'ey": nasty[1]}
        assert led.verify(T).ok
        assert len(led.list(T).items) == 10

    def test_the_record_size_cap_counts_bytes_not_characters(self, factory: StoreFactory, store: Store) -> None:
        if factory.capped is None:
            missing(factory, "a way to reopen a store with a smaller record cap (StoreFactory.capped)")
        assert factory.capped is not None
        small = factory.capped(store, 5000)
        try:
            led = Ledger(small)
            ok = led.write(T, R1, "implement", None, status="failed", error="e" * 3000).record
            # 3000 characters but 6000 bytes of UTF-8: over the cap of 5000 bytes everywhere.
            with pytest.raises(TooLarge) as info:
                led.write(T, R1, "implement", None, status="failed", error="\u00e9" * 3000)
            assert info.value.context["rule"] == "max_record_bytes"
            assert [r.attempt_number for r in small.attempts(T, RUN1)] == [ok.attempt_number]
        finally:
            small.close()

    def test_duplicate_attempt_is_refused_and_the_stored_record_is_unchanged(self, led: Ledger, store: Store) -> None:
        first = led.write(T, R1, "implement", impl(1), attempt=1).record
        before = contents(store)
        with pytest.raises(AlreadyExists) as info:
            led.write(T, R1, "implement", impl(99), attempt=1)
        assert info.value.error_code == "already_exists"
        assert info.value.context["next_attempt"] == 2
        with pytest.raises(AlreadyExists):
            led.write(T, R1, "implement", None, attempt=1, status="failed", error="x")
        # Below the ledger, the store itself refuses a duplicate (a writer that skipped the check).
        dup = Checkpoint(
            ticket_id=T,
            run_id=RUN1,
            phase="implement",
            phase_ordinal=1,
            attempt_number=1,
            timestamp_utc=T0,
            phase_payload={"phase": "implement", **impl(7)},
        )
        with pytest.raises(AlreadyExists):
            store.append(dup, expected_latest=1)
        with pytest.raises(AlreadyExists):
            store.append(dup, expected_latest=0)
        assert contents(store) == before
        assert led.read(T, R1, "implement").record.content_hash == first.content_hash

    def test_a_failed_attempt_is_not_overwritten_either(self, led: Ledger, store: Store) -> None:
        failed = led.write(T, R1, "implement", None, status="failed", error="boom").record
        with pytest.raises(AlreadyExists):
            led.write(T, R1, "implement", impl(1), attempt=1)
        got = led.read(T, R1, "implement", 1).record
        assert got.content_hash == failed.content_hash
        assert (got.status, got.error) == ("failed", "boom")

    def test_auto_attempts_count_up_and_explicit_ones_only_rise(self, led: Ledger, store: Store) -> None:
        assert [led.write(T, R1, "implement", impl(i)).record.attempt_number for i in (1, 2, 3)] == [
            1,
            2,
            3,
        ]
        assert led.write(T, R1, "local_review", LOCAL_REVIEW).record.attempt_number == 1  # per phase
        assert led.write(T, R2, "implement", impl(1)).record.attempt_number == 1  # per run
        assert led.write(T, R1, "implement", impl(6), attempt=6).record.attempt_number == 6
        before = contents(store)
        with pytest.raises(NotMonotonic) as info:
            led.write(T, R1, "implement", impl(4), attempt=4)
        assert info.value.context["next_attempt"] == 7
        assert contents(store) == before
        assert led.write(T, R1, "implement", impl(7)).record.attempt_number == 7
        for bad in (0, -1, True, "2"):
            with pytest.raises(InvalidRecord):
                led.write(T, R1, "implement", impl(8), attempt=bad)  # type: ignore[arg-type]  # wrong types on purpose: refused
        # The store's own compare-and-append: a stale "latest" is a Conflict, never a fork.
        stale = Checkpoint(
            ticket_id=T,
            run_id=RUN1,
            phase="implement",
            phase_ordinal=1,
            attempt_number=8,
            timestamp_utc=T0,
            phase_payload={"phase": "implement", **impl(8)},
        )
        with pytest.raises(Conflict):
            store.append(stale, expected_latest=6)
        assert max(r.attempt_number for r in store.attempts(T, RUN1) if r.phase_ordinal == 1) == 7

    def test_failed_attempts_use_up_their_number(self, led: Ledger) -> None:
        run = led.run(T, R1)
        f1 = run.fail("implement", "tests failed").record
        assert (f1.attempt_number, f1.status, f1.error, f1.phase_payload) == (
            1,
            "failed",
            "tests failed",
            None,
        )
        ok = run.write("implement", impl(2)).record
        assert ok.attempt_number == 2
        assert led.read(T, R1, "implement").record.attempt_number == 2
        f3 = run.fail("implement", "flaky").record
        assert f3.attempt_number == 3
        assert led.read(T, R1, "implement").record.attempt_number == 2  # latest *completed*
        assert led.read(T, R1, "implement", 3).record.error == "flaky"
        led.run(T, R2).fail("implement", "x")
        with pytest.raises(NotFound) as info:
            led.read(T, R2, "implement")
        assert "failed attempts: [1]" in info.value.message

    def test_prev_hash_chains_attempts_and_basis_names_the_latest_completed(self, led: Ledger) -> None:
        run = led.run(T, R1)
        a1 = run.write("implement", impl(1)).record
        a2 = run.fail("implement", "x").record
        a3 = run.write("implement", impl(3)).record
        lr = run.write("local_review", LOCAL_REVIEW).record
        assert a1.prev_hash is None
        assert a2.prev_hash == a1.content_hash
        assert a3.prev_hash == a2.content_hash
        assert lr.prev_hash is None
        assert {k: (v.attempt, v.hash) for k, v in (lr.basis or {}).items()} == {"implement": (3, a3.content_hash)}
        stored = led.read(T, R1, "local_review").record
        assert stored.basis == lr.basis
        assert led.verify(T).ok
