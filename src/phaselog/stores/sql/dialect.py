"""The dialect seam: everything that differs between the databases the SQL core runs on.

The schema and the statements are the same on every database; a :class:`Dialect` says only what
differs — connecting, placeholders, collation, the database clock, row locks, locking for
migrations and prunes, and error classification. A :class:`Transaction` runs statements on one
connection with ``?`` placeholders, whatever the dialect spells. :mod:`phaselog.stores.sql.sqlite` and
:mod:`phaselog.stores.sql.postgres` fill it in; no other module asks which database it is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phaselog.model.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Sequence

#: The rows of one statement.
Rows = list[tuple[Any, ...]]


class Dialect:
    """What differs between databases. Subclasses fill it in."""

    name = "sql"
    placeholder = "?"
    #: Appended to ORDER BY on text columns, so that every store orders by code point (as the
    #: files store's sorted() does) whatever the database's collation.
    collate = ""
    #: The database clock as seconds since the epoch (DOUBLE PRECISION): lease times come from the
    #: database, so machines whose clocks disagree still agree on when a lease expires.
    now = "((julianday('now') - 2440587.5) * 86400.0)"
    #: Appended to a SELECT inside a write transaction to lock the rows it reads until the
    #: transaction ends (empty where the write transaction already locks the whole database).
    for_update = ""
    #: Appended to a SELECT inside a write transaction so that a concurrent ``for_update`` of the
    #: same rows waits for this transaction (empty where writers are serialised anyway).
    for_share = ""

    def connect(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    #: A statement costs a network round trip: prefer one bigger query over two small ones.
    round_trips_dear = True
    #: An append without a fence may be one autocommitted statement (stores/sql/checkpoints.py).
    append_at_once = False
    #: The driver sends several statements in one round trip (``conn.pipeline()``, psycopg 3).
    pipelines = False

    #: Set by the store: refuse every write transaction (see check_writable).
    read_only = False

    def check_writable(self) -> None:
        """StoreError (rule ``read_only``) when the store was opened read-only."""
        if self.read_only:
            raise StoreError(f"{self.describe()} is open read-only: nothing can be written", rule="read_only")

    def change_stamp(self, conn: Any, version: Any = None) -> tuple[Any, ...] | None:
        """A stamp of the whole database that differs once anyone wrote to it since it was taken
        (None: the database has no cheap one; see stores/sql/carried.py). ``version``: the
        database's change counter as read inside the write transaction just committed."""
        return None

    def runs(self, statement: str) -> bool:
        """Whether this database runs a migration's ``statement``: one whose first line is
        ``-- dialect: NAME`` runs only where ``name`` is NAME (a PostgreSQL trigger, D207)."""
        first = statement.split("\n", 1)[0].strip()
        return not first.startswith("-- dialect:") or first.removeprefix("-- dialect:").strip() == self.name

    def begin_write(self, conn: Any) -> None:
        """Start a transaction that will write."""
        self.check_writable()
        conn.execute("BEGIN")

    def lock_for_migration(self, conn: Any) -> None:
        """Serialise concurrent migrations (inside the migration transaction)."""

    def lock_run(self, conn: Any) -> None:
        """Inside a write transaction: make appends and audit entries wait until it ends."""

    def lock_rows(self, tx: Transaction, select: str, params: Sequence[Any]) -> None:
        """Inside a write transaction: lock the rows ``select`` finds until it ends (nothing to do
        where the write transaction holds the whole database already)."""
        if self.for_update:
            tx.execute(select + self.for_update, params)

    def unsynced(self, conn: Any) -> bool:
        """Before a write transaction whose commit need not reach the disk at once (a run lease: see
        stores/sql/lease.py): make the connection's next commit skip its flush, where that is safe;
        True if it did (then :meth:`synced` restores it after the transaction). Default: never."""
        return False

    def synced(self, conn: Any) -> None:
        """After :meth:`unsynced`'s transaction: every commit flushes again."""

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


class Transaction:
    """The statements of one connection (inside a transaction, or autocommitted reads)."""

    __slots__ = ("conn", "dialect")

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        #: The driver's connection (for what only a dialect does with it: locks, pipelines).
        self.conn = conn
        self.dialect = dialect

    def sql(self, text: str) -> str:
        """``text`` with its ``?`` placeholders in the dialect's style."""
        return text if self.dialect.placeholder == "?" else text.replace("?", self.dialect.placeholder)

    def execute(self, text: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; the driver's cursor (``rowcount``, ``fetchone``)."""
        return self.conn.execute(self.sql(text), tuple(params))

    def one(self, text: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of one statement (None: no row)."""
        row: tuple[Any, ...] | None = self.execute(text, params).fetchone()
        return row

    def all(self, text: str, params: Sequence[Any] = ()) -> Rows:
        """Every row of one statement."""
        return list(self.execute(text, params).fetchall())
