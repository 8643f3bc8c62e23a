"""``doctor --quarantine`` on the SQL stores: a damaged row is moved aside, never deleted.

The files store moves a damaged file into ``<root>/quarantine/`` with a note beside it; a SQL
store moves the damaged row into ``phaselog_quarantine`` (migration 6), one transaction that
inserts the row there — its original bytes, its key columns, where it was, why, and the SHA-256
of its body — and deletes it from its table. ``phaselog_quarantine`` is append-only: nothing
updates or deletes its rows. With the row gone the phase's latest attempt is the one before it,
so the next write proceeds (and may take the same attempt number, as on files: D18, D117).

A record row is moved only while it is still damaged (decoded again inside the transaction): a
record written after doctor looked — the freed attempt number taken again — is never moved.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import Corrupt, StoreError, UnsupportedVersion
from phaselog.stores import kernel

if TYPE_CHECKING:
    from phaselog.stores.sql.checkpoints import SqlCheckpoints
    from phaselog.stores.sql.session import Session, Transaction

_RECORD_KEY = "ticket_id = ? AND run_id = ? AND phase_ordinal = ? AND attempt = ?"
_ENTRY_KEY = "kind = ? AND ticket_id = ? AND run_id = ? AND name = ?"


def quarantine(cps: SqlCheckpoints, location: str, reason: str) -> list[dict[str, Any]]:
    """Move the damaged row at ``location`` into ``phaselog_quarantine``; one entry per move
    (none when nothing is there). StoreError when ``location`` names no row, or an intact record."""
    at = kernel.parse_location(location)
    if at is None:
        raise StoreError(f"not a record or entry location in this store: {location!r}", rule="location")
    if at.kind == "record":
        kernel.check_run_key(at.ticket_id, at.run_id)
    else:
        kernel.check_entry_key(at.kind, at.ticket_id, at.run_id or None)

    def move(tx: Transaction) -> list[dict[str, Any]]:
        tx.dialect.lock_run(tx.conn)  # writers (and another quarantine) wait until this commits
        if at.kind == "record":
            key: tuple[Any, ...] = (at.ticket_id, at.run_id, at.ordinal, at.attempt)
            row = tx.one(
                f"SELECT phase, prev_attempt, status, content_hash, body FROM phaselog_checkpoints WHERE {_RECORD_KEY}",
                key,
            )
            if row is None or row[0] != at.phase:
                return []
            phase, prev, status, column_hash, body = row
            try:
                cps.stored(at.ticket_id, at.run_id, at.ordinal, phase, at.attempt, status, body, column_hash)
            except (Corrupt, UnsupportedVersion):
                pass  # damaged: what may be moved
            else:
                raise StoreError(f"{location} reads as an intact record: not moved", rule="not_damaged")
            origin, where = "phaselog_checkpoints", _RECORD_KEY
            columns = dict(zip(("ticket_id", "run_id", "phase_ordinal", "attempt"), key, strict=True))
            columns.update(phase=phase, prev_attempt=prev, status=status, content_hash=column_hash)
        else:
            key = (at.kind, at.ticket_id, at.run_id, at.name)
            row = tx.one(f"SELECT body FROM phaselog_entries WHERE {_ENTRY_KEY}", key)
            if row is None:
                return []
            body = row[0]
            origin, where = "phaselog_entries", _ENTRY_KEY
            columns = dict(zip(("kind", "ticket_id", "run_id", "name"), key, strict=True))
        (seq,) = tx.one("SELECT COALESCE(MAX(seq), 0) + 1 FROM phaselog_quarantine") or (0,)
        tx.execute(
            "INSERT INTO phaselog_quarantine (seq, location, origin, row_columns, body, sha256, reason, "
            "moved_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                int(seq),
                location,
                origin,
                json.dumps(columns, sort_keys=True),
                body,
                hashlib.sha256(str(body).encode("utf-8", "surrogatepass")).hexdigest(),
                reason,
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            ),
        )
        tx.execute(f"DELETE FROM {origin} WHERE {where}", key)
        to = f"phaselog_quarantine/{int(seq)}"
        return [{"from": location, "to": to, "note": to, "reason": reason}]

    return cps.session.write(move)


def quarantined(session: Session, ticket_id: str, run_id: str) -> dict[tuple[str, int], str | None]:
    """The run's checkpoint rows in ``phaselog_quarantine``: (phase, attempt) → their recorded content hash."""
    kernel.check_run_key(ticket_id, run_id)
    out: dict[tuple[str, int], str | None] = {}
    rows = session.query(
        "SELECT row_columns FROM phaselog_quarantine WHERE origin = ? AND location LIKE ? ORDER BY seq",
        ("phaselog_checkpoints", f"{ticket_id}/{run_id}/%"),
    )
    for (raw,) in rows:
        try:
            cols = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(cols, dict) or (cols.get("ticket_id"), cols.get("run_id")) != (ticket_id, run_id):
            continue
        phase, attempt, recorded = cols.get("phase"), cols.get("attempt"), cols.get("content_hash")
        if isinstance(phase, str) and isinstance(attempt, int):
            out[(phase, attempt)] = recorded if isinstance(recorded, str) else None
    return out
