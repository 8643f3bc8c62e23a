"""Stores, chosen by URL and imported only when used.

``file:///path`` or a plain path: the files store (the default); ``sqlite:///path.db``: SQLite;
``postgresql://user@host/db[?schema=NAME]``: PostgreSQL (needs the ``postgres`` extra). The
grammar lives in :mod:`phaselog.stores.urls`.
"""

from __future__ import annotations

import os

from phaselog.stores.base import AttemptRef, Damaged, Store, Stored

__all__ = ["AttemptRef", "Damaged", "Store", "Stored", "open_store"]


def open_store(
    url: str | os.PathLike[str] | None = None,
    *,
    create: bool = True,
    migrate: bool = False,
    read_only: bool = False,
) -> Store:
    """Open a store by URL or path; ``None`` means ``PHASELOG_STORE``, else the files store.

    Opening never writes and never creates anything. ``create=False`` (for reads: every read
    command of the CLI) requires the store to exist: a missing root, database file or schema
    raises StoreNotFound naming it. ``create=True`` (the default, for a ledger you write to)
    accepts a store that does not exist yet: reads see it empty and the first write creates it.
    Either way a SQL schema newer or older than this phaselog is refused (MigrationNeeded:
    run ``phaselog store migrate``). ``migrate=True`` creates or upgrades a SQL schema now (what
    ``phaselog store migrate`` does; the files store has no schema). Malformed URLs raise
    UsageError listing the accepted forms. ``read_only=True`` (the dashboard) implies
    ``create=False`` and refuses every write with StoreError (rule ``read_only``) — and the
    database enforces it too: SQLite is opened ``mode=ro``, PostgreSQL sessions are read-only.

    Examples: ``open_store()``, ``open_store("/var/lib/phaselog")``,
    ``open_store("sqlite:///var/lib/phaselog/ledger.db", create=True)``.
    """
    from phaselog.stores.urls import parse_store_url

    if read_only:
        if migrate:
            from phaselog.model.errors import UsageError

            raise UsageError("a store opened read-only cannot be migrated", field="store", rule="read_only")
        create = False
    if url is None:
        url = os.environ.get("PHASELOG_STORE") or None
    if url is None:
        from phaselog.stores.files.store import FilesStore, default_root

        return FilesStore(default_root(), create=create or migrate, read_only=read_only)
    spec = parse_store_url(url)
    if spec.kind == "files":
        from phaselog.stores.files.store import FilesStore

        return FilesStore(spec.path, create=create or migrate, read_only=read_only)
    if spec.kind == "sqlite":
        from phaselog.stores.sql.sqlite import SqliteStore

        assert spec.path is not None  # the parser sets it for SQLite URLs
        return SqliteStore(spec.path, create=create or migrate, migrate=migrate, read_only=read_only)
    from phaselog.stores.sql.postgres import PostgresStore

    return PostgresStore(spec.text, create=create or migrate, migrate=migrate, read_only=read_only)
