"""What a runner would do with a run, phase by phase, and why: ``phaselog explain``.

The runner plans with this very function, so what ``explain`` says is what ``run`` does. A phase
is **skipped** only while its latest checkpoint is completed (and approved, if gated), current
(no earlier phase has a newer completed attempt, and its artifacts still exist with the SHA-256
recorded at write time: both are the run's state, ``status``, decided once in
:mod:`phaselog.ledger.status`, D89), valid against the manifest and — for ``fingerprint: code`` — the
phase's code is unchanged. Otherwise it **runs**, and so does every phase that needs it, directly
or not (their checkpoints would be built on work that is being redone). A gated phase whose
checkpoint awaits approval makes its branch **wait**; a damaged newest attempt **blocks** it; the
phases that need either are **not reached**, and the other branches of a DAG go on. Each phase is
judged by its own ancestors (``pipeline.graph``): in a manifest without ``needs`` those are every
earlier phase, so a chain is planned as it always was.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phaselog.ledger.derive import (
    AWAITING_APPROVAL,
    COMPLETED,
    DAMAGED,
    FAILED,
    IN_PROGRESS,
    PENDING,
    REJECTED,
    STALE,
    RunStatus,
    row_of,
)
from phaselog.model.errors import Corrupt, NotFound, UnsupportedVersion
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.model.pipelines import Pipeline
from phaselog.runner.lease import judge, leases_of
from phaselog.runner.result import PhaseRow
from phaselog.stores.base import Capability
from phaselog.stores.snapshot import RunSnapshot

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger

SKIP, RUN, WAIT, BLOCKED, NOT_REACHED = "skip", "run", "wait", "blocked", "not_reached"


@dataclass(frozen=True)
class PhasePlan(PhaseRow):
    """What the runner will do with one phase, and why."""

    phase: str
    ordinal: int
    #: ``skip``, ``run``, ``wait`` (awaiting approval), ``blocked`` or ``not_reached``.
    action: str
    reason: str
    #: The derived state of the phase now (``completed``, ``failed``, ``stale`` …).
    state: str
    #: The completed attempt that is kept (skip) or judged (wait), if any.
    attempt: int | None = None
    #: The attempt number a run would use next for this phase.
    next_attempt: int = 1
    #: Where an interrupted attempt stopped (ctx.resume_from_step / PHASELOG_RESUME_FROM_STEP).
    resume_from_step: int | None = None
    #: A rejection's comment, handed to the redo as ctx.rejection.
    rejection: str | None = None
    #: The phases it needs (``needs:``; in a chain, the one before it).
    needs: tuple[str, ...] = ()
    #: Of those, the ones this run executes first: the phase starts once they are done.
    waits_for: tuple[str, ...] = ()


@dataclass(frozen=True)
class Explanation:
    """Per phase, whether a run would skip it, run it, or stop at it; and who holds the run."""

    ticket_id: str
    run_id: str
    pipeline: str
    phases: tuple[PhasePlan, ...]
    #: The run's lease: holder details and ``verdict`` / ``reason`` (None: never run by a runner).
    lease: Mapping[str, Any] | None = None
    status: RunStatus | None = field(default=None, compare=False)

    @property
    def done(self) -> bool:
        """True when every phase would be skipped."""
        return all(p.action == SKIP for p in self.phases)

    @property
    def next_phase(self) -> str | None:
        """The first phase the runner would not skip."""
        return next((p.phase for p in self.phases if p.action != SKIP), None)

    @property
    def to_run(self) -> list[str]:
        """Phases a run would execute (until a gate stops it)."""
        return [p.phase for p in self.phases if p.action == RUN]

    def plan(self, phase: str) -> PhasePlan:
        """The plan of one phase."""
        return row_of(self.phases, phase)

    @property
    def run_name(self) -> str | None:
        """The name the run was given (:func:`phaselog.model.ids.run_name_of`), None for a UUID."""
        return self.status.run_name if self.status is not None else None

    def to_json(self) -> dict[str, Any]:
        """The JSON view (``phaselog explain``, the dashboard)."""
        return {
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "run_name": self.run_name,
            "pipeline": self.pipeline,
            "done": self.done,
            "next_phase": self.next_phase,
            "to_run": self.to_run,
            "phases": [p.to_json() for p in self.phases],
            "lease": dict(self.lease) if self.lease is not None else None,
            **({"params": dict(self.status.params)} if self.status is not None and self.status.params else {}),
        }


def explain(
    ledger: Ledger,
    ticket_id: str,
    run_id: str,
    *,
    pipeline: Pipeline | str | None = None,
    workdir: str | os.PathLike[str] | None = None,
    fingerprints: Mapping[str, str] | None = None,
    lease: bool = True,
) -> Explanation:
    """Explain what ``run`` would do with this run now (see the module docstring).

    ``workdir``: where artifacts are checked (default: the current folder). ``fingerprints``:
    the current code fingerprint of each ``fingerprint: code`` phase (the runner knows them; the
    CLI computes them for shell phases). ``lease``: also report who holds the run.
    """

    given, (ticket_id, run_id) = run_id, (validate_ticket_id(ticket_id), normalize_run_id(run_id))
    pl: Pipeline = ledger.pipeline_for(ticket_id, run_id, pipeline)
    root = os.fspath(workdir) if workdir is not None else os.getcwd()
    st: RunStatus = ledger.status(ticket_id, given, pipeline=pl, artifacts_root=root)  # as given: a name names the run
    held = _lease(ledger, ticket_id, run_id) if lease else None
    return _plan(ledger, ticket_id, run_id, pl, st, fingerprints, held)


def plan_run(
    ledger: Ledger,
    ticket_id: str,
    run_id: str,
    pipeline: Pipeline,
    *,
    workdir: str | os.PathLike[str],
    fingerprints: Mapping[str, str],
) -> tuple[Explanation, RunSnapshot]:
    """The runner's plan (``explain`` without the lease), and the snapshot it was made from.

    The runner derives the run's state after its writes from this snapshot and the records it
    wrote, instead of reading the run again.
    """
    snap: RunSnapshot = ledger.store.snapshot(ticket_id, run_id)
    pl: Pipeline = ledger.pipeline_for(ticket_id, run_id, pipeline, snapshot=snap)
    st: RunStatus = ledger.states.status_from(snap, pl, artifacts_root=workdir)
    return _plan(ledger, ticket_id, run_id, pl, st, fingerprints, None), snap


def _plan(
    ledger: Ledger,
    ticket_id: str,
    run_id: str,
    pl: Pipeline,
    st: RunStatus,
    fingerprints: Mapping[str, str] | None,
    held: Mapping[str, Any] | None,
) -> Explanation:
    plans: list[PhasePlan] = []
    graph = pl.graph
    reruns: list[str] = []  # phases that run again, in manifest order
    stops: dict[str, str] = {}  # phase -> why the phases that need it are not reached
    rejections: dict[str, str] | None = None
    for ps in st.phases:
        ph = pl.phase(ps.phase)
        nxt = max([ps.latest_attempt or 0, *ps.damaged_attempts]) + 1
        flight = ps.in_flight or {}
        resume = flight.get("resume_from_step") if ps.state == IN_PROGRESS else None
        needs = graph.needs[ps.phase]
        common: dict[str, Any] = {
            "phase": ps.phase,
            "ordinal": ps.ordinal,
            "state": ps.state,
            "next_attempt": nxt,
            "needs": needs,
            "waits_for": tuple(n for n in needs if n in reruns),
        }
        # A phase is judged by its own ancestors (D290): in a chain they are every earlier phase.
        ancestors = graph.ancestors(ps.phase)
        stop = next((stops[a] for a in ancestors if a in stops), None)
        rerun = next((a for a in reruns if a in ancestors), None)
        if stop is not None:
            plans.append(PhasePlan(action=NOT_REACHED, reason=stop, attempt=ps.completed_attempt, **common))
            stops[ps.phase] = stop
            continue
        if rerun is not None and ps.state not in (DAMAGED, PENDING, FAILED, IN_PROGRESS):
            why = f"{rerun} runs again, so this phase's checkpoint would be built on superseded work"
            plans.append(PhasePlan(action=RUN, reason=why, resume_from_step=resume, **common))
            reruns.append(ps.phase)
            continue
        if ps.state == COMPLETED:
            problem = _skip_problem(ledger, ticket_id, run_id, pl, ps.phase, ps.completed_attempt, fingerprints)
            if problem is None:
                plans.append(
                    PhasePlan(
                        action=SKIP,
                        reason=_kept(ps.completed_attempt, ph.requires_approval, ph.execution.fingerprint),
                        attempt=ps.completed_attempt,
                        **common,
                    )
                )
                continue
            plans.append(PhasePlan(action=RUN, reason=problem, attempt=ps.completed_attempt, **common))
            reruns.append(ps.phase)
        elif ps.state == AWAITING_APPROVAL:
            reason = (
                f"attempt {ps.completed_attempt} awaits approval: phaselog approve --ticket-id {ticket_id} "
                f"--run-id {run_id} --phase {ps.phase} --by NAME (or reject it to have it redone)"
            )
            plans.append(PhasePlan(action=WAIT, reason=reason, attempt=ps.completed_attempt, **common))
            stops[ps.phase] = held_reason(plans[-1])
        elif ps.state == DAMAGED:
            reason = f"{ps.reason}; the runner will not write past a damaged attempt"
            plans.append(PhasePlan(action=BLOCKED, reason=reason, attempt=ps.completed_attempt, **common))
            stops[ps.phase] = held_reason(plans[-1])
        else:
            rejection = None
            if ps.state == REJECTED and rerun is None:
                if rejections is None:
                    rejections = _rejections(ledger, ticket_id, run_id)
                rejection = rejections.get(ps.phase)
            plans.append(
                PhasePlan(
                    action=RUN,
                    reason=_why_run(ps.state, ps.reason, ps.latest_attempt, flight, rejection),
                    attempt=ps.completed_attempt,
                    resume_from_step=resume,
                    rejection=rejection,
                    **common,
                )
            )
            reruns.append(ps.phase)
    return Explanation(ticket_id, run_id, pl.name, tuple(plans), held, st)


def held_reason(p: PhasePlan) -> str:
    """Why the phases that need a phase the plan stops at (wait, blocked) are not reached."""
    if p.action == WAIT:
        return f"the run waits at {p.phase} for approval"
    if p.action == BLOCKED:
        return f"{p.phase} is damaged"
    return p.reason


def _kept(attempt: int | None, gated: bool, fingerprint: str | None) -> str:
    parts = [f"attempt {attempt} is completed{' and approved' if gated else ''}, current and valid"]
    parts.append("its artifacts are unchanged")
    if fingerprint == "code":
        parts.append("its code is unchanged")
    return "; ".join(parts)


def _why_run(
    state: str, reason: str | None, latest: int | None, flight: Mapping[str, Any], rejection: str | None
) -> str:
    if state == FAILED:
        return f"attempt {latest} failed ({reason}); it runs again as attempt {(latest or 0) + 1}"
    if state == STALE:
        return f"stale: {reason}"
    if state == REJECTED:
        return f"attempt {latest} was rejected" + (f": {rejection}" if rejection else "") + "; it is redone"
    if state == IN_PROGRESS:
        step = flight.get("resume_from_step")
        where = f", stopped at step {step}" if step is not None else ""
        why = f"abandoned: {flight.get('abandoned_reason')}" if flight.get("abandoned") else "no checkpoint yet"
        return f"attempt {flight.get('attempt_number')} never finished ({why}{where}); a new attempt runs"
    return "no checkpoint yet"


def _skip_problem(
    ledger: Ledger,
    ticket_id: str,
    run_id: str,
    pl: Pipeline,
    phase: str,
    attempt: int | None,
    fingerprints: Mapping[str, str] | None,
) -> str | None:
    """Why a completed (current, artifacts unchanged: its state says so) phase cannot be skipped, or None."""
    ph = pl.phase(phase)
    try:
        stored, report = ledger.validate(ticket_id, run_id, phase, attempt, pipeline=pl)
    except (Corrupt, NotFound, UnsupportedVersion) as exc:
        return f"attempt {attempt} cannot be read: {exc}"
    if not report.is_valid:
        return f"attempt {attempt} is not valid against pipeline {pl.name}: " + "; ".join(
            i.text() for i in report.errors
        )
    if ph.execution.fingerprint == "code" and fingerprints is not None and phase in fingerprints:
        recorded = stored.record.code_fingerprint
        now = fingerprints[phase]
        if recorded is None:
            return f"attempt {attempt} recorded no code fingerprint (fingerprint: code): it runs to record one"
        if recorded != now:
            return f"the phase's code changed since attempt {attempt} (recorded {recorded[:19]}, now {now[:19]})"
    return None


def _rejections(ledger: Ledger, ticket_id: str, run_id: str) -> dict[str, str]:
    """The latest rejection comment per phase."""
    out: dict[str, str] = {}
    for a in ledger.approvals(ticket_id, run_id):
        if not a.approved:
            out[a.phase] = a.comment or f"rejected by {a.by} (no comment)"
    return out


def _lease(ledger: Ledger, ticket_id: str, run_id: str) -> dict[str, Any] | None:

    if Capability.LEASES not in ledger.store.capabilities:
        return None
    state = leases_of(ledger.store).read(ticket_id, run_id)
    if state is None:
        return None
    if state.holder is None:
        return {"held": False, "token": state.token, "holder": None, "reason": "free (released by its last runner)"}
    verdict = judge(state)
    return {
        "held": not verdict.take,
        "token": state.token,
        "holder": dict(state.holder),
        "expires_in_sec": round(state.expires_at - state.now, 1) if state.expires_at is not None else None,
        "reason": verdict.reason,
    }
