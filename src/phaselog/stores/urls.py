"""Store URLs: one grammar, parsed in one place.

=====================================  =========================================================
``/abs/dir``, ``rel/dir``, ``~/dir``   the files store at that directory (relative to the cwd)
``file:///abs/dir``                    the files store (``file://localhost/abs/dir`` too)
``sqlite:///abs/path/ledger.db``       SQLite, absolute path (``sqlite:////abs/path`` too)
``sqlite://./rel/ledger.db``           SQLite, relative to the current directory (``../`` too)
``sqlite://~/ledger.db``               SQLite, relative to the home directory
``postgresql://user@host:5432/db``     PostgreSQL (``postgres://`` too); libpq parameters in the
                                       query string are passed on byte for byte, and phaselog's
                                       own ``schema=NAME`` keeps its tables in that schema
=====================================  =========================================================

Anything else is a usage error that lists these forms: a value that starts like a URL
(``word:``) but lacks ``//`` (``sqlite:rel.db``, ``sqlite:/abs.db``), a scheme name glued to a path
(``postgres//x``), an empty SQLite path (``sqlite:///``), ``sqlite:///:memory:`` (nothing would
be durable), a host on a file or SQLite URL, or a malformed PostgreSQL host, port or schema. A
directory whose name contains a colon is still reachable as a path: ``./name:with:colon``.

A scheme a third party registers (:mod:`phaselog.stores.registry`) is parsed by its own backend, after
the checks every URL gets here, and its forms are listed in these errors too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from phaselog.model._lazyre import LazyPattern
from phaselog.stores.registry import StoreURL, backend_for, bad_url, schemes

__all__ = [
    "ACCEPTED_FORMS",
    "SCHEMES",
    "StoreURL",
    "bad_url",
    "parse_file_url",
    "parse_path",
    "parse_postgres_url",
    "parse_sqlite_url",
    "parse_store_url",
]

#: The forms of phaselog's own backends (files, SQLite, PostgreSQL), in the order every "bad store URL"
#: error lists them; a registered third-party backend's forms follow (registry.accepted_forms).
FILES_FORMS = ("a directory path, or file:///abs/dir (files store)",)
SQLITE_FORMS = ("sqlite:///abs/path/ledger.db, sqlite://./relative/ledger.db or sqlite://~/ledger.db (SQLite)",)
POSTGRES_FORMS = ("postgresql://user@host:5432/dbname[?schema=NAME] (PostgreSQL)",)
ACCEPTED_FORMS = (*FILES_FORMS, *SQLITE_FORMS, *POSTGRES_FORMS)
#: phaselog's own schemes (the registry holds these and any a third party adds).
SCHEMES = ("file", "sqlite", "postgresql", "postgres")
_URLISH = LazyPattern(r"[A-Za-z][A-Za-z0-9+.-]*:")
_SCHEMA_RE = LazyPattern(r"[a-z_][a-z0-9_]{0,62}")
_HOST_RE = LazyPattern(r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})")


def parse_store_url(value: str | os.PathLike[str]) -> StoreURL:
    """Parse a store URL or path (see the module docstring); UsageError if malformed.

    The checks every URL gets come first (empty, NUL, a scheme glued to a path, ``//`` missing); then
    the backend registered for the scheme parses the rest (:mod:`phaselog.stores.registry`).
    """
    text = os.fspath(value)
    if not isinstance(text, str):
        raise bad_url(repr(text), "must be text")
    if not text.strip():
        raise bad_url(text, "is empty")
    if "\x00" in text:
        raise bad_url(text, "contains a NUL character")
    lowered = text.lower()
    if any(lowered.startswith(f"{scheme}//") for scheme in schemes()):
        raise bad_url(text, "looks like a URL with the ':' missing after the scheme")
    if not _URLISH.match(text):
        return parse_path(text)
    scheme, _, rest = text.partition(":")
    if not rest.startswith("//"):
        raise bad_url(text, f"a {scheme}: URL needs '//' after the scheme (a plain path needs no scheme)")
    backend = backend_for(scheme)
    if backend is None:
        raise bad_url(text, f"unsupported scheme {scheme.lower()!r}", rule="scheme")
    return backend.parse(text)


def parse_path(text: str) -> StoreURL:
    """A plain path: the files store at that directory (relative to the current directory, ``~`` expanded)."""
    return StoreURL("files", Path(os.path.abspath(os.path.expanduser(text))), text=text)


def _split(text: str) -> tuple[str, str, str, str]:
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # an unbalanced '[' in the host
        raise bad_url(text, f"cannot be parsed ({exc})") from None
    return parts.netloc, parts.path, parts.query, parts.fragment


def parse_file_url(text: str) -> StoreURL:
    """A ``file://`` URL: the files store at an absolute local path."""
    netloc, path, query, fragment = _split(text)
    if netloc not in ("", "localhost"):
        raise bad_url(text, f"file URLs name a local path, not a host ({netloc!r})", rule="host")
    if query or fragment:
        raise bad_url(text, "file URLs take no '?' or '#' part")
    path = unquote(path)
    if not path.startswith("/"):
        raise bad_url(text, "file URLs need an absolute path (file:///abs/dir)")
    return StoreURL("files", Path(path), text=text)


def parse_sqlite_url(text: str) -> StoreURL:
    """A ``sqlite://`` URL: the database file, absolute, or relative to the cwd or home."""
    netloc, path, query, fragment = _split(text)
    if query or fragment:
        raise bad_url(text, "SQLite URLs take no '?' or '#' part")
    path = unquote(path)
    if netloc in (".", "..", "~"):
        if path in ("", "/"):
            raise bad_url(text, "names no database file")
        where = Path(os.path.abspath(os.path.expanduser(netloc + path)))
    elif netloc in ("", "localhost"):
        if path.startswith("//"):
            path = path[1:]  # sqlite:////abs/path: SQLAlchemy's spelling of the same absolute path
        if path.strip("/") == "":
            raise bad_url(text, "names no database file")
        if path.strip("/") == ":memory:":
            raise bad_url(
                text,
                "an in-memory SQLite database keeps nothing once the process exits; phaselog's records must "
                "be durable (use a file, e.g. sqlite:///tmp/ledger.db)",
                rule="memory",
            )
        where = Path(path)
    else:
        raise bad_url(
            text,
            f"{netloc!r} stands where a host would; write sqlite:///abs/path.db (three slashes) or "
            "sqlite://./relative/path.db",
            rule="host",
        )
    if path.endswith("/"):
        raise bad_url(text, "names a directory, not a database file")
    return StoreURL("sqlite", where, text=text)


def parse_postgres_url(text: str) -> StoreURL:
    """A ``postgresql://`` (or ``postgres://``) URL: libpq's text, and phaselog's ``schema=`` taken out."""
    netloc, _path, query, fragment = _split(text)
    if fragment:
        raise bad_url(text, "PostgreSQL URLs take no '#' part")
    hostspec = netloc.rpartition("@")[2]
    for one in filter(None, hostspec.split(",")):  # libpq allows host1:port1,host2:port2
        _check_host_port(text, one)
    # phaselog's own parameter is removed from the query text; every other parameter is kept
    # exactly as written (re-encoding would turn options=-c%20x into options=-c+x, which libpq
    # does not decode back).
    kept: list[str] = []
    schema: str | None = None
    for piece in query.split("&") if query else []:
        key, _, val = piece.partition("=")
        if unquote(key) != "schema":
            kept.append(piece)
            continue
        if schema is not None:
            raise bad_url(text, "schema= is given twice", rule="schema")
        schema = unquote(val)
        if not _SCHEMA_RE.fullmatch(schema):
            raise bad_url(text, f"schema={schema!r}: use 1-63 lowercase letters, digits and '_'", rule="schema")
        if schema.startswith("pg_") or schema == "information_schema":
            raise bad_url(
                text, f"schema={schema!r} is reserved for PostgreSQL's own catalogs; choose another name", rule="schema"
            )
    base = text.split("?", 1)[0]
    dsn = base + ("?" + "&".join(kept) if kept else "")
    return StoreURL("postgresql", dsn=dsn, schema=schema, text=text)


def _check_host_port(text: str, hostport: str) -> None:
    if hostport.startswith("["):
        host, sep, rest = hostport[1:].partition("]")
        if not sep or not host or not re.fullmatch(r"[0-9A-Fa-f:.%a-zA-Z]+", host):
            raise bad_url(text, f"host {hostport!r} is not a valid [IPv6] address", rule="host")
        port = rest[1:] if rest.startswith(":") else None
        if rest and port is None:
            raise bad_url(text, f"unexpected {rest!r} after the host", rule="host")
    else:
        host, sep, port_text = hostport.partition(":")
        port = port_text if sep else None
        decoded = unquote(host)
        if host and not decoded.startswith("/") and not _HOST_RE.fullmatch(decoded):
            raise bad_url(text, f"host {decoded!r} is not a valid host name or address", rule="host")
    if port is not None and (not port.isdigit() or not 1 <= int(port) <= 65535):
        raise bad_url(text, f"port {port!r} must be a number from 1 to 65535", rule="port")
