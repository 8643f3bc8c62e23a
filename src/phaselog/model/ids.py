"""Ticket and run identifiers: validated before they ever touch a path or a query.

Ticket ids: 1-64 characters from ``[A-Za-z0-9._-]``, not starting with ``.`` or ``-``, with no
``..``. That set covers ticket keys (``PROJ-1234``), slugs and dataset names, and it is safe as
one path segment on every filesystem we support.

Run ids: any spelling of a UUID is normalised to its lowercase hyphenated form; anything else
maps to UUID v5 in the seed tool's namespace, so phaselog and the seed tool agree on disk.
"""

from __future__ import annotations

import hashlib
import re
import uuid

from phaselog.model.errors import InvalidIdentifier

#: Namespace the seed tool (omnibase_infra ``_normalize_run_id``) uses for short run ids.
RUN_ID_NAMESPACE = uuid.UUID("e176b05f-f761-5a9d-9a51-ac6d5a3566ee")

TICKET_ID_MAX = 64
_TICKET_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
_CANON_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
RUN_ID_MAX = 256
_NAMESPACE_BYTES = RUN_ID_NAMESPACE.bytes
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _parse_uuid(value: str) -> uuid.UUID | None:
    """``uuid.UUID(value)``, or None where it would refuse it; a name that cannot be a UUID's 32
    hex digits (as ``uuid.UUID`` strips a spelling) is told apart without raising and catching."""
    digits = value.replace("urn:", "").replace("uuid:", "").strip("{}").replace("-", "")
    if len(digits) != 32:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def validate_ticket_id(ticket_id: object, *, field: str = "ticket_id") -> str:
    """Return ``ticket_id`` if it is safe as one path segment, else raise InvalidIdentifier."""
    if not isinstance(ticket_id, str):
        raise InvalidIdentifier(f"{field}: must be a string", field=field, rule="type")
    if not ticket_id:
        raise InvalidIdentifier(f"{field}: must not be empty", field=field, rule="non_empty")
    if len(ticket_id) > TICKET_ID_MAX:
        raise InvalidIdentifier(
            f"{field}: at most {TICKET_ID_MAX} characters (got {len(ticket_id)})",
            field=field,
            rule="max_length",
        )
    if ticket_id[0] in ".-":
        raise InvalidIdentifier(
            f"{field}: must not start with '.' or '-' (got {ticket_id!r})",
            field=field,
            rule="leading_char",
        )
    if ".." in ticket_id:
        raise InvalidIdentifier(f"{field}: must not contain '..' (got {ticket_id!r})", field=field, rule="traversal")
    if not _TICKET_RE.fullmatch(ticket_id):
        bad = next((c for c in ticket_id if not (c.isascii() and (c.isalnum() or c in "._-"))), "")
        raise InvalidIdentifier(
            f"{field}: only letters, digits, '.', '_' and '-' are allowed (found {bad!r} in {ticket_id!r})",
            field=field,
            rule="charset",
        )
    return ticket_id


def given_run_name(run_id: object) -> str | None:
    """The run id as the caller gave it when it is a name (``nightly-1``), not a UUID; else None.

    A name is kept with its run (``Checkpoint.run_name``), since its UUID v5 cannot be turned back.
    """
    if not isinstance(run_id, str) or _CANON_UUID_RE.fullmatch(run_id):
        return None
    return run_id if _parse_uuid(run_id) is None else None  # else another spelling of a UUID


def normalize_run_id(run_id: object, *, field: str = "run_id") -> str:
    """Return the canonical UUID string for ``run_id``.

    UUIDs in any spelling (upper case, braces, ``urn:uuid:``, no hyphens) are normalised;
    any other non-empty string maps to ``uuid5(RUN_ID_NAMESPACE, run_id)``.
    """
    if isinstance(run_id, uuid.UUID):
        return str(run_id)
    if not isinstance(run_id, str):
        raise InvalidIdentifier(f"{field}: must be a string", field=field, rule="type")
    if _CANON_UUID_RE.fullmatch(run_id):  # fast path: already canonical
        return run_id
    if not run_id.strip():
        raise InvalidIdentifier(f"{field}: must not be empty", field=field, rule="non_empty")
    if len(run_id) > RUN_ID_MAX:
        raise InvalidIdentifier(f"{field}: at most {RUN_ID_MAX} characters", field=field, rule="max_length")
    if _CONTROL_RE.search(run_id):
        raise InvalidIdentifier(f"{field}: control characters are not allowed", field=field, rule="charset")
    parsed = _parse_uuid(run_id)
    return _uuid5(run_id) if parsed is None else str(parsed)


def _uuid5(name: str) -> str:
    """``str(uuid.uuid5(RUN_ID_NAMESPACE, name))`` without building UUID objects (a third of the cost)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name.encode("utf-8"), usedforsecurity=False).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def is_canonical_uuid(value: str) -> bool:
    """Tell whether ``value`` is a lowercase hyphenated UUID (a run directory name)."""
    return bool(_CANON_UUID_RE.fullmatch(value))


def run_name_of(run_id: str, *names: str | None) -> str | None:
    """The name run ``run_id`` was given: the first of ``names`` that is one, else None.

    The one decision of a run's name, for every surface (CLI, dashboard, queue, worker, JSON's
    ``run_name``). ``names`` are where a name is kept, most trusted first: the run's records
    (``Checkpoint.run_name``), its queue row, the id the caller typed. A candidate counts only when
    it is a name (not a UUID) whose UUID v5 is ``run_id``, so a run is never shown by another's name.
    """
    for name in names:
        if name and given_run_name(name) is not None and normalize_run_id(name) == run_id:
            return name
    return None


def run_label(run_id: str, *names: str | None, short: bool = False) -> str:
    """How a run is shown: its name (:func:`run_name_of`), else its UUID (``short``: ``8f9bade3…``)."""
    name = run_name_of(run_id, *names)
    if name is not None:
        return name
    return f"{run_id[:8]}…" if short and len(run_id) > 9 else run_id


def run_title(run_id: str, *names: str | None) -> str:
    """A run in a title: ``nightly-1 (8f9bade3…)`` (its name, then its UUID's first digits), else its UUID."""
    name = run_name_of(run_id, *names)
    return f"{name} ({run_id[:8]}…)" if name is not None else run_id
