"""The audit entries of a SQL store: rows of ``phaselog_entries (kind, ticket_id, run_id, name, body)``.

Progress events, approvals, marker revisions and prune notes are entries: named, created if absent
(the primary key refuses a taken name), never replaced. A write whose commit was not heard about
is retried and recognised by its own body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from phaselog.model.errors import AlreadyExists, Corrupt, StoreError
from phaselog.stores import kernel

if TYPE_CHECKING:
    from phaselog.stores.sql.session import Session, Transaction


class SqlEntries:
    """The ``phaselog_entries`` table."""

    def __init__(self, session: Session, max_record_bytes: int) -> None:
        self.session = session
        self.max_record_bytes = max_record_bytes

    @staticmethod
    def _key(kind: str, ticket_id: str, run_id: str | None) -> tuple[str, str, str]:
        kernel.check_entry_key(kind, ticket_id, run_id)
        return kind, ticket_id, run_id or ""

    def put(self, kind: str, ticket_id: str, run_id: str | None, name: str, body: bytes) -> str:
        """Insert an audit entry; AlreadyExists if the name is taken."""
        key = self._key(kind, ticket_id, run_id)
        kernel.check_entry(name, body, self.max_record_bytes)
        rel = kernel.entry_location(kind, ticket_id, run_id, name)
        text = body.decode("utf-8")

        def insert(tx: Transaction) -> None:
            tx.execute(
                "INSERT INTO phaselog_entries (kind, ticket_id, run_id, name, body) VALUES (?, ?, ?, ?, ?)",
                (*key, name, text),
            )

        for i in range(5):
            try:
                self.session.write(insert)
                return rel
            except Exception as exc:
                if self.session.dialect.is_unique_violation(exc):
                    rows = self.session.query(
                        "SELECT body FROM phaselog_entries WHERE kind = ? AND ticket_id = ? "
                        "AND run_id = ? AND name = ?",
                        (*key, name),
                    )
                    if i > 0 and rows and rows[0][0] == text:
                        return rel  # our own insert whose commit we did not hear about
                    raise AlreadyExists(f"{rel} already exists", path=rel) from None
                if not self.session.dialect.is_transient(exc):
                    raise
                self.session.pause(i)
        raise StoreError(f"{self.session.dialect.name}: could not write {rel} (database unreachable)")

    def names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        """Names of a kind's entries, sorted."""
        order = f"ORDER BY name{self.session.dialect.collate}"  # a fixed collation clause; values are bound
        rows = self.session.query(
            "SELECT name FROM phaselog_entries WHERE kind = ? AND ticket_id = ? AND run_id = ? " + order,
            self._key(kind, ticket_id, run_id),
        )
        return [r[0] for r in rows]

    def read(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind as (name, location, bytes), sorted by name."""
        key = self._key(kind, ticket_id, run_id)
        order = f"ORDER BY name{self.session.dialect.collate}"  # a fixed collation clause; values are bound
        # The prefix is matched in the database, so only the wanted bodies travel (one attempt's
        # progress events, not the whole run's). ``name >= prefix`` (in the ORDER BY's collation:
        # every name with the prefix sorts at or after it) lets the primary key start at the prefix
        # instead of reading the run's every entry; substr() stays the exact test.
        ranged = f"AND name{self.session.dialect.collate} >= ? AND substr(name, 1, ?) = ? "
        where = "WHERE kind = ? AND ticket_id = ? AND run_id = ? " + (ranged if prefix else "")
        params = (*key, prefix, len(prefix), prefix) if prefix else key
        rows = self.session.query("SELECT name, body FROM phaselog_entries " + where + order, params)
        rel_dir = kernel.entry_dir_location(kind, ticket_id, run_id)
        return [(n, f"{rel_dir}/{n}.json", b.encode("utf-8")) for n, b in rows if n.startswith(prefix)]
