"""Import: every line checked exactly as a write checks it, and linked to what is stored, first.

Two passes before anything is stored:

1. **Each line on its own** (:func:`parse_line`): the shape of an export line, the record's content
   hash (line and document), identifiers that agree between the line and the record, the entry
   name the record would be stored under, and :func:`phaselog.model.validation.check_record` against the
   run's pipeline — the rules ``write`` applies. A line that fails is an :class:`InvalidRecord`
   naming the line and the field; nothing of the import is stored.
2. **Each run against the store** (:func:`plan_run`): a record whose attempt is already stored is
   skipped when it is the same record and a conflict otherwise; a new record must link to what is
   stored (or imported before it, or noted as pruned): its ``prev_hash`` to the attempt before it,
   its ``basis`` to the checkpoints it names, an approval to the checkpoint it judges, a progress
   event to the event before it, a prune note to the note before it and its content to the records
   around it (:func:`phaselog.ledger.prune_notes.check_notes`). A record that does not link is refused, and
   with it everything that depends on it; the rest is stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phaselog.ledger.prune_notes import (
    NoteEntry,
    PrunedIndex,
    PruneNote,
    check_notes,
    is_legacy,
    parse_note,
    read_notes,
)
from phaselog.model.decoding import checkpoint_from_seed
from phaselog.model.entries import Approval, Marker, ProgressEvent
from phaselog.model.errors import Corrupt, PhaselogError, UnsupportedVersion
from phaselog.model.ids import is_canonical_uuid, validate_ticket_id
from phaselog.model.limits import json_loads
from phaselog.model.logs import LOGS, KeptLog, LogChunk
from phaselog.model.records import Checkpoint
from phaselog.model.validation import check_record
from phaselog.stores.kernel import entry_location
from phaselog.stores.names import (
    approval_name,
    event_name,
    log_chunk_name,
    log_end_name,
    marker_name,
    note_name,
    parse_note_name,
)
from phaselog.transfer.lines import bad_line
from phaselog.transfer.manifests import resolve

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger
    from phaselog.stores.base import Store

ENTRY_TYPES: dict[str, Any] = {"progress": ProgressEvent, "approvals": Approval, "markers": Marker, LOGS: LogChunk}


def entry_type(kind: str, doc: Any) -> Any:
    """The record class of an entry of ``kind`` (a log entry: a chunk, or the kept log its ``kind`` names)."""
    if kind == LOGS and isinstance(doc, Mapping) and doc.get("kind") == KeptLog.KIND:
        return KeptLog
    return ENTRY_TYPES[kind]


@dataclass
class Item:
    """One parsed, self-consistent export line."""

    line: int
    type: str  # "checkpoint" or the entry kind
    ticket_id: str
    run_id: str | None
    name: str
    content_hash: str
    document: dict[str, Any]
    record: Any  # Checkpoint, ProgressEvent, Approval, Marker, or NoteEntry (prune notes)

    @property
    def where(self) -> str:
        """``line N``."""
        return f"line {self.line}"


def _same(n: int, line: Mapping[str, Any], key: str, value: Any) -> None:
    if line.get(key) != value:
        raise bad_line(n, f"{key} {line.get(key)!r} does not match the record's {value!r}", key, "line_mismatch")


def parse_line(n: int, line: Any, ledger: Ledger, manifests: Mapping[tuple[str, str], Any] | None = None) -> Item:
    """Check one export line on its own, exactly as a write would check its record.

    ``manifests``: the pipelines of the import's own ``pipeline`` lines (phaselog.transfer.manifests),
    used first for the records that name them."""
    if not isinstance(line, dict) or line.get("type") not in ("checkpoint", "entry"):
        raise bad_line(n, "not a phaselog export record (needs type checkpoint or entry)", "type", "enum")
    doc = line.get("document")
    if not isinstance(doc, dict):
        raise bad_line(n, "document: must be an object", "document", "type")
    claimed = line.get("content_hash")
    if line["type"] == "checkpoint":
        return _parse_checkpoint(n, line, doc, claimed, ledger, manifests or {})
    return _parse_entry(n, line, doc, claimed, ledger)


def _check_hash(n: int, claimed: Any, actual: str) -> None:
    if claimed != actual:
        raise bad_line(
            n,
            f"content hash mismatch (line says {str(claimed)[:12]}, record hashes to {actual[:12]})",
            "content_hash",
            "content_hash",
        )


def _parse_checkpoint(
    n: int, line: dict[str, Any], doc: dict[str, Any], claimed: Any, ledger: Ledger, manifests: Mapping[Any, Any]
) -> Item:
    meta = doc.get("phaselog")
    if not isinstance(meta, dict):
        raise bad_line(n, "document.phaselog: must be an object", "document.phaselog", "type")
    try:
        cp, _ = checkpoint_from_seed(doc.get("checkpoint"), phase_ordinal=1, meta=meta)
    except (Corrupt, UnsupportedVersion) as exc:
        raise bad_line(
            n, exc.message, str(exc.context.get("field") or "document"), str(exc.context.get("rule") or "record")
        ) from None
    _check_hash(n, claimed, cp.content_hash)
    if "content_hash" in doc:
        _check_hash(n, doc["content_hash"], cp.content_hash)
    _same(n, line, "ticket_id", cp.ticket_id)
    _same(n, line, "run_id", cp.run_id)
    pipeline = _pipeline(n, ledger, cp.pipeline, manifests)
    report = check_record(cp, pipeline, now=ledger.clock())
    if report.errors:
        first = report.errors[0]
        raise bad_line(n, "; ".join(i.text() for i in report.errors), first.field, first.rule)
    return Item(n, "checkpoint", cp.ticket_id, cp.run_id, "", cp.content_hash, doc, cp)


def _pipeline(n: int, ledger: Ledger, ref: Any, manifests: Mapping[Any, Any]) -> Any:
    name = ref.name if ref is not None else None
    try:
        return resolve(ledger, dict(manifests), ref)
    except PhaselogError as exc:
        raise bad_line(
            n,
            f"pipeline {name!r} is not known here ({exc.message}); add its manifest before importing",
            "pipeline",
            "unknown_pipeline",
        ) from None


def _parse_entry(n: int, line: dict[str, Any], doc: dict[str, Any], claimed: Any, ledger: Ledger) -> Item:
    kind = line.get("kind")
    if kind not in (*ENTRY_TYPES, "pruned"):
        raise bad_line(n, f"kind {kind!r} is not one of progress, approvals, markers, pruned, logs", "kind", "enum")
    body = {k: v for k, v in doc.items() if k != "content_hash"}
    try:
        if kind == "pruned":
            record: Any = _parse_note(n, line, doc)
            actual = record.content_hash
        else:
            record = entry_type(str(kind), body).from_json(body)
            actual = record.content_hash
    except (Corrupt, UnsupportedVersion) as exc:
        raise bad_line(
            n, exc.message, str(exc.context.get("field") or "document"), str(exc.context.get("rule") or "record")
        ) from None
    _check_hash(n, claimed, actual)
    if "content_hash" in doc:
        _check_hash(n, doc["content_hash"], actual)
    ticket_id = line.get("ticket_id")
    if not isinstance(ticket_id, str):
        raise bad_line(n, "ticket_id: must be a string", "ticket_id", "type")
    try:
        validate_ticket_id(ticket_id)
    except PhaselogError as exc:
        raise bad_line(n, exc.message, "ticket_id", str(exc.context.get("rule") or "ticket_id")) from None
    run_id = line.get("run_id")
    if kind == "markers":
        if run_id is not None:
            raise bad_line(n, "run_id: a ticket marker belongs to no run (must be null)", "run_id", "line_mismatch")
        _same(n, line, "ticket_id", record.ticket_id)
        name = marker_name(record.revision)
    else:
        if not isinstance(run_id, str) or not is_canonical_uuid(run_id):
            raise bad_line(n, "run_id: must be a canonical UUID", "run_id", "run_id")
        if kind == "pruned":
            name = note_name(record.seq)
            if record.note is not None:
                _same(n, line, "ticket_id", record.note.ticket_id)
                _same(n, line, "run_id", record.note.run_id)
        else:
            _same(n, line, "ticket_id", record.ticket_id)
            _same(n, line, "run_id", record.run_id)
            if kind == "progress":
                name = event_name(record.phase_ordinal, record.phase, record.attempt_number, record.seq)
            elif kind == LOGS:
                at = (record.phase_ordinal, record.phase, record.attempt_number)
                name = log_chunk_name(*at, record.seq) if isinstance(record, LogChunk) else log_end_name(*at)
            else:
                name = approval_name(record.seq, record.phase_ordinal, record.phase, record.attempt_number)
    if line.get("name") != name:
        raise bad_line(n, f"name {line.get('name')!r} is not the record's name {name!r}", "name", "entry_name")
    return Item(n, str(kind), ticket_id, run_id, name, actual, doc, record)


def _parse_note(n: int, line: dict[str, Any], doc: dict[str, Any]) -> NoteEntry:

    name = line.get("name")
    if not isinstance(name, str) or parse_note_name(name) is None:
        raise bad_line(n, f"name {name!r} is not a prune note name (six digits)", "name", "entry_name")
    location = entry_location("pruned", str(line.get("ticket_id")), str(line.get("run_id")), name)
    body = dict(doc)
    if not is_legacy(body):
        body.setdefault(
            "content_hash", PruneNote.from_json({k: v for k, v in body.items() if k != "content_hash"}).content_hash
        )
    return parse_note(json.dumps(body).encode(), location, name)


def check_entry_phases(items: list[Item], ledger: Ledger, manifests: Mapping[Any, Any] | None = None) -> None:
    """Progress events and approvals name a phase of their run's pipeline (the one its checkpoints
    in the import record, else the one the store knows for the run)."""
    named: dict[tuple[str, str | None], Any] = {}
    for i in items:
        if i.type == "checkpoint" and i.record.pipeline is not None:
            named.setdefault((i.ticket_id, i.run_id), i.record.pipeline)
    cache: dict[tuple[str, str | None], Any] = {}
    for i in items:
        if i.type not in ("progress", "approvals", LOGS) or i.run_id is None:
            continue  # (an event or approval always names its run: _parse_entry refuses one that does not)
        key = (i.ticket_id, i.run_id)
        if key not in cache:
            try:
                cache[key] = (
                    resolve(ledger, dict(manifests or {}), named[key])
                    if key in named
                    else ledger.pipeline_for(i.ticket_id, i.run_id)
                )
            except PhaselogError as exc:
                raise bad_line(i.line, exc.message, "pipeline", "unknown_pipeline") from None
        pl = cache[key]
        ph = pl.phase_by_ordinal(i.record.phase_ordinal)
        if ph is None or ph.name != i.record.phase:
            raise bad_line(
                i.line,
                f"phase {i.record.phase!r} (ordinal {i.record.phase_ordinal}) is not a phase of {pl.name}",
                "phase",
                "unknown_phase",
            )


# -- planning: what links, what is refused ---------------------------------------------------------
@dataclass
class Plan:
    """What to store, skip and refuse, in the order it must be stored."""

    store: list[Item] = field(default_factory=list)
    skipped: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)

    def refuse(self, item: Item, path: str, message: str) -> None:
        """Refuse one item (reported as a conflict; nothing of it is stored)."""
        self.refused.append({"line": item.where, "path": path, "message": message})


def plan_run(ledger: Ledger, ticket_id: str, run_id: str, items: list[Item], plan: Plan) -> None:
    """Decide, for one run's items, what links to the store and what is refused."""
    store = ledger.store
    stored_items, damaged = ledger.run_records(ticket_id, run_id)
    stored: dict[tuple[str, int], Checkpoint] = {
        (s.record.phase, s.record.attempt_number): s.record for s in stored_items
    }
    broken = {(d.phase, d.attempt_number) for d in damaged}
    notes = read_notes(store, ticket_id, run_id)
    incoming_notes = sorted((i for i in items if i.type == "pruned"), key=lambda i: i.record.seq)
    checkpoints = sorted((i for i in items if i.type == "checkpoint"), key=lambda i: i.record.key)
    refused_notes: set[int] = set()
    while True:
        trial = Plan()
        merged, accepted_notes = _plan_notes(notes, incoming_notes, refused_notes, trial)
        records = _plan_checkpoints(store, stored, broken, merged.records, checkpoints, trial)
        problems = check_notes(merged, records, ticket_id=ticket_id, run_id=run_id)
        bad = {i.line for i in accepted_notes if any(p[0] == i.record.location for p in problems)}
        if not bad - refused_notes:
            break
        refused_notes |= bad
    _plan_entries(ledger, ticket_id, run_id, items, records, merged, trial)
    plan.store.extend(trial.store)
    plan.skipped += trial.skipped
    plan.refused.extend(trial.refused)


def _plan_notes(
    stored: PrunedIndex, incoming: list[Item], refused: set[int], plan: Plan
) -> tuple[PrunedIndex, list[Item]]:
    merged = PrunedIndex(list(stored.notes), list(stored.damaged))
    by_seq = {n.seq: n for n in stored.notes}
    accepted: list[Item] = []
    for item in incoming:
        note: NoteEntry = item.record
        path = note.location
        if _numbered_here(plan, item, by_seq.get(note.seq), path, "prune note"):
            continue
        head = merged.head
        if item.line in refused:
            plan.refuse(item, path, "the prune note does not agree with the records it names (a forged note?)")
            continue
        if not note.legacy and (
            note.seq != (head.seq if head else 0) + 1 or note.prev_hash != (head.content_hash if head else None)
        ):
            plan.refuse(item, path, "the prune note does not chain to the run's last note")
            continue
        merged.notes.append(note)
        by_seq[note.seq] = note
        accepted.append(item)
        plan.store.append(item)
    return merged, accepted


def _plan_checkpoints(
    store: Store,
    stored: dict[tuple[str, int], Checkpoint],
    broken: set[tuple[str, int]],
    pruned: Mapping[tuple[str, int], Any],
    checkpoints: list[Item],
    plan: Plan,
) -> dict[tuple[str, int], Checkpoint]:
    """Checkpoints in (phase, attempt) order; returns what the run holds once they are stored."""
    records = dict(stored)
    refused: set[str] = set()  # content hashes refused: what names them is refused too
    for item in checkpoints:
        cp: Checkpoint = item.record
        key = (cp.phase, cp.attempt_number)
        path = store.location(cp)
        if key in stored or key in broken:
            if key in stored and stored[key].content_hash == cp.content_hash:
                plan.skipped += 1
            else:
                refused.add(cp.content_hash)
                plan.refuse(item, path, "a different record already has this attempt; left as it is")
            continue
        if key in pruned:
            if pruned[key].content_hash == cp.content_hash:
                plan.skipped += 1  # pruned here on purpose: not brought back
            else:
                refused.add(cp.content_hash)
                plan.refuse(item, path, "this attempt was pruned here with another hash; left as it is")
            continue
        newest = max((a for (ph, a) in stored if ph == cp.phase), default=0)
        why = None
        if cp.attempt_number < newest:
            why = f"attempt {cp.attempt_number} is below the stored latest {newest}"
        elif cp.pipeline is not None:  # a seed-tool record (no pipeline) carries no links
            why = _link_problem(cp, records, pruned, refused)
        if why:
            refused.add(cp.content_hash)
            plan.refuse(item, path, why)
            continue
        records[key] = cp
        plan.store.append(item)
    return records


def _link_problem(
    cp: Checkpoint,
    records: Mapping[tuple[str, int], Checkpoint],
    pruned: Mapping[tuple[str, int], Any],
    refused: set[str],
) -> str | None:
    earlier = [a for (ph, a) in [*records, *pruned] if ph == cp.phase and a < cp.attempt_number]
    if earlier:
        before = max(earlier)
        target = records.get((cp.phase, before)) or pruned.get((cp.phase, before))
        if cp.prev_hash in refused:
            return "its previous attempt was refused; it depends on it"
        if target is None or cp.prev_hash != target.content_hash:
            return (
                f"prev_hash does not match attempt {before} as stored here: it continues another history "
                "(refused with everything built on it)"
            )
    elif cp.prev_hash is not None:
        return "prev_hash names a previous attempt, but none is stored here or in the import"
    for name, entry in sorted((cp.basis or {}).items()):
        if entry.hash in refused:
            return f"basis.{name}: built on attempt {entry.attempt} of {name}, which was refused"
        target = records.get((name, entry.attempt)) or pruned.get((name, entry.attempt))
        if target is None or target.content_hash != entry.hash:
            return (
                f"basis.{name}: built on attempt {entry.attempt} of {name} with hash {entry.hash[:12]}, "
                "which is not what is stored here"
            )
    return None


def _plan_entries(
    ledger: Ledger,
    ticket_id: str,
    run_id: str,
    items: list[Item],
    records: Mapping[tuple[str, int], Checkpoint],
    notes: PrunedIndex,
    plan: Plan,
) -> None:
    store = ledger.store
    pruned = notes.records
    stored_events = ledger.event_index(ticket_id, run_id)
    chains: dict[tuple[int, int], list[Any]] = {k: list(v) for k, v in stored_events.items()}
    for item, path in _new_entries(store, "progress", ticket_id, run_id, items, plan):
        ev: ProgressEvent = item.record
        chain = chains.setdefault((ev.phase_ordinal, ev.attempt_number), [])
        prev = chain[-1] if chain else None
        if ev.seq != len(chain) + 1 or ev.prev_hash != (prev.content_hash if prev else None):
            plan.refuse(item, path, "the progress event does not follow the attempt's last event here")
            continue
        chain.append(ev)
        plan.store.append(item)
    for item, path in _new_entries(store, "approvals", ticket_id, run_id, items, plan):
        a: Approval = item.record
        target = records.get((a.phase, a.attempt_number)) or pruned.get((a.phase, a.attempt_number))
        if target is None or target.content_hash != a.checkpoint_hash:
            plan.refuse(item, path, "the approval judges a checkpoint that is not stored here (or was refused)")
            continue
        plan.store.append(item)
    plan.store.extend(item for item, _path in _new_entries(store, LOGS, ticket_id, run_id, items, plan))


def _new_entries(
    store: Store, kind: str, ticket_id: str, run_id: str, items: list[Item], plan: Plan
) -> Iterator[tuple[Item, str]]:
    """The items of ``kind`` in name order with their paths, less those the store has by that name
    (skipped if the same entry, refused otherwise)."""
    stored = set(store.entry_names(kind, ticket_id, run_id))
    for item in sorted((i for i in items if i.type == kind), key=lambda i: i.name):
        path = entry_location(kind, ticket_id, run_id, item.name)
        if item.name in stored:
            _same_entry(store, item, path, plan)
            continue
        yield item, path


def _numbered_here(plan: Plan, item: Item, have: Any, path: str, what: str) -> bool:
    """Whether the store has an entry of this number (``have``): the line is skipped if it is the
    same entry, refused if it is another; False when the number is free."""
    if have is None:
        return False
    if have.content_hash == item.record.content_hash:
        plan.skipped += 1
    else:
        plan.refuse(item, path, f"a different {what} already has this number; left as it is")
    return True


def _same_entry(store: Store, item: Item, path: str, plan: Plan) -> None:

    for n, _loc, data in store.entries(item.type, item.ticket_id, item.run_id, item.name):
        if n != item.name or isinstance(data, Corrupt):
            continue
        try:
            doc = json_loads(data)
            doc.pop("content_hash", None)
            if item.type == "pruned":
                same = False
            else:
                same = entry_type(item.type, doc).from_json(doc).content_hash == item.content_hash
        except (ValueError, PhaselogError, AttributeError):
            same = False
        if same:
            plan.skipped += 1
            return
    plan.refuse(item, path, "a different entry already has this name; left as it is")


def plan_markers(ledger: Ledger, ticket_id: str, items: Iterable[Item], plan: Plan) -> None:
    """Ticket marker revisions: each must follow the revision before it."""
    revs = list(ledger.markers(ticket_id))
    by_rev = {m.revision: m for m in revs}
    for item in sorted(items, key=lambda i: i.record.revision):
        m: Marker = item.record
        path = entry_location("markers", ticket_id, None, item.name)
        if _numbered_here(plan, item, by_rev.get(m.revision), path, "marker revision"):
            continue
        prev = by_rev.get(m.revision - 1)
        if m.revision != len(by_rev) + 1 or m.prev_hash != (prev.content_hash if prev else None):
            plan.refuse(item, path, "the marker revision does not follow the ticket's last revision here")
            continue
        by_rev[m.revision] = m
        plan.store.append(item)
