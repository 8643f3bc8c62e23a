"""Damage from outside (a garbled or hand-edited record or audit entry): reported by read, skipped by
list, caught by verify and doctor, set aside by doctor --quarantine, never used."""

from __future__ import annotations

import pytest

from phaselog.ledger.doctor import doctor
from phaselog.ledger.facade import Ledger
from phaselog.model.errors import Corrupt, UnsupportedVersion
from phaselog.stores.base import Capability, Store
from phaselog.testing._harness import EntryRef, Fixtures, RecordRef, StoreFactory, damage_of, require
from phaselog.testing.data import LOCAL_REVIEW, R1, R2, RUN1, RUN2, VIDEO, T, contents, impl


class DamageTests(Fixtures):
    """Damaged records and entries are reported and never used (needs StoreFactory.damage)."""

    def test_a_damaged_record_is_reported_by_read_skipped_by_list_and_caught_by_verify(
        self, factory: StoreFactory, led: Ledger, store: Store
    ) -> None:
        dmg = damage_of(factory)
        run = led.run(T, R1)
        hashes = [
            run.write("implement", impl(1)).record.content_hash,
            run.write("implement", impl(2)).record.content_hash,
        ]
        run.fail("implement", "oops")
        run.write("implement", impl(4))
        run.write("local_review", LOCAL_REVIEW)
        dmg.garble_record(store, RecordRef(T, RUN1, 1, "implement", 4))

        with pytest.raises(Corrupt) as info:
            led.read(T, R1, "implement")
        assert info.value.error_code == "corrupt"
        assert info.value.context["path"].endswith("phase_1_implement_a4.yaml")
        assert info.value.context["newest_intact_attempt"] == 2
        with pytest.raises(Corrupt):
            led.read(T, R1, "implement", 4)
        assert led.read(T, R1, "implement", 2).record.content_hash == hashes[1]

        page = led.list(T)
        assert [(s.record.phase, s.record.attempt_number) for s in page.items] == [
            ("implement", 1),
            ("implement", 2),
            ("implement", 3),
            ("local_review", 1),
        ]
        assert [(d.phase, d.attempt_number, d.error_code) for d in page.damaged] == [("implement", 4, "corrupt")]
        assert page.damaged[0].location.endswith("phase_1_implement_a4.yaml")
        report = led.verify(T)
        assert not report.ok
        assert any(p["path"].endswith("phase_1_implement_a4.yaml") and p["damaged"] for p in report.problems)
        st = led.status(T, R1)
        assert st.phase("implement").state == "damaged"
        assert any("phase_1_implement_a4.yaml" in w for w in st.warnings)
        assert not led.can_skip_to(T, R1, "local_review").allowed
        before = contents(store)
        with pytest.raises(Corrupt):  # a new attempt cannot link to a damaged one
            led.write(T, R1, "implement", impl(5))
        assert contents(store) == before

    def test_a_damaged_failed_record_is_reported_too(self, factory: StoreFactory, led: Ledger, store: Store) -> None:
        dmg = damage_of(factory)
        led.run(T, R1).fail("implement", "boom")
        dmg.garble_record(store, RecordRef(T, RUN1, 1, "implement", 1, completed=False))
        with pytest.raises(Corrupt):
            led.read(T, R1, "implement", 1)
        page = led.list(T)
        assert page.items == []
        assert [d.attempt_number for d in page.damaged] == [1]
        assert not led.verify(T).ok

    def test_a_record_from_a_newer_phaselog_is_refused_with_a_clear_error(
        self, factory: StoreFactory, led: Ledger, store: Store
    ) -> None:
        dmg = damage_of(factory)
        led.write(T, R1, "implement", impl(1))
        led.write(T, R1, "implement", impl(2))
        dmg.set_schema_version(store, RecordRef(T, RUN1, 1, "implement", 2), "2.0.0")
        with pytest.raises(UnsupportedVersion) as info:
            led.read(T, R1, "implement", 2)
        assert "upgrade phaselog" in info.value.message
        page = led.list(T)
        assert [s.record.attempt_number for s in page.items] == [1]
        assert [(d.attempt_number, d.error_code) for d in page.damaged] == [(2, "unsupported_version")]
        assert not led.verify(T).ok

    def test_an_edited_record_is_refused_and_verify_names_it(
        self, factory: StoreFactory, led: Ledger, store: Store
    ) -> None:
        dmg = damage_of(factory)
        run = led.run(T, R1)
        run.write("implement", impl(1))
        a2 = run.write("implement", impl(2)).record
        assert led.verify(T).ok
        dmg.edit_payload(store, RecordRef(T, RUN1, 1, "implement", 2), "branch_name", "feat/EVIL-666")
        with pytest.raises(Corrupt) as info:
            led.read(T, R1, "implement")
        assert info.value.context["rule"] == "content_hash"
        assert a2.content_hash[:12] in info.value.message
        report = led.verify(T)
        assert not report.ok
        assert [p["path"] for p in report.problems if p["damaged"]] == [f"{T}/{RUN1}/phase_1_implement_a2.yaml"]
        assert (led.read(T, R1, "implement", 1).record.phase_payload or {})["files_changed"] == ["src/f1.py"]

    def test_a_damaged_audit_entry_is_reported_and_never_used(
        self, factory: StoreFactory, led: Ledger, store: Store
    ) -> None:
        dmg = damage_of(factory)
        led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
        led.progress(T, R1, "research", "start")
        led.progress(T, R1, "research", "step", step=1)
        led.progress(T, R1, "research", "step", step=2)
        led.write(T, R1, "research", VIDEO["research"])
        led.write(T, R1, "proposal", VIDEO["proposal"])
        led.approve(T, R1, "proposal", by="ana")
        assert led.verify(T).ok
        assert led.status(T, R1).phase("proposal").state == "completed"
        (event,) = [n for n in store.entry_names("progress", T, RUN1) if n.endswith("s000000003")]
        dmg.garble_entry(store, EntryRef("progress", T, RUN1, event))  # the latest event: no later link would catch it
        (approval,) = store.entry_names("approvals", T, RUN1)
        dmg.edit_entry(store, EntryRef("approvals", T, RUN1, approval), {"by": "mallory"})  # parseable, but edited
        # Neither is used: the event is skipped, the approval does not count ...
        assert [e.seq for e in led.progress_events(T, R1, "research", 1)] == [1, 2]
        assert led.approvals(T, R1) == []
        assert led.status(T, R1).phase("proposal").state == "awaiting_approval"
        assert [e.context["path"] for e in led.damaged_events(T, RUN1)] == [f"{T}/{RUN1}/.progress/{event}.json"]
        (bad,) = led.damaged_approvals(T, RUN1)
        assert bad.context["rule"] == "content_hash"
        # ... and verify reports both, at once.
        paths = {p["path"] for p in led.verify(T).problems}
        assert {f"{T}/{RUN1}/.progress/{event}.json", f"{T}/{RUN1}/.approvals/{approval}.json"} <= paths

    def test_doctor_is_healthy_then_reports_damage(self, factory: StoreFactory, led: Ledger, store: Store) -> None:
        dmg = damage_of(factory)
        led.write(T, R1, "implement", impl(1))
        led.write(T, R1, "local_review", LOCAL_REVIEW)
        rep = doctor(led)
        assert rep.healthy, rep.findings
        assert (rep.tickets, rep.runs) == (1, 1)
        dmg.garble_record(store, RecordRef(T, RUN1, 2, "local_review", 1))
        rep = doctor(led, T)
        assert [(f["kind"], f["path"]) for f in rep.findings] == [
            ("damaged", f"{T}/{RUN1}/phase_2_local_review_a1.yaml")
        ]

    def test_doctor_quarantine_sets_damage_aside_on_every_store(
        self, factory: StoreFactory, led: Ledger, store: Store
    ) -> None:
        dmg = damage_of(factory)
        # Files: moved into <root>/quarantine/; SQL: the row moved into phaselog_quarantine (D117).
        require(factory, store, Capability.QUARANTINE)
        led.write(T, R1, "implement", impl(1))
        dmg.garble_record(store, RecordRef(T, RUN1, 1, "implement", 1))
        rep = doctor(led, T, quarantine=True)
        assert rep.healthy
        assert len(rep.moved) >= 1
        assert led.list(T).damaged == []
        assert led.write(T, R1, "implement", impl(2)).record.attempt_number == 1  # the phase writes again

    def test_a_damaged_record_makes_its_phase_damaged(self, factory: StoreFactory, led: Ledger, store: Store) -> None:
        dmg = damage_of(factory)
        run = led.run(T, R1)
        for phase, payload in (("implement", impl(1)), ("local_review", LOCAL_REVIEW)):
            run.write(phase, payload)
        run.write("ready_for_merge", {"label_applied_at": "2026-02-09T18:01:58Z"})
        dmg.garble_record(store, RecordRef(T, RUN1, 5, "ready_for_merge", 1))
        assert run.status().phase("ready_for_merge").state == "damaged"

    def test_verify_names_a_fork_whose_source_was_edited(
        self, factory: StoreFactory, led: Ledger, store: Store
    ) -> None:
        dmg = damage_of(factory)
        led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
        led.write(T, R1, "research", VIDEO["research"])
        led.write(T, R1, "proposal", VIDEO["proposal"])
        led.approve(T, R1, "proposal", by="ana")
        led.fork(T, R1, through="proposal", new_run_id=R2)
        assert led.verify(T).ok
        # Lineage is checked: edit the source after the fork and verify names the fork too.
        dmg.edit_payload(store, RecordRef(T, RUN1, 1, "research", 1), "summary", "edited")
        rules = {(p["path"].split("/")[1], p["rule"]) for p in led.verify(T).problems}
        assert (RUN2, "lineage") in rules
        assert (RUN1, "content_hash") in rules
