"""The session: a SQL store's connection, its statements and its retry policy — the one seam.

Everything that talks to the database goes through a :class:`Session` (reads, write
transactions, retries) and, inside a transaction, a :class:`Transaction` (statements written with
``?`` placeholders whatever the dialect). The store's services — checkpoints, entries, snapshot,
leases, manifests, stamps, quarantine, retention, guard storage and the queue — are handed the
session and use only these public methods (SQLAlchemy's ``Connection``, DBOS's ``SystemDatabase``).

The policy lives here, once: a read of a store that does not exist yet sees nothing (a write
creates it, if the store may be created); transient errors (a lost connection, a busy database)
are retried with backoff on a new connection; driver errors come out typed (the dialect's
``translate``); inside a transaction the caller holds open (``held``) nothing is retried, since a
retry would run outside it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from phaselog.model.errors import PhaselogError, StoreError, StoreNotFound
from phaselog.stores.sql import schema
from phaselog.stores.sql.dialect import Dialect, Rows, Transaction

__all__ = ["Rows", "Session", "Transaction"]

T = TypeVar("T")


class Session:
    """A SQL store's connection, its reads and write transactions, and their retries."""

    def __init__(self, url: str, dialect: Dialect, *, may_create: bool) -> None:
        self.url = url
        self.dialect = dialect
        #: A missing store may be created by a write (else every access raises StoreNotFound).
        self.may_create = may_create
        #: The schema exists at SCHEMA_VERSION (False: nothing exists yet; the first write creates it).
        self.ready = False
        #: Inside a transaction the caller holds open (a prune's ``locked_run``): reads run in it,
        #: nothing is retried.
        self.held = False
        self._conn: Any = None

    # -- the connection ------------------------------------------------------------------------------
    @property
    def conn(self) -> Any:
        """The open connection (reconnecting if needed)."""
        if self._conn is None:
            self._conn = self.dialect.connect()
        return self._conn

    @conn.setter
    def conn(self, conn: Any) -> None:
        """Use ``conn`` from now on (a diagnostic wrapper around the real one: bench/profile_sql.py)."""
        self._conn = conn

    @property
    def current(self) -> Transaction:
        """The statements of the open connection (inside a transaction its owner began)."""
        return Transaction(self.conn, self.dialect)

    def reset(self) -> None:
        """Drop the connection (the next statement opens a new one)."""
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection may fail; it is gone anyway
                self._conn.close()
        self._conn = None

    def close(self, *, read_only: bool) -> None:
        """Close the connection (SQLite: after moving the WAL into the database file). Idempotent."""
        if self._conn is not None and not read_only:
            with contextlib.suppress(Exception):  # best effort: a read-only file cannot be checkpointed
                self.dialect.before_close(self._conn)
        self.reset()

    # -- whether the store exists --------------------------------------------------------------------
    def missing(self) -> StoreNotFound:
        """The error for a store that does not exist (and may not be created)."""
        what = "the database has no phaselog tables" if self.dialect.exists() else "the database does not exist"
        return StoreNotFound(
            f"no phaselog store at {self.dialect.describe()}: {what}; check the URL, or create the store with "
            f"`phaselog store migrate --store {self.url}`",
            path=self.dialect.describe(),
        )

    def probe(self) -> int | None:
        """The schema version found, or None when the database or phaselog's tables are absent."""
        if not self.dialect.exists():
            return None
        try:
            rows = self.query_raw("SELECT version FROM phaselog_schema WHERE id = 1", typed=False)
        except Exception as exc:
            if self.dialect.is_missing_schema(exc):
                with contextlib.suppress(Exception):  # only to leave no aborted transaction behind
                    self._end_read()
                return None
            better = self.translate(exc)
            if better is not None:
                raise better from None
            raise
        return int(rows[0][0]) if rows else None

    def open(self) -> None:
        """Check the schema version now (too new: UnsupportedVersion; too old: MigrationNeeded)."""
        version = self.probe()
        if version is not None:
            schema.check_version(version, self.dialect.describe(), self.url)
            self.ready = True

    def still_absent(self) -> bool:
        """For reads of a store not created yet: is it still absent? (Another process may have created it.)"""
        if self.ready:
            return False
        version = self.probe()
        if version is None:
            return True
        schema.check_version(version, self.dialect.describe(), self.url)
        self.ready = True
        return False

    def ensure_ready(self) -> None:
        """Create the store on its first write (a store opened with create=True that did not exist)."""
        if not self.ready:
            if not self.may_create and self.still_absent():
                raise self.missing()
            if not self.ready:
                self.migrate(upgrade=False)

    def migrate(self, *, upgrade: bool = True) -> tuple[int, int]:
        """Create or upgrade the schema (:func:`phaselog.stores.sql.schema.apply`, in one transaction);
        safe to run concurrently. Returns (from, to)."""
        if not self.dialect.exists():
            self.reset()
            self.dialect.prepare_create()
        for i in range(5):
            try:
                result = self.retry(lambda: self.write_created(lambda tx: schema.apply(tx, self.url, upgrade=upgrade)))
                self.ready = True
                return result
            except Exception as exc:
                # Two first-time migrations can race to create phaselog_schema; the loser retries.
                if self.dialect.is_unique_violation(exc) and i < 4:
                    continue
                raise
        raise StoreError("could not migrate")  # pragma: no cover

    # -- reads ----------------------------------------------------------------------------------------
    def query(self, text: str, params: Sequence[Any] = ()) -> Rows:
        """Rows of one read; none while the store does not exist yet (nothing is created by a read)."""
        if not self.ready and self.still_absent():
            if not self.may_create:
                raise self.missing()
            return []
        return self.query_raw(text, params)

    def query_raw(self, text: str, params: Sequence[Any] = (), *, typed: bool = True) -> Rows:
        """Rows of one read, without first asking whether the store exists (retried like any read)."""
        conn = self._conn
        if conn is not None and not self.held:
            # The usual case, one statement on the open connection, without the retry loop's frames
            # (a read is ~30 µs; they were ~2 of them): the first error goes the general way below.
            dialect = self.dialect
            sql = text if dialect.placeholder == "?" else text.replace("?", dialect.placeholder)
            try:
                rows: Rows = conn.execute(sql, params if type(params) is tuple else tuple(params)).fetchall()
            except Exception as exc:
                if not self.dialect.is_transient(exc):
                    if (better := self._final(exc, typed=typed)) is not None:
                        raise better from None
                    raise
            else:
                self._end_read()
                return rows
            # A transient error: the first of retry()'s five tries failed; the loop makes the others.
            self.reset()
            time.sleep(0.05)
            return self.retry(self._reader(text, params), attempts=4, typed=typed)
        return self.retry(self._reader(text, params), typed=typed)

    def _reader(self, text: str, params: Sequence[Any]) -> Callable[[], Rows]:
        def go() -> Rows:
            rows = self.current.all(text, params)
            self._end_read()
            return rows

        return go

    @property
    def pipelined(self) -> bool:
        """Several reads can travel in one round trip (:meth:`query_together`)."""
        return self.dialect.pipelines and self.ready

    def query_together(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[Rows]:
        """Several reads in one round trip (only where :attr:`pipelined`), retried like any read."""

        def together() -> list[Rows]:
            tx = self.current
            with tx.conn.pipeline():
                cursors = [tx.execute(text, params) for text, params in statements]
            return [list(cur.fetchall()) for cur in cursors]

        return self.retry(together)

    def _end_read(self) -> None:
        # psycopg opens a transaction implicitly even for SELECT; end it so nothing stays idle in one.
        if getattr(self.conn, "autocommit", True) is False:
            self.conn.rollback()

    # -- errors and retries ---------------------------------------------------------------------------
    def translate(self, exc: BaseException) -> Exception | None:
        """A typed error in place of a driver error (None: keep ``exc``, the caller handles it)."""
        if isinstance(exc, PhaselogError) or not isinstance(exc, Exception):
            return None
        if self.dialect.is_unique_violation(exc) or self.dialect.is_transient(exc):
            return None
        return self.dialect.translate(exc)

    def retry(self, fn: Callable[[], T], attempts: int = 5, *, typed: bool = True) -> T:
        """``fn()``, again on a new connection after a transient error (with backoff)."""
        if self.held:
            return fn()  # inside locked_run's transaction: a retry would run outside it
        delay = 0.05
        for i in range(attempts):
            try:
                return fn()
            except Exception as exc:
                if not self.dialect.is_transient(exc) or i == attempts - 1:
                    if (better := self._final(exc, typed=typed)) is not None:
                        raise better from None
                    raise
                self.reset()
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise StoreError("unreachable")  # pragma: no cover

    def _final(self, exc: Exception, *, typed: bool) -> Exception | None:
        """What a statement that will not be tried again raises in place of ``exc`` (None: ``exc``)."""
        if self.dialect.is_transient(exc):
            return StoreError(f"{self.dialect.name}: {exc}".strip())
        return self.translate(exc) if typed else None

    def pause(self, attempt: int) -> None:
        """Between two tries of a caller's own retry loop (after a transient error): a new connection
        for the next one, after a backoff."""
        self.reset()
        time.sleep(0.05 * (2**attempt))

    # -- writes ---------------------------------------------------------------------------------------
    def write(self, fn: Callable[[Transaction], T]) -> T:
        """``fn(tx)`` in one write transaction, committed at the end (creating the store first if it
        does not exist yet). Not retried: the caller's loop decides (see :meth:`transact`)."""
        self.ensure_ready()
        return self.write_created(fn)

    def transact(self, fn: Callable[[Transaction], T], *, flush: bool = True) -> T:
        """:meth:`write`, retried on transient errors (a new connection, a new transaction).

        ``flush=False``: the commit need not reach the disk at once (where the dialect can skip the
        flush safely: :meth:`Dialect.unsynced`); only for what is not a record (a run lease)."""
        if flush:
            return self.retry(lambda: self.write(fn))
        return self.retry(lambda: self._unflushed(fn))

    def _unflushed(self, fn: Callable[[Transaction], T]) -> T:
        self.ensure_ready()
        conn = self.conn
        if not self.dialect.unsynced(conn):
            return self.write_created(fn)
        try:
            return self.write_created(fn)
        finally:
            try:
                self.dialect.synced(conn)
            except Exception:
                self.reset()  # never keep a connection whose commits might not flush: a new one flushes

    def write_created(self, fn: Callable[[Transaction], T]) -> T:
        """:meth:`write` of a store known to exist (or being created: the migration itself)."""
        self.dialect.check_writable()
        conn = self.conn
        try:
            self.dialect.begin_write(conn)
            try:
                result = fn(Transaction(conn, self.dialect))
                conn.commit()
            except BaseException:
                with contextlib.suppress(Exception):  # the original error matters, not the rollback's
                    conn.rollback()
                raise
        except Exception as exc:
            typed = self.translate(exc)
            if typed is not None:
                raise typed from None
            raise
        return result

    def autocommit(self, text: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        """One write statement on its own (autocommitted: no BEGIN, no COMMIT); its first row."""
        self.ensure_ready()
        self.dialect.check_writable()
        try:
            return self.current.one(text, params)
        except Exception as exc:
            typed = self.translate(exc)
            if typed is not None:
                raise typed from None
            raise

    @contextlib.contextmanager
    def hold(self, first: Callable[[Transaction], None]) -> Iterator[Transaction]:
        """A write transaction held open around the caller's block (committed when it ends).

        Beginning it — ``BEGIN`` and ``first(tx)``, e.g. the statements that lock a row — is retried
        on a new connection, so a block opened after an hour's idle connection still gets one. Driver
        errors are the caller's to name (they are not translated)."""
        self.ensure_ready()  # a store opened for a write is created by its first write

        def begin() -> Transaction:
            tx = self.current
            self.dialect.begin_write(tx.conn)
            try:
                first(tx)
            except BaseException:
                with contextlib.suppress(Exception):
                    tx.conn.rollback()
                raise
            return tx

        tx = self.retry(begin)
        try:
            yield tx
            tx.conn.commit()
        except BaseException:
            with contextlib.suppress(Exception):
                tx.conn.rollback()
            raise
