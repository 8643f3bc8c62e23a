"""Stores, chosen by URL and imported only when used.

``file:///path`` or a plain path: the files store (the default); ``sqlite:///path.db``: SQLite;
``postgresql://user@host/db[?schema=NAME]``: PostgreSQL (needs the ``postgres`` extra). The
grammar lives in :mod:`phaselog.stores.urls`; the table of backends by URL scheme, where a third
party adds its own, in :mod:`phaselog.stores.registry`. phaselog's three are registered here.
"""

from __future__ import annotations

import os

from phaselog.model.errors import UsageError
from phaselog.stores.base import AttemptRef, Damaged, Store, Stored
from phaselog.stores.registry import Backend, OpenOptions, StoreURL, open_url, register_backend
from phaselog.stores.urls import (
    FILES_FORMS,
    POSTGRES_FORMS,
    SQLITE_FORMS,
    parse_file_url,
    parse_postgres_url,
    parse_sqlite_url,
    parse_store_url,
)

__all__ = ["FILES", "POSTGRES", "SQLITE", "AttemptRef", "Damaged", "Store", "Stored", "open_store"]


# Each opener imports its backend's module when a URL of it is opened, so the CLI starts as fast
# whichever backend it is given (tests/test_cli_lazy.py), and PostgreSQL's driver is an optional extra.
def _open_files(url: StoreURL, options: OpenOptions) -> Store:
    from phaselog.stores.files.store import (  # lazy: a store imports no other backend
        FilesStore,
        default_root,
    )

    root = url.path if url.path is not None else default_root()
    return FilesStore(root, create=options.create, read_only=options.read_only)


def _open_sqlite(url: StoreURL, options: OpenOptions) -> Store:
    from phaselog.stores.sql.sqlite import SqliteStore  # lazy: a store imports no other backend

    assert url.path is not None  # the parser sets it for SQLite URLs
    return SqliteStore(url.path, create=options.create, migrate=options.migrate, read_only=options.read_only)


def _open_postgres(url: StoreURL, options: OpenOptions) -> Store:
    from phaselog.stores.sql.postgres import PostgresStore  # lazy: the postgres extra may be absent

    return PostgresStore(url.text, create=options.create, migrate=options.migrate, read_only=options.read_only)


#: The files store: ``file://`` URLs (a plain path is the files store too: stores.urls.parse_path).
FILES = Backend("files", ("file",), parse_file_url, _open_files, FILES_FORMS)
#: SQLite: ``sqlite://`` URLs.
SQLITE = Backend("sqlite", ("sqlite",), parse_sqlite_url, _open_sqlite, SQLITE_FORMS)
#: PostgreSQL: ``postgresql://`` and ``postgres://`` URLs.
POSTGRES = Backend("postgresql", ("postgresql", "postgres"), parse_postgres_url, _open_postgres, POSTGRES_FORMS)
for _builtin in (FILES, SQLITE, POSTGRES):
    register_backend(_builtin)


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
    The backend is the one registered for the URL's scheme (:mod:`phaselog.stores.registry`).

    Examples: ``open_store()``, ``open_store("/var/lib/phaselog")``,
    ``open_store("sqlite:///var/lib/phaselog/ledger.db", create=True)``.
    """
    if read_only:
        if migrate:
            raise UsageError("a store opened read-only cannot be migrated", field="store", rule="read_only")
        create = False
    options = OpenOptions(create=create or migrate, migrate=migrate, read_only=read_only)
    if url is None:
        url = os.environ.get("PHASELOG_STORE") or None
    spec = StoreURL("files", text="") if url is None else parse_store_url(url)
    return open_url(spec, options)
