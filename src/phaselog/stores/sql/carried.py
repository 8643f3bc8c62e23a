"""The runs a SQL store handle carries: the snapshot it last saw of each, with a change stamp.

A write into a run reads its snapshot (``Store.snapshot``) and appends. Re-reading the run on
every write costs two statements and the decoding of every phase's newest record; instead the
handle keeps the snapshot with the database's change stamp taken *before* it was read (the
dialect's ``change_stamp``: on SQLite the connection, its own ``total_changes`` and ``PRAGMA
data_version``, which moves when another connection commits). The next ``snapshot`` of the run
compares the stamp (one pragma, no transaction) and serves the carried snapshot only when nothing
at all was written to the database since; otherwise it reads the run again.

The append checks the stamp again *inside* its write transaction, under the write lock: when it
still matches, nothing moved between the decision and the insert, and the snapshot plus the new
record is exactly what a fresh read would give (:func:`with_appended`), so it is carried on. When
it does not match, the append decides as it always did (the phase's latest attempt, checked in
the transaction) and the carried snapshot is dropped. A dialect without a cheap stamp
(PostgreSQL) carries nothing. See docs/decisions.md D163.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from phaselog.model.records import detached_copy
from phaselog.stores.values import AttemptRef, Stored

if TYPE_CHECKING:
    from phaselog.model.records import Checkpoint
    from phaselog.stores.snapshot import RunSnapshot
    from phaselog.stores.sql.session import Session

#: How many runs one store handle carries (the oldest is dropped first).
CARRIED_RUNS = 64

Key = tuple[str, str]


class CarriedRuns:
    """The snapshots one store handle last saw, by (ticket, run), each with its change stamp."""

    def __init__(self, session: Session, limit: int = CARRIED_RUNS) -> None:
        self.session = session
        self.limit = limit
        self._runs: OrderedDict[Key, tuple[RunSnapshot, tuple[Any, ...]]] = OrderedDict()

    def stamp(self) -> tuple[Any, ...] | None:
        """The database's change stamp now (None: the dialect has none, or no store exists yet)."""
        session = self.session
        if not session.ready or session.held:
            return None
        return session.dialect.change_stamp(session.conn)

    def fresh(self, key: Key) -> RunSnapshot | None:
        """The carried snapshot of ``key`` if nothing was written to the database since it was read."""
        got = self._runs.get(key)
        if got is None:
            return None
        if self.stamp() != got[1]:
            del self._runs[key]
            return None
        return got[0]

    def keep(self, key: Key, snap: RunSnapshot, stamp: tuple[Any, ...] | None) -> None:
        """Carry ``snap``, read after ``stamp`` was taken."""
        if stamp is None or snap.history:
            return
        runs = self._runs
        runs[key] = (snap, stamp)
        runs.move_to_end(key)
        while len(runs) > self.limit:
            runs.popitem(last=False)

    def carried_stamp(self, key: Key) -> tuple[Any, ...] | None:
        """The stamp the carried snapshot of ``key`` was read at (None: none carried)."""
        got = self._runs.get(key)
        return None if got is None else got[1]

    def appended(self, record: Checkpoint, location: str, after: tuple[Any, ...] | None) -> None:
        """``record`` was committed. ``after``: the stamp right after the commit when the stamp
        checked inside the append's transaction matched the carried one (None: it did not)."""
        key = (record.ticket_id, record.run_id)
        got = self._runs.pop(key, None)
        if got is None or after is None:
            return
        snap = with_appended(got[0], Stored(detached_copy(record), location, record.content_hash))
        if snap is not None:
            self.keep(key, snap, after)

    def drop(self, key: Key) -> None:
        """Carry nothing for ``key`` (an append was refused or its outcome is unknown)."""
        self._runs.pop(key, None)

    def forget(self) -> None:
        """Carry nothing (the connection was replaced)."""
        self._runs.clear()


def with_appended(snap: RunSnapshot, stored: Stored) -> RunSnapshot | None:
    """The snapshot a fresh read would give once ``stored`` is appended to ``snap``'s run (None:
    not derivable here — attempts in flight, or the record is not the phase's new newest)."""
    from phaselog.stores.snapshot import summarize  # lazy: like the snapshot itself (SqlStore.snapshot)

    cp = stored.record
    ordinal, number = cp.phase_ordinal, cp.attempt_number
    old = snap.summary(ordinal)
    if snap.history or snap.events or (old is not None and old.newest.attempt_number >= number):
        return None
    (added,) = summarize((AttemptRef(ordinal, number, cp.phase, cp.completed),))
    summary = added if old is None else old.merge(added)
    summaries = tuple(sorted((*(s for s in snap.summaries if s.ordinal != ordinal), summary), key=_ordinal))
    # The records a fresh snapshot holds for the phase: the newest, and the newest completed with
    # the damaged ones below it that the read walked past (all at or below the newest completed).
    keep_below = (
        0 if cp.completed or old is None or old.newest_completed is None else old.newest_completed.attempt_number
    )
    records = {k: v for k, v in snap.records.items() if k[0] != ordinal or k[1] <= keep_below}
    records[(ordinal, number)] = stored
    out = dataclasses.replace(snap, summaries=summaries, records=records, _by_ordinal={})
    if out.markers is not None and out.pipeline_ref() is not None:
        out = dataclasses.replace(out, markers=None, _by_ordinal={})  # as stores.snapshot.assemble would
    return out


def _ordinal(summary: Any) -> int:
    return int(summary.ordinal)
