"""The SQL stores' retention operations: what ``prune`` (and ``doctor``) need of a SQL store.

Kept apart from the append/read path in :mod:`phaselog.stores.sql.store`. A prune of one run is one
write transaction in which writers are locked out: it reads the run, decides, writes its note and
deletes, and commits all of it or nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from phaselog.model.errors import AlreadyExists, OutcomeUnknown, StoreError
from phaselog.model.ids import validate_ticket_id
from phaselog.stores.base import PruneTarget
from phaselog.stores.kernel import check_run_key, entry_location
from phaselog.stores.names import parse_note_name

if TYPE_CHECKING:
    from phaselog.stores.sql.session import Session, Transaction


def _is_db_error(exc: BaseException) -> bool:
    """An error raised by the database driver (not by phaselog or by the caller's code)."""
    return type(exc).__module__.split(".")[0] in ("sqlite3", "psycopg")


class SqlRetention:
    """Retention on a SQL store (its ``locked_run``, ``put_note``, ``delete_records``, ``remove_run``,
    ``finish_removals``), over the store's session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.dialect = session.dialect

    @property
    def _tx(self) -> Transaction:
        return self.session.current

    # -- retention ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked_run(self, ticket_id: str, run_id: str) -> Iterator[tuple[str, str] | None]:
        """Hold one write transaction with writers locked out (see Retention.locked_run).

        SQLite: ``BEGIN IMMEDIATE`` holds the database's write lock. PostgreSQL: the two record
        tables are locked ``SHARE ROW EXCLUSIVE``, so appends and entries wait (reads do not)
        until the prune of this run commits. Reads through this store inside the block run in
        the transaction and are not retried.
        """
        check_run_key(ticket_id, run_id)
        session = self.session
        if session.held:
            raise StoreError("locked_run() does not nest")
        try:
            conn = session.conn
            self.dialect.begin_write(conn)
        except Exception as exc:
            raise self._as_store_error(exc, "begin the prune") from None
        session.held = True
        ok = False
        try:
            self.dialect.lock_run(conn)
            row = self._tx.one(
                "SELECT (SELECT COUNT(*) FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ?) + "
                "(SELECT COUNT(*) FROM phaselog_entries WHERE ticket_id = ? AND run_id = ?)",
                (ticket_id, run_id, ticket_id, run_id),
            )
            yield (ticket_id, run_id) if row and row[0] else None
            ok = True
        except Exception as exc:
            if not _is_db_error(exc):
                raise
            raise self._as_store_error(exc, f"prune {ticket_id}/{run_id}") from None
        finally:
            session.held = False
            if ok:
                try:
                    conn.commit()
                except Exception as exc:
                    session.reset()
                    raise OutcomeUnknown(
                        f"{self.dialect.name}: the connection failed while committing the prune of "
                        f"{ticket_id}/{run_id}; it was applied whole or not at all — run prune again",
                        path=f"{ticket_id}/{run_id}",
                    ) from exc
            else:
                with contextlib.suppress(Exception):  # the original error matters, not the rollback's
                    conn.rollback()

    def _as_store_error(self, exc: BaseException, what: str) -> StoreError:
        if self.dialect.is_transient(exc):
            self.session.reset()
        return StoreError(f"{self.dialect.name}: cannot {what}: {str(exc).strip()}")

    def _in_prune(self, handle: object) -> tuple[str, str]:
        if not self.session.held or not isinstance(handle, tuple) or len(handle) != 2:
            raise StoreError("a prune operation needs the handle of locked_run()")
        return handle[0], handle[1]

    def put_note(self, handle: object, name: str, body: bytes) -> str:
        """Insert a prune note (inside locked_run)."""
        tid, rid = self._in_prune(handle)
        if parse_note_name(name) is None:
            raise StoreError(f"{name!r} is not a prune note name")
        rel = entry_location("pruned", tid, rid, name)
        taken = self._tx.one(
            "SELECT 1 FROM phaselog_entries WHERE kind = 'pruned' AND ticket_id = ? AND run_id = ? AND name = ?",
            (tid, rid, name),
        )
        if taken:
            raise AlreadyExists(f"{rel} already exists", path=rel)
        self._tx.execute(
            "INSERT INTO phaselog_entries (kind, ticket_id, run_id, name, body) VALUES ('pruned', ?, ?, ?, ?)",
            (tid, rid, name, body.decode("utf-8")),
        )
        return rel

    def delete_records(
        self, handle: object, records: Sequence[PruneTarget], entries: Sequence[tuple[str, str]]
    ) -> tuple[int, int]:
        """Delete rows (inside locked_run): a record only while it still has the hash decided on."""
        tid, rid = self._in_prune(handle)
        count = freed = 0
        where = "ticket_id = ? AND run_id = ? AND phase_ordinal = ? AND attempt = ? AND content_hash = ?"
        for r in records:
            k = (tid, rid, r.phase_ordinal, r.attempt_number, r.content_hash)
            row = self._tx.one(f"SELECT LENGTH(body) FROM phaselog_checkpoints WHERE {where}", k)
            if row:
                self._tx.execute(f"DELETE FROM phaselog_checkpoints WHERE {where}", k)
                freed += int(row[0])
                count += 1
        for kind, name in entries:
            if kind not in ("progress", "approvals", "logs"):
                raise StoreError(f"prune does not delete {kind} entries")
            e = (kind, tid, rid, name)
            ewhere = "kind = ? AND ticket_id = ? AND run_id = ? AND name = ?"
            row = self._tx.one(f"SELECT LENGTH(body) FROM phaselog_entries WHERE {ewhere}", e)
            if row:
                self._tx.execute(f"DELETE FROM phaselog_entries WHERE {ewhere}", e)
                freed += int(row[0])
                count += 1
        return count, freed

    def remove_run(self, handle: object) -> int:
        """Delete every row of the run (inside locked_run: all of it or, on any error, none)."""
        tid, rid = self._in_prune(handle)
        freed = 0
        for table in ("phaselog_checkpoints", "phaselog_entries"):
            row = self._tx.one(
                f"SELECT COALESCE(SUM(LENGTH(body)), 0) FROM {table} WHERE ticket_id = ? AND run_id = ?", (tid, rid)
            )
            freed += int(row[0]) if row else 0
            self._tx.execute(f"DELETE FROM {table} WHERE ticket_id = ? AND run_id = ?", (tid, rid))
        return freed

    def finish_removals(self, ticket_id: str) -> list[dict[str, object]]:
        """Nothing to finish: a SQL prune is one transaction."""
        validate_ticket_id(ticket_id)
        return []
