"""An example third-party store backend: ``jsondir:///abs/dir``, every record one JSON file.

What a backend package provides (docs/stores.md, "Writing a backend"): a store class implementing
:class:`phaselog.stores.base.Store` (:mod:`example_backend.store`), and a
:class:`phaselog.stores.registry.Backend` naming its URL scheme, parser and opener (``BACKEND``
below), registered with :func:`phaselog.stores.registry.register_backend` or through the entry
point group ``phaselog.stores``. ``tests/test_example_backend.py`` runs the installable conformance
suite on it.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from example_backend.damage import JsonDirDamage
from example_backend.store import JsonDirStore
from phaselog.model.errors import UsageError
from phaselog.stores.base import Store
from phaselog.stores.registry import Backend, OpenOptions, StoreURL, bad_url

__all__ = ["BACKEND", "JsonDirDamage", "JsonDirStore"]


def parse(text: str) -> StoreURL:
    """``jsondir:///abs/dir``: the directory, absolute; anything else is the registry's usage error."""
    parts = urlsplit(text)
    if parts.netloc or parts.query or parts.fragment:
        raise bad_url(text, "jsondir URLs name a local directory: jsondir:///abs/dir")
    path = unquote(parts.path)
    if not path.startswith("/") or path.strip("/") == "":
        raise bad_url(text, "jsondir URLs need an absolute directory (jsondir:///abs/dir)")
    return StoreURL("jsondir", Path(path), text=text)


def open_jsondir(url: StoreURL, options: OpenOptions) -> Store:
    """Open a parsed ``jsondir://`` URL (it has no schema to migrate, and no read-only mode)."""
    if options.read_only:
        raise UsageError("the jsondir store cannot be opened read-only", field="store", rule="read_only")
    assert url.path is not None
    return JsonDirStore(url.path, create=options.create)


BACKEND = Backend(
    "jsondir",
    ("jsondir",),
    parse,
    open_jsondir,
    ("jsondir:///abs/dir (the example JSON-directory store)",),
)
