"""The events the ledger raises: built from the records it has just made durable, then emitted.

The event types and the one subscription point live in :mod:`phaselog.model.events` (plain data the
queue and the guard raise too); this module turns the ledger's own records into events — a
checkpoint, an approval — and hands them to the subscribers *after* the store acknowledged the
write. A subscriber's failure becomes a warning on the write's result; the record stays.

    >>> from phaselog.ledger import events
    >>> seen = []
    >>> stop = events.subscribe(lambda event, origin: seen.append(event.id))
    >>> stop()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from phaselog.model.events import (
    AwaitingApproval,
    CheckpointWritten,
    Event,
    Judged,
    PhaseFailed,
    RunCompleted,
    emit,
    subscribe,
)

if TYPE_CHECKING:
    from phaselog.model.entries import Approval
    from phaselog.model.records import Checkpoint
    from phaselog.stores.base import Store


def failed_for_good(cp: Checkpoint, retries: int) -> bool:
    """Is ``cp`` a failure with no retry left (D202)? Decided from the record and the phase's policy alone.

    The runner says so in the failed payload (``failure.retries_left``); a record of the runner's that
    predates that key is final from attempt ``1 + retries`` on; a failure written outside the runner
    (``phaselog write --status failed``, ``Run.fail``: no ``failure`` in its payload) is final at once; an interrupted
    attempt (a signal stopped the run) is not a failure for good.
    """
    if cp.completed:
        return False
    payload = cp.phase_payload if isinstance(cp.phase_payload, Mapping) else {}
    failure = payload.get("failure")
    if not isinstance(failure, Mapping) or "rule" not in failure:
        return True
    if failure["rule"] == "interrupted":
        return False  # the run was stopped by a signal, not failed: resuming it tries the phase again
    left = failure.get("retries_left")
    if isinstance(left, int) and not isinstance(left, bool):
        return left <= 0
    return cp.attempt_number >= 1 + retries


def checkpoint_events(cp: Checkpoint, *, gated: bool, completes_run: bool, for_good: bool = True) -> list[Event]:
    """What appending ``cp`` means, in order: written; then failed for good, awaiting approval or run completed."""
    ticket, run = cp.ticket_id, cp.run_id
    out: list[Event] = [CheckpointWritten(ticket, run, cp.phase, cp.attempt_number, cp.status, cp.content_hash)]
    if not cp.completed:
        if for_good:
            out.append(PhaseFailed(ticket, run, cp.phase, cp.attempt_number, cp.error, cp.content_hash))
    elif gated:
        out.append(AwaitingApproval(ticket, run, cp.phase, cp.attempt_number, cp.content_hash))
    elif completes_run:
        out.append(RunCompleted(ticket, run, cp.phase, cp.content_hash))
    return out


def judgement_events(approval: Approval, *, completes_run: bool) -> list[Event]:
    """What recording ``approval`` means, in order: judged; then run completed (the last gate approved)."""
    a = approval
    out: list[Event] = [
        Judged(a.ticket_id, a.run_id, a.phase, a.attempt_number, a.approved, a.by, a.checkpoint_hash, a.content_hash)
    ]
    if completes_run and a.approved:
        out.append(RunCompleted(a.ticket_id, a.run_id, a.phase, a.content_hash))
    return out


def builds_on_every_phase(cp: Checkpoint, earlier: Sequence[str]) -> bool:
    """Does ``cp`` complete the run it ends? It is completed and built on a completed attempt of every
    earlier phase (its ``basis``, D206). Decided from the record alone, so the event feed decides
    it the same way whatever the order it reads the run's records in."""
    basis = cp.basis or {}
    return cp.completed and all(name in basis for name in earlier)


def raise_events(events: list[Event], store: Store) -> list[str]:
    """Emit ``events`` (their records are durable in ``store``); return the subscribers' warnings.

    First, automatic anchoring follows the environment (``PHASELOG_ANCHOR_TO``/``_KEY``, D323).
    """
    from phaselog.ledger.autoanchor import from_environment  # lazy: only a write that raises events loads it

    return [*from_environment(), *emit(events, store)]


__all__ = [
    "builds_on_every_phase",
    "checkpoint_events",
    "failed_for_good",
    "judgement_events",
    "raise_events",
    "subscribe",
]
