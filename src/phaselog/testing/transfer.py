"""Export and import within one backend: exact, idempotent, every hash checked before writing."""

from __future__ import annotations

import json

import pytest

from phaselog.ledger.facade import Ledger
from phaselog.model.errors import InvalidRecord
from phaselog.stores.base import Store
from phaselog.testing._harness import Fixtures
from phaselog.testing.data import R1, R2, RUN1, Clock, T, export_text, impl, populate, records_in
from phaselog.transfer.jsonl import export_records, import_records


class TransferTests(Fixtures):
    """Export, then import into a second store of the same backend."""

    def test_export_import_round_trip_within_a_backend_is_exact_and_idempotent(
        self, led: Ledger, store: Store, other_store: Store, clock: Clock
    ) -> None:
        populate(led, clock)
        lines = list(export_records(store))
        # The records, and the manifest of each pipeline they name (once, before its first record).
        assert {ln["type"] for ln in lines} == {"checkpoint", "entry", "pipeline"}
        assert {ln.get("kind") for ln in lines} >= {"markers", "progress", "approvals", None}
        rep = import_records(other_store, lines)
        assert (rep.added, rep.skipped, rep.conflicts) == (records_in(lines), 0, [])
        assert export_text(other_store) == export_text(store)
        other = Ledger(other_store)
        assert other.verify(T).ok
        assert other.status(T, R2).to_json() == led.status(T, R2).to_json()
        again = import_records(other_store, lines)
        assert (again.added, again.skipped, again.conflicts) == (0, records_in(lines), [])
        assert export_text(other_store) == export_text(store)

    def test_import_verifies_every_hash_before_writing(
        self, led: Ledger, store: Store, other_store: Store, clock: Clock
    ) -> None:
        populate(led, clock)
        lines = list(export_records(store))
        idx = next(
            i
            for i, ln in enumerate(lines)
            if ln["type"] == "checkpoint" and ln["document"]["checkpoint"].get("phase_payload")
        )
        bad = json.loads(json.dumps(lines))
        bad[idx]["document"]["checkpoint"]["phase_payload"]["summary"] = "forged"
        with pytest.raises(InvalidRecord) as info:
            import_records(other_store, bad)
        assert "content hash mismatch" in info.value.message
        victim = bad[idx]
        phase, ordinal = (
            victim["document"]["checkpoint"]["phase"],
            victim["document"]["phaselog"]["phase_ordinal"],
        )
        attempt = victim["document"]["checkpoint"]["attempt_number"]
        assert not any(
            r.phase_ordinal == ordinal and r.attempt_number == attempt
            for r in other_store.attempts(T, victim["run_id"])
        ), f"{phase} was written"
        # A forged entry (approval) is refused the same way.
        eidx = next(i for i, ln in enumerate(lines) if ln.get("kind") == "approvals")
        forged = json.loads(json.dumps(lines[eidx]))
        forged["document"]["by"] = "mallory"
        with pytest.raises(InvalidRecord):
            import_records(other_store, [forged])
        assert other_store.entries("approvals", T, forged["run_id"]) == []
        # The intact export then completes the import; nothing is doubled.
        rep = import_records(other_store, lines)
        assert rep.conflicts == []
        assert rep.added + rep.skipped == records_in(lines)
        assert export_text(other_store) == export_text(store)

    def test_import_reports_a_different_record_at_the_same_attempt_as_a_conflict(
        self, led: Ledger, store: Store, other_store: Store
    ) -> None:
        led.write(T, R1, "implement", impl(1))
        theirs = Ledger(other_store).write(T, R1, "implement", impl(2)).record
        rep = import_records(other_store, export_records(store))
        assert (rep.added, rep.skipped, len(rep.conflicts)) == (0, 0, 1)
        assert other_store.get(T, RUN1, 1, "implement", 1).record.content_hash == theirs.content_hash
