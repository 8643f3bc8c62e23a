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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from phaselog.model.errors import PhaselogError
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
from phaselog.stores.values import Stored

if TYPE_CHECKING:
    from phaselog.model.entries import Approval
    from phaselog.model.pipelines import Pipeline
    from phaselog.model.records import BasisEntry, Checkpoint
    from phaselog.stores.base import Store
    from phaselog.stores.snapshot import RunSnapshot


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


@dataclass(frozen=True)
class Finisher:
    """What a checkpoint of a sink (a phase nothing needs) must build on to complete the run (D280)."""

    #: Every other phase: its basis must name a completed attempt of each.
    others: tuple[str, ...]
    #: Each other phase that is no ancestor of the sink (a sink or a branch beside it), with that
    #: phase's ancestors: the attempt the basis names must have been current, built on the very
    #: attempts of them the sink's basis names. Empty in a chain.
    beside: tuple[tuple[str, tuple[str, ...]], ...] = ()


#: The record a basis entry names, by phase name and entry (None: not at hand, or another hash).
BasisLookup = Callable[[str, "BasisEntry"], "Checkpoint | None"]


def run_finishers(pipeline: Pipeline) -> dict[int, Finisher]:
    """Per ordinal of a sink, what its checkpoint must build on to complete the run (D280). In a
    chain: the last phase, built on every earlier one (D206)."""
    graph = pipeline.graph
    names, sinks = pipeline.phase_names, set(graph.sinks)
    out: dict[int, Finisher] = {}
    for p in pipeline.phases:
        if p.name not in sinks:
            continue
        ancestors = set(graph.ancestors(p.name))
        beside = tuple((n, graph.ancestors(n)) for n in names if n != p.name and n not in ancestors)
        out[p.ordinal] = Finisher(tuple(n for n in names if n != p.name), beside)
    return out


def completes_run(cp: Checkpoint, finishers: Mapping[int, Finisher], lookup: BasisLookup) -> bool:
    """Does the completed checkpoint ``cp`` (or, for a gated phase, its approval) complete the run?
    THE rule, for the writer, the gates and the feed alike: ``cp`` is of a sink, built on a
    completed attempt of every other phase, and each of those beside it (no ancestor of it) was
    current then — built on the attempts of its own ancestors that ``cp`` names too. So it is the
    checkpoint that completes the last outstanding sink, decided from the record and the records its
    basis names by hash (immutable), never from the order records are read in (D206, D280)."""
    finisher = finishers.get(cp.phase_ordinal)
    if finisher is None or not builds_on_every_phase(cp, finisher.others):
        return False
    basis = cp.basis or {}
    for name, ancestors in finisher.beside:
        other = lookup(name, basis[name])
        if other is None:
            return False  # not at hand (pruned): no claim that the run completed
        if other.basis is not None and any(other.basis.get(a) != basis.get(a) for a in ancestors):
            return False  # it was stale when ``cp`` was written: that phase is still outstanding
    return True


def snapshot_lookup(snap: RunSnapshot, pipeline: Pipeline, store: Store) -> BasisLookup:
    """A :data:`BasisLookup` over a run's snapshot (the newest completed attempts a write's basis
    names), reading ``store`` for an attempt the snapshot does not hold (an older one judged)."""
    ordinals = {p.name: p.ordinal for p in pipeline.phases}

    def lookup(name: str, entry: BasisEntry) -> Checkpoint | None:
        ordinal = ordinals.get(name)
        if ordinal is None:
            return None
        found = snap.record(ordinal, entry.attempt)
        if found is None:
            try:
                found = store.get(snap.ticket_id, snap.run_id, ordinal, name, entry.attempt)
            except PhaselogError:
                return None
        if not isinstance(found, Stored) or found.record.content_hash != entry.hash:
            return None
        return found.record

    return lookup


def raise_events(events: list[Event], store: Store) -> list[str]:
    """Emit ``events`` (their records are durable in ``store``); return the subscribers' warnings.

    First, automatic anchoring follows the environment (``PHASELOG_ANCHOR_TO``/``_KEY``, D323).
    """
    from phaselog.ledger.autoanchor import from_environment  # lazy: only a write that raises events loads it

    return [*from_environment(), *emit(events, store)]


__all__ = [
    "BasisLookup",
    "Finisher",
    "builds_on_every_phase",
    "checkpoint_events",
    "completes_run",
    "failed_for_good",
    "judgement_events",
    "raise_events",
    "run_finishers",
    "snapshot_lookup",
    "subscribe",
]
