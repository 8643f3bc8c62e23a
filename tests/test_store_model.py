"""A state-machine test per backend: the store + ledger against a small in-memory model.

Hypothesis drives random sequences of writes (automatic and explicit attempts, completed and
failed), progress events (start, step) and approvals (approve, reject) on two tickets: one on the
free-order ticket-pipeline, one on the strict, gated video-pipeline. After every step the store's
observable state must equal the model's: the attempts, the latest completed record of every
phase, the listing, every phase's derived state and the next phase, and ``verify``.

Each example uses fresh ticket ids in the test's store, so one store serves every example.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from conftest import CREATE_PR, IMPLEMENT, LOCAL_REVIEW
from phaselog import AlreadyExists, NotFound, NotMonotonic
from phaselog.ledger.facade import Ledger
from phaselog.ledger.gates import GateRefused
from phaselog.model.errors import Prerequisite
from phaselog.model.ids import normalize_run_id
from phaselog.model.pipelines import builtin
from phaselog.stores.base import Store

pytestmark = pytest.mark.all_stores

TICKET_PL, VIDEO_PL = builtin("ticket-pipeline"), builtin("video-pipeline")
PHASES = {"T": ["implement", "local_review", "create_pr"], "V": ["research", "proposal"]}
PIPELINES = {"T": TICKET_PL, "V": VIDEO_PL}
RUNS = [("T", "r1"), ("T", "r2"), ("V", "r1")]
EXAMPLES = {"files": 40, "sqlite": 40, "postgres": 15}
_tickets = itertools.count(1)


def payload(phase: str, n: int) -> dict[str, Any]:
    """A valid payload for ``phase``, unique by ``n``."""
    return {
        "implement": {**IMPLEMENT, "files_changed": [f"src/m{n}.py"]},
        "local_review": {**LOCAL_REVIEW, "iteration_count": n},
        "create_pr": {**CREATE_PR, "pr_number": n},
        "research": {"summary": f"summary {n}", "sources": ["https://example.org/a"]},
        "proposal": {"title": f"title {n}", "concept": "one idea"},
    }[phase]


@dataclass
class Attempt:
    number: int
    completed: bool
    digest: str
    basis: dict[str, int]


@dataclass
class RunModel:
    """What one run should hold."""

    cps: dict[str, list[Attempt]] = field(default_factory=dict)
    events: dict[str, dict[int, int]] = field(default_factory=dict)  # phase -> attempt -> events
    verdicts: dict[str, str] = field(default_factory=dict)  # checkpoint hash -> approved/rejected

    def attempts(self, phase: str) -> list[Attempt]:
        return self.cps.setdefault(phase, [])

    def latest_completed(self, phase: str) -> Attempt | None:
        done = [a for a in self.attempts(phase) if a.completed]
        return done[-1] if done else None

    def flight(self, phase: str) -> int | None:
        top = max((a.number for a in self.attempts(phase)), default=0)
        started = [a for a in self.events.get(phase, {}) if a > top]
        return max(started) if started else None

    def state(self, kind: str, phase: str) -> tuple[str, int | None, int | None]:
        """(state, latest_attempt, completed_attempt) as derive_status should say."""
        pl = PIPELINES[kind]
        lc = self.latest_completed(phase)
        flight = self.flight(phase)
        if flight is not None:
            return "in_progress", flight, lc.number if lc else None
        attempts = self.attempts(phase)
        if not attempts:
            return "pending", None, None
        latest = attempts[-1]
        if not latest.completed:
            return "failed", latest.number, lc.number if lc else None
        for earlier in pl.earlier(pl.phase(phase)):
            now = self.latest_completed(earlier.name)
            if now is not None and latest.basis.get(earlier.name) != now.number:
                return "stale", latest.number, latest.number
        if pl.phase(phase).requires_approval:
            verdict = self.verdicts.get(latest.digest)
            if verdict == "rejected":
                return "rejected", latest.number, latest.number
            if verdict != "approved":
                return "awaiting_approval", latest.number, latest.number
        return "completed", latest.number, latest.number


class LedgerMachine(RuleBasedStateMachine):
    """The ledger over one store, against the model. ``ledger`` is set per test."""

    ledger: Ledger

    def __init__(self) -> None:
        super().__init__()
        n = next(_tickets)
        self.tickets = {"T": f"MT-{n}", "V": f"MV-{n}"}
        self.ledger.init_ticket(self.tickets["V"], title="model", pipeline="video-pipeline")
        self.runs = {key: RunModel() for key in RUNS}
        self.serial = itertools.count(1)

    # -- rules ------------------------------------------------------------------------------------
    @rule(
        where=st.sampled_from(RUNS),
        index=st.integers(0, 2),
        failed=st.booleans(),
        explicit=st.one_of(st.none(), st.integers(1, 6)),
    )
    def write(self, where: tuple[str, str], index: int, failed: bool, explicit: int | None) -> None:
        kind, run = where
        phase = PHASES[kind][index % len(PHASES[kind])]
        m = self.runs[where]
        numbers = [a.number for a in m.attempts(phase)]
        latest = max(numbers, default=0)
        pl = PIPELINES[kind]
        expect: type[Exception] | None = None
        if (
            not failed
            and pl.order == "strict"
            and any(m.state(kind, e.name)[0] != "completed" for e in pl.earlier(pl.phase(phase)))
        ):
            expect = Prerequisite
        elif explicit is not None and explicit in numbers:
            expect = AlreadyExists
        elif explicit is not None and explicit < latest:
            expect = NotMonotonic
        n = next(self.serial)
        kw: dict[str, Any] = {"attempt": explicit}
        if failed:
            kw.update(status="failed", error=f"failure {n}")
        body = None if failed else payload(phase, n)
        if expect is not None:
            with pytest.raises(expect):
                self.ledger.write(self.tickets[kind], run, phase, body, **kw)
            return
        if explicit is not None:
            number = explicit
        else:
            started = max(m.events.get(phase, {}), default=0)
            number = started if started > latest else latest + 1
        rec = self.ledger.write(self.tickets[kind], run, phase, body, **kw).record
        assert (rec.attempt_number, rec.status) == (number, "failed" if failed else "completed")
        basis = {}
        for e in pl.earlier(pl.phase(phase)):
            lc = m.latest_completed(e.name)
            if lc is not None:
                basis[e.name] = lc.number
        assert {k: v.attempt for k, v in (rec.basis or {}).items()} == basis
        m.attempts(phase).append(Attempt(number, not failed, rec.content_hash, basis))
        m.attempts(phase).sort(key=lambda a: a.number)

    @rule(where=st.sampled_from(RUNS), index=st.integers(0, 2), start=st.booleans())
    def progress(self, where: tuple[str, str], index: int, start: bool) -> None:
        kind, run = where
        phase = PHASES[kind][index % len(PHASES[kind])]
        m = self.runs[where]
        events = m.events.setdefault(phase, {})
        cps = {a.number for a in m.attempts(phase)}
        if start:
            attempt = max([*cps, *events], default=0) + 1
        else:
            open_ = [a for a in events if a not in cps and a >= max(cps, default=0)]
            if not open_:
                with pytest.raises(NotFound):
                    self.ledger.progress(self.tickets[kind], run, phase, "step", step=1)
                return
            attempt = max(open_)
        ev = self.ledger.progress(self.tickets[kind], run, phase, "start" if start else "step", step=len(events))
        events[attempt] = events.get(attempt, 0) + 1
        assert (ev.attempt_number, ev.seq) == (attempt, events[attempt])

    @rule()
    def advance_video(self) -> None:
        """Complete the video run's first phase that is not completed (reaches the gate sooner)."""
        m = self.runs[("V", "r1")]
        index = 0 if m.state("V", "research")[0] != "completed" else 1
        self.write(("V", "r1"), index, False, None)

    @rule(approve=st.booleans())
    def judge(self, approve: bool) -> None:
        m = self.runs[("V", "r1")]
        lc = m.latest_completed("proposal")
        call = self.ledger.approve if approve else self.ledger.reject
        if lc is None:
            with pytest.raises(NotFound):
                call(self.tickets["V"], "r1", "proposal", by="ana")
            return
        if approve and m.verdicts.get(lc.digest) == "rejected":
            with pytest.raises(GateRefused):
                call(self.tickets["V"], "r1", "proposal", by="ana")
            return
        a, _warnings = call(self.tickets["V"], "r1", "proposal", by="ana")
        assert (a.attempt_number, a.checkpoint_hash) == (lc.number, lc.digest)
        if not approve:
            m.verdicts[lc.digest] = "rejected"
        else:
            m.verdicts.setdefault(lc.digest, "approved")

    # -- what must always hold ---------------------------------------------------------------------
    @invariant()
    def store_matches_model(self) -> None:
        store = self.ledger.store
        for kind in ("T", "V"):
            ticket, pl = self.tickets[kind], PIPELINES[kind]
            expect_list = []
            for (k, run), m in sorted(self.runs.items(), key=lambda kv: normalize_run_id(kv[0][1])):
                if k != kind:
                    continue
                rid = normalize_run_id(run)
                want = sorted((pl.phase(p).ordinal, a.number, a.completed) for p, lst in m.cps.items() for a in lst)
                got = [(r.phase_ordinal, r.attempt_number, r.completed) for r in store.attempts(ticket, rid)]
                assert got == want
                expect_list += [(rid, o, n) for o, n, _c in want]
                status = self.ledger.status(ticket, run)
                model_states = {p.name: ("pending", None, None) for p in pl.phases}
                for p in PHASES[kind]:
                    model_states[p] = m.state(kind, p)
                assert {
                    p.phase: (p.state, p.latest_attempt, p.completed_attempt) for p in status.phases
                } == model_states
                assert status.next_phase == next(
                    (p.name for p in pl.phases if model_states[p.name][0] != "completed"), None
                )
                for p in PHASES[kind]:
                    lc = m.latest_completed(p)
                    if lc is None:
                        with pytest.raises(NotFound):
                            self.ledger.read(ticket, run, p)
                    else:
                        assert self.ledger.read(ticket, run, p).record.content_hash == lc.digest
            page = self.ledger.list(ticket)
            assert page.damaged == []
            assert [
                (s.record.run_id, s.record.phase_ordinal, s.record.attempt_number) for s in page.items
            ] == expect_list
            report = self.ledger.verify(ticket)
            assert report.ok, report.problems


def test_store_and_ledger_behave_like_the_model(store: Store, backend: str) -> None:
    machine = type(f"LedgerMachine_{backend}", (LedgerMachine,), {"ledger": Ledger(store)})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES[backend],
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
