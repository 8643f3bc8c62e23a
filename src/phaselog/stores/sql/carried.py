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
record is exactly what a fresh read would give (:func:`phaselog.stores.carry.with_appended`),
so it is carried on. When it does not match, the append decides as it always did (the phase's latest attempt, checked in
the transaction) and the carried snapshot is dropped. A dialect without a cheap stamp
(PostgreSQL) carries nothing. See docs/decisions.md D163.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from phaselog.model.records import detached_copy
from phaselog.stores.carry import premise_holds, with_appended
from phaselog.stores.sql.runcheck import run_check
from phaselog.stores.values import Stored

if TYPE_CHECKING:
    from phaselog.model.records import Checkpoint
    from phaselog.stores.snapshot import RunSnapshot
    from phaselog.stores.sql.runcheck import RunCheck
    from phaselog.stores.sql.session import Session

#: How many runs one store handle carries (the oldest is dropped first).
CARRIED_RUNS = 64

Key = tuple[str, str]


class CarriedRuns:
    """The snapshots one store handle last saw, by (ticket, run), each with its change stamp."""

    def __init__(self, session: Session, limit: int = CARRIED_RUNS) -> None:
        self.session = session
        self.limit = limit
        self._runs: OrderedDict[Key, tuple[RunSnapshot, tuple[Any, ...], RunCheck | None]] = OrderedDict()

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

    def keep(self, key: Key, snap: RunSnapshot, stamp: tuple[Any, ...] | None, check: RunCheck | None = None) -> None:
        """Carry ``snap``, read after ``stamp`` was taken; ``check``: the run check taken with it
        (stores/sql/runcheck.py), where the stamp is the database's."""
        if stamp is None or snap.history:
            return
        runs = self._runs
        runs[key] = (snap, stamp, check)
        runs.move_to_end(key)
        while len(runs) > self.limit:
            runs.popitem(last=False)

    def premise(self, key: Key) -> tuple[RunSnapshot, bool] | None:
        """The carried snapshot of ``key`` for a write, and whether it is handed out unchecked (the
        append checks it): checked now where the stamp is the database's (SQLite) — unless the
        database moved and a run check was carried, which the append asks under the write lock
        (stores/sql/runcheck.py); handed out as it is where the stamp is the run's (PostgreSQL: the
        append checks it in the statement that inserts)."""
        got = self._runs.get(key)
        if got is None:
            return None
        if is_run_stamp(got[1]):
            return got[0], True
        if self.stamp() == got[1]:
            return got[0], False
        if got[2] is not None:
            return got[0], True
        del self._runs[key]
        return None

    def check_for(self, key: Key) -> RunCheck | None:
        """The run check carried with ``key``'s snapshot (None: none)."""
        got = self._runs.get(key)
        return None if got is None else got[2]

    def premise_for(self, record: Checkpoint, expected_latest: int) -> tuple[Any, ...] | None:
        """The stamp of the carried snapshot ``record`` was decided on (None: it was not — its
        phase's latest attempt or ``prev_hash`` differ from the carried snapshot's)."""
        got = self._runs.get((record.ticket_id, record.run_id))
        if got is None:
            return None
        snap = got[0]
        if not premise_holds(snap, record, expected_latest):
            return None
        return got[1]

    def appended(
        self, record: Checkpoint, location: str, after: tuple[Any, ...] | None, body: str | None = None
    ) -> None:
        """``record`` was committed (stored as ``body``). ``after``: the stamp right after it when
        the append found the carried stamp unchanged, or the run check held (None: neither, or
        nothing was carried)."""
        key = (record.ticket_id, record.run_id)
        got = self._runs.pop(key, None)
        if got is None or after is None:
            return
        snap = with_appended(got[0], Stored(detached_copy(record), location, record.content_hash))
        if snap is not None:
            check = got[2]
            if check is not None and body is not None:
                row = (
                    record.phase_ordinal,
                    record.attempt_number,
                    record.phase,
                    record.status,
                    record.content_hash,
                    body,
                )
                check = run_check(snap, (*check.rows, row), check.bodies)
            self.keep(key, snap, after, None if body is None else check)

    def drop(self, key: Key) -> None:
        """Carry nothing for ``key`` (an append was refused or its outcome is unknown)."""
        self._runs.pop(key, None)

    def forget(self) -> None:
        """Carry nothing (the connection was replaced)."""
        self._runs.clear()


# -- the run stamp (PostgreSQL) -----------------------------------------------------------------
# Dialects without a cheap database stamp carry a stamp of the run itself, read in the snapshot's
# round trip (before the run) and checked by the append's INSERT: the count of the run's attempts
# and a sum that weighs each (ordinal, attempt) apart (a prune that removes attempts and an append
# that adds as many still moves it), and the count, greatest name and total name length of the
# entries a snapshot reads (progress events, approvals, the ticket's markers).
_RUN_ROWS = "FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ?"
_RUN_ENTRIES = (
    "FROM phaselog_entries WHERE ticket_id = ? AND ((run_id = ? AND kind IN ('progress', 'approvals')) "
    "OR (run_id = '' AND kind = 'markers'))"
)
_WEIGHT = 1_000_001  # above MAX_ATTEMPT: (ordinal, attempt) -> ordinal * _WEIGHT + attempt is one-to-one
#: A row's version: PostgreSQL's ``xmin`` (the transaction that wrote this version of the row). Any
#: UPDATE of a row, even one that keeps its key, count and name, writes a version newer than every
#: earlier one, so the greatest moves: bytes edited in place are never decided on from memory (D177).
#: The run stamp is read only by dialects without a database stamp, which is PostgreSQL alone.
ROW_VERSION = "xmin::text::bigint"
_RUN_PARTS = (
    f"(SELECT COUNT(*) {_RUN_ROWS})",
    f"(SELECT COALESCE(SUM(phase_ordinal * {_WEIGHT} + attempt), 0) {_RUN_ROWS})",
    f"(SELECT COALESCE(MAX({ROW_VERSION}), 0) {_RUN_ROWS})",
    f"(SELECT COUNT(*) {_RUN_ENTRIES})",
    f"(SELECT COALESCE(MAX(name), '') {_RUN_ENTRIES})",
    f"(SELECT COALESCE(SUM(LENGTH(name)), 0) {_RUN_ENTRIES})",
    f"(SELECT COALESCE(MAX({ROW_VERSION}), 0) {_RUN_ENTRIES})",
)
#: The run stamp, read (``run_stamp_params``).
RUN_STAMP = "SELECT " + ", ".join(_RUN_PARTS)
#: The run stamp as the condition of an INSERT … SELECT … WHERE (``premise_params``).
RUN_STAMP_WHERE = "".join(f" AND {part} = ?" for part in _RUN_PARTS)


def run_stamp_params(ticket_id: str, run_id: str) -> tuple[str, ...]:
    """The parameters of :data:`RUN_STAMP`."""
    return (ticket_id, run_id) * len(_RUN_PARTS)


def run_stamp(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The stamp :data:`RUN_STAMP`'s row makes."""
    return ("run", *(v if isinstance(v, str) else int(v) for v in row or ()))


def is_run_stamp(stamp: tuple[Any, ...]) -> bool:
    """Is ``stamp`` a run stamp (else the database's)?"""
    return bool(stamp) and stamp[0] == "run"


def premise_params(ticket_id: str, run_id: str, stamp: tuple[Any, ...]) -> tuple[Any, ...]:
    """The parameters of :data:`RUN_STAMP_WHERE` for ``stamp``."""
    return tuple(v for value in stamp[1:] for v in (ticket_id, run_id, value))


def bumped(stamp: tuple[Any, ...], record: Checkpoint, version: int) -> tuple[Any, ...]:
    """The run stamp once ``record`` is appended to the run ``stamp`` was read of; ``version``: the
    new row's :data:`ROW_VERSION` (the newest of the run's rows now)."""
    _, count, total, _newest, *entries = stamp
    return ("run", count + 1, total + record.phase_ordinal * _WEIGHT + record.attempt_number, version, *entries)
