"""The run snapshot: everything a write or a status needs about one run, read in one store call.

A write, ``status``, ``can_skip_to`` and in-flight detection all start from a :class:`RunSnapshot`
instead of asking the store record by record. What they need costs O(phases), not O(attempts):

* per phase a :class:`PhaseSummary`: how many attempts, the newest one and the newest completed
  one (a directory listing or an aggregate over an index: no record is read, and no
  :class:`AttemptRef` is made per attempt); every attempt's ref only with ``history``;
* per phase, the newest attempt's record and the newest *intact completed* one (walking down past
  failed or damaged attempts only as far as needed);
* the progress events of attempts that have no record yet (the attempts in flight), and the
  names of every event (cheap);
* the run's approvals (each phase's judgements form a short chain);
* the ticket's marker revisions when no loaded record names the run's pipeline.

``history=True`` loads every record and lists every attempt (``history``, ``verify``, ``export``
and ``prune`` need it). What remains O(events) without it: the names of the run's progress events
(a listing, no bodies), which in-flight detection and the next attempt number read.

:func:`build_snapshot` builds a snapshot from the store contract's primitives; a backend may
answer :meth:`Store.snapshot` in fewer round trips (one directory walk, one or two queries) as
long as it returns the same snapshot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from phaselog.model.errors import Corrupt, NotFound, UnsupportedVersion
from phaselog.model.records import PipelineRef
from phaselog.stores.kernel import damaged_from
from phaselog.stores.names import event_prefix, parse_event_name
from phaselog.stores.values import AttemptRef, Damaged, Stored


class Source(Protocol):
    """The contract's calls :func:`build_snapshot` makes (every :class:`~phaselog.stores.base.Store` has them)."""

    def attempts(self, ticket_id: str, run_id: str) -> list[AttemptRef]:
        """Every committed attempt of a run, sorted by (phase ordinal, attempt)."""
        ...

    def get(self, ticket_id: str, run_id: str, phase_ordinal: int, phase: str, attempt: int) -> Stored:
        """Read one record; NotFound if absent, Corrupt if damaged."""
        ...

    def entry_names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        """Names of a kind's entries, sorted, without reading them."""
        ...

    def entries(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind as (name, location, bytes or the Corrupt error), sorted by name."""
        ...


#: An audit entry as the store returns it: (name, location, bytes or the error reading it).
Entry = tuple[str, str, "bytes | Corrupt"]
#: How often a snapshot is re-read when a record vanished between listing and reading (a prune).
_RETRIES = 20


#: One phase name's attempts within a phase, as an index answers it (``GROUP BY phase_ordinal, phase``):
#: (ordinal, phase, how many, the newest attempt, the newest completed attempt or None).
Group = tuple[int, str, int, int, "int | None"]


@dataclass(frozen=True, slots=True)
class PhaseSummary:
    """One phase's committed attempts, summarised: what a write or a status needs, without listing them."""

    ordinal: int
    #: The newest committed attempt (completed or failed).
    newest: AttemptRef
    #: The newest completed attempt as the names (or rows) say: it may be damaged. None: none completed.
    newest_completed: AttemptRef | None
    #: How many committed attempts, per phase name, sorted by name (one pair unless a phase was renamed).
    counts: tuple[tuple[str, int], ...]

    @property
    def count(self) -> int:
        """How many committed attempts the phase has."""
        return sum(n for _, n in self.counts)

    def merge(self, other: PhaseSummary) -> PhaseSummary:
        """The summary of both summaries' attempts (two disjoint sets of attempts of one phase)."""
        newest = max(self.newest, other.newest, key=_attempt_of)
        done = [r for r in (self.newest_completed, other.newest_completed) if r is not None]
        counts = dict(self.counts)
        for name, n in other.counts:
            counts[name] = counts.get(name, 0) + n
        return PhaseSummary(
            self.ordinal, newest, max(done, key=_attempt_of) if done else None, tuple(sorted(counts.items()))
        )


def _attempt_of(ref: AttemptRef) -> int:
    return ref.attempt_number


def summarize_groups(groups: Iterable[Group]) -> tuple[PhaseSummary, ...]:
    """The phases' summaries from their groups (any order), sorted by ordinal."""
    newest: dict[int, tuple[int, str, bool]] = {}
    done: dict[int, tuple[int, str]] = {}
    counts: dict[int, dict[str, int]] = {}
    for ordinal, phase, n, top, top_done in groups:
        if ordinal not in newest or top > newest[ordinal][0]:
            newest[ordinal] = (top, phase, top == top_done)
        if top_done is not None and (ordinal not in done or top_done > done[ordinal][0]):
            done[ordinal] = (top_done, phase)
        names = counts.setdefault(ordinal, {})
        names[phase] = names.get(phase, 0) + n
    out = []
    for ordinal in sorted(newest):
        top, phase, completed = newest[ordinal]
        d = done.get(ordinal)
        out.append(
            PhaseSummary(
                ordinal,
                AttemptRef(ordinal, top, phase, completed),
                AttemptRef(ordinal, d[0], d[1], True) if d is not None else None,
                tuple(sorted(counts[ordinal].items())),
            )
        )
    return tuple(out)


def summarize(refs: Iterable[AttemptRef]) -> tuple[PhaseSummary, ...]:
    """The phases' summaries of a list of attempts (distinct (ordinal, attempt) keys): the reference
    every backend's shortcut must agree with."""
    groups: dict[tuple[int, str], list[Any]] = {}
    for ref in refs:
        g = groups.setdefault((ref.phase_ordinal, ref.phase), [0, 0, None])
        g[0] += 1
        g[1] = max(g[1], ref.attempt_number)
        if ref.completed and (g[2] is None or ref.attempt_number > g[2]):
            g[2] = ref.attempt_number
    return summarize_groups((o, p, n, top, done) for (o, p), (n, top, done) in groups.items())


def with_attempts(summaries: Iterable[PhaseSummary], refs: Iterable[AttemptRef]) -> tuple[PhaseSummary, ...]:
    """``summaries`` with more attempts (not among them) added."""
    by = {s.ordinal: s for s in summaries}
    for s in summarize(refs):
        old = by.get(s.ordinal)
        by[s.ordinal] = s if old is None else old.merge(s)
    return tuple(by[o] for o in sorted(by))


@dataclass(frozen=True)
class RunSnapshot:
    """One consistent read of a run (see the module docstring for what is loaded)."""

    ticket_id: str
    run_id: str
    #: Per phase with a committed attempt, its summary, sorted by ordinal.
    summaries: tuple[PhaseSummary, ...]
    #: The records that were read, by (phase ordinal, attempt): Stored, or Damaged when unreadable.
    records: Mapping[tuple[int, int], Stored | Damaged]
    #: Names of every progress event of the run (sorted).
    event_names: tuple[str, ...] = ()
    #: Progress events of the attempts in flight (every event with ``history``).
    events: tuple[Entry, ...] = ()
    #: Every approval / rejection of the run.
    approvals: tuple[Entry, ...] = ()
    #: The ticket's marker revisions; read only when no loaded record names the pipeline.
    markers: tuple[Entry, ...] | None = None
    #: True when every record of the run was read.
    history: bool = False
    #: Every committed attempt, sorted by (phase ordinal, attempt): only with ``history``.
    attempts: tuple[AttemptRef, ...] = ()
    _by_ordinal: dict[int, PhaseSummary] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for s in self.summaries:
            self._by_ordinal[s.ordinal] = s

    # -- attempts ---------------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        """True when nothing is recorded for the run (no attempt, no progress event)."""
        return not self.summaries and not self.event_names

    def summary(self, ordinal: int) -> PhaseSummary | None:
        """A phase's summary (None: no committed attempt)."""
        return self._by_ordinal.get(ordinal)

    def latest(self, ordinal: int) -> AttemptRef | None:
        """The newest committed attempt of a phase (completed or failed)."""
        s = self._by_ordinal.get(ordinal)
        return s.newest if s is not None else None

    def latest_completed(self, ordinal: int) -> AttemptRef | None:
        """The newest completed attempt of a phase, as the names say (it may be damaged)."""
        s = self._by_ordinal.get(ordinal)
        return s.newest_completed if s is not None else None

    def counts(self) -> dict[str, int]:
        """How many committed attempts each phase name has."""
        out: dict[str, int] = {}
        for s in self.summaries:
            for name, n in s.counts:
                out[name] = out.get(name, 0) + n
        return out

    def record(self, ordinal: int, attempt: int) -> Stored | Damaged | None:
        """The record of one attempt, if it was read."""
        return self.records.get((ordinal, attempt))

    # -- records ----------------------------------------------------------------------------------
    def stored(self) -> Iterator[Stored]:
        """The intact records that were read, in (phase ordinal, attempt) order."""
        for key in sorted(self.records):
            entry = self.records[key]
            if isinstance(entry, Stored):
                yield entry

    def damaged(self) -> list[Damaged]:
        """The records that were read but are damaged, in (phase ordinal, attempt) order."""
        return [e for k, e in sorted(self.records.items()) if isinstance(e, Damaged)]

    def pipeline_ref(self) -> PipelineRef | None:
        """The pipeline the run recorded with its phaselog checkpoints (None: none yet)."""
        for s in self.stored():
            if s.record.pipeline is not None:
                return s.record.pipeline
        return None

    def run_name(self) -> str | None:
        """The run id as the user gave it (``nightly-1``), as the run's records keep it (None: a UUID)."""
        for s in self.stored():
            if s.record.run_name is not None:
                return s.record.run_name
        return None

    def params(self) -> dict[str, Any] | None:
        """The run's parameters, as the runner recorded them with its checkpoints (None: none, D260)."""
        for s in self.stored():
            if s.record.params is not None:
                return dict(s.record.params)
        return None

    def started_attempts(self, ordinal: int, phase: str) -> list[int]:
        """Attempts of a phase that have progress events (from the names alone), sorted."""
        found = set()
        for name in self.event_names:
            parsed = parse_event_name(name)
            if parsed is not None and (parsed.ordinal, parsed.phase) == (ordinal, phase):
                found.add(parsed.attempt)
        return sorted(found)


def _ref_key(ref: AttemptRef) -> tuple[int, int]:
    return ref.phase_ordinal, ref.attempt_number


def build_snapshot(
    store: Source,
    ticket_id: str,
    run_id: str,
    *,
    history: bool = False,
    groups: Callable[[], Iterable[Group]] | None = None,
) -> RunSnapshot:
    """A snapshot made of the store contract's primitives (attempts, get, entry names, entries).

    ``groups`` (without ``history``): the phases' groups from a backend's own cheap listing, in
    place of every attempt's :class:`AttemptRef`. A record that vanishes between the listing and
    the read (a concurrent prune removed it) makes the snapshot start again, so it never mixes a
    listing with a different set of records.
    """
    for _ in range(_RETRIES):
        refs: tuple[AttemptRef, ...] = ()
        if history or groups is None:
            # Whatever order the listing gives; sorted by an int key (AttemptRef's __lt__ is Python code).
            refs = tuple(sorted(store.attempts(ticket_id, run_id), key=_ref_key))
            summaries = summarize(refs)
        else:
            summaries = summarize_groups(groups())
        try:
            records = _read_records(store, ticket_id, run_id, refs, summaries, history=history)
        except NotFound:
            continue
        break
    else:  # pragma: no cover - a prune would have to win 20 races in a row
        raise NotFound(f"run {run_id} changed while it was being read; try again", ticket_id=ticket_id)
    names = tuple(store.entry_names("progress", ticket_id, run_id))
    events: tuple[Entry, ...]
    if history:
        events = tuple(store.entries("progress", ticket_id, run_id))
    else:
        events = tuple(
            entry
            for ordinal, phase, attempt in flight_attempts(summaries, names)
            for entry in store.entries("progress", ticket_id, run_id, event_prefix(ordinal, phase, attempt))
        )
    approvals = tuple(store.entries("approvals", ticket_id, run_id))
    snap = RunSnapshot(
        ticket_id,
        run_id,
        summaries,
        records,
        names,
        events,
        approvals,
        None,
        history,
        refs if history else (),
    )
    return assemble(snap, lambda: store.entries("markers", ticket_id, None))


def assemble(snap: RunSnapshot, markers: Callable[[], Iterable[Entry]]) -> RunSnapshot:
    """``snap`` with the ticket's marker revisions when no loaded record names the run's pipeline."""
    if snap.pipeline_ref() is not None:
        return snap
    return dataclasses.replace(snap, markers=tuple(markers()))


def _read_records(
    store: Source,
    ticket_id: str,
    run_id: str,
    refs: tuple[AttemptRef, ...],
    summaries: tuple[PhaseSummary, ...],
    *,
    history: bool,
) -> dict[tuple[int, int], Stored | Damaged]:
    out: dict[tuple[int, int], Stored | Damaged] = {}
    if history:
        for ref in refs:
            out[(ref.phase_ordinal, ref.attempt_number)] = get_or_damaged(store, ticket_id, run_id, ref)
        return out
    listed: list[tuple[AttemptRef, ...]] = [refs] if refs else []

    def older(ordinal: int) -> list[AttemptRef]:
        if not listed:  # the rare walk down past a damaged record: list the run once
            listed.append(tuple(sorted(store.attempts(ticket_id, run_id), key=_ref_key)))
        return [r for r in listed[0] if r.phase_ordinal == ordinal]

    load_latest(summaries, out, lambda ref: get_or_damaged(store, ticket_id, run_id, ref), older)
    return out


def load_latest(
    summaries: Iterable[PhaseSummary],
    records: dict[tuple[int, int], Stored | Damaged],
    load: Callable[[AttemptRef], Stored | Damaged],
    older: Callable[[int], list[AttemptRef]],
) -> None:
    """Fill ``records`` with what a write or a status needs, loading only what it lacks.

    Per phase: the newest attempt, and the newest intact completed one. When the newest completed
    record is damaged (rare), ``older(ordinal)`` lists the phase's attempts (sorted) and the walk
    goes down past failed or damaged attempts only as far as needed. ``load`` reads one attempt.
    """

    def intact(ordinal: int, ref: AttemptRef) -> bool:
        """Load ``ref`` unless ``records`` holds it; True when it is intact."""
        key = (ordinal, ref.attempt_number)
        if key not in records:
            records[key] = load(ref)
        return isinstance(records[key], Stored)

    for s in summaries:
        intact(s.ordinal, s.newest)
        done = s.newest_completed
        if done is None or intact(s.ordinal, done):
            continue
        for ref in reversed(older(s.ordinal)):
            if ref.completed and ref.attempt_number < done.attempt_number and intact(ref.phase_ordinal, ref):
                break


def get_or_damaged(store: Source, ticket_id: str, run_id: str, ref: AttemptRef) -> Stored | Damaged:
    """Read one attempt; a record that exists but cannot be read comes back as Damaged."""
    try:
        return store.get(ticket_id, run_id, ref.phase_ordinal, ref.phase, ref.attempt_number)
    except (Corrupt, UnsupportedVersion) as exc:
        return damaged_from(exc, ticket_id, run_id, ref.phase_ordinal, ref.phase, ref.attempt_number)


def flight_attempts(summaries: Iterable[PhaseSummary], names: Iterable[str]) -> dict[tuple[int, str, int], list[str]]:
    """The attempts in flight (events newer than their phase's newest record), sorted, with their
    event names."""
    top = {s.ordinal: s.newest.attempt_number for s in summaries}
    wanted: dict[tuple[int, str, int], list[str]] = {}
    for name in names:
        parsed = parse_event_name(name)
        if parsed is not None and parsed.attempt > top.get(parsed.ordinal, 0):
            wanted.setdefault((parsed.ordinal, parsed.phase, parsed.attempt), []).append(name)
    return dict(sorted(wanted.items()))
