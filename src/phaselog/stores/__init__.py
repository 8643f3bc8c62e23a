"""Stores, chosen by URL and imported only when used.

``file:///path`` or a plain path: the files store (the default); ``sqlite:///path.db``: SQLite;
``postgresql://user@host/db[?schema=NAME]``: PostgreSQL (needs the ``postgres`` extra).
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from phaselog.errors import UsageError
from phaselog.stores.base import AttemptRef, Damaged, Store, Stored

__all__ = ["AttemptRef", "Damaged", "Store", "Stored", "open_store"]


def open_store(url: str | os.PathLike[str] | None = None) -> Store:
    """Open a store by URL or path; ``None`` means ``PHASELOG_STORE``, else the files store.

    Examples: ``open_store()``, ``open_store("/var/lib/phaselog")``,
    ``open_store("file:///var/lib/phaselog")``.
    """
    if url is None:
        url = os.environ.get("PHASELOG_STORE") or None
    if url is None:
        from phaselog.stores.files import FilesStore

        return FilesStore()
    text = os.fspath(url)
    if "://" not in text:
        from phaselog.stores.files import FilesStore

        return FilesStore(text)
    parts = urlsplit(text)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise UsageError(f"file URLs name a local path, not a host: {text}", field="store")
        from phaselog.stores.files import FilesStore

        return FilesStore(unquote(parts.path))
    if parts.scheme == "sqlite":
        from phaselog.stores.sqlite import SqliteStore

        path = unquote(parts.path)
        if path.startswith("//"):
            path = path[1:]  # sqlite:////abs/path (SQLAlchemy's spelling) means the same as sqlite:///abs/path
        if parts.netloc not in ("", "localhost") or not path or path == "/":
            raise UsageError(f"sqlite URLs look like sqlite:///path/to/file.db (got {text})", field="store")
        return SqliteStore(path)
    if parts.scheme in ("postgresql", "postgres"):
        from phaselog.stores.postgres import PostgresStore

        return PostgresStore(text)
    raise UsageError(
        f"unsupported store URL scheme {parts.scheme!r} in {text}; use file:///path, "
        "sqlite:///path/to/file.db or postgresql://user@host/db",
        field="store",
    )
