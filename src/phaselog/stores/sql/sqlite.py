"""The SQLite store: big histories on one machine.

WAL journal, ``synchronous=FULL`` (a commit survives power loss), a busy timeout, and every write
in ``BEGIN IMMEDIATE`` (writers queue for the lock up front instead of failing on upgrade).
A database on a network filesystem is warned about: SQLite's locking is not reliable there.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from phaselog.model.errors import Corrupt, StoreError
from phaselog.stores.oslock import open_locked
from phaselog.stores.sql.dialect import Dialect
from phaselog.stores.sql.store import SqlStore

BUSY_TIMEOUT_MS = 30_000
_NETWORK_FS = (
    "nfs",
    "nfs4",
    "cifs",
    "smb",
    "smb2",
    "smbfs",
    "fuse.sshfs",
    "9p",
    "afs",
    "ceph",
    "glusterfs",
    "lustre",
    "gpfs",
)


def filesystem_type(path: Path) -> str | None:
    """The filesystem type holding ``path`` (Linux /proc/mounts), or None if unknown."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    target = str(path.resolve())
    best, kind = "", None
    for line in mounts:
        parts = line.split()
        if (
            len(parts) >= 3
            and (target == parts[1] or target.startswith(parts[1].rstrip("/") + "/"))
            and len(parts[1]) >= len(best)
        ):
            best, kind = parts[1], parts[2]
    return kind


# SQLite result codes (the primary code is the low byte of an extended code).
_SQLITE_PERM, _SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_CORRUPT = 3, 8, 10, 11
_SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 13, 14, 26
#: How ``translate`` names a driver error, the first match winning: (primary result code, words that
#: say the same when the driver gives no code, error class, rule, message: ``{where}`` the file,
#: ``{text}`` the driver's words). Anything else is a plain StoreError (rule ``sqlite``).
_KNOWN_ERRORS: tuple[tuple[int, str | None, type[Corrupt] | type[StoreError], str, str], ...] = (
    (
        _SQLITE_CORRUPT,
        "malformed",
        Corrupt,
        "sqlite_corrupt",
        "{where}: the SQLite database is damaged ({text}); restore it from a backup, or try "
        "`sqlite3 {where} .recover` on a copy",
    ),
    (
        _SQLITE_NOTADB,
        "not a database",
        StoreError,
        "not_a_database",
        "{where} is not a SQLite database ({text}); point --store at a phaselog SQLite file",
    ),
    (
        _SQLITE_FULL,
        "is full",
        StoreError,
        "disk_full",
        "{where}: the disk (or the database's size limit) is full; nothing was written ({text})",
    ),
    (
        _SQLITE_READONLY,
        "readonly",
        StoreError,
        "read_only",
        "{where} is read-only (file permissions or a read-only filesystem); nothing was written ({text})",
    ),
    (_SQLITE_CANTOPEN, "unable to open", StoreError, "cannot_open", "cannot open {where} ({text})"),
    (_SQLITE_PERM, None, StoreError, "permission", "{where}: permission denied ({text})"),
    (_SQLITE_IOERR, None, StoreError, "io", "{where}: input/output error ({text})"),
)


class SqliteDialect(Dialect):
    """SQLite specifics."""

    name = "sqlite"
    round_trips_dear = False  # in-process: two narrow statements beat one that copies every body
    now = "((julianday('now') - 2440587.5) * 86400.0)"
    # No row locks: every write transaction is BEGIN IMMEDIATE, which holds the database's write lock.
    for_update = for_share = ""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: The next connection may create the file (only while migrating, i.e. creating the store).
        self.may_create = False

    def exists(self) -> bool:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(f"cannot open {self.path}: {exc.strerror}", path=str(self.path)) from None
        if stat.S_ISDIR(st.st_mode):
            raise StoreError(
                f"{self.path} is a directory, not a SQLite database file (a files store is given as a plain "
                "path or file:/// URL)",
                path=str(self.path),
                rule="is_a_directory",
            )
        return True

    def prepare_create(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the folder of {self.path}: {exc.strerror}", path=str(self.path), rule="cannot_create"
            ) from None
        self.may_create = True

    def connect(self) -> Any:
        fresh = self.may_create and not self.read_only and not self.exists()
        # mode=rw never creates the file: only creating the store (migrate) may, with mode=rwc;
        # a store opened read-only is opened mode=ro, so SQLite itself refuses any write.
        mode = "ro" if self.read_only else "rwc" if fresh else "rw"
        uri = f"file:{quote(str(self.path))}?mode={mode}"
        try:
            conn = sqlite3.connect(
                uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            if fresh:
                os.chmod(self.path, 0o600)
            if (fresh or self.may_create) and not self.read_only:
                _set_wal(conn)  # persistent: set once, when the store is made
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        except sqlite3.Error as exc:
            raise self.translate(exc) from None
        except OSError as exc:
            raise StoreError(f"cannot open {self.path}: {exc.strerror}", path=str(self.path)) from None
        return _Conn(conn)

    def unsynced(self, conn: Any) -> bool:
        # WAL with synchronous=NORMAL: the commit is in the WAL, safe from a process crash, and
        # reaches the disk with the next FULL commit (the WAL is one file, synced whole) — so a
        # lease is durable before any checkpoint fenced by it is. Only in WAL mode: a rollback
        # journal with NORMAL may be damaged by a power loss.
        raw = getattr(conn, "raw", None)
        if raw is None or not conn.in_wal():
            return False
        raw.execute("PRAGMA synchronous=NORMAL")
        return True

    def synced(self, conn: Any) -> None:
        conn.raw.execute("PRAGMA synchronous=FULL")

    def begin_write(self, conn: Any) -> None:
        self.check_writable()
        conn.enter_gate(self.path.parent)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            conn.leave_gate()
            raise

    def change_stamp(self, conn: Any, version: Any = None) -> tuple[Any, ...] | None:
        # PRAGMA data_version moves when another connection commits; total_changes counts this
        # connection's own changes (no statement); the connection itself, as both are per connection.
        raw = getattr(conn, "raw", None)
        if raw is None:
            return None  # a diagnostic wrapper (bench/profile_sql.py): carry nothing
        if version is None:
            version = raw.execute("PRAGMA data_version").fetchone()[0]
        return (raw, raw.total_changes, version)

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc).upper()

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc).lower()

    def is_missing_schema(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc).lower()

    def before_close(self, conn: Any) -> None:
        # Move every committed transaction from ledger.db-wal into ledger.db, and empty the WAL:
        # a copy of the database file alone is then complete (see docs/stores.md, backups).
        # Through the writers' gate: a checkpoint that must wait for a writer then waits in the
        # kernel's queue, not in SQLite's busy handler's sleeps.
        conn.enter_gate(self.path.parent)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.leave_gate()

    def translate(self, exc: BaseException) -> Exception:
        """Name the file and what is wrong with it; never a bare driver error."""
        where = str(self.path)
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        text = str(exc)
        low = text.lower()
        for code, says, kind, rule, message in _KNOWN_ERRORS:
            if primary == code or (says is not None and says in low):
                return kind(message.format(where=where, text=text), path=where, rule=rule)
        return StoreError(f"{where}: SQLite error: {text}", path=where, rule="sqlite")

    def describe(self) -> str:
        return f"sqlite://{self.path}"


class _Conn:
    """sqlite3 in autocommit mode, with commit/rollback that match our explicit BEGIN."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.raw = conn
        self.autocommit = True
        self._gate: tuple[int, str] | None = None
        self._wal: bool | None = None

    def in_wal(self) -> bool:
        """The database is in WAL mode (asked once per connection: the mode is persistent)."""
        if self._wal is None:
            self._wal = str(self.raw.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
        return self._wal

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        return self.raw.execute(sql, params)

    def enter_gate(self, folder: Path) -> None:
        """Queue for the write lock in the kernel before asking SQLite for it (see _GATES)."""
        if self._gate is None:
            self._gate = _GATES.enter(str(folder))

    def leave_gate(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            _GATES.leave(gate)

    def commit(self) -> None:
        try:
            if self.raw.in_transaction:
                self.raw.execute("COMMIT")
        finally:
            self.leave_gate()

    def rollback(self) -> None:
        try:
            if self.raw.in_transaction:
                self.raw.execute("ROLLBACK")
        finally:
            self.leave_gate()

    def close(self) -> None:
        try:
            self.raw.close()
        finally:
            self.leave_gate()


class _Gates:
    """The writers' queue: an exclusive ``flock`` on the database's folder, held from just before
    ``BEGIN IMMEDIATE`` to just after ``COMMIT``/``ROLLBACK``.

    SQLite makes a writer that finds the database locked sleep and retry (its busy handler sleeps
    1, 2, 5, 10 … 100 ms), so under contention the lock sits idle between one writer's commit and
    the next one's wake-up: eight writers got fewer commits per second than one. A process blocked
    in ``flock`` is woken the moment the holder releases it. The gate orders phaselog's own writers
    only: correctness stays with SQLite's locks (any other client, or a failure to take the gate,
    simply goes through the busy handler as before). A folder, not a lock file: nothing new is
    created beside the database, and closing a descriptor of the folder cannot drop SQLite's POSIX
    locks on the database file (closing any descriptor of *that* file would). A thread that already
    holds the gate of a folder (a second store on the same database) skips it instead of waiting for
    itself.
    """

    def __init__(self) -> None:
        self._held: set[tuple[int, str]] = set()

    def enter(self, folder: str) -> tuple[int, str] | None:
        key = (threading.get_ident(), folder)
        if key in self._held:
            return None
        fd = open_locked(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if fd is None:
            return None
        self._held.add(key)
        return fd, folder

    def leave(self, gate: tuple[int, str]) -> None:
        fd, folder = gate
        self._held.discard((threading.get_ident(), folder))
        os.close(fd)  # releases the flock


_GATES = _Gates()


class SqliteStore(SqlStore):
    """Checkpoints in one SQLite database file."""

    def __init__(self, path: str | os.PathLike[str], **kw: Any) -> None:
        """Open the database at ``path`` (see SqlStore: ``create``, ``migrate``)."""
        self.path = Path(path).expanduser().absolute()
        kind = filesystem_type(self.path.parent if not self.path.exists() else self.path)
        if kind in _NETWORK_FS:
            sys.stderr.write(
                f"phaselog: warning: {self.path} is on a network filesystem ({kind}); SQLite's locking is "
                "unreliable there — use a local disk, or PostgreSQL when several machines share runs\n"
            )
        super().__init__(f"sqlite://{self.path}", SqliteDialect(self.path), **kw)

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` ('ok' when the database is sound)."""
        return str(self.session.query("PRAGMA integrity_check")[0][0])


def _set_wal(conn: sqlite3.Connection) -> None:
    """Switch a new database to WAL. Several processes creating the same store at once can get
    "database is locked" here without the busy handler being consulted: retry for a while."""

    for i in range(100):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or i == 99:
                raise
            time.sleep(0.05)
