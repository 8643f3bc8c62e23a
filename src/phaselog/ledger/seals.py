"""Seals and pruned-run records: the ticket-level ``tree`` entries that keep a ticket's leaf order (D320, D321).

:mod:`phaselog.ledger.leaves` reads them; ``anchor`` writes seals, ``prune`` the pruned-run
records (before it removes a run of an anchored ticket whole). Formats: docs/anchoring.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import AlreadyExists
from phaselog.model.records import format_timestamp

if TYPE_CHECKING:
    from phaselog.stores.base import Store

__all__ = ["SEAL_KIND", "SEAL_VERSION", "is_anchored", "micros", "put_numbered", "record_run_pruned", "run_pruned_hash"]

#: The ticket-level entry kind of seals and pruned-run records.
SEAL_KIND = "tree"
SEAL_VERSION = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def micros(at: datetime) -> int:
    """Microseconds since the epoch (the history's time key)."""
    return (at - _EPOCH) // _MICRO


def run_pruned_hash(doc: dict[str, Any]) -> str:
    """The content hash of a pruned-run record: SHA-256 of its canonical JSON without ``content_hash``."""
    blob = json.dumps({k: v for k, v in doc.items() if k != "content_hash"}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def body_of(doc: dict[str, Any]) -> bytes:
    """A seal's stored bytes."""
    return (json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def put_numbered(store: Store, ticket_id: str, seq: int, doc: dict[str, Any]) -> bool:
    """Store ``doc`` as the ticket's ``tree`` entry ``seq``; False when another writer took the number."""
    try:
        store.put_entry(SEAL_KIND, ticket_id, None, f"{seq:06d}", body_of(doc))
    except AlreadyExists:
        return False
    return True


def is_anchored(store: Store, ticket_id: str) -> bool:
    """Has any anchoring sealed leaves of this ticket (so a pruned run must be recorded)?"""
    return bool(store.entry_names(SEAL_KIND, ticket_id, None))


def record_run_pruned(store: Store, ticket_id: str, run_ids: Iterable[str], at: datetime) -> None:
    """Record that these runs of an anchored ticket are pruned whole (D321).

    The record is a leaf itself, so removing it later is caught like removing any entry.
    """
    if not is_anchored(store, ticket_id):
        return  # no head covers any leaf of the ticket: nothing to account for
    for run_id in run_ids:
        for _ in range(20):
            names = [n for n in store.entry_names(SEAL_KIND, ticket_id, None) if n.isdigit()]
            doc: dict[str, Any] = {
                "schema_version": SEAL_VERSION,
                "kind": "phaselog.tree",
                "type": "run_pruned",
                "ticket_id": ticket_id,
                "run_id": run_id,
                "at": format_timestamp(at),
                "at_us": micros(at),
            }
            doc["content_hash"] = run_pruned_hash(doc)
            if put_numbered(store, ticket_id, max([0, *map(int, names)]) + 1, doc):
                break
