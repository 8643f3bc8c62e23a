"""The checkpoint rows of a SQL store: appending them, and reading them back whole or in pages.

Append-only and "one writer wins" come from constraints, not from reads:

* ``PRIMARY KEY (ticket_id, run_id, phase_ordinal, attempt)``: a duplicate attempt is refused;
* ``UNIQUE (ticket_id, run_id, phase_ordinal, prev_attempt)``: every attempt has at most one
  successor, so the attempts of a phase form one chain and a writer that read a stale "latest"
  loses with a conflict instead of forking the chain.

An append is one write transaction (read the phase's latest attempt, decide, insert). Where a
round trip is dear (PostgreSQL) and there is no fence to check, one autocommitted statement does
the same first: it inserts only while the phase's latest attempt is still the one the writer
read, and ``ON CONFLICT DO NOTHING`` turns a duplicate or a second successor into "nothing
inserted"; only then does the transaction run, whose read says why (AlreadyExists or Conflict).

Listings read ``PAGE_ROWS`` rows at a time, each page starting after the last key of the one
before (keyset paging): each page is one short read of its own, retried like any read, holding no
transaction open while the caller works on the rows (a server-side cursor would pin a snapshot,
and on PostgreSQL would not survive the rollback that ends each read). Records are append-only and
the key is unique, so paging neither repeats nor skips a record that existed when the listing
began (see docs/decisions.md, "streamed output").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import AlreadyExists, Conflict, Corrupt, NotFound, OutcomeUnknown, UnsupportedVersion
from phaselog.model.ids import validate_ticket_id
from phaselog.stores import kernel
from phaselog.stores.base import AttemptRef, Damaged, RunFence, Stored
from phaselog.stores.sql import carried, lease, manifests
from phaselog.stores.sql.carried import ROW_VERSION, RUN_STAMP_WHERE, CarriedRuns

if TYPE_CHECKING:
    from phaselog.model.records import Checkpoint
    from phaselog.stores.manifests import ManifestDoc
    from phaselog.stores.sql.session import Rows, Session, Transaction

PAGE_ROWS = 500

_INSERT = (
    "INSERT INTO phaselog_checkpoints (ticket_id, run_id, phase_ordinal, phase, attempt, prev_attempt, status, "
    "content_hash, body) "
)
_VALUES = "?, ?, ?, ?, ?, ?, ?, ?, ?"
#: The append's insert, inside its transaction (after its read decided it may).
_INSERT_ROW = f"{_INSERT}VALUES ({_VALUES})"
#: The same insert in one autocommitted statement: only while the phase's latest is still the one read.
_INSERT_AT_ONCE = (
    f"{_INSERT}SELECT {_VALUES} WHERE COALESCE((SELECT MAX(attempt) FROM "
    "phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ?), 0) = ? "
    "ON CONFLICT DO NOTHING RETURNING 1"
)
_AT_ONCE_WHERE, _AT_ONCE_TAIL = _INSERT_AT_ONCE.split(" ON CONFLICT ")
#: :data:`_INSERT_AT_ONCE` that also checks the newest attempt's hash and the whole run's stamp
#: (stores/sql/carried.py): the write decided on a carried snapshot is one statement.
_INSERT_PREMISED = (
    f"{_AT_ONCE_WHERE} AND (SELECT content_hash FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
    f"AND phase_ordinal = ? AND attempt = ?) IS NOT DISTINCT FROM ?{RUN_STAMP_WHERE} ON CONFLICT "
    + _AT_ONCE_TAIL.replace("RETURNING 1", f"RETURNING {ROW_VERSION}")
)
#: The new row's version (the run stamp's newest), read after an insert in a transaction.
_ROW_VERSION_OF = (
    f"SELECT {ROW_VERSION} FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ? "
    "AND attempt = ?"
)
#: The fence as a condition of the premised insert (``lock``: the dialect's share lock).
_FENCED = (
    " AND EXISTS (SELECT 1 FROM phaselog_run_leases WHERE ticket_id = ? AND run_id = ? AND fencing_token = ? "
    "AND holder IS NOT NULL{lock})"
)
# One round trip, two primary-key lookups (no scan: attempt 1,000 costs what attempt 2 does): the
# phase's latest attempt, and this attempt's hash if it exists (NULL: no such row).
_LATEST_AND_MINE = (
    "SELECT (SELECT MAX(attempt) FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
    "AND phase_ordinal = ?), (SELECT content_hash FROM phaselog_checkpoints WHERE ticket_id = ? "
    "AND run_id = ? AND phase_ordinal = ? AND attempt = ?)"
)

#: The phase's ordinal: its first attempt, in (ordinal, attempt) order, named by name or ordinal.
_ORDINAL = (
    "(SELECT phase_ordinal FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
    "AND (phase = ? OR phase_ordinal = ?) ORDER BY phase_ordinal LIMIT 1)"
)
_PHASE_ROWS = (
    "SELECT phase_ordinal, attempt, phase, status, content_hash, body FROM phaselog_checkpoints "
    f"WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = {_ORDINAL} AND attempt "
)
# Scalar subqueries, not a WITH clause: SQLite materialises a CTE (twice the time of both reads).
_PHASE_LATEST = (
    f"{_PHASE_ROWS}>= (SELECT attempt FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
    f"AND phase_ordinal = {_ORDINAL} AND status = 'completed' ORDER BY attempt DESC LIMIT 1) ORDER BY attempt"
)
_PHASE_ONE = f"{_PHASE_ROWS}= ?"

Query = Callable[[str, Sequence[Any]], "Rows"]


def _links_to_newest(tx: Transaction, record: Checkpoint, newest: int) -> bool:
    """Is ``record.prev_hash`` the hash of the phase's attempt ``newest`` (0: none, and no prev_hash)?"""
    if not newest:
        return record.prev_hash is None
    row = tx.one(
        "SELECT content_hash FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ? "
        "AND attempt = ?",
        (record.ticket_id, record.run_id, record.phase_ordinal, newest),
    )
    return row is not None and row[0] == record.prev_hash


def _row(record: Checkpoint, expected_latest: int, body: str) -> tuple[Any, ...]:
    """The values of ``_INSERT``'s columns for ``record``."""
    key = (record.ticket_id, record.run_id, record.phase_ordinal)
    return (*key, record.phase, record.attempt_number, expected_latest, record.status, record.content_hash, body)


def paged_by_key(
    query: Query,
    select: str,
    params: Sequence[Any],
    collate: str,
    *,
    key: tuple[int, int, int],
    page: int | None = None,
) -> Iterator[tuple[Any, ...]]:
    """Rows of ``select`` (a ``SELECT … WHERE …`` without ORDER BY) in (run_id, phase_ordinal,
    attempt) order, ``page`` (default :data:`PAGE_ROWS`) at a time; ``key`` gives those columns'
    positions in a row."""
    page = PAGE_ROWS if page is None else page
    order = f" ORDER BY run_id{collate}, phase_ordinal, attempt LIMIT {int(page)}"
    after = f" AND (run_id{collate} > ? OR (run_id = ? AND (phase_ordinal > ? OR (phase_ordinal = ? AND attempt > ?))))"
    rows = query(select + order, list(params))
    while rows:
        yield from rows
        if len(rows) < page:
            return
        last = rows[-1]
        run, ordinal, attempt = last[key[0]], last[key[1]], last[key[2]]
        rows = query(select + after + order, [*params, run, run, ordinal, ordinal, attempt])


class SqlCheckpoints:
    """The ``phaselog_checkpoints`` table (see the module docstring)."""

    def __init__(self, session: Session, max_record_bytes: int) -> None:
        self.session = session
        self.max_record_bytes = max_record_bytes
        #: Records decoded before, by (ordinal, row body): a row read again is not decoded again.
        self._decoded = kernel.DecodedRecords()
        #: The snapshot of each run this handle last saw, with its change stamp (stores/sql/carried.py).
        self.carried = CarriedRuns(session)

    # -- appending ------------------------------------------------------------------------------------
    def append(
        self,
        record: Checkpoint,
        *,
        expected_latest: int,
        fence: RunFence | None = None,
        manifest: ManifestDoc | None = None,
    ) -> str:
        """Append ``record`` (see Store.append): constraints decide, the first writer wins."""
        kernel.check_record_key(record)
        body = kernel.encode_record(record, self.max_record_bytes).decode()
        key = (record.ticket_id, record.run_id, record.phase_ordinal)
        location = kernel.record_location(record)
        session = self.session
        dialect = session.dialect
        # The stamp of the carried snapshot this record was decided on (stores/sql/carried.py).
        premise = self.carried.premise_for(record, expected_latest)
        run_premise = premise is not None and carried.is_run_stamp(premise)
        # SQLite: the run check carried with the snapshot (stores/sql/runcheck.py), asked when the
        # database moved since: another writer's commit to another run is no reason to read this one.
        check = self.carried.check_for(key[:2]) if premise is not None and not run_premise else None
        after: list[tuple[Any, ...] | None] = [None]

        def insert(tx: Transaction) -> None:
            after[0] = None
            # In the transaction (SQLite: under the write lock): did anyone write since it was read?
            now = None
            if premise is not None:
                now = (
                    carried.run_stamp(tx.one(carried.RUN_STAMP, carried.run_stamp_params(*key[:2])))
                    if run_premise
                    else dialect.change_stamp(tx.conn)
                )
            unmoved = premise is not None and now == premise
            if premise is not None and not run_premise and unmoved and record.attempt_number > expected_latest:
                # Nothing at all was written since the carried snapshot was read (the database's
                # stamp, under the write lock), and premise_for matched it: the phase's latest is
                # expected_latest (its hash the record's prev_hash) and no attempt above it exists.
                # What a read of them would say is known exactly; the fence is still checked here.
                latest, existing = expected_latest, None
            else:
                latest, existing = tx.one(_LATEST_AND_MINE, (*key, *key, record.attempt_number)) or (None, None)
                if check is not None and not unmoved and existing is None:
                    # The database moved: did this run? (A duplicate is decided first, below, so a
                    # retry after a lost commit still finds its own record.)
                    if not check.holds(tx, *key[:2]):
                        raise Conflict(f"run {record.run_id} changed since it was read", latest_attempt=latest or 0)
                    unmoved = True  # nothing in this run moved: what was carried plus this record is the run
            try:
                kernel.decide_append(
                    record,
                    exists=existing is not None,
                    latest=latest or 0,
                    expected_latest=expected_latest,
                    check_fence=None if fence is None else lambda: lease.check_fence(tx, fence),
                )
            except AlreadyExists as exc:
                exc.context["_same"] = existing == record.content_hash
                raise
            if run_premise and (now != premise or not _links_to_newest(tx, record, expected_latest)):
                # The record was decided on a run that moved since (or whose newest attempt changed).
                raise Conflict(f"run {record.run_id} changed since it was read", latest_attempt=latest or 0)
            if manifest is not None:  # in the same transaction: a record never lacks its manifest
                manifests.insert(tx, manifest)
            tx.execute(_INSERT_ROW, _row(record, expected_latest, body))
            if unmoved and now is not None and premise is not None:
                # Nothing moved (or nothing in this run: the run check held): the carried snapshot
                # plus this record is the run (our own insert counted in total_changes, as the
                # commit leaves our own data_version alone).
                if run_premise:
                    row = tx.one(_ROW_VERSION_OF, (*key, record.attempt_number))
                    after[0] = None if row is None else carried.bumped(premise, record, int(row[0]))
                else:
                    after[0] = dialect.change_stamp(tx.conn, now[-1])

        def attempt_once() -> None:
            if manifest is None and dialect.round_trips_dear and dialect.append_at_once:
                at_once = (*_row(record, expected_latest, body), *key, expected_latest)
                if premise is not None and run_premise:
                    # One round trip: the insert itself checks the whole run's premise, the phase's
                    # newest attempt's hash (the record's prev_hash) and the fence (its lease row
                    # share-locked until the statement commits, as check_fence does in a transaction).
                    premised = (
                        *at_once,
                        *key,
                        expected_latest,
                        record.prev_hash,
                        *carried.premise_params(*key[:2], premise),
                    )
                    text = _INSERT_PREMISED
                    if fence is not None:
                        text = text.replace(" ON CONFLICT ", _FENCED.format(lock=dialect.for_share) + " ON CONFLICT ")
                        premised = (*premised, fence.ticket_id, fence.run_id, fence.token)
                    row = session.autocommit(text, premised)
                    if row is not None:
                        after[0] = carried.bumped(premise, record, int(row[0]))
                        return
                elif fence is None and session.autocommit(_INSERT_AT_ONCE, at_once) is not None:
                    return  # else the transaction below reads why (and inserts if it now may)
            try:
                session.write(insert)
            except Exception as exc:
                if dialect.is_unique_violation(exc):
                    # A concurrent writer got there between our read and our insert.
                    raise Conflict(f"phase {record.phase} changed while writing") from None
                raise

        try:
            return self._append_tries(record, location, attempt_once, after, body)
        except BaseException:
            self.carried.drop(key[:2])  # refused or unknown: the next write reads the run again
            raise

    def _append_tries(
        self,
        record: Checkpoint,
        location: str,
        attempt_once: Callable[[], None],
        after: list[tuple[Any, ...] | None],
        body: str,
    ) -> str:
        """``attempt_once()`` until it is decided (retried after transient errors)."""
        dialect = self.session.dialect
        for i in range(5):
            try:
                attempt_once()
                self.carried.appended(record, location, after[0], body)
                return location
            except AlreadyExists as exc:
                if exc.context.pop("_same", False) and i > 0:
                    return location  # our own insert, whose commit we did not hear about
                exc.context.pop("_same", None)
                raise
            except Exception as exc:
                if not dialect.is_transient(exc):
                    raise
                # Commit outcome unknown (connection lost): the next round's read decides by content hash.
                self.session.reset()
                time.sleep(0.05 * (2**i))
        raise OutcomeUnknown(
            f"{dialect.name}: the database stopped answering while {location} was being written; it may or "
            "may not be stored — read it back before writing again",
            path=location,
        )

    # -- reading --------------------------------------------------------------------------------------
    def attempts(self, ticket_id: str, run_id: str) -> list[AttemptRef]:
        """Every committed attempt of a run, sorted by (phase ordinal, attempt)."""
        validate_ticket_id(ticket_id)
        rows = self.session.query(
            "SELECT phase_ordinal, attempt, phase, status FROM phaselog_checkpoints WHERE ticket_id = ? "
            "AND run_id = ? ORDER BY phase_ordinal, attempt",
            (ticket_id, run_id),
        )
        return [AttemptRef(r[0], r[1], r[2], r[3] == "completed") for r in rows]

    def get(self, ticket_id: str, run_id: str, phase_ordinal: int, phase: str, attempt: int) -> Stored:
        """Read one record."""
        validate_ticket_id(ticket_id)
        rows = self.session.query(
            "SELECT phase, status, content_hash, body FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
            "AND phase_ordinal = ? AND attempt = ?",
            (ticket_id, run_id, phase_ordinal, attempt),
        )
        if not rows or rows[0][0] != phase:
            raise NotFound(
                f"no attempt {attempt} of phase {phase} in run {run_id}",
                path=kernel.attempt_location(ticket_id, run_id, phase_ordinal, phase, attempt, completed=True),
            )
        return self.stored(ticket_id, run_id, phase_ordinal, phase, attempt, rows[0][1], rows[0][3], rows[0][2])

    def read_phase(self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None) -> Stored | None:
        """Attempt ``attempt`` of ``phase``, or (None) its latest checkpoint, in one statement; None
        unless plainly there and intact (the caller then takes its general path, whose errors and
        hints are unchanged).

        The statement finds the phase as a listing would (the first attempt, in (ordinal, attempt)
        order, whose phase name or ordinal is the one asked for), then its newest completed attempt
        and every newer one (a failed attempt newer than the checkpoint is read too: if it is
        damaged, the older checkpoint is not the latest)."""
        validate_ticket_id(ticket_id)
        text = str(phase)
        ordinal = int(text) if text.isascii() and text.isdigit() and str(int(text)) == text else -1
        name = phase if isinstance(phase, str) else None
        phase_key = (ticket_id, run_id, ticket_id, run_id, name, ordinal)
        if attempt is None:
            rows = self.session.query(_PHASE_LATEST, (*phase_key, *phase_key))
            if not rows or rows[0][3] != "completed":
                return None
        else:
            rows = self.session.query(_PHASE_ONE, (*phase_key, attempt))
            if not rows:
                return None
        try:
            # Not kept in the memo: a read takes each record once; the memo is for what a status or
            # a write reads again (a hit is still taken).
            found = [self.stored(ticket_id, run_id, o, p, a, s, body, h, keep=False) for o, a, p, s, h, body in rows]
        except (Corrupt, UnsupportedVersion):
            return None  # the caller's general path reads it again and says what is wrong, and where
        return found[0]

    def iter_records(self, ticket_id: str, run_id: str | None = None) -> Iterator[Stored | Damaged]:
        """Yield records in (run, phase ordinal, attempt) order, in pages; damaged ones as Damaged."""
        validate_ticket_id(ticket_id)
        sql = (
            "SELECT run_id, phase_ordinal, phase, attempt, status, body, content_hash FROM phaselog_checkpoints "
            "WHERE ticket_id = ?"
        )
        params: list[Any] = [ticket_id]
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        rows = paged_by_key(self.session.query, sql, params, self.session.dialect.collate, key=(0, 1, 3))
        for rid, ordinal, phase, attempt, status, body, column_hash in rows:
            try:
                # Not kept in the memo (as read_phase's): a listing reads each record once, and
                # keeping one costs a copy of its payload (D195); a hit is still taken.
                yield self.stored(ticket_id, rid, ordinal, phase, attempt, status, body, column_hash, keep=False)
            except (Corrupt, UnsupportedVersion) as exc:
                yield kernel.damaged_from(exc, ticket_id, rid, ordinal, phase, attempt)

    def stored(
        self,
        ticket_id: str,
        run_id: str,
        ordinal: int,
        phase: str,
        attempt: int,
        status: str,
        body: str,
        column_hash: str | None,
        *,
        keep: bool = True,
        shared: bool = False,
    ) -> Stored:
        """The record of one row, checked (Corrupt when its body or its key columns are damaged);
        ``keep``: remember it decoded (the memo), for a caller that reads the run again; ``shared``:
        the memo and the caller hold one record, never handed to a user uncopied (a run snapshot's;
        D192)."""
        location = kernel.attempt_location(ticket_id, run_id, ordinal, phase, attempt, completed=status == "completed")
        stored = self._decoded.get(ordinal, body, location, copy=not shared)
        kept = stored is not None
        if stored is None:
            doc = kernel.decode_document(body.encode("utf-8"), location)
            stored = kernel.record_from_document(doc, ordinal, location)
        kernel.check_identity(stored, ticket_id, run_id, ordinal, phase, attempt)
        cp = stored.record
        # The key columns decide what readers see without reading the body (attempts() lists the
        # status column): each must say what the hashed body says, or the row is damaged.
        if status != cp.status or column_hash != stored.recorded_hash:
            column, value = ("status", status) if status != cp.status else ("content_hash", column_hash)
            raise Corrupt(
                f"{location}: the row's {column} column ({str(value)[:20]!r}) differs from its hashed content",
                path=location,
                rule="row_mismatch",
            )
        if keep and not kept and stored.recorded_hash is not None:
            self._decoded.put(ordinal, body, stored, copy=not shared)
        return stored
