"""The audit trail's records: progress events, approvals (and rejections), ticket markers.

Each is an immutable document with a content hash over its canonical JSON form, stored as a named
audit entry (:meth:`phaselog.stores.base.Store.put_entry`) beside the run's checkpoints, and
checked against its recorded hash on every read. Checkpoints themselves are in
:mod:`phaselog.model.records`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, ClassVar, Protocol, Self, TypeVar, get_type_hints

from phaselog.model._json import dumps_canonical
from phaselog.model.errors import Corrupt
from phaselog.model.limits import json_loads
from phaselog.model.records import (
    SCHEMA_VERSION,
    check_schema_version,
    format_timestamp,
    parse_timestamp,
    required_field,
)

EVENTS = ("start", "step", "complete", "fail", "skip")
#: The kind of entry a ticket marker revision is stored as.
MARKERS = "markers"
DECISIONS = ("approve", "reject")


def _hash_doc(doc: Mapping[str, Any]) -> str:
    return hashlib.sha256(dumps_canonical(doc)).hexdigest()


def _opt(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(name)
    if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise Corrupt(f"{name}: has the wrong type", field=name, rule="type")
    return value


def check_header(data: Any, kind: str, what: str) -> None:
    """Refuse a document that is not an audit record of ``kind``, or of a newer major version."""
    if not isinstance(data, Mapping) or data.get("kind") != kind:
        raise Corrupt(f"not a phaselog {what}", rule="kind")
    check_schema_version(data.get("schema_version"))


class AuditRecord:
    """What the audit-trail records share: a content hash over their canonical JSON form."""

    def to_json(self) -> dict[str, Any]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 of the canonical JSON form."""
        return _hash_doc(self.to_json())


_KINDS: dict[Any, tuple[type | tuple[type, ...], str]] = {
    str: (str, "a string"),
    int: (int, "an integer"),
    float: ((int, float), "a number"),
}


class EntryRecord(AuditRecord):
    """An audit entry built one way: ``KIND`` and ``KEYS`` say its stored form, its fields the rest.

    ``to_json`` writes ``schema_version``, ``kind``, then ``KEYS`` (default: the fields) in order
    (times as ISO-8601 text, mappings with sorted keys); ``from_json`` checks the header, then reads every field in the
    dataclass's order: a field without a default is required, one with a default optional, each of
    the type it is declared with (Corrupt naming the field and rule otherwise). What a kind checks
    beyond that (an enum, a mapping's items) it checks in :meth:`_checked`.
    """

    KIND: ClassVar[str]
    WHAT: ClassVar[str]
    #: The stored keys after ``schema_version`` and ``kind``, in order; empty: the fields in order.
    KEYS: ClassVar[tuple[str, ...]] = ()
    schema_version: str  # a field of every kind

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form (also what the CLI prints)."""
        keys, values, converted = _writer(type(self))
        doc: dict[str, Any] = {"schema_version": self.schema_version, "kind": self.KIND}
        doc.update(zip(keys, values(self), strict=True))
        for key, convert in converted:
            doc[key] = convert(doc[key])
        return doc

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """Parse the stored form; Corrupt on a broken one."""
        check_header(data, cls.KIND, cls.WHAT)
        checked = cls._checked(data)
        return _reader(cls, checked)(data, checked)  # type: ignore[no-any-return]  # the reader makes a cls

    @classmethod
    def _checked(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """The fields this kind checks itself (an enum, a mapping's items), checked."""
        return {}


_READERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}
_Writer = tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]], tuple[tuple[str, Callable[[Any], Any]], ...]]
_WRITERS: dict[type, _Writer] = {}


def _writer(cls: type[EntryRecord]) -> _Writer:
    """How to write ``cls``: its stored keys, one getter of their values, and the keys stored converted."""
    known = _WRITERS.get(cls)
    if known is None:
        hints = get_type_hints(cls)
        every = dataclasses.fields(cls)  # type: ignore[arg-type]  # every kind is a dataclass
        fields = [f.name for f in every if f.name != "schema_version"]
        keys = cls.KEYS or tuple(fields)
        converted: list[tuple[str, Callable[[Any], Any]]] = []
        for key in keys:
            base = typing.get_origin(hints[key]) or hints[key]
            if base is datetime:
                converted.append((key, _timestamp_or_none))
            elif isinstance(base, type) and issubclass(base, Mapping):
                converted.append((key, _sorted_mapping))
        known = _WRITERS[cls] = (keys, operator.attrgetter(*keys), tuple(converted))
    return known


def _timestamp_or_none(value: datetime | None) -> str | None:
    return None if value is None else format_timestamp(value)


def _sorted_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(sorted(value.items()))


def _reader(cls: type[EntryRecord], checked: Iterable[str]) -> Callable[[Any, dict[str, Any]], Any]:
    """How to read each field of ``cls`` from a stored document, worked out once per kind.

    ``checked``: the fields the kind checks itself (:meth:`EntryRecord._checked`, the same every time).
    A value of exactly an accepted type is taken as it is; any other goes through the full check
    (``required_field``, ``_opt``, ``parse_timestamp``), which raises the error or accepts it.
    """
    known = _READERS.get(cls)
    if known is not None:
        return known
    hints = get_type_hints(cls)
    steps = tuple(
        (f.name, *_field_reader(f.name, hints[f.name], f.default is dataclasses.MISSING))
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]  # every kind is a dataclass
        if f.name not in checked
    )

    def read(data: Any, checked: dict[str, Any]) -> Any:
        fields = dict(checked)
        get = data.get
        for name, exact, check in steps:
            value = get(name)
            fields[name] = value if value.__class__ in exact else check(data)
        return cls(**fields)

    _READERS[cls] = read
    return read


def _field_reader(name: str, hint: Any, required: bool) -> tuple[frozenset[type], Callable[[Any], Any]]:
    """The types field ``name`` (declared as ``hint``) takes as they are, and the full check of it."""
    if name == "schema_version":
        return frozenset(), operator.itemgetter("schema_version")
    if hint is datetime:
        return frozenset(), lambda data: parse_timestamp(data.get(name), field=name)
    base = [a for a in typing.get_args(hint) if a is not type(None)] if not required else [hint]
    if len(base) != 1 or base[0] not in _KINDS:
        raise TypeError(f"{name}: {hint} is not a plain scalar; check it in _checked")
    kind, what = _KINDS[base[0]]
    exact = frozenset(kind if isinstance(kind, tuple) else (kind,))
    if required:
        return exact, lambda data: required_field(data, name, kind, what)
    return exact | {type(None)}, lambda data: _opt(data, name, kind)


@dataclass(frozen=True)
class ProgressEvent(EntryRecord):
    """An immutable record inside a running attempt (seed 003's mid-execution checkpoint)."""

    KIND: ClassVar[str] = "phaselog.progress"
    WHAT: ClassVar[str] = "progress event"

    ticket_id: str
    run_id: str
    phase: str
    phase_ordinal: int
    attempt_number: int
    seq: int
    event: str
    timestamp: datetime
    step: int | None = None
    status: str | None = None
    provider: str | None = None
    tokens: int | None = None
    elapsed_sec: float | None = None
    output: str | None = None
    output_sha256: str | None = None
    output_length: int | None = None
    host: str | None = None
    pid: int | None = None
    process_start: float | None = None
    prev_hash: str | None = None
    schema_version: str = SCHEMA_VERSION

    @classmethod
    def _checked(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """``event``: one of EVENTS."""
        event = data.get("event")
        if event not in EVENTS:
            raise Corrupt(f"event: must be one of {', '.join(EVENTS)}", field="event", rule="enum")
        return {"event": event}


@dataclass(frozen=True)
class Approval(EntryRecord):
    """An immutable judgement of one checkpoint (bound to its content hash) by a person."""

    KIND: ClassVar[str] = "phaselog.approval"
    WHAT: ClassVar[str] = "approval"
    KEYS: ClassVar[tuple[str, ...]] = (
        "ticket_id",
        "run_id",
        "phase",
        "phase_ordinal",
        "attempt_number",
        "checkpoint_hash",
        "decision",
        "by",
        "comment",
        "timestamp",
        "seq",
        "prev_hash",
        "via",
    )

    ticket_id: str
    run_id: str
    phase: str
    phase_ordinal: int
    attempt_number: int
    checkpoint_hash: str
    decision: str
    by: str
    timestamp: datetime
    seq: int
    comment: str | None = None
    #: Content hash of the previous judgement of the same phase (None for the first): a phase's
    #: judgements form a chain, as its attempts do, so a deleted rejection breaks it.
    prev_hash: str | None = None
    #: The door the judgement came through, beside the name given (``mcp``: an MCP server started
    #: with --allow-judgements; None: the CLI, the dashboard or the API, as before). D240.
    via: str | None = None
    schema_version: str = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form (``prev_hash`` and ``via`` only when set: judgements stored before
        either existed keep their hash)."""
        doc = super().to_json()
        for optional in ("prev_hash", "via"):
            if doc[optional] is None:
                del doc[optional]
        return doc

    @property
    def approved(self) -> bool:
        """True for an approval, False for a rejection."""
        return self.decision == "approve"

    @classmethod
    def _checked(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """``decision``: approve or reject."""
        decision = data.get("decision")
        if decision not in DECISIONS:
            raise Corrupt("decision: must be approve or reject", field="decision", rule="enum")
        return {"decision": decision}


@dataclass(frozen=True)
class Marker(EntryRecord):
    """One revision of a ticket's identity marker (seed 002's project.json, append-only)."""

    KIND: ClassVar[str] = "phaselog.marker"
    WHAT: ClassVar[str] = "ticket marker"

    ticket_id: str
    revision: int
    title: str
    pipeline: str
    meta: Mapping[str, str]
    timestamp: datetime
    prev_hash: str | None = None
    schema_version: str = SCHEMA_VERSION

    @classmethod
    def _checked(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """``meta``: strings to strings (absent: none)."""
        meta = data.get("meta") or {}
        if not isinstance(meta, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise Corrupt("meta: must map strings to strings", field="meta", rule="type")
        return {"meta": dict(meta)}


def entry_bytes(record: EntryRecord) -> bytes:
    """The stored form of an audit entry: its JSON plus its content hash (checked on read)."""
    doc = {**record.to_json(), "content_hash": record.content_hash}
    return (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8")


E = TypeVar("E", bound="EntryRecord")


def parse_entry(cls: type[E], data: bytes, location: str) -> E:
    """Parse an audit entry of ``cls``; Corrupt if it is broken or was edited after writing."""
    try:
        doc = json_loads(data)
    except (ValueError, RecursionError) as exc:
        raise Corrupt(f"{location}: not valid JSON ({exc})", path=location, rule="json") from None
    recorded = doc.pop("content_hash", None) if isinstance(doc, dict) else None
    try:
        record = cls.from_json(doc)
    except Corrupt as exc:
        raise Corrupt(f"{location}: {exc.message}", path=location, rule=exc.context.get("rule")) from None
    if recorded is not None and recorded != record.content_hash:
        raise Corrupt(
            f"{location}: content changed after it was written (recorded hash {str(recorded)[:12]}, "
            f"content now hashes to {record.content_hash[:12]})",
            path=location,
            rule="content_hash",
        )
    return record


class EntrySource(Protocol):
    """What reading entries needs of a store (:meth:`phaselog.stores.base.Store.entries`)."""

    def entries(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind as (name, location, bytes or the Corrupt error), sorted by name."""
        ...


def read_entries(
    store: EntrySource, kind: str, cls: type[E], ticket_id: str, run_id: str | None
) -> tuple[list[E], list[Corrupt]]:
    """Every intact entry of a kind, and the damaged ones apart (never used, always reported)."""
    return parse_entries(cls, store.entries(kind, ticket_id, run_id))


def read_markers(store: EntrySource, ticket_id: str) -> tuple[list[Marker], list[Corrupt]]:
    """Every usable revision of a ticket's marker (oldest first), and the damaged ones."""
    out, damaged = read_entries(store, MARKERS, Marker, ticket_id, None)
    return sorted(out, key=lambda m: m.revision), damaged


def current_marker(store: EntrySource, ticket_id: str) -> Marker | None:
    """The current revision of a ticket's marker, or None."""
    revs = read_markers(store, ticket_id)[0]
    return revs[-1] if revs else None


def parse_entries(cls: type[E], entries: Iterable[tuple[str, str, bytes | Corrupt]]) -> tuple[list[E], list[Corrupt]]:
    """Parse (name, location, bytes or Corrupt) entries: the intact ones, and the damaged apart."""
    good: list[E] = []
    bad: list[Corrupt] = []
    for _name, location, data in entries:
        if isinstance(data, Corrupt):
            bad.append(data)
            continue
        try:
            good.append(parse_entry(cls, data, location))
        except Corrupt as exc:
            bad.append(exc)
    return good, bad
