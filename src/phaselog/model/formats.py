"""String formats phaselog enforces: in the record header and as JSON Schema ``format``s.

Each checker returns ``None`` when the value is fine, else a short reason naming the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from phaselog.model._lazyre import LazyPattern

_GIT_SHA = LazyPattern(r"[0-9a-f]{7,40}")
_URI = LazyPattern(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\x00-\x1f\x7f-\x9f]+")
_RFC3339 = LazyPattern(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_DRIVE = LazyPattern(r"[A-Za-z]:")
_CONTROL = LazyPattern(r"[\x00-\x1f\x7f-\x9f]")


def git_sha(value: str) -> str | None:
    """Check a commit SHA: 7-40 lowercase hex characters."""
    if _GIT_SHA.fullmatch(value):
        return None
    return f"must be 7-40 lowercase hex characters (got {value!r})"


def relative_path(value: str) -> str | None:
    """Check an artifact path: relative, normalised, no '..', no backslashes or drive letters."""
    if not value:
        return "must not be empty"
    if _CONTROL.search(value):  # C0, DEL and C1
        return "must not contain control characters"
    if "\\" in value:
        return f"must use '/' separators, not backslashes (got {value!r})"
    if value.startswith("/") or _DRIVE.match(value):
        return f"must be relative, not absolute (got {value!r})"
    parts = value.split("/")
    if ".." in parts:
        return f"must not contain a '..' segment (got {value!r})"
    if any(p in ("", ".") for p in parts):
        return f"must be normalised: no empty or '.' segments, no trailing '/' (got {value!r})"
    return None


def uri(value: str) -> str | None:
    """Check a URI: a scheme followed by a non-empty, space-free remainder (RFC 3986 shape)."""
    if _URI.fullmatch(value):
        return None
    return f"must be an absolute URI with a scheme, e.g. https://… (got {value!r})"


def date_time(value: str) -> str | None:
    """Check an RFC 3339 date-time with a timezone (``Z`` or ``±hh:mm``)."""
    if not _RFC3339.fullmatch(value):
        return f"must be an RFC 3339 date-time with a timezone, e.g. 2026-01-31T12:00:00Z (got {value!r})"
    try:
        datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
    except ValueError:
        return f"is not a real date-time (got {value!r})"
    return None


CHECKERS: dict[str, Callable[[str], str | None]] = {
    "git-sha": git_sha,
    "relative-path": relative_path,
    "uri": uri,
    "date-time": date_time,
}
