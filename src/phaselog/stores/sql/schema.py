"""The SQL stores' schema (its version and migrations) and the dialect seam.

The schema is the same on every database; a :class:`Dialect` says only what differs between
them (connecting, placeholders, locking, error classification). ``stores/sqlite.py`` and
``stores/postgres.py`` fill it in; ``stores/sql.py`` is the store over it.
"""

from __future__ import annotations

from typing import Any

from phaselog.model.errors import StoreError
from phaselog.stores import manifests
from phaselog.stores.sql import lease as sql_lease
from phaselog.stores.sql import quarantine as sql_quarantine
from phaselog.stores.sql.queue import rows as sql_queue

#: The schema version this code writes and understands.
SCHEMA_VERSION = 7

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE IF NOT EXISTS phaselog_checkpoints (
            ticket_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            phase_ordinal INTEGER NOT NULL,
            phase TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            prev_attempt INTEGER NOT NULL,
            status TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (ticket_id, run_id, phase_ordinal, attempt),
            UNIQUE (ticket_id, run_id, phase_ordinal, prev_attempt)
        )""",
        """CREATE TABLE IF NOT EXISTS phaselog_entries (
            kind TEXT NOT NULL,
            ticket_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (kind, ticket_id, run_id, name)
        )""",
        """CREATE TABLE IF NOT EXISTS phaselog_guard_state (
            name TEXT PRIMARY KEY,
            body TEXT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS phaselog_guard_lease (
            name TEXT PRIMARY KEY,
            fencing_token BIGINT NOT NULL,
            holder TEXT
        )""",
        """CREATE TABLE IF NOT EXISTS phaselog_guard_history (
            name TEXT NOT NULL,
            seq INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (name, seq)
        )""",
    ],
    # Run leases (the runner): one row per run with its fencing token; see stores/sql_lease.py.
    2: [sql_lease.MIGRATION],
    # The queue of runs that workers drain (PostgreSQL; empty elsewhere); see stores/sql_queue.py.
    3: sql_queue.MIGRATION,
    # Recorded pipeline manifests, content-addressed: see stores/manifests.py.
    4: [manifests.SQL_MIGRATION],
    # A covering index for the run snapshot's per-phase aggregate (stores/sql_snapshot.py): a write
    # or a status reads the index, never a row per attempt (decisions: "A phase summary").
    5: [
        "CREATE INDEX IF NOT EXISTS phaselog_checkpoints_summary "
        "ON phaselog_checkpoints (ticket_id, run_id, phase_ordinal, phase, attempt, status)"
    ],
    # Where `doctor --quarantine` moves damaged rows, append-only: see stores/sql_quarantine.py (D117).
    6: sql_quarantine.MIGRATION,
    # The name a submitted run was given (`submit --run-id w49`), kept with its queue row so that
    # the queue, the worker and the run's checkpoints show it (decisions: D93).
    7: sql_queue.MIGRATION_7,
}


class Dialect:
    """What differs between databases. Subclasses fill it in."""

    name = "sql"
    placeholder = "?"
    #: Appended to ORDER BY on text columns, so that every store orders by code point (as the
    #: files store's sorted() does) whatever the database's collation.
    collate = ""

    def connect(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    #: A statement costs a network round trip: prefer one bigger query over two small ones.
    round_trips_dear = True
    #: An append without a fence may be one autocommitted statement (stores/sql_append.py).
    append_at_once = False
    #: The driver sends several statements in one round trip (``conn.pipeline()``, psycopg 3).
    pipelines = False

    #: Set by the store: refuse every write transaction (see check_writable).
    read_only = False

    def check_writable(self) -> None:
        """StoreError (rule ``read_only``) when the store was opened read-only."""
        if self.read_only:
            raise StoreError(f"{self.describe()} is open read-only: nothing can be written", rule="read_only")

    def begin_write(self, conn: Any) -> None:
        """Start a transaction that will write."""
        self.check_writable()
        conn.execute("BEGIN")

    def lock_for_migration(self, conn: Any) -> None:
        """Serialise concurrent migrations (inside the migration transaction)."""

    def lock_run(self, conn: Any) -> None:
        """Inside a write transaction: make appends and audit entries wait until it ends."""

    def is_unique_violation(self, exc: BaseException) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def is_transient(self, exc: BaseException) -> bool:
        """A retryable error (lost connection, serialisation failure, busy)."""
        return False

    def is_missing_schema(self, exc: BaseException) -> bool:  # pragma: no cover - abstract
        """The error says phaselog's tables do not exist (yet)."""
        raise NotImplementedError

    def exists(self) -> bool:
        """Whether the database itself exists, known without connecting (SQLite: the file)."""
        return True

    def prepare_create(self) -> None:
        """Get ready to create the database on the next connection (SQLite: its folder)."""

    def create_schema(self, conn: Any) -> None:
        """Create the namespace phaselog's tables live in, inside the migration transaction."""

    def before_close(self, conn: Any) -> None:
        """Last words on a connection about to close (SQLite: checkpoint the WAL)."""

    def translate(self, exc: BaseException) -> Exception | None:
        """The typed error for a driver error that is neither a unique violation nor transient."""
        return None

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError
