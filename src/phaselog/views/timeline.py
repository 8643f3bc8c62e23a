"""The timeline of a run: every attempt of every phase as a span on a time axis.

A span starts when the attempt's work started (the ``started_at`` its checkpoint records, else its
``start`` progress event) and ends at its checkpoint (completed or failed); an attempt still in
flight ends, for now, at its latest event. An attempt recorded with neither has no known start:
its span is a point at the checkpoint's time and its duration is unknown (``None``) — durations
come from recorded starts only, never from guesses.

Derived from the records like everything else (``docs/ui.md`` shows the chart drawn from it).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from phaselog.ledger.attempts import ATTEMPT_STATES, Liveness, attempt_state
from phaselog.ledger.derive import judge
from phaselog.model.entries import ProgressEvent
from phaselog.model.errors import NotFound
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.model.records import Checkpoint, format_timestamp
from phaselog.stores.base import Damaged

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger
    from phaselog.stores.snapshot import RunSnapshot

#: Span states: an attempt's state as :func:`phaselog.ledger.attempts.attempt_state` decides it.
SPAN_STATES = ATTEMPT_STATES


@dataclass(frozen=True)
class Span:
    """One attempt of one phase on the time axis."""

    phase: str
    ordinal: int
    attempt: int
    state: str
    started_at: datetime | None
    ended_at: datetime | None
    #: Seconds from the start event to the checkpoint (or the latest event while in flight).
    duration_sec: float | None = None
    #: For a gated phase's completed attempt: ``approved``, ``rejected`` or None (not judged).
    approval: str | None = None
    events: int = 0
    last_step: int | None = None
    error: str | None = None
    content_hash: str | None = None
    location: str | None = None
    #: Why the attempt is in its state, when that is not obvious (abandoned: why it can never finish).
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "phase": self.phase,
            "ordinal": self.ordinal,
            "attempt_number": self.attempt,
            "state": self.state,
            "started_at": format_timestamp(self.started_at) if self.started_at else None,
            "ended_at": format_timestamp(self.ended_at) if self.ended_at else None,
            "duration_sec": self.duration_sec,
            "approval": self.approval,
            "events": self.events,
            "last_step": self.last_step,
            "error": self.error,
            "content_hash": self.content_hash,
            "location": self.location,
            "reason": self.reason,
        }


def spans(
    records: Iterable[tuple[Checkpoint, str]],
    events: Mapping[tuple[int, int], Sequence[ProgressEvent]],
    *,
    verdicts: Mapping[str, str] | None = None,
    gated: Iterable[str] = (),
    damaged: Iterable[tuple[str, int, int]] = (),
    newest: Mapping[int, int] | None = None,
    live: Liveness | None = None,
) -> list[Span]:
    """Spans of a run's attempts, ordered by (phase ordinal, attempt).

    ``records``: (checkpoint, location) pairs; ``events``: progress events by (ordinal, attempt);
    ``verdicts``: checkpoint content hash → approved / rejected; ``gated``: names of gated phases;
    ``damaged``: (phase, ordinal, attempt) of attempts that exist but cannot be read; ``newest``:
    per phase ordinal, its newest attempt when more exist than are given (a page of them);
    ``live``: how processes are judged (default: on this machine, now). Each span's state is
    :func:`phaselog.ledger.attempts.attempt_state`'s.
    """
    verdicts = verdicts or {}
    gates = set(gated)
    out: dict[tuple[int, int], Span] = {}
    for cp, location in records:
        evs = events.get((cp.phase_ordinal, cp.attempt_number), ())
        start = cp.started_at or _start(evs)  # the checkpoint's own start (D98), else its start event
        duration = (cp.timestamp_utc - start).total_seconds() if start is not None else None
        out[(cp.phase_ordinal, cp.attempt_number)] = Span(
            phase=cp.phase,
            ordinal=cp.phase_ordinal,
            attempt=cp.attempt_number,
            state="completed" if cp.completed else "failed",
            started_at=start,
            ended_at=cp.timestamp_utc,
            duration_sec=round(duration, 3) if duration is not None else None,
            approval=verdicts.get(cp.content_hash) if cp.phase in gates and cp.completed else None,
            events=len(evs),
            last_step=_last_step(evs),
            error=cp.error,
            content_hash=cp.content_hash,
            location=location,
        )
    outcomes = {key: span.state for key, span in out.items()}
    for (ordinal, attempt), evs in events.items():
        if (ordinal, attempt) in out or not evs:
            continue
        last = evs[-1]
        start = _start(evs)
        elapsed = last.elapsed_sec
        if elapsed is None and start is not None:
            elapsed = (last.timestamp - start).total_seconds()
        out[(ordinal, attempt)] = Span(
            phase=last.phase,
            ordinal=ordinal,
            attempt=attempt,
            state="in_progress",
            started_at=start or evs[0].timestamp,
            ended_at=last.timestamp,
            duration_sec=round(float(elapsed), 3) if elapsed is not None else None,
            events=len(evs),
            last_step=_last_step(evs),
        )
    broken = set()
    for phase, ordinal, attempt in damaged:
        broken.add((ordinal, attempt))
        out.setdefault(
            (ordinal, attempt),
            Span(phase=phase, ordinal=ordinal, attempt=attempt, state="damaged", started_at=None, ended_at=None),
        )
    top = dict(newest or {})
    for ordinal, attempt in out:
        top[ordinal] = max(top.get(ordinal, 0), attempt)
    live = live or Liveness.here(datetime.now(UTC))
    for key, span in out.items():
        judged = attempt_state(
            attempt=span.attempt,
            outcome=outcomes.get(key),
            error=span.error,
            events=events.get(key, ()),
            damaged=key in broken,
            newer=top[key[0]] if top[key[0]] > key[1] else None,
            gated=span.phase in gates,
            verdict=span.approval,
            live=live,
        )
        if judged is not None and judged.state != span.state:
            out[key] = dataclasses.replace(span, state=judged.state, reason=judged.reason)
        elif judged is not None and judged.reason and span.error is None:
            out[key] = dataclasses.replace(span, reason=judged.reason)
    return [out[k] for k in sorted(out)]


def bounds(items: Sequence[Span]) -> tuple[datetime, datetime] | None:
    """The earliest start (or end) and the latest end of ``items``; None when none has a time."""
    times = [t for s in items for t in (s.started_at, s.ended_at) if t is not None]
    if not times:
        return None
    return min(times), max(times)


def _start(events: Sequence[ProgressEvent]) -> datetime | None:
    return next((e.timestamp for e in events if e.event == "start"), None)


def _last_step(events: Sequence[ProgressEvent]) -> int | None:
    steps = [e.step for e in events if e.step is not None]
    return steps[-1] if steps else None


def run_timeline(ledger: Ledger, ticket_id: str, run_id: str) -> list[Span]:
    """Every attempt of a run as a span (see :func:`spans`), read through ``ledger``."""

    ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
    pipeline = ledger.pipeline_for(ticket_id, run_id)
    damaged: list[tuple[str, int, int]] = []

    def records() -> Iterator[tuple[Checkpoint, str]]:
        # Streamed: a span keeps no payload, so a run of many attempts is never all in memory.
        for entry in ledger.store.iter_records(ticket_id, run_id):
            if isinstance(entry, Damaged):
                damaged.append((entry.phase, entry.phase_ordinal, entry.attempt_number))
            else:
                yield entry.record, entry.location

    return spans(
        records(),
        ledger.event_index(ticket_id, run_id),
        verdicts=judge(ledger.approvals(ticket_id, run_id)),
        gated=[p.name for p in pipeline.phases if p.requires_approval],
        damaged=damaged,  # filled while spans() reads the records, which it does first
        live=Liveness.here(ledger.clock()),
    )


def run_version(ledger: Ledger, ticket_id: str, run_id: str) -> str:
    """A short fingerprint of what a run holds: it changes whenever a checkpoint, progress event
    or approval is added (or pruned). Live views poll it (one snapshot, O(phases) and names).
    NotFound when nothing is recorded for the run, as its page and overview say."""

    ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
    snap = ledger.store.snapshot(ticket_id, run_id)
    if snap.empty:
        raise NotFound(f"no run {run_id} for ticket {ticket_id}", ticket_id=ticket_id, run_id=run_id)
    return snapshot_version(snap)


def snapshot_version(snap: RunSnapshot) -> str:
    """:func:`run_version` of what a snapshot read: per phase how many attempts and the newest ones
    (an added checkpoint moves them, a prune moves the count), and the names of the run's progress
    events and approvals."""

    parts = [
        f"{s.ordinal}:{s.count}:{s.newest.attempt_number}:{int(s.newest.completed)}:"
        f"{s.newest_completed.attempt_number if s.newest_completed else 0}"
        for s in snap.summaries
    ]
    parts.append("-progress-")
    parts.extend(snap.event_names)
    parts.append("-approvals-")
    parts.extend(sorted(name for name, _, _ in snap.approvals))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
