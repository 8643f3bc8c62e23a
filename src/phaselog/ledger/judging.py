"""Judge a gated phase and say where that leaves it: the approve-then-report of ``phaselog approve``.

:meth:`Ledger.approve` records a judgement; a person who just judged also wants to know the
phase's state afterwards (approved, or still waiting because the attempt was superseded, or
rejected). :func:`judge_and_report` does both with one pipeline: the pipeline is resolved once,
before anything is recorded, and the judgement and the report use that same object, so the state
read afterwards cannot fail on a pipeline lookup. Once recorded, the judgement stands: a state that
cannot be read is a warning, never a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from phaselog.model.errors import PhaselogError
from phaselog.model.ids import normalize_run_id, validate_ticket_id

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger
    from phaselog.ledger.resolve import PipelineArg
    from phaselog.model.entries import Approval


@dataclass(frozen=True)
class Judged:
    """A recorded judgement, the state of its phase afterwards (None: could not be read), and warnings."""

    approval: Approval
    phase_state: str | None
    warnings: tuple[str, ...]


def judge_and_report(
    ledger: Ledger,
    ticket_id: str,
    run_id: str,
    phase: str | int,
    *,
    by: str,
    decision: str = "approve",
    comment: str | None = None,
    attempt: int | None = None,
    pipeline: PipelineArg = None,
    checkpoint_hash: str | None = None,
    via: str | None = None,
) -> Judged:
    """Approve or reject a gated phase's checkpoint (:meth:`Ledger.approve`) and read its state afterwards."""
    resolved = ledger.pipeline_for(validate_ticket_id(ticket_id), normalize_run_id(run_id), pipeline)
    approval, warnings = ledger.approve(
        ticket_id,
        run_id,
        phase,
        by=by,
        comment=comment,
        attempt=attempt,
        decision=decision,
        pipeline=resolved,
        checkpoint_hash=checkpoint_hash,
        via=via,
    )
    try:
        state: str | None = ledger.status(ticket_id, run_id, pipeline=resolved).phase(approval.phase).state
    except PhaselogError as exc:  # recorded: the judgement stands; say what could not be read
        state = None
        warnings = [*warnings, f"recorded, but the phase's state could not be read: {exc.message}"]
    return Judged(approval, state, tuple(warnings))
