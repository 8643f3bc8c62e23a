"""Progress events inside a running attempt (seed 003's mid-execution checkpoints).

An attempt is *in flight* from its ``start`` event until a checkpoint (completed or failed) is
written for it. Events are immutable, numbered 1, 2, 3 … within the attempt (two events in the
same nanosecond never collide), and carry the step, cumulative tokens, elapsed seconds since
``start`` and, optionally, the accumulated output with its SHA-256 and byte length.

Seed 003's API maps onto this one (see docs/progress.md):

==========================  =====================================================
seed 003                    phaselog
==========================  =====================================================
``Save(workDir, cp)``       ``ledger.progress(ticket, run, phase, "step", ...)``
``Load(workDir)``           ``ledger.progress_latest(ticket, run, phase)``
``Exists(workDir)``         ``ledger.in_flight(ticket, run)`` has the phase
``Clear(workDir)``          write the attempt's checkpoint (nothing is deleted)
``SaveHistoryEntry``        every event is a history entry already
``ListHistory``             ``ledger.progress_events(ticket, run, phase, attempt)``
``LoadHistoryEntry(id)``    ``ledger.progress_event(ticket, run, phase, attempt, seq)``
``HashOutput(s)``           ``hashlib.sha256(s.encode()).hexdigest()`` (stored for you)
==========================  =====================================================
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from phaselog.ledger.attempts import TERMINAL_EVENTS, Liveness, attempt_state, process_start_time
from phaselog.ledger.attempts import hostname as _hostname
from phaselog.model.durations import aware_utc
from phaselog.model.entries import EVENTS, ProgressEvent, entry_bytes, parse_entries, read_entries
from phaselog.model.errors import (
    AlreadyExists,
    Conflict,
    Corrupt,
    InvalidRecord,
    NotFound,
    TooLarge,
    UsageError,
)
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.model.limits import MAX_OUTPUT_BYTES, check_attempt, check_text
from phaselog.model.pipelines import Phase
from phaselog.stores.names import event_block_prefix, event_name, event_prefix, parse_event_name

if TYPE_CHECKING:
    from phaselog.ledger.resolve import PipelineArg, PipelineResolver
    from phaselog.stores import Store
    from phaselog.stores.snapshot import RunSnapshot

DEFAULT_MAX_OUTPUT_BYTES = MAX_OUTPUT_BYTES
#: Highest process id a progress event may name (Linux's pid_max ceiling is 2**22).
MAX_PID = 2**31 - 1
MAX_PROVIDER = 200
MAX_STATUS = 10_000
#: How far ahead of this clock a start event's ``started_at`` may be (another host's clock).
FUTURE_TOLERANCE_S = 60.0
_KIND = "progress"


@dataclass(frozen=True)
class Flight:
    """The attempt of a phase that is in flight: started, no checkpoint yet."""

    phase: str
    phase_ordinal: int
    attempt_number: int
    events: int
    last: ProgressEvent
    start: ProgressEvent | None
    abandoned: bool = False
    abandoned_reason: str | None = None

    @property
    def last_step(self) -> int | None:
        """The last step number any event recorded."""
        return self.last.step

    def to_json(self) -> dict[str, Any]:
        """The JSON form used in ``status`` and ``resume``."""
        return {
            "phase": self.phase,
            "attempt_number": self.attempt_number,
            "events": self.events,
            "last_event": self.last.event,
            "last_step": self.last.step,
            # The last step recorded (a step event says that step is done): resume after it.
            "resume_after": self.last.step,
            "resume_from_step": self.last.step,  # the old name of the same number
            "elapsed_sec": self.last.elapsed_sec,
            "tokens": self.last.tokens,
            "last_event_at": self.last.to_json()["timestamp"],
            "host": self.start.host if self.start else None,
            "pid": self.start.pid if self.start else None,
            "abandoned": self.abandoned,
            "abandoned_reason": self.abandoned_reason,
        }


class AttemptEvents:
    """The progress events of one phase's attempts, read on demand, oldest first per attempt.

    With ``block``, asked for attempts in rising order (as a phase's records are iterated), it reads
    the events of :data:`~phaselog.stores.names.EVENT_BLOCK` attempts at once (one prefix read)
    and keeps only that block, so memory does not grow with the number of attempts; without it,
    each call reads just the one attempt's events. Events are grouped by what they say (phase
    ordinal, attempt), as :meth:`Progress.event_index` groups them; damaged ones are left out.
    """

    def __init__(self, store: Store, ticket_id: str, run_id: str, ph: Phase, *, block: bool = False) -> None:
        self.store = store
        self.ticket_id = ticket_id
        self.run_id = run_id
        self.phase = ph
        self.block = block
        self._prefix: str | None = None
        self._groups: dict[int, list[ProgressEvent]] = {}

    def of(self, attempt: int) -> list[ProgressEvent]:
        """The events of ``attempt``, by sequence number (empty: none)."""
        ph = self.phase
        prefix = (event_block_prefix if self.block else event_prefix)(ph.ordinal, ph.name, attempt)
        if prefix != self._prefix:
            self._prefix, self._groups = None, {}  # the previous block goes before the next is read
            found = self.store.entries(_KIND, self.ticket_id, self.run_id, prefix)
            events, _damaged = parse_entries(ProgressEvent, found)
            for ev in events:
                if ev.phase_ordinal == ph.ordinal:
                    self._groups.setdefault(ev.attempt_number, []).append(ev)
            for lst in self._groups.values():
                lst.sort(key=lambda e: e.seq)
            self._prefix = prefix
        return self._groups.get(attempt, [])


class Progress:
    """Progress events over one store: append them, read them, find the attempts in flight.

    ``pipelines`` names the run's phases; ``clock`` stamps the events and ages the flights.
    """

    def __init__(self, store: Store, clock: Callable[[], datetime], pipelines: PipelineResolver) -> None:
        self.store = store
        self.clock = clock
        self.pipelines = pipelines

    def _phase(self, ticket_id: str, run_id: str, phase: str | int, pipeline: PipelineArg) -> Phase:
        return self.pipelines.phase(ticket_id, run_id, phase, pipeline)

    # -- reading ------------------------------------------------------------------------------
    def progress_events(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        attempt: int | None = None,
        *,
        pipeline: PipelineArg = None,
        newest: bool = False,
    ) -> list[ProgressEvent]:
        """Every event of an attempt (default: the attempt in flight), oldest first.

        ``newest``: when no attempt is in flight, the phase's newest attempt (a finished one);
        what ``phaselog progress show`` shows without ``--attempt``.
        """
        ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
        ph = self._phase(ticket_id, run_id, phase, pipeline)
        if attempt is None:
            snap = self.store.snapshot(ticket_id, run_id)
            flight = flights(snap, now=self.clock()).get(ph.name)
            latest = snap.latest(ph.ordinal)
            if flight is not None:
                attempt = flight.attempt_number
            elif newest and latest is not None:
                attempt = latest.attempt_number
            elif newest:
                raise NotFound(f"phase {ph.name} has no attempt in run {run_id}", phase=ph.name)
            else:
                raise NotFound(f"no attempt of phase {ph.name} is in flight in run {run_id}", phase=ph.name)
        return self._events(ticket_id, run_id, ph, attempt)

    def progress_latest(
        self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None = None, *, pipeline: PipelineArg = None
    ) -> ProgressEvent:
        """The latest event of the attempt in flight (seed 003's Load)."""
        events = self.progress_events(ticket_id, run_id, phase, attempt, pipeline=pipeline)
        if not events:
            raise NotFound(f"attempt {attempt} of phase {phase} has no progress events")
        return events[-1]

    def progress_event(
        self, ticket_id: str, run_id: str, phase: str | int, attempt: int, seq: int, *, pipeline: PipelineArg = None
    ) -> ProgressEvent:
        """One event by its sequence number (seed 003's LoadHistoryEntry)."""
        ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
        ph = self._phase(ticket_id, run_id, phase, pipeline)
        for ev in self._events(ticket_id, run_id, ph, attempt):
            if ev.seq == seq:
                return ev
        raise NotFound(f"no event {seq} in attempt {attempt} of phase {ph.name}", seq=seq)

    def _events(self, ticket_id: str, run_id: str, ph: Phase, attempt: int) -> list[ProgressEvent]:
        prefix = event_prefix(ph.ordinal, ph.name, attempt)
        return [ev for ev in self._all_events(ticket_id, run_id, prefix) if ev.attempt_number == attempt]

    def _all_events(self, ticket_id: str, run_id: str, prefix: str = "") -> list[ProgressEvent]:
        # The store matches the prefix (one attempt's events are read, not the whole run's).
        events, _damaged = parse_entries(ProgressEvent, self.store.entries(_KIND, ticket_id, run_id, prefix))
        return [e for e in events if event_name(e.phase_ordinal, e.phase, e.attempt_number, e.seq).startswith(prefix)]

    def damaged_events(self, ticket_id: str, run_id: str) -> list[Corrupt]:
        """Progress events that exist but cannot be used (damaged or edited after writing)."""
        return read_entries(self.store, _KIND, ProgressEvent, ticket_id, run_id)[1]

    def event_index(self, ticket_id: str, run_id: str) -> dict[tuple[int, int], list[ProgressEvent]]:
        """Every progress event of a run, grouped by (phase ordinal, attempt)."""
        groups: dict[tuple[int, int], list[ProgressEvent]] = {}
        for ev in self._all_events(ticket_id, run_id):
            groups.setdefault((ev.phase_ordinal, ev.attempt_number), []).append(ev)
        for lst in groups.values():
            lst.sort(key=lambda e: e.seq)
        return groups

    def in_flight(self, ticket_id: str, run_id: str, *, stale_after: timedelta | None = None) -> dict[str, Flight]:
        """Per phase, the newest attempt that has events but no checkpoint (if any)."""
        ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
        return flights(self.store.snapshot(ticket_id, run_id), now=self.clock(), stale_after=stale_after)

    # -- writing ------------------------------------------------------------------------------
    def progress(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        event: str,
        *,
        attempt: int | None = None,
        step: int | None = None,
        output: str | bytes | None = None,
        tokens: int | None = None,
        provider: str | None = None,
        status: str | None = None,
        pid: int | Literal["self"] | None = "self",
        pipeline: PipelineArg = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        started_at: datetime | None = None,
    ) -> ProgressEvent:
        """Append a progress event to the attempt in flight (``start`` opens a new attempt).

        ``started_at`` (with ``start`` only): when the attempt's work started, if that was before
        now (a runner that writes the event once the attempt has run a while); the event is
        stamped with it. Default: now.

        ``pid`` (with ``start``): the process that runs the phase and lives until its checkpoint.
        ``"self"`` (the default) is this process; an int is a process you vouch for; None records
        none, and the attempt is then judged abandoned only by the age of its last event.
        """
        ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
        if event not in EVENTS:
            raise UsageError(f"--event must be one of {', '.join(EVENTS)} (got {event!r})", field="event")
        for name, value in (("step", step), ("tokens", tokens)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidRecord(
                    f"{name}: must be an integer >= 0 (got {value!r})",
                    errors=[{"field": name, "rule": "minimum", "message": "must be >= 0"}],
                )
        if pid not in (None, "self") and (isinstance(pid, bool) or not isinstance(pid, int) or not 1 <= pid <= MAX_PID):
            raise UsageError(f"--pid: must be a process id from 1 to {MAX_PID} (got {pid!r})", field="pid", rule="pid")
        if attempt is not None:
            check_attempt(attempt)
        if started_at is not None:
            started_at = self._started_at(event, started_at)
        if provider is not None:
            check_text(provider, field="provider", max_chars=MAX_PROVIDER)
        if status is not None:
            check_text(status, field="status", max_chars=MAX_STATUS, multiline=True)
        text: str | None = None
        if output is not None:
            raw = output if isinstance(output, bytes) else output.encode("utf-8")
            if len(raw) > max_output_bytes:
                raise TooLarge(
                    f"output: {len(raw)} bytes exceeds the cap of {max_output_bytes} bytes; nothing was written",
                    field="output",
                    rule="max_output_bytes",
                    limit=max_output_bytes,
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidRecord(
                    "output: must be UTF-8 text", errors=[{"field": "output", "rule": "utf8", "message": "not UTF-8"}]
                ) from None
        snap = self.store.snapshot(ticket_id, run_id)  # O(phases), and the events of attempts in flight
        ph = self.pipelines.for_run(ticket_id, run_id, pipeline, snapshot=snap).phase(phase)
        for tries in range(1000):
            if tries:
                snap = self.store.snapshot(ticket_id, run_id)  # someone took our sequence number: re-read
            number, history = self._target_attempt(snap, ph, event, attempt)
            ev = self._build_event(
                ticket_id, run_id, ph, number, history, event, step, text, tokens, provider, status, pid, started_at
            )
            try:
                self.store.put_entry(
                    _KIND, ticket_id, run_id, event_name(ph.ordinal, ph.name, number, ev.seq), entry_bytes(ev)
                )
            except AlreadyExists:
                continue  # another writer took this sequence number: re-read, retry
            return ev
        raise Conflict(f"could not append a progress event to phase {ph.name}")

    def _started_at(self, event: str, given: Any) -> datetime:
        """A ``start`` event's ``started_at``, checked: aware, and not in the future."""
        if event != "start":
            raise UsageError(
                f"started_at: only a start event has one (got event {event!r})", field="started_at", rule="start_only"
            )
        started_at = aware_utc(given, "started_at")
        if started_at - self.clock() > timedelta(seconds=FUTURE_TOLERANCE_S):
            raise UsageError(
                f"started_at: {started_at.isoformat()} is in the future; an attempt cannot have started yet",
                field="started_at",
                rule="not_future",
            )
        return started_at

    def _target_attempt(
        self, snap: RunSnapshot, ph: Phase, event: str, attempt: int | None
    ) -> tuple[int, list[ProgressEvent]]:
        """The attempt an event goes to, and that attempt's events so far.

        Only the attempts above the phase's newest record can take events, and the snapshot holds
        exactly their events; an explicit attempt at or below it (refused, unless it is an old
        attempt without a record) is judged from every attempt and event (rare).
        """
        newest = snap.latest(ph.ordinal)
        top_record = newest.attempt_number if newest is not None else 0
        if attempt is not None and attempt <= top_record:
            checkpoints = {
                r.attempt_number
                for r in self.store.attempts(snap.ticket_id, snap.run_id)
                if r.phase_ordinal == ph.ordinal
            }
            groups = {
                a: evs for (o, a), evs in self.event_index(snap.ticket_id, snap.run_id).items() if o == ph.ordinal
            }
            return _target_in(ph, event, attempt, checkpoints, groups)
        groups = {}
        for ev in parse_entries(ProgressEvent, snap.events)[0]:
            if ev.phase_ordinal == ph.ordinal and ev.attempt_number > top_record:
                groups.setdefault(ev.attempt_number, []).append(ev)
        for lst in groups.values():
            lst.sort(key=lambda e: e.seq)
        return _target_in(ph, event, attempt, {top_record} - {0}, groups)

    def _build_event(
        self,
        ticket_id: str,
        run_id: str,
        ph: Phase,
        attempt: int,
        history: list[ProgressEvent],
        event: str,
        step: int | None,
        text: str | None,
        tokens: int | None,
        provider: str | None,
        status: str | None,
        pid: int | Literal["self"] | None,
        started_at: datetime | None = None,
    ) -> ProgressEvent:
        now = self.clock() if started_at is None else min(started_at, self.clock())
        last = history[-1] if history else None
        start = history[0] if history else None
        if tokens is not None and last is not None and last.tokens is not None and tokens < last.tokens:
            raise InvalidRecord(
                f"tokens: is the cumulative count and cannot drop ({tokens} < {last.tokens})",
                errors=[{"field": "tokens", "rule": "cumulative", "message": "cannot decrease"}],
            )
        host = pid_ = started = None
        if event == "start":
            host = _hostname()
            pid_ = os.getpid() if pid == "self" else pid
            started = process_start_time(pid_) if pid_ is not None else None
        elapsed = round(max((now - start.timestamp).total_seconds(), 0.0), 6) if start else 0.0
        return ProgressEvent(
            ticket_id=ticket_id,
            run_id=run_id,
            phase=ph.name,
            phase_ordinal=ph.ordinal,
            attempt_number=attempt,
            seq=len(history) + 1,
            event=event,
            timestamp=now,
            step=step if step is not None else (last.step if last else None),
            status=status,
            provider=provider if provider is not None else (last.provider if last else None),
            tokens=tokens if tokens is not None else (last.tokens if last else None),
            elapsed_sec=elapsed,
            output=text,
            output_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest() if text is not None else None,
            output_length=len(text.encode("utf-8")) if text is not None else None,
            host=host,
            pid=pid_,
            process_start=started,
            prev_hash=last.content_hash if last else None,
        )


def _target_in(
    ph: Phase, event: str, attempt: int | None, checkpoints: set[int], groups: dict[int, list[ProgressEvent]]
) -> tuple[int, list[ProgressEvent]]:
    """The attempt an event goes to, given the phase's attempts with records and its events by attempt."""
    top = max([*checkpoints, *groups.keys()], default=0)
    if attempt is None:
        if event == "start":
            return top + 1, []
        open_attempts = [a for a in groups if a not in checkpoints and a >= max(checkpoints, default=0)]
        if not open_attempts:
            raise NotFound(
                f"no attempt of phase {ph.name} is in flight; send --event start first",
                phase=ph.name,
                rule="no_attempt_in_flight",
            )
        attempt = max(open_attempts)
    if attempt in checkpoints:
        raise Conflict(
            f"attempt {attempt} of phase {ph.name} already has its checkpoint; progress goes to a new attempt "
            "(--event start)",
            attempt_number=attempt,
            rule="attempt_finished",
        )
    history = groups.get(attempt, [])
    if event == "start":
        if history:
            raise AlreadyExists(f"attempt {attempt} of phase {ph.name} has already started", attempt_number=attempt)
        if attempt < top:
            raise Conflict(
                f"attempt {attempt} is below the latest attempt {top} of phase {ph.name}; attempts only rise",
                rule="not_monotonic",
            )
    elif not history:
        raise NotFound(
            f"attempt {attempt} of phase {ph.name} has not started; send --event start first",
            rule="not_started",
        )
    elif history[-1].event in TERMINAL_EVENTS:
        raise Conflict(
            f"attempt {attempt} of phase {ph.name} already ended with '{history[-1].event}'; "
            "write its checkpoint or start a new attempt",
            rule="attempt_ended",
        )
    return attempt, history


def flights(snap: RunSnapshot, *, now: datetime, stale_after: timedelta | None = None) -> dict[str, Flight]:
    """Per phase, the newest attempt of a snapshot that has events but no record (if any), with
    its state as :func:`phaselog.ledger.attempts.attempt_state` decides it."""

    top_checkpoint = {s.ordinal: s.newest.attempt_number for s in snap.summaries}
    top_started: dict[int, int] = {}
    for name in snap.event_names:
        parsed = parse_event_name(name)
        if parsed is not None:
            top_started[parsed.ordinal] = max(top_started.get(parsed.ordinal, 0), parsed.attempt)
    events, _damaged = parse_entries(ProgressEvent, snap.events)
    groups: dict[tuple[int, int], list[ProgressEvent]] = {}
    for ev in events:
        groups.setdefault((ev.phase_ordinal, ev.attempt_number), []).append(ev)
    out: dict[str, Flight] = {}
    live = Liveness.here(now, stale_after)
    for (ordinal, attempt), group in sorted(groups.items()):
        if attempt <= top_checkpoint.get(ordinal, 0):  # finished, or older than the newest record
            continue
        group.sort(key=lambda e: e.seq)
        start = next((e for e in group if e.event == "start"), None)
        last = group[-1]
        newer = top_started.get(ordinal, 0)
        judged = attempt_state(
            attempt=attempt, outcome=None, events=group, newer=newer if newer > attempt else None, live=live
        )
        gone = judged is not None and judged.abandoned
        reason = judged.reason if judged is not None and gone else None
        out[last.phase] = Flight(last.phase, ordinal, attempt, len(group), last, start, gone, reason)
    return out
