"""The audit views over a store: history in time order, diffs of attempts and events, forks."""

from __future__ import annotations

import pytest

from phaselog.ledger.facade import Ledger
from phaselog.model.errors import InvalidRecord, NotFound, Prerequisite
from phaselog.stores.base import Store
from phaselog.testing._harness import Fixtures
from phaselog.testing.data import R1, R2, RUN1, RUN2, VIDEO, Clock, T, impl


class AuditTests(Fixtures):
    """History, diff and fork over the records of any store."""

    def test_history_is_in_time_order_with_every_kind(self, led: Ledger, clock: Clock) -> None:
        led.init_ticket(T, title="Launch", pipeline="video-pipeline")
        clock.tick()
        led.progress(T, R1, "research", "start")
        clock.tick(0.5)
        led.progress(T, R1, "research", "step", step=1, tokens=10)
        clock.tick(0.5)
        led.write(T, R1, "research", None, status="failed", error="source down")
        clock.tick()
        led.write(T, R1, "research", VIDEO["research"])
        clock.tick()
        led.write(T, R1, "proposal", VIDEO["proposal"])
        clock.tick()
        led.reject(T, R1, "proposal", by="bo", comment="too long")
        clock.tick()
        led.init_ticket(T, title="Launch film")
        h = led.history(T)
        assert [(e["kind"], e["phase"], e["attempt_number"], e["seq"]) for e in h] == [
            ("marker", None, None, None),
            ("progress", "research", 1, 1),
            ("progress", "research", 1, 2),
            ("checkpoint", "research", 1, None),
            ("checkpoint", "research", 2, None),
            ("checkpoint", "proposal", 1, None),
            ("approval", "proposal", 1, 1),
            ("marker", None, None, None),
        ]
        assert h[4]["record"]["checkpoint_path"] == f"{T}/{RUN1}/phase_1_research_a2.yaml"
        assert h[6]["summary"] == "proposal attempt 1 rejected by bo: too long"
        assert [e["kind"] for e in led.history(T, R1, "proposal")] == ["checkpoint", "approval"]

    def test_diff_of_two_attempts_and_of_two_events(self, led: Ledger, clock: Clock) -> None:
        led.progress(T, R1, "implement", "start")
        clock.tick(3)
        led.progress(T, R1, "implement", "step", step=1, tokens=100)
        led.write(
            T,
            R1,
            "implement",
            None,
            status="failed",
            error="tests failed",
            repo_commit_map={"app": "a1b2c3d"},
        )
        clock.tick(60)
        led.write(T, R1, "implement", impl(2), repo_commit_map={"app": "b2c3d4e"})
        d = led.diff(T, f"{R1}:implement:1", f"{R1}:implement:2")
        by = {c["field"]: c for c in d["changes"]}
        assert (d["a"], d["b"], d["identical"]) == (f"{RUN1}:implement:1", f"{RUN1}:implement:2", False)
        assert (by["status"]["a"], by["status"]["b"]) == ("failed", "completed")
        assert by["repo_commit_map.app"]["b"] == "b2c3d4e"
        assert by["progress"]["a"]["tokens"] == 100  # attempt 2 had no progress events
        assert by["progress"]["b"] is None
        assert led.diff(T, f"{R1}:implement:2", f"{R1}:implement:2")["identical"] is True
        ev = led.diff(T, f"{R1}:implement:1:1", f"{R1}:implement:1:2")
        assert {c["field"] for c in ev["changes"]} >= {"event", "step", "tokens"}
        assert len(led.diff_phase(T, R1, "implement")) == 1
        with pytest.raises(NotFound):
            led.diff(T, f"{R1}:implement:9", f"{R1}:implement:1")

    def test_fork_reuses_checkpoints_records_lineage_and_carries_approvals(self, led: Ledger, store: Store) -> None:
        led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
        src = [
            led.write(T, R1, "research", VIDEO["research"]).record,
            led.write(T, R1, "proposal", VIDEO["proposal"]).record,
        ]
        led.approve(T, R1, "proposal", by="ana")
        new_run, written = led.fork(T, R1, through="proposal", new_run_id=R2)
        assert new_run == RUN2
        assert [w.record.phase for w in written] == ["research", "proposal"]
        for w, s in zip(written, src, strict=True):
            assert w.record.forked_from == {
                "ticket_id": T,
                "run_id": RUN1,
                "phase": s.phase,
                "attempt_number": s.attempt_number,
                "content_hash": s.content_hash,
            }
            assert w.record.phase_payload == s.phase_payload
        st = led.status(T, R2)
        assert st.phase("proposal").state == "completed"  # the approval of the source carries over
        assert st.next_phase == "script"
        assert led.verify(T).ok
        with pytest.raises(InvalidRecord):
            led.fork(T, R1, through="proposal", new_run_id=R2)  # not into an existing run
        with pytest.raises(Prerequisite):
            led.fork(T, R1, through="script")
        # An edit of the source after the fork: DamageTests.test_verify_names_a_fork_whose_source_was_edited.
