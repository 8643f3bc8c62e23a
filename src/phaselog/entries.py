"""The audit trail's records: progress events, approvals (and rejections), ticket markers.

Each is an immutable document with a content hash over its canonical JSON form, stored as a named
audit entry (:meth:`phaselog.stores.base.Store.put_entry`) beside the run's checkpoints, and
checked against its recorded hash on every read. Checkpoints themselves are in
:mod:`phaselog.records`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from phaselog._json import dumps_canonical
from phaselog.errors import Corrupt
from phaselog.limits import json_loads
from phaselog.records import SCHEMA_VERSION, check_schema_version, format_timestamp, parse_timestamp, required_field

EVENTS = ("start", "step", "complete", "fail", "skip")
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


@dataclass(frozen=True)
class ProgressEvent(AuditRecord):
    """An immutable record inside a running attempt (seed 003's mid-execution checkpoint)."""

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

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form (also what the CLI prints)."""
        return {
            "schema_version": self.schema_version,
            "kind": "phaselog.progress",
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "phase": self.phase,
            "phase_ordinal": self.phase_ordinal,
            "attempt_number": self.attempt_number,
            "seq": self.seq,
            "event": self.event,
            "timestamp": format_timestamp(self.timestamp),
            "step": self.step,
            "status": self.status,
            "provider": self.provider,
            "tokens": self.tokens,
            "elapsed_sec": self.elapsed_sec,
            "output": self.output,
            "output_sha256": self.output_sha256,
            "output_length": self.output_length,
            "host": self.host,
            "pid": self.pid,
            "process_start": self.process_start,
            "prev_hash": self.prev_hash,
        }

    @classmethod
    def from_json(cls, data: Any) -> ProgressEvent:
        """Parse the stored form; Corrupt on a broken one."""
        check_header(data, "phaselog.progress", "progress event")
        event = data.get("event")
        if event not in EVENTS:
            raise Corrupt(f"event: must be one of {', '.join(EVENTS)}", field="event", rule="enum")
        return cls(
            ticket_id=required_field(data, "ticket_id", str, "a string"),
            run_id=required_field(data, "run_id", str, "a string"),
            phase=required_field(data, "phase", str, "a string"),
            phase_ordinal=required_field(data, "phase_ordinal", int, "an integer"),
            attempt_number=required_field(data, "attempt_number", int, "an integer"),
            seq=required_field(data, "seq", int, "an integer"),
            event=event,
            timestamp=parse_timestamp(data.get("timestamp"), field="timestamp"),
            step=_opt(data, "step", int),
            status=_opt(data, "status", str),
            provider=_opt(data, "provider", str),
            tokens=_opt(data, "tokens", int),
            elapsed_sec=_opt(data, "elapsed_sec", (int, float)),
            output=_opt(data, "output", str),
            output_sha256=_opt(data, "output_sha256", str),
            output_length=_opt(data, "output_length", int),
            host=_opt(data, "host", str),
            pid=_opt(data, "pid", int),
            process_start=_opt(data, "process_start", (int, float)),
            prev_hash=_opt(data, "prev_hash", str),
            schema_version=data["schema_version"],
        )


@dataclass(frozen=True)
class Approval(AuditRecord):
    """An immutable judgement of one checkpoint (bound to its content hash) by a person."""

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
    schema_version: str = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form (``prev_hash`` only when set: judgements stored before chaining keep their hash)."""
        doc = self._doc()
        if self.prev_hash is not None:
            doc["prev_hash"] = self.prev_hash
        return doc

    def _doc(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": "phaselog.approval",
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "phase": self.phase,
            "phase_ordinal": self.phase_ordinal,
            "attempt_number": self.attempt_number,
            "checkpoint_hash": self.checkpoint_hash,
            "decision": self.decision,
            "by": self.by,
            "comment": self.comment,
            "timestamp": format_timestamp(self.timestamp),
            "seq": self.seq,
        }

    @property
    def approved(self) -> bool:
        """True for an approval, False for a rejection."""
        return self.decision == "approve"

    @classmethod
    def from_json(cls, data: Any) -> Approval:
        """Parse the stored form; Corrupt on a broken one."""
        check_header(data, "phaselog.approval", "approval")
        decision = data.get("decision")
        if decision not in DECISIONS:
            raise Corrupt("decision: must be approve or reject", field="decision", rule="enum")
        return cls(
            ticket_id=required_field(data, "ticket_id", str, "a string"),
            run_id=required_field(data, "run_id", str, "a string"),
            phase=required_field(data, "phase", str, "a string"),
            phase_ordinal=required_field(data, "phase_ordinal", int, "an integer"),
            attempt_number=required_field(data, "attempt_number", int, "an integer"),
            checkpoint_hash=required_field(data, "checkpoint_hash", str, "a string"),
            decision=decision,
            by=required_field(data, "by", str, "a string"),
            timestamp=parse_timestamp(data.get("timestamp"), field="timestamp"),
            seq=required_field(data, "seq", int, "an integer"),
            comment=_opt(data, "comment", str),
            prev_hash=_opt(data, "prev_hash", str),
            schema_version=data["schema_version"],
        )


@dataclass(frozen=True)
class Marker(AuditRecord):
    """One revision of a ticket's identity marker (seed 002's project.json, append-only)."""

    ticket_id: str
    revision: int
    title: str
    pipeline: str
    meta: Mapping[str, str]
    timestamp: datetime
    prev_hash: str | None = None
    schema_version: str = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form."""
        return {
            "schema_version": self.schema_version,
            "kind": "phaselog.marker",
            "ticket_id": self.ticket_id,
            "revision": self.revision,
            "title": self.title,
            "pipeline": self.pipeline,
            "meta": dict(sorted(self.meta.items())),
            "timestamp": format_timestamp(self.timestamp),
            "prev_hash": self.prev_hash,
        }

    @classmethod
    def from_json(cls, data: Any) -> Marker:
        """Parse the stored form; Corrupt on a broken one."""
        check_header(data, "phaselog.marker", "ticket marker")
        meta = data.get("meta") or {}
        if not isinstance(meta, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise Corrupt("meta: must map strings to strings", field="meta", rule="type")
        return cls(
            ticket_id=required_field(data, "ticket_id", str, "a string"),
            revision=required_field(data, "revision", int, "an integer"),
            title=required_field(data, "title", str, "a string"),
            pipeline=required_field(data, "pipeline", str, "a string"),
            meta=dict(meta),
            timestamp=parse_timestamp(data.get("timestamp"), field="timestamp"),
            prev_hash=_opt(data, "prev_hash", str),
            schema_version=data["schema_version"],
        )


def entry_bytes(record: ProgressEvent | Approval | Marker) -> bytes:
    """The stored form of an audit entry: its JSON plus its content hash (checked on read)."""
    doc = {**record.to_json(), "content_hash": record.content_hash}
    return (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8")


def parse_entry(cls: Any, data: bytes, location: str) -> Any:
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


def read_entries(
    store: Any, kind: str, cls: Any, ticket_id: str, run_id: str | None
) -> tuple[list[Any], list[Corrupt]]:
    """Every intact entry of a kind, and the damaged ones apart (never used, always reported)."""
    return parse_entries(cls, store.entries(kind, ticket_id, run_id))


def parse_entries(cls: Any, entries: Any) -> tuple[list[Any], list[Corrupt]]:
    """Parse (name, location, bytes or Corrupt) entries: the intact ones, and the damaged apart."""
    good: list[Any] = []
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
