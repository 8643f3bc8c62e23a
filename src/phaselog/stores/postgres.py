"""The PostgreSQL store: many machines sharing runs.

Uniqueness is enforced by constraints (``INSERT`` refused on conflict: the first writer wins);
every value is a bound parameter; transient errors (lost connection, serialisation failure,
deadlock) are retried with backoff, and a write whose commit outcome is unknown is resolved by
reading the record back by its content hash (its idempotency key). ``?schema=NAME`` in the URL
keeps phaselog's tables in their own schema (created if missing).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from phaselog.errors import UsageError
from phaselog.stores.sql import Dialect, SqlStore

_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MIGRATION_LOCK = 0x7068_6C67  # "phlg": advisory lock id that serialises migrations


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise UsageError(
            "the PostgreSQL store needs psycopg 3: pip install 'phaselog[postgres]' (or psycopg[binary])",
            field="store",
            rule="missing_dependency",
        ) from None
    return psycopg


def split_url(url: str) -> tuple[str, str | None]:
    """Remove phaselog's own ``schema`` parameter from a postgresql:// URL."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = [(k, v) for k, v in query if k != "schema"]
    if schema is not None and not _SCHEMA_RE.fullmatch(schema):
        raise UsageError(f"schema={schema!r}: use lowercase letters, digits and '_'", field="store")
    return urlunsplit(parts._replace(query=urlencode(rest))), schema


class PostgresDialect(Dialect):
    """PostgreSQL specifics."""

    name = "postgresql"
    placeholder = "%s"
    collate = ' COLLATE "C"'

    def __init__(self, url: str) -> None:
        self.dsn, self.schema = split_url(url)
        self.psycopg = _psycopg()

    def connect(self) -> Any:
        try:
            # Autocommit: a read is one round trip (no BEGIN before it, no ROLLBACK after it);
            # writes open their transaction explicitly (begin_write) and end it with COMMIT/ROLLBACK.
            conn = self.psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        except self.psycopg.OperationalError as exc:
            from phaselog.errors import StoreError

            raise StoreError(
                f"cannot connect to PostgreSQL at {self.describe()}: {str(exc).strip()}", rule="connect"
            ) from None
        if self.schema:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')  # validated identifier
            conn.execute(f'SET search_path TO "{self.schema}"')
            conn.commit()
        return conn

    def begin_write(self, conn: Any) -> None:
        """Open the write transaction (the connection is in autocommit mode; psycopg's commit()
        and rollback() end it, as they act on the server's transaction status)."""
        conn.execute("BEGIN")

    def lock_for_migration(self, conn: Any) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))

    def lock_run(self, conn: Any) -> None:
        # Appends and entries take ROW EXCLUSIVE, which this mode excludes; reads are not blocked.
        # No writer holds both tables' locks, so taking them in this order cannot deadlock.
        conn.execute("LOCK TABLE phaselog_checkpoints, phaselog_entries IN SHARE ROW EXCLUSIVE MODE")

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, self.psycopg.errors.UniqueViolation)

    def is_transient(self, exc: BaseException) -> bool:
        from phaselog.errors import StoreError

        if isinstance(exc, StoreError) and exc.context.get("rule") == "connect":
            return True  # a (re)connection refused while the server restarts: retried with backoff
        errors = self.psycopg.errors
        return isinstance(
            exc,
            self.psycopg.OperationalError
            | errors.SerializationFailure
            | errors.DeadlockDetected
            | errors.AdminShutdown,
        ) and not isinstance(exc, errors.UndefinedTable)

    def describe(self) -> str:
        parts = urlsplit(self.dsn)
        host = parts.hostname or "localhost"
        where = f"{host}:{parts.port or 5432}{parts.path}"
        return f"postgresql://{where}" + (f"?schema={self.schema}" if self.schema else "")


class PostgresStore(SqlStore):
    """Checkpoints in a PostgreSQL database."""

    def __init__(self, url: str, **kw: Any) -> None:
        super().__init__(url, PostgresDialect(url), **kw)
