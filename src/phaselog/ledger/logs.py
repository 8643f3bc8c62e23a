"""An attempt's log read back from the store: the kept log, or the live chunks of one still running.

:func:`read_log` decides which attempt (default: the phase's newest, whether recorded, in flight or
only logged) and returns a :class:`PhaseLog`; :func:`follow_log` yields the output of an attempt as
it reaches the store and ends when the attempt does (its kept log is written, or its record is).
The entries' shape is in :mod:`phaselog.model.logs`; how they get there, runner/logsink.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phaselog.model.entries import parse_entry
from phaselog.model.errors import Corrupt, NotFound, UnknownPhase
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.model.logs import LOGS, KeptLog, LogChunk
from phaselog.stores.names import log_prefix, parse_event_name, parse_log_name

if TYPE_CHECKING:
    from phaselog.ledger.resolve import PipelineArg, PipelineResolver
    from phaselog.stores.base import Store


@dataclass(frozen=True)
class PhaseLog:
    """One attempt's log as the store holds it (``complete``: the attempt ended and its log was kept)."""

    ticket_id: str
    run_id: str
    phase: str
    phase_ordinal: int
    attempt: int
    text: str
    total_bytes: int
    dropped_bytes: int
    cap_bytes: int | None
    complete: bool
    chunks: int
    #: Log entries of the attempt that did not read back (named, never used).
    damaged: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The JSON view (``phaselog logs --format json``, the dashboard)."""
        return {
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "phase": self.phase,
            "phase_ordinal": self.phase_ordinal,
            "attempt": self.attempt,
            "complete": self.complete,
            "total_bytes": self.total_bytes,
            "kept_bytes": len(self.text.encode("utf-8")),
            "dropped_bytes": self.dropped_bytes,
            "cap_bytes": self.cap_bytes,
            "chunks": self.chunks,
            "damaged": list(self.damaged),
            "text": self.text,
        }


@dataclass(frozen=True)
class _Phase:
    name: str
    ordinal: int


@dataclass(frozen=True)
class _Target:
    ticket_id: str
    run_id: str
    phase: _Phase
    #: The attempts of the phase known now: recorded, in flight (progress events) or logged.
    attempts: tuple[int, ...]
    recorded: frozenset[int]


def _target(
    store: Store, pipelines: PipelineResolver, ticket_id: str, run_id: str, phase: str | int, pipeline: PipelineArg
) -> _Target:
    tid, rid = validate_ticket_id(ticket_id), normalize_run_id(run_id)
    if rid not in store.runs(tid):
        raise NotFound(f"run {run_id} of ticket {tid} not found", ticket_id=tid, run_id=rid)
    names = [(n, parse_event_name(n)) for n in store.entry_names("progress", tid, rid)]
    logged = [(n, parse_log_name(n)) for n in store.entry_names(LOGS, tid, rid)]
    try:
        found = pipelines.for_run(tid, rid, pipeline).phase(phase)
        ph = _Phase(found.name, found.ordinal)
    except UnknownPhase:
        # A run whose first phase still runs has no checkpoint naming its pipeline: its entries name the phase.
        named = [
            (p.ordinal, p.phase)
            for _n, p in (*names, *logged)
            if p is not None and str(phase) in (p.phase, str(p.ordinal))
        ]
        if not named:
            raise
        ph = _Phase(named[0][1], named[0][0])
    recorded = {r.attempt_number for r in store.attempts(tid, rid) if r.phase_ordinal == ph.ordinal}
    seen = set(recorded)
    for _n, got in (*names, *logged):
        if got is not None and (got.ordinal, got.phase) == (ph.ordinal, ph.name):
            seen.add(got.attempt)
    return _Target(tid, rid, ph, tuple(sorted(seen)), frozenset(recorded))


def _attempt(t: _Target, attempt: int | None) -> int:
    if attempt is None:
        if not t.attempts:
            raise NotFound(
                f"phase {t.phase.name} of run {t.run_id} has no attempt yet", phase=t.phase.name, run_id=t.run_id
            )
        return t.attempts[-1]
    if attempt not in t.attempts:
        known = ", ".join(map(str, t.attempts)) or "none yet"
        raise NotFound(
            f"attempt {attempt} of phase {t.phase.name} not found in run {t.run_id} (attempts: {known})",
            phase=t.phase.name,
            attempt=attempt,
        )
    return attempt


def _entries(store: Store, t: _Target, attempt: int) -> tuple[list[LogChunk], KeptLog | None, list[str]]:
    chunks: list[LogChunk] = []
    kept: KeptLog | None = None
    damaged: list[str] = []
    prefix = log_prefix(t.phase.ordinal, t.phase.name, attempt)
    found = [(parse_log_name(n), loc, data) for n, loc, data in store.entries(LOGS, t.ticket_id, t.run_id, prefix)]
    ours = [
        (got, loc, data) for got, loc, data in found if got and got.attempt == attempt and got.phase == t.phase.name
    ]
    take = max((got.take for got, _, _ in ours), default=1)  # the newest execution of the attempt (D319)
    for got, location, data in ours:
        if got.take != take:
            continue  # an earlier execution's, whose runner died before the attempt's record
        try:
            if isinstance(data, Corrupt):
                raise data
            if got.chunk is None:
                kept = parse_entry(KeptLog, data, location)
            else:
                chunks.append(parse_entry(LogChunk, data, location))
        except Corrupt as exc:
            damaged.append(exc.message)
    return chunks, kept, damaged


def read_log(
    store: Store,
    pipelines: PipelineResolver,
    ticket_id: str,
    run_id: str,
    phase: str | int,
    attempt: int | None = None,
    *,
    pipeline: PipelineArg = None,
) -> PhaseLog:
    """The log of one attempt of ``phase`` (default: its newest); NotFound for an unknown run or attempt,
    UnknownPhase for an unknown phase. An attempt that printed nothing has an empty, complete log."""
    t = _target(store, pipelines, ticket_id, run_id, phase, pipeline)
    n = _attempt(t, attempt)
    chunks, kept, damaged = _entries(store, t, n)
    ph = t.phase
    if kept is not None:
        return PhaseLog(t.ticket_id, t.run_id, ph.name, ph.ordinal, n, kept.text, kept.total_bytes,
                        kept.dropped_bytes, kept.cap_bytes, True, kept.chunks, tuple(damaged))  # fmt: skip
    text = "".join(c.text for c in chunks)
    size = chunks[-1].end if chunks else 0
    done = n in t.recorded and not damaged  # recorded without a kept log: it printed nothing (or kept none)
    return PhaseLog(t.ticket_id, t.run_id, ph.name, ph.ordinal, n, text, size, 0, None, done, len(chunks),
                    tuple(damaged))  # fmt: skip


def follow_log(
    store: Store,
    pipelines: PipelineResolver,
    ticket_id: str,
    run_id: str,
    phase: str | int,
    attempt: int | None = None,
    *,
    pipeline: PipelineArg = None,
    poll: float = 0.5,
) -> Iterator[str]:
    """Yield an attempt's output as it reaches the store, until the attempt ends.

    Without ``attempt``: the phase's newest attempt, or (none yet) the first one to appear. The
    live chunks come first; when the kept log appears, the part of it not yet yielded follows (with
    a line saying how much was skipped when the live output stopped at the cap). Ends when the kept
    log is there, or the attempt's record is, or a newer attempt of the phase started.
    """
    t = _target(store, pipelines, ticket_id, run_id, phase, pipeline)
    n = _attempt(t, attempt) if attempt is not None or t.attempts else None
    sent = 0  # bytes of the output yielded so far
    seen = 0  # chunks yielded so far
    while True:
        if n is None:
            t = _target(store, pipelines, ticket_id, run_id, phase, pipeline)
            n = t.attempts[-1] if t.attempts else None
        if n is not None:
            chunks, kept, _damaged = _entries(store, t, n)
            for c in chunks[seen:]:
                if c.offset >= sent:
                    yield c.text
                    sent = c.end
                if c.note:
                    yield f"\n[phaselog: {c.note}]\n"
            seen = len(chunks)
            if kept is not None:
                yield from _rest(kept, sent)
                return
            t = _target(store, pipelines, ticket_id, run_id, phase, pipeline)
            if n in t.recorded or (t.attempts and t.attempts[-1] > n):
                return
        time.sleep(poll)


def _rest(kept: KeptLog, sent: int) -> Iterator[str]:
    """What of the kept log a follower that has the output's first ``sent`` bytes still lacks."""
    data = kept.text.encode("utf-8")
    start = kept.total_bytes - len(data)  # the output offset the kept tail starts at
    if sent >= kept.total_bytes:
        return
    if sent < start:
        yield f"[phaselog: {start - sent} bytes not kept; the last {len(data)} follow]\n"
        yield kept.text
        return
    yield data[sent - start :].decode("utf-8", "replace")


class Logs:
    """Attempts' logs of one store (the Ledger's ``logs_reader``; ``Ledger.logs`` calls :meth:`read`)."""

    def __init__(self, store: Store, pipelines: PipelineResolver) -> None:
        self.store = store
        self.pipelines = pipelines

    def read(
        self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None = None, *, pipeline: PipelineArg = None
    ) -> PhaseLog:
        """See :func:`read_log`."""
        return read_log(self.store, self.pipelines, ticket_id, run_id, phase, attempt, pipeline=pipeline)

    def follow(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        attempt: int | None = None,
        *,
        pipeline: PipelineArg = None,
        poll: float = 0.5,
    ) -> Iterator[str]:
        """See :func:`follow_log`."""
        return follow_log(self.store, self.pipelines, ticket_id, run_id, phase, attempt, pipeline=pipeline, poll=poll)
