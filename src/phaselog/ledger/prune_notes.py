"""Prune notes: what retention removed, with hashes, so every link into the gap stays checkable.

Removing attempt k breaks nothing only if the records that linked to it can still be checked:
attempt k+1's ``prev_hash``, a basis entry, a fork's ``forked_from``. So before ``prune``
deletes anything it appends a note to the run (``.pruned/<seq>``) that lists, per removed record,
its phase, attempt, status, content hash and its own ``prev_hash``, plus the names of the audit
entries removed with it. A link to a pruned record is then checked against the note exactly as
it would be against the record: the hash must match. Notes are audit records like the others:
content-hashed (an edited note is damaged), chained by ``prev_hash`` and numbered without gaps.

:func:`check_notes` is what ``verify`` (and ``import``) ask of the notes themselves: a note never
names a record that is stored with another hash, never names the newest attempt of a phase (prune
never removes it), and the chain of ``prev_hash`` through pruned records is intact.

Notes written before this format (no ``schema_version``) are still read; their items carry no
``prev_hash`` and vouch only for the successor's link.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from phaselog.model.entries import AuditRecord, check_header
from phaselog.model.errors import Corrupt
from phaselog.model.limits import json_loads
from phaselog.model.records import STATUSES, format_timestamp, parse_timestamp, required_field
from phaselog.stores.names import (
    parse_approval_name,
    parse_event_name,
    parse_log_name,
    parse_note_name,
)

if TYPE_CHECKING:
    from phaselog.stores.base import Store

KIND = "phaselog.pruned"
ENTRY_KIND = "pruned"
_HASH_RE = re.compile(r"[0-9a-f]{64}")
_PHASE_RE = re.compile(r"[a-z][a-z0-9_]{0,62}")
#: Audit entries that go with a pruned record (its progress events, the rejections of it, its log).
REMOVABLE_ENTRY_KINDS = ("progress", "approvals", "logs")
_PARSERS: dict[str, Callable[[str], Any]] = {
    "progress": parse_event_name,
    "approvals": parse_approval_name,
    "logs": parse_log_name,
}


def _hash(value: Any, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not _HASH_RE.fullmatch(value):
        raise Corrupt(f"{name}: must be a SHA-256 hex digest (64 lowercase hex digits)", field=name, rule="hash")
    return value


def _flag(data: Mapping[str, Any], name: str) -> bool:
    value = data.get(name, True)
    if not isinstance(value, bool):
        raise Corrupt(f"{name}: must be true or false", field=name, rule="type")
    return value


def _phase(data: Mapping[str, Any]) -> str:
    phase: str = required_field(data, "phase", str, "a phase name")
    if not _PHASE_RE.fullmatch(phase):
        raise Corrupt("phase: must match [a-z][a-z0-9_]*", field="phase", rule="phase")
    return phase


_T = TypeVar("_T")


def _item(data: Any, at: str, parse: Callable[[Mapping[str, Any]], _T]) -> _T:
    """Parse one object of a list with ``parse``; Corrupt naming ``at`` and, below it, the field."""
    if not isinstance(data, Mapping):
        raise Corrupt(f"{at}: must be an object", field=at, rule="type")
    try:
        return parse(data)
    except Corrupt as exc:
        raise Corrupt(
            f"{at}.{exc.message}", field=f"{at}.{exc.context.get('field')}", rule=exc.context.get("rule")
        ) from None


def _positive(data: Mapping[str, Any], name: str) -> int:
    value = required_field(data, name, int, "an integer >= 1")
    if value < 1:
        raise Corrupt(f"{name}: must be an integer >= 1", field=name, rule="range")
    return int(value)


@dataclass(frozen=True)
class PrunedRecord:
    """One record a prune removed: enough to check every link that named it."""

    phase: str
    phase_ordinal: int
    attempt_number: int
    status: str
    content_hash: str
    #: The removed record's own ``prev_hash``: the chain stays checkable through the gap.
    #: None for a first attempt (and for items of notes written before this format).
    prev_hash: str | None
    #: False for a checkpoint the seed tool wrote: it carries no links, so its prev_hash says nothing.
    linked: bool = True

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form."""
        return {
            "phase": self.phase,
            "phase_ordinal": self.phase_ordinal,
            "attempt_number": self.attempt_number,
            "status": self.status,
            "content_hash": self.content_hash,
            "prev_hash": self.prev_hash,
            "linked": self.linked,
        }

    @classmethod
    def from_json(cls, data: Any, at: str) -> PrunedRecord:
        """Parse one ``removed`` item; Corrupt naming the field on a broken one."""
        return _item(data, at, cls._parse)

    @classmethod
    def _parse(cls, data: Mapping[str, Any]) -> PrunedRecord:
        phase = _phase(data)
        status = data.get("status")
        if status not in STATUSES:
            raise Corrupt(f"status: must be one of {', '.join(STATUSES)}", field="status", rule="enum")
        return cls(
            phase=phase,
            phase_ordinal=_positive(data, "phase_ordinal"),
            attempt_number=_positive(data, "attempt_number"),
            status=str(status),
            content_hash=str(_hash(data.get("content_hash"), "content_hash")),
            prev_hash=_hash(data.get("prev_hash"), "prev_hash", optional=True),
            linked=_flag(data, "linked"),
        )


def _entry(data: Any, at: str) -> tuple[str, str]:
    if not isinstance(data, Mapping) or data.get("kind") not in REMOVABLE_ENTRY_KINDS:
        raise Corrupt(f"{at}.kind: must be one of {', '.join(REMOVABLE_ENTRY_KINDS)}", field=f"{at}.kind", rule="enum")
    name = data.get("name")
    parse = _PARSERS[data["kind"]]
    if not isinstance(name, str) or parse(name) is None:
        raise Corrupt(f"{at}.name: not a {data['kind']} entry name", field=f"{at}.name", rule="entry_name")
    return str(data["kind"]), name


def _judgement(data: Any, at: str) -> tuple[int, str, str]:
    return _item(data, at, _parse_judgement)


def _parse_judgement(data: Mapping[str, Any]) -> tuple[int, str, str]:
    phase = _phase(data)  # checked first: a note broken twice names its phase
    return _positive(data, "seq"), phase, str(_hash(data.get("content_hash"), "content_hash"))


@dataclass(frozen=True)
class PruneNote(AuditRecord):
    """One prune of one run: what it removed, chained to the run's previous note."""

    ticket_id: str
    run_id: str
    seq: int
    timestamp: datetime
    removed: tuple[PrunedRecord, ...]
    #: The audit entries removed with the records, as (kind, name).
    entries: tuple[tuple[str, str], ...] = ()
    prev_hash: str | None = None
    #: The approvals and rejections removed, as (seq, phase, content hash): they keep their
    #: places in the run's judgement chain (verify).
    judgements: tuple[tuple[int, str, str], ...] = ()
    schema_version: str = "1.0.0"

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form."""
        return {
            "schema_version": self.schema_version,
            "kind": KIND,
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "seq": self.seq,
            "timestamp": format_timestamp(self.timestamp),
            "removed": [r.to_json() for r in self.removed],
            "entries": [{"kind": k, "name": n} for k, n in self.entries],
            "judgements": [{"seq": q, "phase": p, "content_hash": h} for q, p, h in self.judgements],
            "prev_hash": self.prev_hash,
        }

    @classmethod
    def from_json(cls, data: Any) -> PruneNote:
        """Parse the stored form; Corrupt naming the field on a broken one."""
        check_header(data, KIND, "prune note")
        removed = data.get("removed")
        if not isinstance(removed, list) or not removed:
            raise Corrupt("removed: must be a non-empty list of removed records", field="removed", rule="type")
        entries = data.get("entries", [])
        if not isinstance(entries, list):
            raise Corrupt("entries: must be a list", field="entries", rule="type")
        judgements = data.get("judgements", [])
        if not isinstance(judgements, list):
            raise Corrupt("judgements: must be a list", field="judgements", rule="type")
        return cls(
            ticket_id=required_field(data, "ticket_id", str, "a string"),
            run_id=required_field(data, "run_id", str, "a string"),
            seq=_positive(data, "seq"),
            timestamp=parse_timestamp(data.get("timestamp"), field="timestamp"),
            removed=tuple(PrunedRecord.from_json(r, f"removed[{i}]") for i, r in enumerate(removed)),
            entries=tuple(_entry(e, f"entries[{i}]") for i, e in enumerate(entries)),
            prev_hash=_hash(data.get("prev_hash"), "prev_hash", optional=True),
            judgements=tuple(_judgement(j, f"judgements[{i}]") for i, j in enumerate(judgements)),
            schema_version=str(data["schema_version"]),
        )

    def body(self) -> bytes:
        """The stored bytes: the JSON form plus its content hash (checked on read)."""
        doc = {**self.to_json(), "content_hash": self.content_hash}
        return (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8")


def legacy_hash(document: Any) -> str:
    """Content hash of a note written before this format (canonical JSON of the whole document)."""
    blob = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def is_legacy(document: Any) -> bool:
    """True for a note written before this format (no ``schema_version``)."""
    return isinstance(document, Mapping) and document.get("kind") == KIND and "schema_version" not in document


def document_hash(document: Any) -> str:
    """The content hash of a stored note document (either format); Corrupt if it is broken."""
    if is_legacy(document):
        _legacy_items(document)
        return legacy_hash(document)
    doc = dict(document) if isinstance(document, Mapping) else document
    if isinstance(doc, dict):
        doc.pop("content_hash", None)
    return PruneNote.from_json(doc).content_hash


def _legacy_items(document: Mapping[str, Any]) -> list[PrunedRecord]:
    removed = document.get("removed")
    if not isinstance(removed, list):
        raise Corrupt("removed: must be a list", field="removed", rule="type")
    out = []
    for i, r in enumerate(removed):
        if not isinstance(r, Mapping):
            raise Corrupt(f"removed[{i}]: must be an object", field=f"removed[{i}]", rule="type")
        item = dict(r)
        item.setdefault("phase_ordinal", 1)  # old notes did not record it; nothing checks it
        item["prev_hash"] = None
        out.append(PrunedRecord.from_json(item, f"removed[{i}]"))
    return out


@dataclass
class NoteEntry:
    """A note as read from a store: parsed, with its location and hash."""

    seq: int
    location: str
    content_hash: str
    prev_hash: str | None
    removed: tuple[PrunedRecord, ...]
    entries: tuple[tuple[str, str], ...]
    legacy: bool
    note: PruneNote | None = None


@dataclass
class PrunedIndex:
    """Every prune note of a run, and the records they name, by (phase, attempt)."""

    notes: list[NoteEntry] = field(default_factory=list)
    damaged: list[Corrupt] = field(default_factory=list)

    @property
    def records(self) -> dict[tuple[str, int], PrunedRecord]:
        """(phase, attempt) → the pruned record (the first note that names it wins)."""
        out: dict[tuple[str, int], PrunedRecord] = {}
        for n in self.notes:
            for r in n.removed:
                out.setdefault((r.phase, r.attempt_number), r)
        return out

    @property
    def head(self) -> NoteEntry | None:
        """The newest note (the next one chains to it)."""
        return self.notes[-1] if self.notes else None

    def __bool__(self) -> bool:
        return bool(self.notes)


def parse_note(data: bytes, location: str, name: str) -> NoteEntry:
    """Parse one stored note (either format); Corrupt if broken or edited after writing."""
    try:
        doc = json_loads(data)
    except (ValueError, RecursionError) as exc:
        raise Corrupt(f"{location}: not valid JSON ({exc})", path=location, rule="json") from None
    seq = parse_note_name(name)
    try:
        if seq is None:
            raise Corrupt(f"{name!r} is not a prune note name (six digits)", rule="entry_name")
        if is_legacy(doc):
            items = tuple(_legacy_items(doc))
            return NoteEntry(seq, location, legacy_hash(doc), None, items, (), legacy=True)
        recorded = doc.pop("content_hash", None) if isinstance(doc, dict) else None
        note = PruneNote.from_json(doc)
    except Corrupt as exc:
        raise Corrupt(f"{location}: {exc.message}", path=location, rule=exc.context.get("rule")) from None
    if recorded != note.content_hash:
        raise Corrupt(
            f"{location}: content changed after it was written (recorded hash {str(recorded)[:12]}, "
            f"content now hashes to {note.content_hash[:12]})",
            path=location,
            rule="content_hash",
        )
    return NoteEntry(note.seq, location, note.content_hash, note.prev_hash, note.removed, note.entries, False, note)


def read_notes(store: Store, ticket_id: str, run_id: str) -> PrunedIndex:
    """Every prune note of a run, in order; damaged notes apart (never used, always reported)."""
    index = PrunedIndex()
    for name, location, data in store.entries(ENTRY_KIND, ticket_id, run_id):
        if isinstance(data, Corrupt):
            index.damaged.append(data)
            continue
        try:
            index.notes.append(parse_note(data, location, name))
        except Corrupt as exc:
            index.damaged.append(exc)
    return index


def predecessor(
    pruned: Mapping[tuple[str, int], PrunedRecord], phase: str, attempt: int, stored_before: int | None
) -> PrunedRecord | None:
    """The pruned record that is the attempt right before ``attempt`` of ``phase``, if any.

    ``stored_before`` is the newest stored attempt below ``attempt`` (None: none); a pruned
    attempt between the two is the true predecessor.
    """
    gone = [a for (ph, a) in pruned if ph == phase and a < attempt and (stored_before is None or a > stored_before)]
    return pruned[(phase, max(gone))] if gone else None


def check_notes(
    index: PrunedIndex, stored: Mapping[tuple[str, int], Any], *, ticket_id: str, run_id: str
) -> list[tuple[str, str, str]]:
    """What is wrong with a run's notes, as (location, rule, message); ``stored`` maps
    (phase, attempt) → the stored Checkpoint."""
    problems: list[tuple[str, str, str]] = []
    prev: NoteEntry | None = None
    claimed: dict[tuple[str, int], tuple[str, str]] = {}
    for i, n in enumerate(index.notes, start=1):
        if not n.legacy:
            want = prev.content_hash if prev else None
            if n.seq != i or n.prev_hash != want:
                problems.append((n.location, "prune_note_chain", "prune notes are not a contiguous hash chain here"))
            if n.note is not None and (n.note.ticket_id, n.note.run_id) != (ticket_id, run_id):
                problems.append((n.location, "prune_note", "the note names another ticket or run than its location"))
        prev = n
        for r in n.removed:
            key = (r.phase, r.attempt_number)
            other = claimed.get(key)
            if other is not None and other[0] != r.content_hash:
                problems.append(
                    (
                        n.location,
                        "prune_note",
                        f"records attempt {key[1]} of {key[0]} as pruned with another hash than {other[1]} does",
                    )
                )
            claimed.setdefault(key, (r.content_hash, n.location))
    pruned = index.records
    by_phase: dict[str, list[int]] = {}
    for ph, a in [*stored.keys(), *pruned.keys()]:
        by_phase.setdefault(ph, []).append(a)
    for (ph, a), r in pruned.items():
        loc = claimed[(ph, a)][1]
        cp = stored.get((ph, a))
        if cp is not None and cp.content_hash != r.content_hash:
            problems.append(
                (
                    loc,
                    "prune_note",
                    f"records attempt {a} of {ph} as pruned with hash {r.content_hash[:12]}, but "
                    f"the stored attempt {a} hashes to {cp.content_hash[:12]}",
                )
            )
        if any(n.legacy and r in n.removed for n in index.notes):
            continue  # an old note: it vouches for its successor's link only
        if not any(b > a for b in by_phase[ph]):
            problems.append(
                (
                    loc,
                    "prune_note",
                    f"records attempt {a} of {ph} as pruned, but no later attempt exists "
                    "(prune never removes the newest attempt of a phase)",
                )
            )
        earlier = [b for b in by_phase[ph] if b < a]
        before = max(earlier) if earlier else None
        if before is None:
            want = None
        elif (ph, before) in pruned:
            want = pruned[(ph, before)].content_hash
        else:
            want = stored[(ph, before)].content_hash
        if r.linked and r.prev_hash != want:
            problems.append(
                (
                    loc,
                    "prune_note",
                    f"the pruned attempt {a} of {ph} names a previous attempt that does not match "
                    "what is stored or recorded as pruned",
                )
            )
    return problems
