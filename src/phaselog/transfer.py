"""Moving data between stores: export (JSON Lines), import (verifying every hash), copy.

Each line is one record with its content hash, in a stable order: tickets sorted; per ticket its
marker revisions, then per run (sorted) its checkpoints by (phase ordinal, attempt), its progress
events, approvals and prune notes by name. Import recomputes every hash before writing anything
of that record and is idempotent: a record already present with the same hash is skipped; one
present with another hash is reported as a conflict and left as it is.

    {"type": "checkpoint", "ticket_id": …, "run_id": …, "content_hash": …, "document": {…}}
    {"type": "entry", "kind": "progress", "ticket_id": …, "run_id": …, "name": …, "content_hash": …,
     "document": {…}}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from phaselog.errors import AlreadyExists, Conflict, Corrupt, InvalidRecord, PhaselogError
from phaselog.records import Approval, Checkpoint, Marker, ProgressEvent, checkpoint_from_seed
from phaselog.stores.base import Damaged, Store

EXPORT_VERSION = 1
_ENTRY_TYPES: dict[str, Any] = {"progress": ProgressEvent, "approvals": Approval, "markers": Marker}


def entry_hash(kind: str, document: Any) -> str:
    """The content hash of an audit entry's document (as its record class computes it)."""
    if kind == "pruned":
        from phaselog.pruned import document_hash

        return document_hash(document)
    return str(_ENTRY_TYPES[kind].from_json(document).content_hash)


def _checkpoint_document(store: Store, record: Checkpoint) -> dict[str, Any]:
    from phaselog.stores.files import _meta_bytes

    doc: dict[str, Any] = json.loads(_meta_bytes(record, None))
    doc.pop("checkpoint_file_sha256", None)
    return doc


def export_records(store: Store, ticket_id: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield every record of a ticket (or of the store) as export lines, in a stable order."""
    tickets = [ticket_id] if ticket_id is not None else store.tickets()
    for tid in tickets:
        yield from _entry_lines(store, "markers", tid, None)
        for rid in store.runs(tid):
            for item in store.iter_records(tid, rid):
                if isinstance(item, Damaged):
                    raise Corrupt(
                        f"cannot export {item.location}: {item.message} (run `phaselog doctor`)", path=item.location
                    )
                rec = item.record
                yield {
                    "type": "checkpoint",
                    "ticket_id": tid,
                    "run_id": rid,
                    "content_hash": rec.content_hash,
                    "document": _checkpoint_document(store, rec),
                }
            for kind in ("progress", "approvals", "pruned"):
                yield from _entry_lines(store, kind, tid, rid)


def _entry_lines(store: Store, kind: str, ticket_id: str, run_id: str | None) -> Iterator[dict[str, Any]]:
    try:
        items = store.entries(kind, ticket_id, run_id)
    except PhaselogError:
        return
    for name, location, data in items:
        if isinstance(data, Corrupt):
            raise Corrupt(f"cannot export {location}: {data.message}", path=location)
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise Corrupt(f"cannot export {location}: not JSON ({exc})", path=location) from None
        yield {
            "type": "entry",
            "kind": kind,
            "ticket_id": ticket_id,
            "run_id": run_id,
            "name": name,
            "content_hash": entry_hash(kind, doc),
            "document": doc,
        }


@dataclass
class ImportReport:
    """What an import did."""

    added: int = 0
    skipped: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {"added": self.added, "skipped": self.skipped, "conflicts": self.conflicts}


def import_records(
    store: Store, lines: Iterable[dict[str, Any]], *, on_record: Callable[[], None] | None = None
) -> ImportReport:
    """Write export lines into ``store``; every hash is verified first. Idempotent."""
    rep = ImportReport()
    for n, line in enumerate(lines, start=1):
        where = f"line {n}"
        if not isinstance(line, dict) or line.get("type") not in ("checkpoint", "entry"):
            raise InvalidRecord(
                f"{where}: not a phaselog export record (needs type checkpoint or entry)",
                line=n,
                errors=[{"field": "type", "rule": "enum", "message": "unknown type"}],
            )
        if line["type"] == "checkpoint":
            _import_checkpoint(store, line, where, rep)
        else:
            _import_entry(store, line, where, rep)
        if on_record:
            on_record()
    return rep


def _verify(where: str, claimed: Any, actual: str) -> None:
    if claimed != actual:
        raise InvalidRecord(
            f"{where}: content hash mismatch (line says {str(claimed)[:12]}, record hashes to {actual[:12]}); "
            "nothing of this record was written",
            errors=[{"field": "content_hash", "rule": "content_hash", "message": "mismatch"}],
        )


def _import_checkpoint(store: Store, line: dict[str, Any], where: str, rep: ImportReport) -> None:
    doc = line.get("document")
    if not isinstance(doc, dict) or not isinstance(doc.get("phaselog"), dict):
        raise InvalidRecord(f"{where}: checkpoint document missing", errors=[])
    try:
        cp, _ = checkpoint_from_seed(
            doc.get("checkpoint"), phase_ordinal=int(doc["phaselog"].get("phase_ordinal", 0)), meta=doc["phaselog"]
        )
    except (Corrupt, ValueError, TypeError) as exc:
        raise InvalidRecord(f"{where}: {exc}", errors=[]) from None
    _verify(where, line.get("content_hash"), cp.content_hash)
    _verify(where, doc.get("content_hash"), cp.content_hash)
    refs = [r for r in store.attempts(cp.ticket_id, cp.run_id) if r.phase_ordinal == cp.phase_ordinal]
    if any(r.attempt_number == cp.attempt_number for r in refs):
        existing = store.get(cp.ticket_id, cp.run_id, cp.phase_ordinal, cp.phase, cp.attempt_number).record
        if existing.content_hash == cp.content_hash:
            rep.skipped += 1
        else:
            rep.conflicts.append(
                {
                    "line": where,
                    "path": store.location(cp),
                    "message": "a different record already has this attempt; left as it is",
                }
            )
        return
    latest = max((r.attempt_number for r in refs), default=0)
    if cp.attempt_number < latest:
        rep.conflicts.append(
            {
                "line": where,
                "path": store.location(cp),
                "message": f"attempt {cp.attempt_number} is below the stored latest {latest}",
            }
        )
        return
    try:
        store.append(cp, expected_latest=latest)
    except (AlreadyExists, Conflict) as exc:
        rep.conflicts.append({"line": where, "path": store.location(cp), "message": exc.message})
        return
    rep.added += 1


def _import_entry(store: Store, line: dict[str, Any], where: str, rep: ImportReport) -> None:
    kind, doc = line.get("kind"), line.get("document")
    if kind not in (*_ENTRY_TYPES, "pruned") or not isinstance(doc, dict):
        raise InvalidRecord(f"{where}: unknown entry kind {kind!r}", errors=[])
    try:
        actual = entry_hash(str(kind), doc)
    except (Corrupt, ValueError, TypeError) as exc:
        raise InvalidRecord(f"{where}: {exc}", errors=[]) from None
    _verify(where, line.get("content_hash"), actual)
    body = (json.dumps(doc, ensure_ascii=False) + "\n").encode()
    ticket_id, run_id, name = str(line.get("ticket_id")), line.get("run_id"), str(line.get("name"))
    try:
        store.put_entry(str(kind), ticket_id, run_id, name, body)
    except AlreadyExists:
        same = [d for n, _loc, d in store.entries(str(kind), ticket_id, run_id, name) if n == name]
        try:
            existing = json.loads(same[0]) if same and not isinstance(same[0], Corrupt) else None
        except ValueError:
            existing = None
        if existing is not None and entry_hash(str(kind), existing) == actual:
            rep.skipped += 1
        else:
            rep.conflicts.append(
                {
                    "line": where,
                    "path": f"{ticket_id}/{run_id or ''}/.{kind}/{name}",
                    "message": "a different entry already has this name; left as it is",
                }
            )
        return
    rep.added += 1


def read_lines(stream: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Parse JSON Lines, naming the line of any error."""
    for n, raw in enumerate(stream, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            yield json.loads(text)
        except ValueError as exc:
            raise InvalidRecord(
                f"line {n}: not valid JSON ({exc})",
                line=n,
                errors=[{"field": f"line {n}", "rule": "json", "message": str(exc)}],
            ) from None
