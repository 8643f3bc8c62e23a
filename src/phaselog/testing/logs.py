"""Attempts' logs (entries of kind ``logs``): kept bounded, read back, never overwritten, carried."""

from __future__ import annotations

import pytest

from phaselog.ledger.facade import Ledger
from phaselog.model.errors import AlreadyExists, NotFound
from phaselog.model.logs import LOGS
from phaselog.runner.logsink import LogSink
from phaselog.stores.base import Capability, Store
from phaselog.stores.names import log_end_name, parse_log_name
from phaselog.testing._harness import Fixtures, StoreFactory, require
from phaselog.testing.data import R1, RUN1, T, impl
from phaselog.transfer.jsonl import export_records, import_records

CAP = 1000


def _log_attempt(store: Store, attempt: int, output: bytes) -> None:
    sink = LogSink(store, ticket_id=T, run_id=RUN1, phase="implement", ordinal=1, attempt=attempt, cap=CAP)
    for i in range(0, len(output), 300):
        sink.write(output[i : i + 300], "out")
    sink.close()


class LogTests(Fixtures):
    """A run's logs on any store: the tail kept, what was dropped counted, the record untouched."""

    def test_an_attempts_log_keeps_its_tail_and_counts_what_was_dropped(self, led: Ledger, store: Store) -> None:
        output = b"".join(b"line %05d\n" % i for i in range(400))  # 4000 bytes, over the cap
        _log_attempt(store, 1, output)
        written = led.write(T, R1, "implement", impl(1)).record
        log = led.logs(T, R1, "implement")
        assert log.attempt == 1
        assert log.complete
        assert log.text.encode() == output[-CAP:]
        assert (log.total_bytes, log.dropped_bytes, log.cap_bytes) == (len(output), len(output) - CAP, CAP)
        names = store.entry_names(LOGS, T, RUN1)
        assert names[-1] == log_end_name(1, "implement", 1)  # the chunks first, then the kept log
        assert len(names) >= 2
        with pytest.raises(AlreadyExists):  # never overwritten
            store.put_entry(LOGS, T, RUN1, names[-1], b"{}\n")
        assert led.logs(T, R1, "implement").to_json() == log.to_json()
        assert store.get(T, RUN1, 1, "implement", 1).record.content_hash == written.content_hash
        assert led.verify(T).ok

    def test_the_newest_attempt_is_the_default_and_unknown_ones_are_not_found(self, led: Ledger, store: Store) -> None:
        led.write(T, R1, "implement", None, status="failed", error="first")
        _log_attempt(store, 1, b"one\n")
        _log_attempt(store, 2, b"two\n")  # running: logged, not recorded yet
        assert led.logs(T, R1, "implement").text == "two\n"
        assert led.logs(T, R1, "implement", 1).text == "one\n"
        with pytest.raises(NotFound, match="attempt 3 of phase implement not found"):
            led.logs(T, R1, "implement", 3)
        with pytest.raises(NotFound, match="not found"):
            led.logs(T, "another-run", "implement")

    def test_logs_are_exported_and_imported_with_the_run(self, led: Ledger, store: Store, other_store: Store) -> None:
        led.write(T, R1, "implement", impl(1))
        _log_attempt(store, 1, b"x" * 2500)
        lines = list(export_records(store))
        assert sum(1 for ln in lines if ln.get("kind") == LOGS) == len(store.entry_names(LOGS, T, RUN1))
        rep = import_records(other_store, lines)
        assert rep.conflicts == []
        assert Ledger(other_store).logs(T, R1, "implement").to_json() == led.logs(T, R1, "implement").to_json()
        again = import_records(other_store, lines)
        assert again.added == 0
        assert again.conflicts == []

    def test_prune_removes_a_pruned_attempts_log_with_it_and_says_so(
        self, factory: StoreFactory, led: Ledger, store: Store
    ) -> None:
        require(factory, store, Capability.RETENTION)
        for attempt in (1, 2, 3):
            _log_attempt(store, attempt, b"attempt %d\n" % attempt)
            if attempt < 3:
                led.write(T, R1, "implement", None, status="failed", error=f"try {attempt}")
        led.write(T, R1, "implement", impl(3))
        before = store.entry_names(LOGS, T, RUN1)
        rep = led.prune(T, keep_last=1)
        gone = sorted(f"{T}/{RUN1}/.logs/{n}.json" for n in before if "_a000003_" not in n)
        assert len(gone) == 2  # the kept logs of attempts 1 and 2 (each ended before a chunk was due)
        assert sorted(r["path"] for r in rep.removed if r.get("kind") == LOGS) == gone
        left = {got.attempt for got in map(parse_log_name, store.entry_names(LOGS, T, RUN1)) if got is not None}
        assert left == {3}
        assert led.logs(T, R1, "implement").text == "attempt 3\n"
        assert led.verify(T).ok
