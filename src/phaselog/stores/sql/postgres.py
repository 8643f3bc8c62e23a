"""The PostgreSQL store: many machines sharing runs.

Uniqueness is enforced by constraints (``INSERT`` refused on conflict: the first writer wins);
every value is a bound parameter; transient errors (lost connection, serialisation failure,
deadlock) are retried with backoff, and a write whose commit outcome is unknown is resolved by
reading the record back by its content hash (its idempotency key). ``?schema=NAME`` in the URL
keeps phaselog's tables in their own schema (created with the store, by its first write or by
``phaselog store migrate``).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from phaselog.model.errors import Corrupt, StoreError, UsageError
from phaselog.stores.base import Capability
from phaselog.stores.sql.dialect import Dialect
from phaselog.stores.sql.queue import claim as _queue  # noqa: F401  # the queue subscribes to judgements (events)
from phaselog.stores.sql.queue.rows import SqlQueue
from phaselog.stores.sql.store import SQL_CAPABILITIES, SqlStore
from phaselog.stores.urls import bad_url, parse_store_url

if TYPE_CHECKING:
    from phaselog.stores.sql.queue.rows import SqlQueue

_MIGRATION_LOCK = 0x7068_6C67  # "phlg": advisory lock id that serialises migrations
#: The channel migration 8's trigger notifies, with "schema:ticket/run" of a run that gained a record.
FEED_CHANNEL = "phaselog_feed"


def _psycopg() -> Any:
    try:
        import psycopg  # lazy: the postgres extra may be absent
    except ImportError:
        raise UsageError(
            "the PostgreSQL store needs psycopg 3: pip install 'phaselog[postgres]' (or psycopg[binary])",
            field="store",
            rule="missing_dependency",
        ) from None
    return psycopg


def split_url(url: str) -> tuple[str, str | None]:
    """Remove phaselog's own ``schema`` parameter from a postgresql:// URL (others kept verbatim)."""
    spec = parse_store_url(url)
    if spec.kind != "postgresql" or spec.dsn is None:
        raise UsageError(f"not a PostgreSQL URL: {url}", field="store")
    return spec.dsn, spec.schema


class PostgresDialect(Dialect):
    """PostgreSQL specifics."""

    name = "postgresql"
    append_at_once = True  # one round trip instead of four (stores/sql/checkpoints.py)
    pipelines = True  # psycopg 3's pipeline mode: the snapshot's two reads in one round trip
    placeholder = "%s"
    collate = ' COLLATE "C"'
    now = "EXTRACT(EPOCH FROM clock_timestamp())::double precision"
    for_update = " FOR UPDATE"
    for_share = " FOR SHARE"

    def __init__(self, url: str) -> None:
        self.dsn, self.schema = split_url(url)
        self.psycopg = _psycopg()
        try:
            # libpq's own parser: unknown parameters and bad values are named before any connection.
            self.psycopg.conninfo.conninfo_to_dict(self.dsn)
        except self.psycopg.ProgrammingError as exc:
            raise bad_url(url, str(exc).strip().rstrip(".")) from None

    def connect(self) -> Any:
        try:
            # Autocommit: a read is one round trip (no BEGIN before it, no ROLLBACK after it);
            # writes open their transaction explicitly (begin_write) and end it with COMMIT/ROLLBACK.
            # A store opened read-only gets a read-only session: the server refuses any write.
            extra = {"options": "-c default_transaction_read_only=on"} if self.read_only else {}
            conn = self.psycopg.connect(self.dsn, autocommit=True, connect_timeout=10, **extra)
        except self.psycopg.OperationalError as exc:
            raise StoreError(
                f"cannot connect to PostgreSQL at {self.describe()}: {str(exc).strip()}", rule="connect"
            ) from None
        except self.psycopg.Error as exc:
            raise UsageError(
                f"store URL {self.describe()}: {str(exc).strip()}", field="store", rule="store_url"
            ) from None
        if self.schema:
            # Only points at the schema (which may not exist yet): creating it is a write.
            conn.execute(f'SET search_path TO "{self.schema}"')  # validated identifier
        return conn

    def create_schema(self, conn: Any) -> None:
        if self.schema:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')  # validated identifier

    def begin_write(self, conn: Any) -> None:
        """Open the write transaction (the connection is in autocommit mode; psycopg's commit()
        and rollback() end it, as they act on the server's transaction status)."""
        self.check_writable()
        conn.execute("BEGIN")

    def lock_for_migration(self, conn: Any) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))

    def lock_run(self, conn: Any) -> None:
        # Appends and entries take ROW EXCLUSIVE, which this mode excludes; reads are not blocked.
        # No writer holds both tables' locks, so taking them in this order cannot deadlock.
        conn.execute("LOCK TABLE phaselog_checkpoints, phaselog_entries IN SHARE ROW EXCLUSIVE MODE")

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, self.psycopg.errors.UniqueViolation)

    def is_missing_schema(self, exc: BaseException) -> bool:
        return isinstance(exc, self.psycopg.errors.UndefinedTable)

    def is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, StoreError) and exc.context.get("rule") == "connect":
            return True  # a (re)connection refused while the server restarts: retried with backoff
        errors = self.psycopg.errors
        return isinstance(
            exc,
            self.psycopg.OperationalError
            | errors.SerializationFailure
            | errors.DeadlockDetected
            | errors.AdminShutdown,
        ) and not isinstance(exc, errors.UndefinedTable | errors.DiskFull | errors.InsufficientPrivilege)

    def translate(self, exc: BaseException) -> Exception | None:
        """Typed errors for the database's refusals; None for what is not a psycopg error."""
        if not isinstance(exc, self.psycopg.Error):
            return None
        errors = self.psycopg.errors
        where = self.describe()
        text = str(exc).strip()
        if isinstance(exc, errors.DiskFull | errors.OutOfMemory | errors.ProgramLimitExceeded):
            return StoreError(f"{where}: the database is out of space; nothing was written ({text})", rule="disk_full")
        if isinstance(exc, errors.InsufficientPrivilege):
            return StoreError(f"{where}: permission denied ({text})", rule="permission")
        if isinstance(exc, errors.ReadOnlySqlTransaction):
            return StoreError(f"{where} is read-only; nothing was written ({text})", rule="read_only")
        if isinstance(exc, errors.DataCorrupted | errors.IndexCorrupted):
            return Corrupt(f"{where}: the database reports damage ({text})", rule="database_corrupt")
        if isinstance(exc, errors.UndefinedTable | errors.UndefinedColumn | errors.DatatypeMismatch):
            return StoreError(
                f"{where}: phaselog's tables are missing or were altered behind its back ({text}); restore them "
                f"from a backup (`phaselog store migrate` recreates missing tables)",
                rule="schema_mismatch",
            )
        return StoreError(f"{where}: PostgreSQL error: {text}", rule="postgresql")

    def describe(self) -> str:
        parts = urlsplit(self.dsn)
        try:
            host = parts.hostname or "localhost"
            port = parts.port or 5432
        except ValueError:  # multi-host URLs: show them as written
            return f"postgresql://{parts.netloc.rpartition('@')[2]}{parts.path}"
        where = f"{host}:{port}{parts.path}"
        return f"postgresql://{where}" + (f"?schema={self.schema}" if self.schema else "")


class FeedListener:
    """A connection of its own, in autocommit, in ``LISTEN phaselog_feed`` (``Capability.CHANGE_WAIT``).

    Only this store's schema wakes it (tests and tenants share a database). A dropped connection
    is one wake-up (the follower reads again: what changed while nobody listened is not missed),
    and the next wait listens anew (or sleeps, while the server is away). See D207.
    """

    def __init__(self, dialect: PostgresDialect) -> None:
        self._dialect = dialect
        self._conn: Any = None
        self._schema = ""
        self._listen()

    def _listen(self) -> None:
        conn = self._dialect.connect()
        try:
            conn.execute(f"LISTEN {FEED_CHANNEL}")  # a constant identifier
            row = conn.execute("SELECT current_schema()").fetchone()
        except self._dialect.psycopg.Error:
            conn.close()
            raise
        self._schema = self._dialect.schema or (row[0] if row and row[0] else "public")
        self._conn = conn

    def wait(self, timeout: float) -> bool:
        if self._conn is None:
            try:
                self._listen()
            except (StoreError, UsageError, self._dialect.psycopg.Error):
                time.sleep(max(0.0, timeout))
                return False
            return True  # listening again: a change while nobody listened would be lost otherwise
        prefix = self._schema + ":"
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            while (left := deadline - time.monotonic()) > 0:
                woke = [n for n in self._conn.notifies(timeout=left, stop_after=1) if n.payload.startswith(prefix)]
                if woke:
                    return True
            return False
        except self._dialect.psycopg.Error:
            self.close()
            return True

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(self._dialect.psycopg.Error):  # already gone: nothing to let go of
                conn.close()


class PostgresStore(SqlStore):
    """Checkpoints in a PostgreSQL database."""

    capabilities = SQL_CAPABILITIES | {Capability.QUEUE, Capability.CHANGE_WAIT}

    def change_waiter(self) -> FeedListener:
        """A waiter that wakes when a run of this store gains a record (``Capability.CHANGE_WAIT``)."""
        return FeedListener(self._pg)

    def __init__(self, url: str, **kw: Any) -> None:
        self._pg = PostgresDialect(url)
        super().__init__(url, self._pg, **kw)

    def run_queue(self) -> SqlQueue:
        """The queue of runs that workers drain (``Capability.QUEUE``)."""

        return SqlQueue(self)
