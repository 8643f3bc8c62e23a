"""Anchoring's seals in an export (D324): carried, so a copy keeps the leaf order and the pruned leaves.

A ticket's ``tree`` entries (seals and pruned-run records, :mod:`phaselog.ledger.seals`) travel as
export lines of kind ``tree`` after the ticket's markers; their ``content_hash`` is the SHA-256 of
the document's canonical JSON. Import checks each line's shape and hash, and stores a seal under
its number when the target has none there; the same seal there is skipped, a different one is
refused (the target was anchored on its own: anchor it anew). Seals are trusted for nothing but
the order (the witness's heads decide), so import does not check them against the records.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from phaselog.ledger.seals import SEAL_KIND, SEAL_VERSION, body_of
from phaselog.model.errors import PhaselogError
from phaselog.model.ids import validate_ticket_id
from phaselog.stores.base import Store
from phaselog.stores.kernel import entry_location
from phaselog.transfer.importing import Item, Plan
from phaselog.transfer.lines import bad_line

__all__ = ["is_seal_line", "parse_seal_line", "plan_seals", "seal_body", "seal_hash"]

_NAME = re.compile(r"\d{6,}")


def seal_hash(document: Any) -> str:
    """The content hash of a seal's document: SHA-256 of its canonical JSON."""
    blob = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def is_seal_line(line: Any) -> bool:
    """Is this export line one of a ticket's seals?"""
    return isinstance(line, dict) and line.get("type") == "entry" and line.get("kind") == SEAL_KIND


def parse_seal_line(n: int, line: dict[str, Any]) -> Item:
    """Check one seal line on its own; InvalidRecord naming the line and the field."""
    doc = line.get("document")
    if not isinstance(doc, dict) or doc.get("kind") != "phaselog.tree" or doc.get("schema_version") != SEAL_VERSION:
        raise bad_line(
            n, f"document: must be a phaselog.tree document of schema_version {SEAL_VERSION}", "document", "type"
        )
    ticket_id, name = line.get("ticket_id"), line.get("name")
    try:
        validate_ticket_id(ticket_id if isinstance(ticket_id, str) else "")
    except PhaselogError as exc:
        raise bad_line(n, exc.message, "ticket_id", str(exc.context.get("rule") or "ticket_id")) from None
    if line.get("run_id") is not None or doc.get("ticket_id") != ticket_id:
        raise bad_line(
            n,
            "a seal belongs to its ticket: run_id must be null, document.ticket_id the line's",
            "run_id",
            "line_mismatch",
        )
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise bad_line(n, "name: must be six or more digits", "name", "entry_name")
    actual = seal_hash(doc)
    if line.get("content_hash") != actual:
        raise bad_line(
            n, f"content hash mismatch (the document hashes to {actual[:12]})", "content_hash", "content_hash"
        )
    return Item(n, SEAL_KIND, str(ticket_id), None, name, actual, doc, None)


def seal_body(item: Item) -> bytes:
    """The bytes a seal is stored as (the form anchoring writes)."""
    return body_of(item.document)


def plan_seals(store: Store, ticket_id: str, items: Iterable[Item], plan: Plan) -> None:
    """Store each seal the target lacks; skip the same one; refuse another under the same number."""
    have = {name: data for name, _, data in store.entries(SEAL_KIND, ticket_id, None)}
    for item in items:
        there = have.get(item.name)
        if there is None:
            plan.store.append(item)
        elif isinstance(there, bytes) and there == seal_body(item):
            plan.skipped += 1
        else:
            path = entry_location(SEAL_KIND, ticket_id, None, item.name)
            plan.refuse(
                item, path, "a different seal already has this number here (anchored on its own): left as it is"
            )
