"""Carrying a run's snapshot on from one write to the next (the stores that declare CARRIED_RUNS).

:func:`with_appended` derives the snapshot a fresh read would give once a record is appended;
:func:`detached` hands a reader copies. Shared by the SQL stores (stores/sql/carried.py) and the
files store (stores/files/carried.py); the snapshot module itself is imported only when a snapshot
is derived, so a plain read loads none of it (D196).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from phaselog.model.records import detached_copy
from phaselog.stores.values import AttemptRef, Stored

if TYPE_CHECKING:
    from phaselog.model.records import Checkpoint
    from phaselog.stores.snapshot import RunSnapshot

__all__ = ["detached", "premise_holds", "with_appended"]


def detached(snap: RunSnapshot) -> RunSnapshot:
    """``snap`` with copies of its records: a reader that edits a payload in place never changes
    what the next write decides on (as the memo of decoded records hands out copies)."""
    records = {
        k: Stored(detached_copy(v.record), v.location, v.recorded_hash, v.warnings) if isinstance(v, Stored) else v
        for k, v in snap.records.items()
    }
    return dataclasses.replace(snap, records=records, _by_ordinal={})


def with_appended(snap: RunSnapshot, stored: Stored) -> RunSnapshot | None:
    """The snapshot a fresh read would give once ``stored`` is appended to ``snap``'s run (None:
    not derivable here — attempts in flight, or the record is not the phase's new newest)."""
    from phaselog.stores.snapshot import summarize  # lazy: a read (`phaselog read`) never loads the snapshot module

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


def premise_holds(snap: RunSnapshot, record: Checkpoint, expected_latest: int) -> bool:
    """Does the carried ``snap`` say what the append of ``record`` assumed: the phase's newest
    attempt is ``expected_latest`` (0: none), and ``record`` links to that attempt's hash?"""
    newest = snap.latest(record.phase_ordinal)
    latest = 0 if newest is None else newest.attempt_number
    if latest != expected_latest:
        return False
    if latest:
        entry = snap.record(record.phase_ordinal, latest)
        if not isinstance(entry, Stored) or entry.record.content_hash != record.prev_hash:
            return False
    return True
