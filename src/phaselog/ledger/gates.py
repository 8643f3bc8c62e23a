"""Approval gates (seed 002): immutable approvals bound to a checkpoint's content hash.

A phase whose manifest says ``requires_approval: true`` is ``awaiting_approval`` once a completed
checkpoint exists, until a person approves that exact checkpoint. A rejection is final for the
attempt it judges: the phase stays ``rejected`` until a new attempt is written and approved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from phaselog.ledger.derive import AWAITING_APPROVAL, AWAITING_INPUT

# Re-exported: the verdict of the approvals lives in derive (status needs it and must not import the gates);
# callers that import it from here keep working.
from phaselog.ledger.derive import judge as judge  # noqa: PLC0414
from phaselog.ledger.events import completes_run, judgement_events, raise_events, run_finishers, snapshot_lookup
from phaselog.model.entries import DECISIONS, Approval, entry_bytes, read_entries
from phaselog.model.errors import AlreadyExists, Conflict, Corrupt, NotFound, PhaselogError, UsageError
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.model.limits import check_text, is_control, json_loads
from phaselog.model.records import format_timestamp, parse_timestamp
from phaselog.stores.names import approval_name, parse_approval_name

if TYPE_CHECKING:
    from phaselog.ledger.derive import RunStatus
    from phaselog.ledger.reads import Reads
    from phaselog.ledger.resolve import PipelineArg, PipelineResolver
    from phaselog.model.pipelines import Pipeline
    from phaselog.model.records import Checkpoint
    from phaselog.stores import Store
    from phaselog.stores.snapshot import RunSnapshot

_KIND = "approvals"
MAX_BY = 200
MAX_COMMENT = 10_000


class GateRefused(PhaselogError, ValueError):
    """The approval cannot be recorded (not gated, rejected already, not completed …)."""

    error_code = "gate"


#: The doors a judgement may record it came through (``Approval.via``, D240).
VIAS = ("mcp",)


def _check_via(via: str | None) -> str | None:
    if via is not None and via not in VIAS:
        raise UsageError(f"via: one of {', '.join(VIAS)} (or none)", field="via", rule="enum")
    return via


def _check_person(by: str) -> str:
    if not isinstance(by, str) or not by.strip():
        raise UsageError("--by: name who approves (must not be empty)", field="by", rule="required")
    if len(by) > MAX_BY or any(is_control(c) for c in by):
        raise UsageError(f"--by: at most {MAX_BY} printable characters", field="by", rule="format")
    return by.strip()


def pruned_judgements(store: Store, ticket_id: str, run_id: str) -> dict[int, tuple[str, str | None]]:
    """seq → (phase, content hash or None) of every approval or rejection prune removed from a run.

    Prune notes list the audit entries removed with their records: ``entries`` items
    ``{"kind": "approvals", "name": …}`` (the name holds the number and the phase) and, where the
    note has it, ``judgements`` items with the content hash. A note that cannot be read vouches
    for nothing (verify reports it on its own).
    """
    out: dict[int, tuple[str, str | None]] = {}
    for _name, _loc, data in store.entries("pruned", ticket_id, run_id):
        if isinstance(data, Exception):
            continue
        try:
            doc = json_loads(data)
            for e in doc.get("entries", []):
                parsed = parse_approval_name(e.get("name", "")) if e.get("kind") == "approvals" else None
                if parsed is not None:
                    out.setdefault(parsed.seq, (parsed.phase, None))
            for r in doc.get("judgements", []):
                out[int(r["seq"])] = (str(r["phase"]), str(r["content_hash"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    return out


def read_approvals(store: Store, ticket_id: str, run_id: str) -> tuple[list[Approval], list[Corrupt]]:
    """Every usable approval and rejection of a run (in the order recorded), and the damaged ones."""
    out, damaged = read_entries(store, _KIND, Approval, ticket_id, run_id)
    return sorted(out, key=lambda a: a.seq), damaged


class StateSource(Protocol):
    """What the gates need of :class:`phaselog.ledger.status.RunStates` (a Protocol: status needs the gates' rules)."""

    def status(self, ticket_id: str, run_id: str) -> RunStatus:
        """The state of a run (one snapshot)."""
        ...

    def status_from(self, snap: RunSnapshot, pl: Pipeline) -> RunStatus:
        """The state of a run as a snapshot shows it."""
        ...


class Gates:
    """Approvals and rejections over one store; ``pipelines`` finds a run's gated phases.

    ``states`` (when given) tells whether approving the last gate completes the run (RunCompleted).
    """

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        pipelines: PipelineResolver,
        *,
        states: StateSource | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.pipelines = pipelines
        self.states = states

    def approvals(self, ticket_id: str, run_id: str) -> list[Approval]:
        """Every approval and rejection of a run, in the order they were recorded."""
        return read_approvals(self.store, validate_ticket_id(ticket_id), normalize_run_id(run_id))[0]

    def damaged_approvals(self, ticket_id: str, run_id: str) -> list[Corrupt]:
        """Approvals that exist but cannot be used (damaged or edited after writing): not counted."""
        return read_approvals(self.store, validate_ticket_id(ticket_id), normalize_run_id(run_id))[1]

    def approve(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        *,
        by: str,
        comment: str | None = None,
        attempt: int | None = None,
        decision: str = "approve",
        pipeline: PipelineArg = None,
        checkpoint_hash: str | None = None,
        via: str | None = None,
    ) -> tuple[Approval, list[str]]:
        """Record that ``by`` approves (or rejects) a checkpoint of a gated phase.

        ``attempt`` defaults to the latest completed attempt. ``checkpoint_hash``: the content hash
        the person was shown; the judgement is refused (rule ``hash_mismatch``) unless the judged
        checkpoint still has exactly that hash. Returns the approval and warnings (approving a
        superseded attempt is recorded but does not approve the phase). ``via``: the door the
        judgement came through, recorded beside ``by`` (``mcp``; None: the CLI, dashboard or API).
        """
        if decision not in DECISIONS:
            raise UsageError("decision must be approve or reject", field="decision")
        ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
        by = _check_person(by)
        if comment is not None:
            check_text(comment, field="comment", max_chars=MAX_COMMENT, multiline=True)
        snap = self.store.snapshot(ticket_id, run_id)  # O(phases): the phase's newest completed attempt
        pl = self.pipelines.for_run(ticket_id, run_id, pipeline, snapshot=snap)
        ph = pl.phase(phase)
        if ph.awaits_input and not ph.requires_approval:
            raise GateRefused(
                f"phase {ph.name} waits for input, not for an approval: it is answered by the program that "
                "asked (a LangGraph interrupt() is resumed by the graph: graph.invoke(Command(resume=answer), "
                "config) on the thread; see docs/langgraph.md); `phaselog status` shows what it asks",
                phase=ph.name,
                rule="awaits_input",
            )
        if not ph.requires_approval:
            raise GateRefused(
                f"phase {ph.name} has no approval gate (requires_approval is false in its pipeline)",
                phase=ph.name,
                rule="not_gated",
            )
        done = snap.latest_completed(ph.ordinal)
        newest_done = done.attempt_number if done is not None else None
        if attempt is None:
            if newest_done is None:
                raise NotFound(f"phase {ph.name} has no completed checkpoint to judge", phase=ph.name)
            attempt = newest_done
        elif attempt != newest_done:  # an older attempt (or none at all): list the phase's (rare)
            refs = [r for r in self.store.attempts(ticket_id, run_id) if r.phase_ordinal == ph.ordinal]
            if attempt not in {r.attempt_number for r in refs}:
                raise NotFound(f"no attempt {attempt} of phase {ph.name}", phase=ph.name, attempt_number=attempt)
            if attempt not in {r.attempt_number for r in refs if r.completed}:
                raise GateRefused(
                    f"attempt {attempt} of phase {ph.name} failed; only completed checkpoints can be judged",
                    rule="not_completed",
                )
        target = self.store.get(ticket_id, run_id, ph.ordinal, ph.name, attempt).record
        if checkpoint_hash is not None and checkpoint_hash != target.content_hash:
            raise GateRefused(
                f"attempt {attempt} of phase {ph.name} has content hash {target.content_hash[:12]}, not the "
                f"{str(checkpoint_hash)[:12]} that was judged; look at it again before judging",
                phase=ph.name,
                rule="hash_mismatch",
            )
        warnings = []
        if attempt != newest_done:
            warnings.append(
                f"attempt {attempt} is superseded by attempt {newest_done}; this judgement does not "
                "change the phase's state"
            )
        for _ in range(1000):
            existing = self.approvals(ticket_id, run_id)
            mine = [a for a in existing if a.checkpoint_hash == target.content_hash]
            if decision == "approve" and any(not a.approved for a in mine):
                raise GateRefused(
                    f"attempt {attempt} of phase {ph.name} was rejected; write a new attempt and approve that",
                    rule="rejected",
                )
            # The next number after every stored judgement, damaged ones included (their names
            # still hold their numbers): two judgements must never share a number.
            taken = [p.seq for n in self.store.entry_names(_KIND, ticket_id, run_id) if (p := parse_approval_name(n))]
            seq = max([a.seq for a in existing] + taken, default=0) + 1
            # The phase's previous judgement, counting those prune removed (its notes keep their hashes).
            chain = sorted(
                [(a.seq, a.content_hash) for a in existing if a.phase_ordinal == ph.ordinal]
                + [
                    (n, h)
                    for n, (name, h) in pruned_judgements(self.store, ticket_id, run_id).items()
                    if name == ph.name and h is not None
                ]
            )
            approval = Approval(
                ticket_id=ticket_id,
                run_id=run_id,
                phase=ph.name,
                phase_ordinal=ph.ordinal,
                attempt_number=attempt,
                checkpoint_hash=target.content_hash,
                decision=decision,
                by=by,
                timestamp=self.clock(),
                seq=seq,
                comment=comment,
                prev_hash=chain[-1][1] if chain else None,
                via=_check_via(via),
            )
            name = approval_name(seq, ph.ordinal, ph.name, attempt)
            try:
                self.store.put_entry(_KIND, ticket_id, run_id, name, entry_bytes(approval))
            except AlreadyExists:
                continue  # a concurrent approval took the number: re-read, retry
            # Durable now: tell the subscribers (the queue re-queues a run waiting at this gate).
            completes = decision == "approve" and self._completes(snap, target, pl)
            warnings += raise_events(judgement_events(approval, completes_run=completes), self.store)
            return approval, warnings
        raise Conflict("could not record the approval")

    def _completes(self, snap: RunSnapshot, target: Checkpoint, pl: Pipeline) -> bool:
        """Does approving ``target`` complete the run? Its phase is a sink, built on every other one (D206, D280)."""
        return completes_run(target, run_finishers(pl), snapshot_lookup(snap, pl, self.store))

    def reject(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        *,
        by: str,
        comment: str | None = None,
        attempt: int | None = None,
        pipeline: PipelineArg = None,
        checkpoint_hash: str | None = None,
        via: str | None = None,
    ) -> tuple[Approval, list[str]]:
        """Record a rejection (see :meth:`approve`)."""
        return self.approve(
            ticket_id,
            run_id,
            phase,
            by=by,
            comment=comment,
            attempt=attempt,
            decision="reject",
            pipeline=pipeline,
            checkpoint_hash=checkpoint_hash,
            via=via,
        )


@dataclass(frozen=True)
class Awaiting:
    """A phase whose latest checkpoint waits for a person: a gated phase's judgement
    (``waiting_for`` "approval"), or the input it asks for ("input": a LangGraph interrupt)."""

    ticket_id: str
    run_id: str
    phase: str
    attempt_number: int
    content_hash: str
    since: datetime
    waiting_for: str = "approval"
    #: For "input": what is asked (``PhaseState.input_request``).
    input_request: dict[str, Any] | None = None
    #: The name the run was given (``nightly-1``), None for a UUID (see :func:`phaselog.model.ids.run_name_of`).
    run_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "run_name": self.run_name,
            "phase": self.phase,
            "attempt_number": self.attempt_number,
            "content_hash": self.content_hash,
            "since": format_timestamp(self.since),
            "waiting_for": self.waiting_for,
            "input_request": self.input_request,
        }


class QueueSource(Protocol):
    """What :func:`approval_queue` needs of a :class:`phaselog.ledger.facade.Ledger` (a service never imports it)."""

    @property
    def store(self) -> Store:
        """The store whose tickets and runs are listed."""
        ...

    @property
    def states(self) -> StateSource:
        """The service deriving each run's state."""
        ...

    @property
    def reads(self) -> Reads:
        """The service reading the awaiting checkpoints."""
        ...


def approval_queue(ledger: QueueSource, ticket_ids: Iterable[str] | None = None) -> tuple[list[Awaiting], list[str]]:
    """Everything waiting for a person (oldest first) across tickets — approvals and the input a
    checkpoint asks for (``awaiting_input``) — and the runs that could not be read."""
    queue: list[Awaiting] = []
    problems: list[str] = []
    tickets = list(ticket_ids) if ticket_ids is not None else ledger.store.tickets()
    for ticket_id in tickets:
        for run_id in ledger.store.runs(ticket_id):
            try:
                status = ledger.states.status(ticket_id, run_id)
                for ps in status.phases:
                    if ps.state not in (AWAITING_APPROVAL, AWAITING_INPUT) or ps.completed_attempt is None:
                        continue
                    stored = ledger.reads.read(ticket_id, run_id, ps.phase, ps.completed_attempt)
                    asked = ps.input_request if ps.state == AWAITING_INPUT else None
                    queue.append(
                        Awaiting(
                            ticket_id,
                            run_id,
                            ps.phase,
                            ps.completed_attempt,
                            stored.record.content_hash,
                            parse_timestamp(asked["since"]) if asked else stored.record.timestamp_utc,
                            "input" if asked else "approval",
                            asked,
                            run_name=status.run_name,
                        )
                    )
            except PhaselogError as exc:
                problems.append(f"{ticket_id}/{run_id}: {exc.message}")
    queue.sort(key=lambda a: (a.since, a.ticket_id, a.run_id))
    return queue, problems
