"""What a run did: per phase, skipped / completed / failed / waiting, and the run's exit code."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from phaselog.ledger.derive import RunStatus, row_of
from phaselog.stores.base import AttemptRef, Stored
from phaselog.stores.snapshot import RunSnapshot, with_attempts

#: ``phaselog run`` exit codes (docs/runner.md).
EXIT_OK, EXIT_FAILED, EXIT_WAITING, EXIT_HELD = 0, 1, 3, 75


class PhaseRow:
    """A per-phase row of a view (a dataclass; ``explain``'s plans, a run's outcomes)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form: the fields in order, tuples as lists."""
        out = {}
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class PhaseOutcome(PhaseRow):
    """What this run did with one phase."""

    phase: str
    #: ``skipped``, ``completed``, ``failed``, ``waiting`` (checkpoint written, awaits approval),
    #: ``interrupted``, ``blocked`` or ``not_reached``.
    outcome: str
    reason: str = ""
    #: Attempts this run made (empty when skipped).
    attempts: tuple[int, ...] = ()
    #: The checkpoint that counts for the phase (written now, or kept).
    attempt: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class RunResult:
    """The result of ``pipe.run`` / ``phaselog run``."""

    ticket_id: str
    run_id: str
    pipeline: str
    phases: tuple[PhaseOutcome, ...]
    #: The gated phase the run stopped at, awaiting approval (None: not waiting).
    waiting: str | None = None
    #: The run's derived state after this run (None if it could not be read).
    status: RunStatus | None = field(default=None, compare=False)
    #: The runner this one displaced when it took the lease, and why.
    took_over: dict[str, Any] | None = None
    interrupted: int | None = None
    #: The name the run was given (``nightly-1``; :func:`phaselog.model.ids.run_name_of`), None for a UUID.
    run_name: str | None = None

    @property
    def done(self) -> bool:
        """True when every phase is completed."""
        return (
            self.status.done
            if self.status is not None
            else all(p.outcome in ("skipped", "completed") for p in self.phases)
        )

    @property
    def failed(self) -> str | None:
        """The phase that failed after its retries, if any."""
        return next((p.phase for p in self.phases if p.outcome == "failed"), None)

    @property
    def exit_code(self) -> int:
        """0 complete, 1 failed, 3 waiting for approval, 128+N interrupted by signal N."""
        if self.interrupted is not None:
            return 128 + self.interrupted
        if self.failed is not None or any(p.outcome == "blocked" for p in self.phases):
            return EXIT_FAILED
        if self.waiting is not None:
            return EXIT_WAITING
        return EXIT_OK if self.done else EXIT_FAILED

    def outcome(self, phase: str) -> PhaseOutcome:
        """What this run did with ``phase``."""
        return row_of(self.phases, phase)

    def state(self, phase: str) -> str:
        """The phase's derived state after the run (``completed``, ``awaiting_approval`` …)."""
        if self.status is None:
            raise LookupError("the run's state could not be read")
        return self.status.phase(phase).state

    @property
    def states(self) -> dict[str, str]:
        """Every phase's derived state after the run."""
        return {p.phase: p.state for p in self.status.phases} if self.status is not None else {}

    def to_json(self) -> dict[str, Any]:
        """The JSON view (``phaselog run`` prints it)."""
        return {
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "run_name": self.run_name,
            "pipeline": self.pipeline,
            "done": self.done,
            "waiting": self.waiting,
            "failed": self.failed,
            "interrupted": self.interrupted,
            "exit_code": self.exit_code,
            "phases": [p.to_json() for p in self.phases],
            "states": self.states,
            "took_over": self.took_over,
            **({"params": dict(self.status.params)} if self.status is not None and self.status.params else {}),
        }


def after_writes(snap: RunSnapshot, written: list[Stored]) -> RunSnapshot:
    """``snap`` with the records a runner appended since it was read (its state after the run).

    The runner holds the run's lease, so nobody else appended meanwhile; every attempt it began
    has its record among ``written`` (so no progress event of its own is in flight).
    """
    refs = [
        AttemptRef(s.record.phase_ordinal, s.record.attempt_number, s.record.phase, s.record.completed) for s in written
    ]
    records = dict(snap.records)
    records.update({(s.record.phase_ordinal, s.record.attempt_number): s for s in written})
    return RunSnapshot(
        ticket_id=snap.ticket_id,
        run_id=snap.run_id,
        summaries=with_attempts(snap.summaries, refs),
        records=records,
        event_names=snap.event_names,
        events=snap.events,
        approvals=snap.approvals,
        markers=snap.markers,
        history=snap.history,
        attempts=tuple(sorted([*snap.attempts, *refs])) if snap.history else (),
    )
