"""Store backends by URL scheme: phaselog's three, and any a third party registers.

A :class:`Backend` is a small spec — its URL schemes, the forms its URLs take (listed in every "bad
store URL" error), how to parse one of its URLs into a :class:`StoreURL`, and how to open a parsed URL
with :class:`OpenOptions` — kept in one table keyed by scheme (fsspec's ``registry.py``, SQLAlchemy's
dialect registry). phaselog registers ``file``, ``sqlite``, ``postgresql`` and ``postgres`` in
:mod:`phaselog.stores`; each backend's module is imported only when one of its URLs is opened.

A third party adds a backend without editing phaselog, either by calling :func:`register_backend`,
or, for an installed package, by naming a :class:`Backend` in the entry point group
``phaselog.stores`` (the entry point's name is the scheme)::

    [project.entry-points."phaselog.stores"]
    jsondir = "example_backend:BACKEND"

Entry points are read only when a URL names a scheme nobody registered, so start-up never pays for
scanning the installed packages. See docs/stores.md, "Writing a backend".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from phaselog.model.errors import UsageError

if TYPE_CHECKING:
    from phaselog.stores.base import Store

#: The entry point group an installed package names its backends in (name: the URL scheme).
ENTRY_POINT_GROUP = "phaselog.stores"


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: which backend it names, and what that backend needs to open it."""

    #: The backend's name (``files``, ``sqlite``, ``postgresql``, or a third party's).
    kind: str
    #: The files-store root or the SQLite database file (absolute); None for PostgreSQL (and, for the
    #: files store, None means its default root).
    path: Path | None = None
    #: The libpq connection URL without phaselog's ``schema`` parameter (PostgreSQL only).
    dsn: str | None = None
    #: PostgreSQL schema for phaselog's tables (``?schema=NAME``), or None.
    schema: str | None = None
    #: The text as given.
    text: str = ""


@dataclass(frozen=True)
class OpenOptions:
    """How :func:`phaselog.stores.open_store` asks a backend to open a store (see its docstring)."""

    #: A store that does not exist yet is accepted (the first write creates it); else StoreNotFound.
    create: bool = True
    #: Create or upgrade a versioned schema now (``phaselog store migrate``); implies ``create``.
    migrate: bool = False
    #: Refuse every write (StoreError, rule ``read_only``); implies ``create=False``.
    read_only: bool = False


@dataclass(frozen=True)
class Backend:
    """A store backend as the registry knows it: its schemes, its URL grammar and its opener."""

    #: The backend's name, used as :attr:`StoreURL.kind` (``files``, ``sqlite``, ``postgresql`` …).
    name: str
    #: The URL schemes it answers, lowercase (``("postgresql", "postgres")``).
    schemes: tuple[str, ...]
    #: Parse one of its URLs (the text starts with one of ``schemes`` and ``://``); raise the
    #: :func:`bad_url` error when it is malformed.
    parse: Callable[[str], StoreURL]
    #: Open a parsed URL (import the backend's module here, so only a used backend is imported).
    open: Callable[[StoreURL, OpenOptions], Store]
    #: How its URLs are written, one line each; every "bad store URL" error lists them.
    forms: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        """Refuse a scheme that could never be parsed as one (RFC 3986: a letter, then letters,
        digits, ``+``, ``-``, ``.``) or that is not lowercase."""
        if not self.schemes:
            raise UsageError(f"backend {self.name!r} names no URL scheme", field="schemes", rule="scheme")
        for scheme in self.schemes:
            if not _is_scheme(scheme):
                raise UsageError(
                    f"backend {self.name!r}: {scheme!r} is not a lowercase URL scheme (a letter, then letters, "
                    "digits, '+', '-' or '.')",
                    field="schemes",
                    rule="scheme",
                )


def _is_scheme(text: str) -> bool:
    return bool(text) and text[0].isascii() and text[0].islower() and all(c in _SCHEME_CHARS for c in text)


_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+-.")

#: scheme → backend, in registration order (the order the accepted forms are listed in).
_BY_SCHEME: dict[str, Backend] = {}


def register_backend(backend: Backend, *, replace: bool = False) -> None:
    """Make ``backend`` open the URLs of its schemes.

    Raises UsageError (rule ``scheme_taken``) when another backend has one of its schemes, unless
    ``replace`` (the new backend then answers them). Registering the same backend again is a no-op.
    """
    for scheme in backend.schemes:
        held = _BY_SCHEME.get(scheme)
        if held is not None and held != backend and not replace:
            raise UsageError(
                f"the store URL scheme {scheme!r} is already registered by backend {held.name!r}; "
                "unregister it first, or register with replace=True",
                field="scheme",
                rule="scheme_taken",
                scheme=scheme,
            )
    for scheme in backend.schemes:
        _BY_SCHEME[scheme] = backend


def unregister_backend(backend: Backend) -> None:
    """Forget ``backend``'s schemes (those it still holds); a later URL of them is unknown again."""
    for scheme in backend.schemes:
        if _BY_SCHEME.get(scheme) == backend:
            del _BY_SCHEME[scheme]


def backends() -> list[Backend]:
    """Every registered backend, once each, in registration order."""
    out: list[Backend] = []
    for backend in _BY_SCHEME.values():
        if backend not in out:
            out.append(backend)
    return out


def schemes() -> tuple[str, ...]:
    """Every registered scheme, in registration order."""
    return tuple(_BY_SCHEME)


def accepted_forms() -> tuple[str, ...]:
    """The URL forms of every registered backend, in registration order (the errors list them)."""
    return tuple(form for backend in backends() for form in backend.forms)


def backend_for(scheme: str) -> Backend | None:
    """The backend of ``scheme`` (any case): registered, else from an installed package's entry point."""
    scheme = scheme.lower()
    found = _BY_SCHEME.get(scheme)
    if found is None:
        found = _from_entry_points(scheme)
    return found


def _from_entry_points(scheme: str) -> Backend | None:
    """Load and register the backend an installed package names for ``scheme`` (None: none does)."""
    # Imported here: scanning the installed packages' metadata costs start-up time, and only a URL
    # of a scheme nobody registered needs it.
    from importlib.metadata import entry_points  # lazy: ~17 ms; only for a scheme not ours

    for point in entry_points(group=ENTRY_POINT_GROUP, name=scheme):
        try:
            backend = point.load()
        except Exception as exc:  # a broken plug-in must say which one, not crash the command
            raise UsageError(
                f"the store backend for {scheme}:// ({point.value}, entry point group {ENTRY_POINT_GROUP}) "
                f"cannot be loaded: {type(exc).__name__}: {exc}",
                field="store",
                rule="backend_load",
            ) from exc
        if not isinstance(backend, Backend) or scheme not in backend.schemes:
            raise UsageError(
                f"the entry point {point.value} ({ENTRY_POINT_GROUP}) must name a phaselog.stores.registry.Backend "
                f"whose schemes include {scheme!r}",
                field="store",
                rule="backend_load",
            )
        register_backend(backend)
        return backend
    return None


def bad_url(text: str, why: str, *, rule: str = "store_url") -> UsageError:
    """The usage error for a store URL that cannot be used, listing the accepted forms."""
    forms = accepted_forms()
    return UsageError(
        f"store URL {text!r}: {why}. Accepted forms: " + "; ".join(forms),
        field="store",
        rule=rule,
        accepted=list(forms),
    )


def open_url(url: StoreURL, options: OpenOptions) -> Store:
    """Open a parsed URL with its backend (UsageError naming the backend when none is registered)."""
    for backend in backends():
        if backend.name == url.kind:
            return backend.open(url, options)
    raise bad_url(url.text or os.fspath(url.path or ""), f"no backend named {url.kind!r} is registered", rule="scheme")
