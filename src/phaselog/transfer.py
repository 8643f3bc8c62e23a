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
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from phaselog.entries import Approval, Marker, ProgressEvent, entry_bytes
from phaselog.errors import AlreadyExists, Conflict, Corrupt, InvalidRecord, PhaselogError
from phaselog.limits import MAX_RECORD_BYTES, json_loads
from phaselog.records import Checkpoint
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
    from phaselog.stores.kernel import record_document

    doc: dict[str, Any] = json.loads(record_document(record))
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
    store: Store,
    lines: Iterable[Any],
    *,
    on_record: Callable[[], None] | None = None,
    pipelines_root: str | os.PathLike[str] | None = None,
) -> ImportReport:
    """Write export lines into ``store`` (see :mod:`phaselog.importing`). Idempotent.

    Every line is checked as a write checks its record, and linked to what is stored, before
    anything is stored; a bad line raises InvalidRecord naming it (nothing is stored), a record
    that does not link is refused with what depends on it (``conflicts``), the rest is stored.
    ``pipelines_root``: where the records' pipeline manifests are (``copy`` passes the source's
    root); by default the target's own, as for a write.
    """
    from phaselog.importing import Plan, check_entry_phases, parse_line, plan_markers, plan_run
    from phaselog.ledger import Ledger

    ledger = Ledger(store, pipelines_root=pipelines_root)
    items = [parse_line(n, line, ledger) for n, line in enumerate(lines, start=1)]
    check_entry_phases(items, ledger)
    plan = Plan()
    markers: dict[str, list[Any]] = {}
    runs: dict[tuple[str, str], list[Any]] = {}
    for item in items:
        if item.run_id is None:
            markers.setdefault(item.ticket_id, []).append(item)
        else:
            runs.setdefault((item.ticket_id, item.run_id), []).append(item)
    for tid, group in markers.items():
        plan_markers(ledger, tid, group, plan)
    for (tid, rid), group in runs.items():
        plan_run(ledger, tid, rid, group, plan)
    rep = ImportReport(skipped=plan.skipped, conflicts=list(plan.refused))
    for item in plan.store:
        try:
            _store(store, item)
        except (AlreadyExists, Conflict) as exc:  # a writer got there meanwhile
            rep.conflicts.append({"line": item.where, "path": item.ticket_id, "message": exc.message})
        else:
            rep.added += 1
        if on_record:
            on_record()
    if on_record:
        for _ in range(len(items) - len(plan.store)):
            on_record()
    rep.conflicts.sort(key=lambda c: int(str(c["line"]).split()[-1]))
    return rep


def _store(store: Store, item: Any) -> None:
    if item.type == "checkpoint":
        cp = item.record
        refs = [
            r.attempt_number for r in store.attempts(cp.ticket_id, cp.run_id) if r.phase_ordinal == cp.phase_ordinal
        ]
        store.append(cp, expected_latest=max(refs, default=0))
        return
    if item.type == "pruned":
        note = item.record.note
        body = note.body() if note is not None else (json.dumps(item.document, ensure_ascii=False) + "\n").encode()
    else:
        body = entry_bytes(item.record)
    store.put_entry(item.type, item.ticket_id, item.run_id, item.name, body)


#: The longest export line import reads (a record at the size cap, JSON-escaped, with room).
MAX_LINE_BYTES = 8 * MAX_RECORD_BYTES


def read_lines(stream: Any) -> Iterator[Any]:
    """Parse JSON Lines from a binary (or text) stream, naming the line of any error.

    Each line must be UTF-8 JSON of at most MAX_LINE_BYTES; NaN, Infinity, numbers that overflow
    and nesting too deep for the parser are refused as InvalidRecord, never a crash.
    """
    n = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        n += 1
        if len(raw) > MAX_LINE_BYTES:
            raise _line_error(n, f"longer than {MAX_LINE_BYTES} bytes", "max_line_bytes")
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _line_error(n, f"not UTF-8 text (byte {exc.start})", "utf8") from None
        text = raw.strip()
        if not text:
            continue
        try:
            yield json_loads(text)
        except RecursionError:
            raise _line_error(n, "nested too deeply", "json_depth") from None
        except ValueError as exc:
            raise _line_error(n, f"not valid JSON ({exc})", "json") from None


def _line_error(n: int, message: str, rule: str) -> InvalidRecord:
    return InvalidRecord(
        f"line {n}: {message}; nothing was imported",
        line=n,
        rule=rule,
        errors=[{"field": f"line {n}", "rule": rule, "message": message}],
    )
