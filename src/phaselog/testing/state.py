"""Run state derived from the records, the same way on every store: phase states, gates and
approvals, prerequisites, skipping, progress events, ticket markers, the decision log, verify."""

from __future__ import annotations

import hashlib

import pytest

from phaselog.ledger.facade import Ledger
from phaselog.ledger.gates import GateRefused
from phaselog.model.errors import Conflict, NotFound, PipelineMismatch, Prerequisite, TooLarge
from phaselog.stores.base import Store
from phaselog.testing._harness import Fixtures
from phaselog.testing.data import LOCAL_REVIEW, R1, R2, RUN1, RUN2, VIDEO, Clock, T, contents, decision, impl


class StateTests(Fixtures):
    """State, gates, progress, markers and decisions: derived from the records alone."""

    def test_every_phase_state_is_derived_the_same_way(self, led: Ledger, store: Store) -> None:
        run = led.run(T, R1)
        st = run.status()
        assert {p.state for p in st.phases} == {"pending"}
        assert st.next_phase == "implement"
        run.write("implement", impl(1))
        run.write("local_review", LOCAL_REVIEW)
        run.fail("create_pr", "gh down")
        led.progress(T, R1, "pr_release_ready", "start")
        led.progress(T, R1, "pr_release_ready", "step", step=3)
        st = run.status()
        states = {p.phase: p.state for p in st.phases}
        assert states == {
            "implement": "completed",
            "local_review": "completed",
            "create_pr": "failed",
            "pr_release_ready": "in_progress",
            "ready_for_merge": "pending",
        }
        assert st.next_phase == "create_pr"
        assert st.completed_phases == ["implement", "local_review"]
        flight = st.phase("pr_release_ready").in_flight
        assert flight is not None
        assert flight["resume_from_step"] == 3
        run.write("implement", impl(2))  # local_review was built on implement attempt 1
        st = run.status()
        assert st.phase("local_review").state == "stale"
        assert "implement" in (st.phase("local_review").reason or "")
        assert st.next_phase == "local_review"

    def test_gated_states_awaiting_approval_and_rejected(self, led: Ledger) -> None:
        led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
        led.write(T, R1, "research", VIDEO["research"])
        led.write(T, R1, "proposal", VIDEO["proposal"])
        assert led.status(T, R1).phase("proposal").state == "awaiting_approval"
        led.reject(T, R1, "proposal", by="bo", comment="too long")
        st = led.status(T, R1).phase("proposal")
        assert (st.state, st.approval) == ("rejected", "rejected")
        led.write(T, R1, "proposal", {**VIDEO["proposal"], "concept": "Sixty seconds"})
        assert led.status(T, R1).phase("proposal").state == "awaiting_approval"
        led.approve(T, R1, "proposal", by="ana")
        st = led.status(T, R1).phase("proposal")
        assert (st.state, st.approval, st.completed_attempt) == ("completed", "approved", 2)

    def test_can_skip_to_names_every_blocker(self, led: Ledger) -> None:
        run = led.run(T, R1)
        d = run.can_skip_to("create_pr")
        assert not d.allowed
        assert [(b.phase, b.state) for b in d.blockers] == [
            ("implement", "pending"),
            ("local_review", "pending"),
        ]
        run.write("implement", impl(1))
        run.fail("local_review", "lint")
        d = run.can_skip_to("create_pr")
        assert [(b.phase, b.state) for b in d.blockers] == [("local_review", "failed")]
        assert "lint" in d.blockers[0].reason
        run.write("local_review", LOCAL_REVIEW)
        d = run.can_skip_to("create_pr")
        assert d.allowed
        assert d.to_json()["completed_phases"] == ["implement", "local_review"]
        assert run.can_skip_to("implement").allowed

    def test_verify_recomputes_the_whole_graph(self, led: Ledger, store: Store, clock: Clock) -> None:
        led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
        clock.tick()
        led.progress(T, R1, "research", "start")
        clock.tick()
        led.progress(T, R1, "research", "step", step=1, output="notes")
        led.write(T, R1, "research", VIDEO["research"])
        led.write(T, R1, "proposal", VIDEO["proposal"])
        led.approve(T, R1, "proposal", by="ana")
        led.write(T, R1, "script", VIDEO["script"])
        led.init_ticket(T, title="Launch film")
        report = led.verify(T)
        assert report.ok, report.problems
        assert report.checked == 3 + 1 + 2 + 2  # checkpoints, approval, events, marker revisions
        assert led.verify(T, R1).ok

    def test_progress_events_are_numbered_chained_and_shown(self, led: Ledger, store: Store, clock: Clock) -> None:
        e1 = led.progress(T, R1, "implement", "start")
        clock.tick(2)
        e2 = led.progress(T, R1, "implement", "step", step=1, tokens=100, output="so far")
        clock.tick(3)
        e3 = led.progress(T, R1, "implement", "step", step=2, tokens=250)
        assert [e.seq for e in (e1, e2, e3)] == [1, 2, 3]
        assert [e.attempt_number for e in (e1, e2, e3)] == [1, 1, 1]
        assert (e1.prev_hash, e2.prev_hash, e3.prev_hash) == (None, e1.content_hash, e2.content_hash)
        assert e2.output_sha256 == hashlib.sha256(b"so far").hexdigest()
        assert (e3.elapsed_sec, e3.tokens) == (5.0, 250)
        assert led.progress_events(T, R1, "implement") == [e1, e2, e3]
        assert led.progress_latest(T, R1, "implement") == e3
        assert led.progress_event(T, R1, "implement", 1, 2) == e2
        flight = led.in_flight(T, R1)["implement"]
        assert (flight.attempt_number, flight.events, flight.last_step) == (1, 3, 2)
        # Oversize output is refused before anything is written.
        names = store.entry_names("progress", T, RUN1)
        with pytest.raises(TooLarge):
            led.progress(T, R1, "implement", "step", step=3, output="x" * 101, max_output_bytes=100)
        assert store.entry_names("progress", T, RUN1) == names
        with pytest.raises(NotFound):
            led.progress(T, R1, "local_review", "step", step=1)  # never started
        # The checkpoint takes the attempt in flight; afterwards nothing is in flight.
        assert led.write(T, R1, "implement", impl(1)).record.attempt_number == 1
        assert led.in_flight(T, R1) == {}
        with pytest.raises(Conflict):
            led.progress(T, R1, "implement", "step", attempt=1, step=9)
        assert led.progress(T, R1, "implement", "start").attempt_number == 2
        assert led.verify(T).ok

    def test_approvals_and_prerequisites_in_a_strict_gated_pipeline(self, led: Ledger, store: Store) -> None:
        led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
        with pytest.raises(Prerequisite) as info:
            led.write(T, R1, "proposal", VIDEO["proposal"])
        assert [b["phase"] for b in info.value.context["blockers"]] == ["research"]
        led.write(T, R1, "research", VIDEO["research"])
        p1 = led.write(T, R1, "proposal", VIDEO["proposal"]).record
        before = contents(store)
        with pytest.raises(Prerequisite) as info:
            led.write(T, R1, "script", VIDEO["script"])
        assert [(b["phase"], b["state"]) for b in info.value.context["blockers"]] == [("proposal", "awaiting_approval")]
        assert contents(store) == before  # a refused write leaves no trace
        with pytest.raises(GateRefused):
            led.approve(T, R1, "research", by="ana")  # not gated
        a, warnings = led.approve(T, R1, "proposal", by="  ana ", comment="ship it")
        assert (a.by, a.checkpoint_hash, a.seq, a.attempt_number, warnings) == (
            "ana",
            p1.content_hash,
            1,
            1,
            [],
        )
        led.write(T, R1, "script", VIDEO["script"])
        led.reject(T, R1, "script", by="bo")
        with pytest.raises(GateRefused):
            led.approve(T, R1, "script", by="ana")  # a rejection is final for its attempt
        assert [(x.phase, x.decision, x.seq) for x in led.approvals(T, R1)] == [
            ("proposal", "approve", 1),
            ("script", "reject", 2),
        ]
        # A newer proposal supersedes the approved one: approving the old one does not count.
        led.write(T, R1, "proposal", {**VIDEO["proposal"], "title": "Launch 2"})
        _a, warnings = led.approve(T, R1, "proposal", by="ana", attempt=1)
        assert len(warnings) == 1
        assert "superseded" in warnings[0]
        assert led.status(T, R1).phase("proposal").state == "awaiting_approval"
        with pytest.raises(NotFound):
            led.approve(T, R1, "proposal", by="ana", attempt=9)
        assert led.verify(T).ok

    def test_ticket_marker_revisions(self, led: Ledger, clock: Clock) -> None:
        m1, changed = led.init_ticket(T, title="Launch", pipeline="video-pipeline", meta={"team": "video"})
        assert (m1.revision, changed) == (1, True)
        again, changed = led.init_ticket(T, title="Launch", pipeline="video-pipeline")
        assert (again, changed) == (m1, False)
        with pytest.raises(PipelineMismatch):
            led.init_ticket(T, title="Launch", pipeline="ticket-pipeline")
        clock.tick()
        m2, changed = led.init_ticket(T, title="Launch film", meta={"owner": "ana"})
        assert (m2.revision, m2.prev_hash, changed) == (2, m1.content_hash, True)
        assert dict(m2.meta) == {"team": "video", "owner": "ana"}
        assert led.markers(T) == [m1, m2]
        assert led.marker(T) == m2
        assert led.marker("OTHER-1") is None
        # The marker's pipeline is the default for the ticket's runs.
        pipeline = led.write(T, R1, "research", VIDEO["research"]).record.pipeline
        assert pipeline is not None
        assert pipeline.name == "video-pipeline"
        assert led.verify(T).ok

    def test_decision_log_first_record_wins_and_failed_attempts_do_not_count(self, led: Ledger, clock: Clock) -> None:
        led.write(T, R1, "implement", impl(1), decisions=[decision("d1"), decision("d2")])
        clock.tick()
        led.write(T, R2, "implement", impl(2), decisions=[decision("d1", selected="b"), decision("d3")])
        clock.tick()
        led.write(T, R1, "local_review", None, status="failed", error="x", decisions=[decision("d9")])
        log = led.decisions(T)
        assert (log["version"], log["ticket"]) == ("1.0", T)
        assert [d["decision_id"] for d in log["decisions"]] == ["d1", "d2", "d3"]
        assert log["decisions"][0]["selected"] == "a"
        assert log["decisions"][0]["source"]["run_id"] == RUN1
        assert log["decisions"][0]["source"]["checkpoint_path"] == f"{T}/{RUN1}/phase_1_implement_a1.yaml"
        assert [(c["decision_id"], c["ignored"]["run_id"]) for c in log["conflicts"]] == [("d1", RUN2)]
        assert led.decisions("NOBODY-1")["decisions"] == []
