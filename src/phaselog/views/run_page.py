"""A run read for a page: the overview from one snapshot, its history in keyset pages.

A dashboard page (or any caller that shows a run) must not cost more the longer a run has
been retried. :func:`overview` reads the run once (``Store.snapshot``) and derives from it
everything the top of a run page shows: the state of every phase with its newest attempt, the
next phase and what blocks it, and the fingerprint the live view polls. O(phases).

The rest is paged and read only when asked for:

* :func:`attempts_page` — the run's attempts (or one phase's), newest first by (phase ordinal,
  attempt), ``limit`` at a time, each page after a keyset cursor ``ORDINAL:ATTEMPT``. The records
  come in one store call per page (``Store.iter_records`` of the run), never one ``get`` per
  attempt; only the page (and one attempt past it) is held, so memory does not grow with the run;
  an attempt with progress events and no record (in flight, or never finished) is an attempt too,
  as on the timeline.
* :func:`events_page` — one attempt's progress events, oldest first, ``limit`` at a time after a
  sequence number (one prefix read of that attempt's events).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from phaselog.ledger.attempts import Liveness
from phaselog.ledger.gates import judge
from phaselog.ledger.progress import AttemptEvents
from phaselog.model.errors import NotFound, UsageError
from phaselog.model.ids import normalize_run_id, run_name_of, validate_ticket_id
from phaselog.model.limits import check_attempt, is_digits
from phaselog.stores.base import Damaged, Stored
from phaselog.stores.names import parse_event_name
from phaselog.views.timeline import snapshot_version, spans

if TYPE_CHECKING:
    from phaselog.ledger.derive import PhaseState, RunStatus
    from phaselog.ledger.facade import Ledger
    from phaselog.ledger.status import SkipDecision
    from phaselog.model.entries import ProgressEvent
    from phaselog.model.pipelines import Pipeline
    from phaselog.stores.snapshot import RunSnapshot
    from phaselog.views.timeline import Span

#: The largest page a caller may ask for.
MAX_PAGE = 500


@dataclass(frozen=True)
class RunOverview:
    """The top of a run page, from one snapshot."""

    status: RunStatus
    pipeline: Pipeline
    #: May the run go on with its next phase? (None when every phase is complete.)
    skip: SkipDecision | None
    #: The run's fingerprint (``timeline.run_version``) as of the same snapshot.
    version: str


@dataclass(frozen=True)
class SpanPage:
    """A page of attempts as spans, newest first; ``next_before`` continues (None: the last page)."""

    spans: tuple[Span, ...]
    next_before: str | None
    #: For each span: the attempt of the same phase just before it, when it is known to exist.
    previous: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class EventPage:
    """A page of one attempt's progress events; ``next_after`` continues (None: the last page)."""

    phase: str
    attempt_number: int
    events: tuple[ProgressEvent, ...]
    next_after: int | None
    #: The run's name (:func:`phaselog.model.ids.run_name_of`), None for a UUID.
    run_name: str | None = None


def _ids(ticket_id: str, run_id: str) -> tuple[str, str]:
    return validate_ticket_id(ticket_id), normalize_run_id(run_id)


def check_limit(limit: Any, *, field: str = "limit") -> int:
    """``limit`` as a page size from 1 to :data:`MAX_PAGE`; UsageError naming ``field`` otherwise."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise UsageError(f"{field}: must be a whole number from 1 to {MAX_PAGE} (got {limit!r})", field=field)
    return limit


def overview(ledger: Ledger, ticket_id: str, run_id: str, *, artifacts_root: str | None = None) -> RunOverview:
    """The state of every phase, the next phase and its blockers, and the fingerprint: one snapshot.

    ``artifacts_root``: where the run's artifacts are checked, as ``status --workdir`` (None: not
    looked at). NotFound when nothing at all is recorded for the run.
    """

    snap, pipeline, status = _read(ledger, ticket_id, run_id, artifacts_root)
    skip = ledger.states.skip_from(snap, status, pipeline, status.next_phase) if status.next_phase else None
    return RunOverview(status, pipeline, skip, snapshot_version(snap))


def _read(
    ledger: Ledger, ticket_id: str, run_id: str, artifacts_root: str | None = None
) -> tuple[RunSnapshot, Pipeline, RunStatus]:
    """One snapshot of the run, its pipeline and its status; NotFound when nothing is recorded."""
    ticket_id, run_id = _ids(ticket_id, run_id)
    snap = ledger.store.snapshot(ticket_id, run_id)
    if snap.empty:
        raise NotFound(f"no run {run_id} for ticket {ticket_id}", ticket_id=ticket_id, run_id=run_id)
    pipeline = ledger.pipelines.for_run(ticket_id, run_id, snapshot=snap)
    return snap, pipeline, ledger.states.status_from(snap, pipeline, artifacts_root=artifacts_root)


# -- attempts ----------------------------------------------------------------------------------------
def parse_before(before: str | None, *, field: str = "before") -> tuple[int, int] | None:
    """Parse a cursor ``ORDINAL:ATTEMPT`` (as ``next_before`` gives it)."""
    if before is None or before == "":
        return None
    ordinal, sep, attempt = before.partition(":")
    if not sep or not is_digits(ordinal) or not is_digits(attempt):
        raise UsageError(
            f"{field}: must be a cursor ORDINAL:ATTEMPT as given in next_before (got {before!r})",
            field=field,
            rule="cursor",
        )
    return int(ordinal), int(attempt)


def attempts_page(
    ledger: Ledger,
    ticket_id: str,
    run_id: str,
    *,
    phase: str | int | None = None,
    before: str | None = None,
    limit: int = 50,
    status: RunStatus | None = None,
    pipeline: Pipeline | None = None,
) -> SpanPage:
    """The run's attempts (or one phase's) newest first, ``limit`` of them before ``before``.

    Walks each phase down from its newest attempt (as ``status`` knows it — the overview's, with
    its ``pipeline`` — else from one snapshot). The records come from one ``Store.iter_records``
    of the run, of which only the page's (the newest ``limit + 1`` below the cursor) are kept, and
    the progress events from one read per ten attempts. Where attempts are missing (pruned), the
    records read and the run's event names say which remain.
    """

    ticket_id, run_id = _ids(ticket_id, run_id)
    limit = check_limit(limit)
    cursor = parse_before(before)
    if status is None or pipeline is None:
        _, pipeline, status = _read(ledger, ticket_id, run_id)
    only = pipeline.phase(phase).ordinal if phase is not None else None
    found = _page_records(ledger, status, pipeline, only, cursor, limit + 1)
    walked = list(itertools.islice(_newest_first(ledger, status, pipeline, only, cursor, found), limit + 1))
    page, beyond = walked[:limit], walked[limit:]
    records = [(e.record, e.location) for _, e, _ in page if isinstance(e, Stored)]
    damaged = [(e.phase, e.phase_ordinal, e.attempt_number) for _, e, _ in page if isinstance(e, Damaged)]
    by_name = {p.name: p.ordinal for p in pipeline.phases}
    made = spans(
        records,
        {key: evs for key, _, evs in page if evs},
        verdicts=judge(ledger.approvals(ticket_id, run_id)),
        gated=[p.name for p in pipeline.phases if p.requires_approval],
        damaged=damaged,
        newest={by_name[ps.phase]: _newest_attempt(ps) for ps in status.phases},
        live=Liveness.here(ledger.clock()),
    )
    made.sort(key=lambda s: (s.ordinal, s.attempt), reverse=True)
    # The attempt before each one (for "diff with the previous"): the next one, newest first, of
    # the same phase, when it has a record; the attempt read past the page counts too.
    before_it: dict[tuple[int, int], int] = {}
    for (key, _, _), (nxt, entry, _) in itertools.pairwise(walked):
        if nxt[0] == key[0] and isinstance(entry, Stored):
            before_it[key] = nxt[1]
    last = page[-1][0] if page and beyond else None
    return SpanPage(
        tuple(made),
        f"{last[0]}:{last[1]}" if last else None,
        tuple(before_it.get((s.ordinal, s.attempt)) for s in made),
    )


def _newest_attempt(ps: PhaseState) -> int:
    """A phase's newest attempt as its state knows it: recorded, in flight or damaged (0: none)."""
    flying = int(ps.in_flight["attempt_number"]) if ps.in_flight is not None else 0
    return max(ps.latest_attempt or 0, flying, *ps.damaged_attempts)


#: (ordinal, attempt), its record (Stored, Damaged, or None: progress events only), its events.
Walked = tuple[tuple[int, int], Any, list["ProgressEvent"]]


@dataclass(frozen=True)
class _Found:
    """What one read of the run's records gave a page: the records it may show, and every attempt number."""

    #: The newest ``n`` records (Stored or Damaged) below the cursor, by (phase ordinal, attempt).
    records: Mapping[tuple[int, int], Any]
    #: Per phase ordinal, every attempt that has a record (numbers only).
    attempts: Mapping[int, frozenset[int]]


def _page_records(
    ledger: Ledger, status: RunStatus, pipeline: Pipeline, only: int | None, cursor: tuple[int, int] | None, n: int
) -> _Found:
    """The newest ``n`` records a walk below ``cursor`` can reach, from one ``iter_records`` of the run.

    The walk goes down (phase ordinal, attempt) from each phase's newest attempt as ``status`` knows
    it, so the first ``n`` attempts it yields are among the ``n`` newest records it can reach: those
    are kept (a bounded heap), every other record is dropped as soon as it is read.
    """

    by_name = {p.name: p.ordinal for p in pipeline.phases}
    newest = {by_name[ps.phase]: _newest_attempt(ps) for ps in status.phases}
    kept: list[tuple[tuple[int, int], int, Any]] = []  # a min-heap of (key, tie-break, record)
    attempts: dict[int, set[int]] = {}
    for i, entry in enumerate(ledger.store.iter_records(status.ticket_id, status.run_id)):
        if isinstance(entry, Stored):
            key = (entry.record.phase_ordinal, entry.record.attempt_number)
        else:
            key = (entry.phase_ordinal, entry.attempt_number)
        if key[0] not in newest or key[1] > newest[key[0]] or (only is not None and key[0] != only):
            continue  # not on this page's walk (another phase, or written after the status was read)
        attempts.setdefault(key[0], set()).add(key[1])
        if cursor is not None and key >= cursor:
            continue
        if len(kept) < n:
            heapq.heappush(kept, (key, i, entry))
        elif key > kept[0][0]:
            heapq.heapreplace(kept, (key, i, entry))
    return _Found({key: entry for key, _, entry in kept}, {o: frozenset(a) for o, a in attempts.items()})


def _newest_first(
    ledger: Ledger,
    status: RunStatus,
    pipeline: Pipeline,
    only: int | None,
    cursor: tuple[int, int] | None,
    found: _Found,
) -> Iterator[Walked]:
    """Every attempt of the run (or of phase ``only``) below ``cursor``, newest first."""

    ticket_id, run_id = status.ticket_id, status.run_id
    by_name = {p.name: p for p in pipeline.phases}
    for ps in reversed(status.phases):
        ph = by_name[ps.phase]
        if (only is not None and ph.ordinal != only) or (cursor is not None and ph.ordinal > cursor[0]):
            continue
        attempt = _newest_attempt(ps)
        if cursor is not None and ph.ordinal == cursor[0]:
            attempt = min(attempt, cursor[1] - 1)
        events = AttemptEvents(ledger.store, ticket_id, run_id, ph, block=True)
        recorded = found.attempts.get(ph.ordinal, frozenset())
        while attempt >= 1:
            entry = found.records.get((ph.ordinal, attempt))
            evs = events.of(attempt)
            if attempt not in recorded and not evs:  # a gap (pruned): from here on, only what exists
                for older in _existing(ledger, ticket_id, run_id, ph.ordinal, attempt, recorded):
                    yield (ph.ordinal, older), found.records.get((ph.ordinal, older)), events.of(older)
                break
            yield (ph.ordinal, attempt), entry, evs
            attempt -= 1


def _existing(
    ledger: Ledger, ticket_id: str, run_id: str, ordinal: int, below: int, recorded: frozenset[int]
) -> list[int]:
    """The attempts of a phase below ``below`` that have a record (``recorded``) or progress events
    (the run's event names), newest first."""
    have = set(recorded)
    for name in ledger.store.entry_names("progress", ticket_id, run_id):
        parsed = parse_event_name(name)
        if parsed is not None and parsed.ordinal == ordinal:
            have.add(parsed.attempt)
    return sorted((a for a in have if a < below), reverse=True)


def previous_attempt(ledger: Ledger, ticket_id: str, run_id: str, ordinal: int, attempt: int) -> int | None:
    """The newest recorded attempt of a phase below ``attempt`` (None: none), from the run's list
    of attempts (names or an index; no record is read)."""
    ticket_id, run_id = _ids(ticket_id, run_id)
    below = [
        r.attempt_number
        for r in ledger.store.attempts(ticket_id, run_id)
        if r.phase_ordinal == ordinal and r.attempt_number < attempt
    ]
    return max(below, default=None)


# -- progress events -----------------------------------------------------------------------------------
def events_page(
    ledger: Ledger,
    ticket_id: str,
    run_id: str,
    phase: str | int,
    attempt: int,
    *,
    after: int = 0,
    limit: int = 50,
) -> EventPage:
    """One attempt's progress events with a sequence number above ``after``, oldest first."""

    ticket_id, run_id = _ids(ticket_id, run_id)
    limit = check_limit(limit)
    check_attempt(attempt)
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise UsageError(f"after: must be a whole number >= 0 (got {after!r})", field="after", rule="cursor")
    snap = ledger.store.snapshot(ticket_id, run_id)  # the run's pipeline and its name
    ph = ledger.pipeline_for(ticket_id, run_id, snapshot=snap).phase(phase)
    every = [e for e in AttemptEvents(ledger.store, ticket_id, run_id, ph).of(attempt) if e.seq > after]
    page = every[:limit]
    more = len(every) > limit
    name = run_name_of(run_id, snap.run_name())
    return EventPage(ph.name, attempt, tuple(page), page[-1].seq if more else None, run_name=name)
