"""Run state, derived from the records and nothing else (a pure function).

For each phase in pipeline order the latest attempt decides:

* ``pending``   no attempt;
* ``failed``    the latest attempt failed;
* ``stale``     the latest attempt completed, but a phase it needs (directly or not: its ancestors,
  ``Pipeline.earlier``; in a chain every earlier phase) has since completed a newer attempt than
  the one this phase was built on (its ``basis``; for seed-tool checkpoints, which have no basis,
  such a phase completed after this one), or its artifacts no longer
  match the SHA-256 it recorded (``artifacts``: judged by the caller under a folder, D89);
* ``in_progress`` an attempt newer than any checkpoint has progress events (``abandoned``
  flags one whose process is gone or whose last event is too old);
* ``rejected``  the phase is gated and a person rejected its latest checkpoint;
* ``awaiting_approval`` the phase is gated and its latest checkpoint is not approved yet;
* ``awaiting_input`` the latest checkpoint asks for input that was not given yet (a LangGraph
  thread paused at ``interrupt()``: phaselog.ledger.inputs);
* ``damaged``   the newest attempt exists but cannot be read (damaged or edited after writing);
* ``completed`` otherwise.

Approvals are judged by content hash: an approval of a superseded attempt does not count.

``next_phase`` is the first phase that is not ``completed``; ``None`` when all are. It is also the
first of ``ready_phases``: every phase not completed whose needs all are (``Graph.ready``, D283).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from phaselog.model.graph import Graph, default_needs
from phaselog.model.pipelines import Phase, Pipeline
from phaselog.model.records import Checkpoint, format_timestamp, parse_timestamp

if TYPE_CHECKING:
    from phaselog.model.entries import Approval

PENDING, COMPLETED, FAILED, STALE = "pending", "completed", "failed", "stale"
IN_PROGRESS, AWAITING_APPROVAL, REJECTED = "in_progress", "awaiting_approval", "rejected"
DAMAGED, AWAITING_INPUT = "damaged", "awaiting_input"
APPROVED = "approved"
#: RunStatus.summary: ``running`` (an attempt in flight), ``stuck`` (only abandoned attempts in
#: flight), ``awaiting_approval``, ``awaiting_input``, ``failed`` (the next phase failed, was
#: rejected or is damaged), ``pending`` (the next phase has not started, or must be redone because
#: it is stale), ``complete``.
RUN_SUMMARIES = ("running", "stuck", "awaiting_approval", "awaiting_input", "failed", "pending", "complete")


class _PerPhase(Protocol):
    @property
    def phase(self) -> str: ...


_Row = TypeVar("_Row", bound=_PerPhase)


def row_of(rows: Iterable[_Row], phase: str) -> _Row:
    """The row of ``phase`` among per-phase rows (states, plans, outcomes); KeyError if there is none."""
    for row in rows:
        if row.phase == phase:
            return row
    raise KeyError(phase)


def judge(approvals: Iterable[Approval]) -> dict[str, str]:
    """Map checkpoint content hash → ``approved`` / ``rejected``; any rejection wins."""
    out: dict[str, str] = {}
    for a in sorted(approvals, key=lambda a: a.seq):
        if not a.approved:
            out[a.checkpoint_hash] = REJECTED
        elif out.get(a.checkpoint_hash) != REJECTED:
            out[a.checkpoint_hash] = APPROVED
    return out


@dataclass(frozen=True)
class PhaseState:
    """The derived state of one phase."""

    phase: str
    ordinal: int
    state: str
    latest_attempt: int | None = None
    latest_timestamp: datetime | None = None
    #: The completed attempt that counts for this phase (None if none).
    completed_attempt: int | None = None
    #: How many attempts the phase has: recorded (completed or failed), damaged, and with progress
    #: events only (in flight or abandoned).
    attempts: int = 0
    reason: str | None = None
    damaged_attempts: tuple[int, ...] = ()
    requires_approval: bool = False
    #: For a gated phase: "approved", "rejected" or None (not judged) for the counted attempt.
    approval: str | None = None
    #: The attempt in flight (progress events, no checkpoint), as JSON; None if none.
    in_flight: dict[str, Any] | None = None
    #: What the latest checkpoint asks (``awaiting_input``), as JSON (phaselog.ledger.inputs); None if nothing.
    input_request: dict[str, Any] | None = None
    #: For a gated phase judged by another run's approval (a fork's copy, D91): that run, the
    #: attempt judged there, ``by``, ``timestamp``, ``decision``, ``inherited: true``; else None.
    approval_from: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "phase": self.phase,
            "ordinal": self.ordinal,
            "state": self.state,
            "latest_attempt": self.latest_attempt,
            "latest_timestamp": (format_timestamp(self.latest_timestamp) if self.latest_timestamp else None),
            "completed_attempt": self.completed_attempt,
            "attempts": self.attempts,
            "reason": self.reason,
            "damaged_attempts": list(self.damaged_attempts),
            "requires_approval": self.requires_approval,
            "approval": self.approval,
            "in_flight": self.in_flight,
            "input_request": self.input_request,
            "approval_from": self.approval_from,
        }


@dataclass(frozen=True)
class RunStatus:
    """The derived state of a run."""

    ticket_id: str
    run_id: str
    pipeline: str
    phases: tuple[PhaseState, ...]
    warnings: tuple[str, ...] = field(default=())
    #: False when nothing at all is recorded for the run (a new run, or a mistyped run id).
    recorded: bool = True
    #: With ``recorded`` false: the runs the ticket does have (canonical ids).
    known_runs: tuple[str, ...] = ()
    #: The run id as the user gave it (``nightly-1``), as its checkpoints keep it; None for a UUID.
    run_name: str | None = None
    #: The run's parameters as its checkpoints record them (None: none; D260).
    params: Mapping[str, Any] | None = None
    #: The pipeline's needs (model/graph.py); None: each phase needs the one before it (a chain).
    graph: Graph | None = field(default=None, compare=False, repr=False)

    @property
    def message(self) -> str | None:
        """What a person should know first: that nothing is recorded for the run, and what is."""
        if self.recorded:
            return None
        runs = ", ".join(self.known_runs) if self.known_runs else "none"
        return f"nothing is recorded for run {self.run_id} of ticket {self.ticket_id}; its runs: {runs}"

    @property
    def next_phase(self) -> str | None:
        """First phase not completed-and-current; None when the run is done."""
        for p in self.phases:
            if p.state != COMPLETED:
                return p.phase
        return None

    @property
    def ready_phases(self) -> list[str]:
        """Every phase not completed whose needs all are, in manifest order (``Graph.ready``: the one rule
        of readiness, D283). Its first is ``next_phase``: all before that one are completed, and a phase
        needs only phases listed before it."""
        graph = self.graph
        if graph is None:
            names = [p.phase for p in self.phases]
            graph = Graph.of(names, [default_needs(names, i) for i in range(len(names))])
        return list(graph.ready(set(self.completed_phases)))

    @property
    def summary(self) -> str:
        """One word for the whole run, as a dashboard badge shows it (see RUN_SUMMARIES)."""
        if self.done:
            return "complete"
        flights = [p.in_flight for p in self.phases if p.state == IN_PROGRESS and p.in_flight is not None]
        if any(not f.get("abandoned") for f in flights):
            return "running"
        if flights:
            return "stuck"
        nxt = next(p for p in self.phases if p.state != COMPLETED)
        if nxt.state in (AWAITING_APPROVAL, AWAITING_INPUT):
            return nxt.state
        if nxt.state in (FAILED, REJECTED, DAMAGED):
            return "failed"
        return "pending"

    @property
    def last_activity(self) -> datetime | None:
        """The newest checkpoint or progress event of the run (None: nothing recorded)."""
        times = [p.latest_timestamp for p in self.phases if p.latest_timestamp is not None]
        return max(times) if times else None

    @property
    def completed_phases(self) -> list[str]:
        """Phases whose state is ``completed``."""
        return [p.phase for p in self.phases if p.state == COMPLETED]

    @property
    def done(self) -> bool:
        """True when every phase is completed."""
        return self.next_phase is None

    def phase(self, name: str) -> PhaseState:
        """The state of one phase by name."""
        return row_of(self.phases, name)

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form the CLI prints."""
        return {
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "run_name": self.run_name,
            "pipeline": self.pipeline,
            "next_phase": self.next_phase,
            "ready_phases": self.ready_phases,
            "completed_phases": self.completed_phases,
            "done": self.done,
            "summary": self.summary,
            "last_activity": format_timestamp(self.last_activity) if self.last_activity else None,
            "phases": [p.to_json() for p in self.phases],
            "warnings": list(self.warnings),
            "recorded": self.recorded,
            **({"message": self.message, "known_runs": list(self.known_runs)} if not self.recorded else {}),
            **({"params": dict(self.params)} if self.params is not None else {}),
        }


def derive_status(
    pipeline: Pipeline,
    records: Iterable[Checkpoint],
    *,
    ticket_id: str = "",
    run_id: str = "",
    damaged: Sequence[tuple[str, int]] = (),
    judgements: Mapping[str, str] | None = None,
    flights: Mapping[str, Mapping[str, Any]] | None = None,
    counts: Mapping[str, int] | None = None,
    inputs: Mapping[str, Mapping[str, Any]] | None = None,
    artifacts: Mapping[str, str] | None = None,
    approval_sources: Mapping[str, Mapping[str, Any]] | None = None,
) -> RunStatus:
    """Derive a run's state from its records (any order).

    ``damaged``: (phase, attempt) pairs that exist but cannot be read. ``judgements``: checkpoint
    content hash → ``approved`` / ``rejected``. ``flights``: phase → the in-flight attempt's JSON
    summary (``attempt_number``, ``abandoned`` …). ``counts``: phase → every attempt (committed,
    damaged, and with progress events only), when ``records`` holds only the attempts the state
    depends on (a run snapshot), not all of them.
    ``inputs``: phase → the open question of its latest checkpoint (``InputRequest.to_json()``).
    ``artifacts``: checkpoint content hash → why its artifacts no longer match what it recorded
    (:func:`phaselog.model.artifacts.drift`); such a completed checkpoint is ``stale``.
    ``approval_sources``: checkpoint content hash → where its judgement came from, when another
    run's approval judged it (a fork's copy): shown as the phase's ``approval_from``.
    """
    by_phase: dict[str, list[Checkpoint]] = {}
    warnings: list[str] = []
    known = set(pipeline.phase_names)
    run_name: str | None = None
    params: Mapping[str, Any] | None = None
    for cp in records:
        run_name = run_name or cp.run_name
        params = params if params is not None else cp.params
        if cp.phase not in known:
            warnings.append(
                f"attempt {cp.attempt_number} of phase {cp.phase!r} is not in pipeline {pipeline.name}; ignored"
            )
            continue
        by_phase.setdefault(cp.phase, []).append(cp)
    for lst in by_phase.values():
        lst.sort(key=lambda c: c.attempt_number)
    bad: dict[str, list[int]] = {}
    for name, attempt in damaged:
        bad.setdefault(name, []).append(attempt)

    latest_completed: dict[str, Checkpoint] = {}
    for name, lst in by_phase.items():
        done = [c for c in lst if c.completed]
        if done:
            latest_completed[name] = done[-1]

    states = [
        _phase_state(
            p,
            by_phase.get(p.name, []),
            pipeline,
            latest_completed,
            bad.get(p.name, []),
            judgements or {},
            (flights or {}).get(p.name),
            (counts or {}).get(p.name),
            (inputs or {}).get(p.name),
            artifacts or {},
            approval_sources or {},
        )
        for p in pipeline.phases
    ]
    return RunStatus(
        ticket_id,
        run_id,
        pipeline.name,
        tuple(states),
        tuple(warnings),
        run_name=run_name,
        params=params,
        graph=pipeline.graph,
    )


#: The fields a PhaseState takes from a default (every one but phase, ordinal and state).
_PHASE_DEFAULTS = {f.name: f.default for f in fields(PhaseState) if f.default is not MISSING}


def _phase(**values: Any) -> PhaseState:
    """``PhaseState(**values)`` without the frozen dataclass's ``__init__`` (a setattr per field,
    15 of them, five times a status): it has no ``__post_init__`` and no slots, so its fields are
    its ``__dict__`` (tests/test_status_fast.py compares the two constructions; D194)."""
    ps = object.__new__(PhaseState)
    state = ps.__dict__
    state.update(_PHASE_DEFAULTS)
    state.update(values)
    return ps


def _phase_state(
    phase: Phase,
    attempts: list[Checkpoint],
    pipeline: Pipeline,
    latest_completed: dict[str, Checkpoint],
    damaged: list[int],
    judgements: Mapping[str, str],
    flight: Mapping[str, Any] | None,
    count: int | None = None,
    asked: Mapping[str, Any] | None = None,
    artifacts: Mapping[str, str] | None = None,
    approval_sources: Mapping[str, Mapping[str, Any]] | None = None,
) -> PhaseState:
    common: dict[str, Any] = {
        "phase": phase.name,
        "ordinal": phase.ordinal,
        "damaged_attempts": tuple(sorted(damaged)),
        "requires_approval": phase.requires_approval,
    }
    top = attempts[-1].attempt_number if attempts else 0
    n_attempts = count if count is not None else len(attempts)
    # The attempt in flight is an attempt too: "attempts" must agree with "latest_attempt" (given
    # ``count`` holds every attempt already, those with progress events only among them).
    if count is None and flight is not None and flight["attempt_number"] > top:
        n_attempts += 1
    if damaged and max(damaged) > top and (flight is None or max(damaged) > flight["attempt_number"]):
        lc = latest_completed.get(phase.name)
        return _phase(
            state=DAMAGED,
            latest_attempt=max(damaged),
            completed_attempt=lc.attempt_number if lc else None,
            attempts=n_attempts,
            reason=f"attempt {max(damaged)} is damaged; see `phaselog verify`, `phaselog doctor`",
            **common,
        )
    if flight is not None and flight["attempt_number"] > top:
        lc = latest_completed.get(phase.name)
        return _phase(
            state=IN_PROGRESS,
            latest_attempt=flight["attempt_number"],
            latest_timestamp=parse_timestamp(flight["last_event_at"]) if flight.get("last_event_at") else None,
            completed_attempt=lc.attempt_number if lc else None,
            attempts=n_attempts,
            reason=(
                f"abandoned: {flight.get('abandoned_reason')}"
                if flight.get("abandoned")
                else f"step {flight.get('last_step')} after {flight.get('elapsed_sec')} s"
            ),
            in_flight=dict(flight),
            **common,
        )
    if not attempts:
        return _phase(state=PENDING, **common)
    latest = attempts[-1]
    common.update(
        latest_attempt=latest.attempt_number,
        latest_timestamp=latest.timestamp_utc,
        attempts=n_attempts,
    )
    if not latest.completed:
        lc = latest_completed.get(phase.name)
        return _phase(
            state=FAILED,
            completed_attempt=lc.attempt_number if lc else None,
            reason=latest.error,
            **common,
        )
    reason = stale_reason(latest, pipeline.earlier(phase), latest_completed) or (artifacts or {}).get(
        latest.content_hash
    )
    judged = judgements.get(latest.content_hash) if phase.requires_approval else None
    origin = (approval_sources or {}).get(latest.content_hash) if judged is not None else None
    state = COMPLETED
    if reason:
        state = STALE
    elif phase.requires_approval and judged == REJECTED:
        state, reason = REJECTED, f"attempt {latest.attempt_number} was rejected; write a new attempt"
    elif phase.requires_approval and judged != APPROVED:
        state, reason = AWAITING_APPROVAL, f"attempt {latest.attempt_number} awaits approval"
    request = dict(asked) if asked is not None and asked.get("attempt_number") == latest.attempt_number else None
    if request is not None and state == COMPLETED:
        state, reason = AWAITING_INPUT, _input_reason(latest.attempt_number, request)
    if origin is not None and state in (COMPLETED, REJECTED):
        where = origin.get("run_name") or origin.get("run_id")
        copied = f"its attempt {origin.get('attempt_number')}, copied here by fork"
        said = f"{judged} by {origin.get('by')} in run {where} ({copied})"
        reason = f"{reason}: {said}" if reason else said
    return _phase(
        state=state,
        completed_attempt=latest.attempt_number,
        reason=reason,
        approval=judged,
        input_request=request if state == AWAITING_INPUT else None,
        approval_from=dict(origin) if origin is not None else None,
        **common,
    )


def _input_reason(attempt: int, request: Mapping[str, Any]) -> str:
    shown = [q for q in request.get("questions", []) if q.get("shown", True)]
    if shown:
        text = json.dumps(shown[0].get("value"), ensure_ascii=False, sort_keys=True)
        asked = f": {text[:117]}..." if len(text) > 120 else f": {text}"
    else:
        asked = " (its question is kept serialised)"
    how = request.get("resume")
    return f"attempt {attempt} waits for input{asked}" + (f"; resume: {how}" if how else "")


def stale_reason(cp: Checkpoint, earlier: Sequence[Phase], latest_completed: dict[str, Checkpoint]) -> str | None:
    """Why ``cp`` is stale with respect to ``earlier`` (its phase's ancestors), or None if it is current."""
    for e in earlier:
        now = latest_completed.get(e.name)
        if now is None:
            continue
        if cp.basis is not None:
            b = cp.basis.get(e.name)
            if b is None:
                return f"{e.name} completed attempt {now.attempt_number} after this checkpoint was written"
            if b.attempt < now.attempt_number:
                return (
                    f"built on {e.name} attempt {b.attempt}, but {e.name} has a newer "
                    f"completed attempt {now.attempt_number}"
                )
            if b.attempt > now.attempt_number:
                return f"built on {e.name} attempt {b.attempt}, which is no longer a stored completed attempt"
            if b.attempt == now.attempt_number and b.hash != now.content_hash:
                if now.timestamp_utc > cp.timestamp_utc:  # a newer record took the number (D18, D115)
                    return (
                        f"built on {e.name} attempt {b.attempt}, whose number a newer record written after this "
                        "one now holds (its original was set aside, as `doctor --quarantine` does)"
                    )
                return f"built on {e.name} attempt {b.attempt}, whose content has changed since"
        elif now.timestamp_utc > cp.timestamp_utc:
            return (
                f"{e.name} attempt {now.attempt_number} completed after this checkpoint "
                "(no basis recorded: judged by timestamps)"
            )
    return None
