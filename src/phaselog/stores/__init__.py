"""Stores, chosen by URL and imported only when used.

``file:///path`` or a plain path: the files store (the default); ``sqlite:///path.db`` and
``postgresql://…`` arrive with the SQL stores.
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
    raise UsageError(
        f"unsupported store URL scheme {parts.scheme!r} in {text}; use file:///path "
        "(sqlite:// and postgresql:// arrive with the SQL stores)",
        field="store",
    )
