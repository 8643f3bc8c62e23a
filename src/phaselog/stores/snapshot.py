"""The run snapshot: everything a write or a status needs about one run, read in one store call.

A write, ``status``, ``can_skip_to`` and in-flight detection all start from a :class:`RunSnapshot`
instead of asking the store record by record. What they need costs O(phases), not O(attempts):

* every committed attempt as an :class:`AttemptRef` (names or an index: no record is read);
* per phase, the newest attempt's record and the newest *intact completed* one (walking down past
  failed or damaged attempts only as far as needed);
* the progress events of attempts that have no record yet (the attempts in flight), and the
  names of every event (cheap);
* the run's approvals (each phase's judgements form a short chain);
* the ticket's marker revisions when no loaded record names the run's pipeline.

``history=True`` loads every record (``history``, ``verify``, ``export`` and ``prune`` need it).

:func:`build_snapshot` builds a snapshot from the store contract's primitives; a backend may
answer :meth:`Store.snapshot` in fewer round trips (one directory walk, one or two queries) as
long as it returns the same snapshot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from phaselog.errors import Corrupt, NotFound, UnsupportedVersion
from phaselog.records import PipelineRef
from phaselog.stores.kernel import damaged_from
from phaselog.stores.names import event_prefix, parse_event_name

if TYPE_CHECKING:
    from phaselog.stores.base import AttemptRef, Damaged, Store, Stored

#: An audit entry as the store returns it: (name, location, bytes or the error reading it).
Entry = tuple[str, str, "bytes | Corrupt"]
#: How often a snapshot is re-read when a record vanished between listing and reading (a prune).
_RETRIES = 20


@dataclass(frozen=True)
class RunSnapshot:
    """One consistent read of a run (see the module docstring for what is loaded)."""

    ticket_id: str
    run_id: str
    #: Every committed attempt (completed and failed), sorted by (phase ordinal, attempt).
    attempts: tuple[AttemptRef, ...]
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
    _by_phase: dict[int, list[AttemptRef]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for ref in self.attempts:
            self._by_phase.setdefault(ref.phase_ordinal, []).append(ref)

    # -- attempts ---------------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        """True when nothing is recorded for the run (no attempt, no progress event)."""
        return not self.attempts and not self.event_names

    def phase_attempts(self, ordinal: int) -> list[AttemptRef]:
        """The committed attempts of one phase, oldest first."""
        return self._by_phase.get(ordinal, [])

    def latest(self, ordinal: int) -> AttemptRef | None:
        """The newest committed attempt of a phase (completed or failed)."""
        refs = self._by_phase.get(ordinal)
        return refs[-1] if refs else None

    def latest_completed(self, ordinal: int) -> AttemptRef | None:
        """The newest completed attempt of a phase, as the names say (it may be damaged)."""
        for ref in reversed(self._by_phase.get(ordinal, [])):
            if ref.completed:
                return ref
        return None

    def record(self, ordinal: int, attempt: int) -> Stored | Damaged | None:
        """The record of one attempt, if it was read."""
        return self.records.get((ordinal, attempt))

    # -- records ----------------------------------------------------------------------------------
    def stored(self) -> Iterator[Stored]:
        """The intact records that were read, in (phase ordinal, attempt) order."""
        from phaselog.stores.base import Stored

        for key in sorted(self.records):
            entry = self.records[key]
            if isinstance(entry, Stored):
                yield entry

    def damaged(self) -> list[Damaged]:
        """The records that were read but are damaged, in (phase ordinal, attempt) order."""
        from phaselog.stores.base import Damaged

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


def build_snapshot(store: Store, ticket_id: str, run_id: str, *, history: bool = False) -> RunSnapshot:
    """A snapshot made of the store contract's primitives (attempts, get, entry names, entries).

    A record that vanishes between the listing and the read (a concurrent prune removed it) makes
    the snapshot start again, so it never mixes a listing with a different set of records.
    """
    for _ in range(_RETRIES):
        # Whatever order the listing gives; sorted by an int key (AttemptRef's __lt__ is Python code).
        refs = tuple(sorted(store.attempts(ticket_id, run_id), key=_ref_key))
        try:
            records = _read_records(store, ticket_id, run_id, refs, history=history)
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
            for ordinal, phase, attempt in flight_attempts(refs, names)
            for entry in store.entries("progress", ticket_id, run_id, event_prefix(ordinal, phase, attempt))
        )
    approvals = tuple(store.entries("approvals", ticket_id, run_id))
    return assemble(
        RunSnapshot(ticket_id, run_id, refs, records, names, events, approvals, None, history),
        lambda: store.entries("markers", ticket_id, None),
    )


def assemble(snap: RunSnapshot, markers: Callable[[], Iterable[Entry]]) -> RunSnapshot:
    """``snap`` with the ticket's marker revisions when no loaded record names the run's pipeline."""
    if snap.pipeline_ref() is not None:
        return snap
    return dataclasses.replace(snap, markers=tuple(markers()))


def _read_records(
    store: Store, ticket_id: str, run_id: str, refs: tuple[AttemptRef, ...], *, history: bool
) -> dict[tuple[int, int], Stored | Damaged]:

    out: dict[tuple[int, int], Stored | Damaged] = {}
    if history:
        for ref in refs:
            out[(ref.phase_ordinal, ref.attempt_number)] = get_or_damaged(store, ticket_id, run_id, ref)
    else:
        load_latest(refs, out, lambda ref: get_or_damaged(store, ticket_id, run_id, ref))
    return out


def load_latest(
    refs: Iterable[AttemptRef],
    records: dict[tuple[int, int], Stored | Damaged],
    load: Callable[[AttemptRef], Stored | Damaged],
) -> None:
    """Fill ``records`` with what a write or a status needs, loading only what it lacks.

    Per phase: the newest attempt, and the newest intact completed one (walking down past failed
    or damaged attempts only as far as needed). ``refs`` are sorted; ``load`` reads one attempt.
    """
    from phaselog.stores.base import Stored

    by_phase: dict[int, list[AttemptRef]] = {}
    for ref in refs:
        by_phase.setdefault(ref.phase_ordinal, []).append(ref)
    for lst in by_phase.values():
        newest = lst[-1]
        if (newest.phase_ordinal, newest.attempt_number) not in records:
            records[(newest.phase_ordinal, newest.attempt_number)] = load(newest)
        for ref in reversed(lst):
            if not ref.completed:
                continue
            key = (ref.phase_ordinal, ref.attempt_number)
            if key not in records:
                records[key] = load(ref)
            if isinstance(records[key], Stored):
                break


def get_or_damaged(store: Store, ticket_id: str, run_id: str, ref: AttemptRef) -> Stored | Damaged:
    """Read one attempt; a record that exists but cannot be read comes back as Damaged."""
    try:
        return store.get(ticket_id, run_id, ref.phase_ordinal, ref.phase, ref.attempt_number)
    except (Corrupt, UnsupportedVersion) as exc:
        return damaged_from(exc, ticket_id, run_id, ref.phase_ordinal, ref.phase, ref.attempt_number)


def flight_attempts(refs: Iterable[AttemptRef], names: Iterable[str]) -> dict[tuple[int, str, int], list[str]]:
    """The attempts in flight (events newer than their phase's newest record), sorted, with their
    event names."""
    top: dict[int, int] = {}
    for ref in refs:
        top[ref.phase_ordinal] = max(top.get(ref.phase_ordinal, 0), ref.attempt_number)
    wanted: dict[tuple[int, str, int], list[str]] = {}
    for name in names:
        parsed = parse_event_name(name)
        if parsed is not None and parsed.attempt > top.get(parsed.ordinal, 0):
            wanted.setdefault((parsed.ordinal, parsed.phase, parsed.attempt), []).append(name)
    return dict(sorted(wanted.items()))
