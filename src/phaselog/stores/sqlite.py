"""The SQLite store: big histories on one machine.

WAL journal, ``synchronous=FULL`` (a commit survives power loss), a busy timeout, and every write
in ``BEGIN IMMEDIATE`` (writers queue for the lock up front instead of failing on upgrade).
A database on a network filesystem is warned about: SQLite's locking is not reliable there.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from phaselog.stores.sql import Dialect, SqlStore

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


class SqliteDialect(Dialect):
    """SQLite specifics."""

    name = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path

    def connect(self) -> Any:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists()
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        if fresh:
            os.chmod(self.path, 0o600)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return _Conn(conn)

    def begin_write(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc).upper()

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc).lower()

    def describe(self) -> str:
        return f"sqlite://{self.path}"


class _Conn:
    """sqlite3 in autocommit mode, with commit/rollback that match our explicit BEGIN."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.raw = conn
        self.autocommit = True

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        return self.raw.execute(sql, params)

    def commit(self) -> None:
        if self.raw.in_transaction:
            self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if self.raw.in_transaction:
            self.raw.execute("ROLLBACK")

    def close(self) -> None:
        self.raw.close()


class SqliteStore(SqlStore):
    """Checkpoints in one SQLite database file."""

    def __init__(self, path: str | os.PathLike[str], **kw: Any) -> None:
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
        return str(self._query("PRAGMA integrity_check")[0][0])
