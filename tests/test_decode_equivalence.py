"""The one-pass decode accepts exactly what the field-by-field decode accepted, and refuses the same way.

``_reference_*`` below is the decode as it was before the one-pass check (git: 748edad,
``model/records.py`` ``checkpoint_from_seed`` / ``_meta_kwargs`` and ``stores/kernel.py``
``record_from_document``), copied here verbatim as the judge: for generated documents, valid and
broken, the new decode must give an equal record (same fields, same content hash, same warnings)
or raise the same error class with the same field, rule and message. docs/decisions.md D170.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaselog.model.decoding import checkpoint_from_seed
from phaselog.model.errors import Corrupt, UnsupportedVersion
from phaselog.model.limits import MAX_ATTEMPT, MAX_PHASE_ORDINAL, is_phase_ordinal
from phaselog.model.records import (
    SEED_FIELDS,
    STATUSES,
    BasisEntry,
    Checkpoint,
    PipelineRef,
    check_schema_version,
    parse_timestamp,
    stored_parts_match,
)
from phaselog.stores import kernel
from phaselog.stores.values import Stored


# -- the reference: the decode before the one-pass check (verbatim, but for the constructor) --------
def _decoded_checkpoint(**values: Any) -> Checkpoint:
    return Checkpoint(**values)


def _is_mapping(value: Any) -> bool:
    # A decoded record's containers are plain dicts: the exact type check first, the ABC's
    # isinstance (several times slower) only for anything else.
    return type(value) is dict or isinstance(value, Mapping)


def _str_map(value: Mapping[Any, Any]) -> bool:
    """Every key and value is a string."""
    return all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def required_field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``data[name]``, refused (Corrupt naming the field and rule) when missing or of the wrong type."""
    if name not in data:
        raise Corrupt(f"{name}: missing required field", field=name, rule="required")
    value = data[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise Corrupt(f"{name}: must be {what}", field=name, rule="type")
    return value


def _reference_checkpoint_from_seed(
    data: Any, *, phase_ordinal: int, meta: Mapping[str, Any] | None = None
) -> tuple[Checkpoint, list[str]]:
    """Build a Checkpoint from a seed dict (and an optional phaselog part).

    Returns the checkpoint and read warnings (older schema version). Raises Corrupt for a
    structurally broken record and UnsupportedVersion for a newer major version.
    """
    if not _is_mapping(data):
        raise Corrupt("checkpoint: must be a mapping of the seed contract's fields", rule="type")
    missing = [f for f in SEED_FIELDS if f not in data]
    if missing:
        raise Corrupt(
            f"{missing[0]}: missing required field of the checkpoint contract"
            + (f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""),
            field=missing[0],
            rule="required",
        )
    warnings = check_schema_version(data.get("schema_version"))
    ticket_id = required_field(data, "ticket_id", str, "a string")
    run_id = required_field(data, "run_id", str, "a UUID string")
    phase = required_field(data, "phase", str, "a phase name")
    attempt = required_field(data, "attempt_number", int, "an integer >= 1")
    if not 1 <= attempt <= MAX_ATTEMPT:
        raise Corrupt(f"attempt_number: must be from 1 to {MAX_ATTEMPT}", field="attempt_number", rule="max_attempt")
    ts = parse_timestamp(data.get("timestamp_utc"))
    rcm = data.get("repo_commit_map", {})
    if rcm is None:
        rcm = {}
    if not _is_mapping(rcm) or not _str_map(rcm):
        raise Corrupt(
            "repo_commit_map: must map repo names to commit SHA strings",
            field="repo_commit_map",
            rule="type",
        )
    paths = data.get("artifact_paths", [])
    if paths is None:
        paths = []
    if not isinstance(paths, list | tuple) or not all(type(p) is str or isinstance(p, str) for p in paths):
        raise Corrupt("artifact_paths: must be a list of strings", field="artifact_paths", rule="type")
    payload = data.get("phase_payload")
    if payload is not None and not _is_mapping(payload):
        raise Corrupt("phase_payload: must be a mapping", field="phase_payload", rule="type")
    unknown = tuple(k for k in data if k not in SEED_FIELDS)
    kwargs: dict[str, Any] = {}
    if meta is not None:
        kwargs = _meta_kwargs(meta)
        phase_ordinal = kwargs.pop("phase_ordinal", phase_ordinal)
    cp = _decoded_checkpoint(
        ticket_id=ticket_id,
        run_id=run_id,
        phase=phase,
        phase_ordinal=phase_ordinal,
        attempt_number=attempt,
        timestamp_utc=ts,
        repo_commit_map=dict(rcm),
        artifact_paths=tuple(paths),
        phase_payload=dict(payload) if payload is not None else None,
        schema_version=data["schema_version"],
        has_metadata=meta is not None,
        unknown_fields=unknown,
        **kwargs,
    )
    return cp, warnings


def _meta_kwargs(meta: Mapping[str, Any]) -> dict[str, Any]:
    status = meta.get("status", "completed")
    if status not in STATUSES:
        raise Corrupt(f"status: must be one of {', '.join(STATUSES)}", field="status", rule="enum")
    ordinal = meta.get("phase_ordinal")
    if not is_phase_ordinal(ordinal):
        raise Corrupt(
            f"phase_ordinal: must be an integer from 1 to {MAX_PHASE_ORDINAL}", field="phase_ordinal", rule="type"
        )
    basis_raw = meta.get("basis")
    basis: dict[str, BasisEntry] | None = None
    if basis_raw is not None:
        if not _is_mapping(basis_raw):
            raise Corrupt("basis: must be a mapping", field="basis", rule="type")
        basis = {}
        for name, entry in basis_raw.items():
            if (
                not _is_mapping(entry)
                or not isinstance(entry.get("attempt"), int)
                or not isinstance(entry.get("hash"), str)
            ):
                raise Corrupt(
                    f"basis.{name}: needs an integer attempt and a string hash",
                    field=f"basis.{name}",
                    rule="type",
                )
            basis[name] = BasisEntry(entry["attempt"], entry["hash"])
    prev = meta.get("prev_hash")
    if prev is not None and not isinstance(prev, str):
        raise Corrupt("prev_hash: must be a string or null", field="prev_hash", rule="type")
    err = meta.get("error")
    if err is not None and not isinstance(err, str):
        raise Corrupt("error: must be a string or null", field="error", rule="type")
    decisions = meta.get("decisions") or []
    if not isinstance(decisions, list) or not all(_is_mapping(d) for d in decisions):
        raise Corrupt("decisions: must be a list of mappings", field="decisions", rule="type")
    pipeline = meta.get("pipeline")
    forked = meta.get("forked_from")
    if forked is not None and not _is_mapping(forked):
        raise Corrupt("forked_from: must be a mapping or null", field="forked_from", rule="type")
    hashes = meta.get("artifact_hashes")
    if hashes is not None and (not _is_mapping(hashes) or not _str_map(hashes)):
        raise Corrupt(
            "artifact_hashes: must map artifact paths to SHA-256 strings", field="artifact_hashes", rule="type"
        )
    fingerprint = meta.get("code_fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise Corrupt("code_fingerprint: must be a string or null", field="code_fingerprint", rule="type")
    run_name = meta.get("run_name")
    if run_name is not None and (not isinstance(run_name, str) or not run_name):
        raise Corrupt("run_name: must be a non-empty string or absent", field="run_name", rule="type")
    started = meta.get("started_at")
    if started is not None:
        if not isinstance(started, str):
            raise Corrupt("started_at: must be a timestamp string or absent", field="started_at", rule="type")
        started = parse_timestamp(started, field="started_at")
    return {
        "started_at": started,
        "run_name": run_name,
        "artifact_hashes": dict(hashes) if hashes is not None else None,
        "code_fingerprint": fingerprint,
        "forked_from": dict(forked) if forked is not None else None,
        "status": status,
        "error": err,
        "phase_ordinal": ordinal,
        "pipeline": PipelineRef.from_json(pipeline) if pipeline is not None else None,
        "basis": basis,
        "prev_hash": prev,
        "decisions": tuple(dict(d) for d in decisions),
    }


def _reference_record_from_document(doc: dict[str, Any], ordinal: int, location: str) -> Stored:
    recorded = doc.get("content_hash")
    try:
        cp, read_warns = _reference_checkpoint_from_seed(
            doc.get("checkpoint"), phase_ordinal=ordinal, meta=doc.get("phaselog") or {}
        )
    except (Corrupt, UnsupportedVersion) as exc:
        exc.context["path"] = location
        exc.message = f"{location}: {exc.message}"
        raise exc from None
    known_hash = None
    if isinstance(recorded, str) and stored_parts_match(doc.get("checkpoint"), doc.get("phaselog"), recorded):
        known_hash = recorded
    if known_hash is not None:
        cp.__dict__["content_hash"] = known_hash
    stored = Stored(cp, location, recorded if isinstance(recorded, str) else None, tuple(read_warns))
    kernel.check_tamper(stored)
    return stored


# -- generated documents ---------------------------------------------------------------------------
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)  # no lone surrogates: not UTF-8
_JSON_LEAF = (
    st.none() | st.booleans() | st.integers(-5, 2**40) | st.floats(allow_nan=False, allow_infinity=False) | _TEXT
)
_JSON = st.recursive(
    _JSON_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=6
)
_HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
_STAMPS = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
) | st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from([timezone(timedelta(hours=2)), timezone(timedelta(hours=-14))]),
)


@st.composite
def _records(draw: st.DrawFn) -> Checkpoint:
    """A record as phaselog writes it, with every optional part present or absent."""
    optional = st.none() | st.just(None)
    return Checkpoint(
        ticket_id=draw(st.sampled_from(["PROJ-1", "T-2", "x"])),
        run_id="4fa2159f-9c61-5f8b-9ae5-28692b46cbd7",
        phase=draw(st.sampled_from(["implement", "create_pr"])),
        phase_ordinal=draw(st.integers(1, MAX_PHASE_ORDINAL)),
        attempt_number=draw(st.integers(1, MAX_ATTEMPT)),
        timestamp_utc=draw(_STAMPS).astimezone(UTC),
        repo_commit_map=draw(st.dictionaries(_TEXT, _TEXT, max_size=3)),
        artifact_paths=tuple(draw(st.lists(_TEXT, max_size=3))),
        phase_payload=draw(st.none() | st.dictionaries(_TEXT, _JSON, max_size=3)),
        status=draw(st.sampled_from(STATUSES)),
        error=draw(optional | _TEXT),
        pipeline=draw(st.none() | st.builds(PipelineRef, _TEXT, _TEXT, _HEX)),
        basis=draw(st.none() | st.dictionaries(_TEXT, st.builds(BasisEntry, st.integers(1, 9), _HEX), max_size=2)),
        prev_hash=draw(st.none() | _HEX),
        decisions=tuple(draw(st.lists(st.dictionaries(_TEXT, _JSON, max_size=2), max_size=2))),
        forked_from=draw(st.none() | st.dictionaries(_TEXT, _JSON, min_size=1, max_size=2)),
        artifact_hashes=draw(st.none() | st.dictionaries(_TEXT, _HEX, max_size=2)),
        code_fingerprint=draw(st.none() | _TEXT),
        run_name=draw(st.none() | _TEXT.filter(bool)),
        started_at=draw(st.none() | _STAMPS.map(lambda ts: ts.astimezone(UTC))),
    )


#: Values a hand edit might leave in a field: wrong types, edge numbers, odd timestamps and versions.
_ODD_VALUES: list[Any] = [
    True,
    False,
    0,
    -1,
    MAX_ATTEMPT,
    MAX_ATTEMPT + 1,
    MAX_PHASE_ORDINAL + 1,
    "",
    "completed",
    "failed",
    "done",
    "1.0.0",
    "0.9.0",
    "1.1.0",
    "2.0.0",
    "x.0",
    "2026-02-09T15:04:27Z",
    "2026-02-09T15:04:27+00:00",
    "2026-02-09T15:04:27+02:00",
    "2026-02-09T15:04:27",
    "0001-01-01T00:00:00+14:00",
    "not a time",
    {"attempt": 1, "hash": "h"},
    {"attempt": True, "hash": "h"},
    {"name": "p", "version": "1", "manifest_hash": "h"},
    {"name": "p", "version": 1, "manifest_hash": "h"},
    [{"a": 1}],
    [1],
    {"k": "v"},
    {"k": 1},
    {1: "v"},
    ["a", 1],
    ("a",),
    {},
    [],
    None,
    1,
    2.5,
    "PROJ-1",
    "sha256:ab",
    {"run_id": "x"},
    {"a": "0" * 64},
    {"implement": {"attempt": 1, "hash": "h", "extra": 1}},
    {"implement": {"attempt": 1, "hash": 1}},
    {"implement": {"attempt": True, "hash": "h"}},
    {"implement": {"attempt": "1", "hash": "h"}},
    {"implement": {"hash": "h"}},
    {"implement": 1},
    {"name": "p", "version": "1", "manifest_hash": "h", "extra": 1},
    {"name": "p", "version": "1"},
    {"a.txt": 1},
    [{"id": 1}, 1],
]
_ODD = _JSON | st.sampled_from(_ODD_VALUES)


@st.composite
def _documents(draw: st.DrawFn) -> dict[str, Any]:
    """A stored document of a generated record, perhaps edited by hand (with or without a re-hash)."""
    record = draw(_records())
    doc = copy.deepcopy(
        {"content_hash": record.content_hash, "checkpoint": record.seed_dict(), "phaselog": record.meta_dict()}
    )
    for _ in range(draw(st.integers(0, 3))):
        part = draw(st.sampled_from(["checkpoint", "phaselog", "phaselog"]))
        names = [*SEED_FIELDS, "extra"] if part == "checkpoint" else [*record.meta_dict(), "started_at", "run_name"]
        name = draw(st.sampled_from(names))
        edit = draw(st.sampled_from(["drop", "set", "set"]))
        if edit == "drop":
            doc[part].pop(name, None)
        else:
            doc[part][name] = draw(_ODD)
    if draw(st.booleans()):
        doc["phaselog"] = draw(st.sampled_from([None, {}, doc["phaselog"]]))
    if draw(st.integers(0, 9)) == 0:
        doc["checkpoint"] = draw(_ODD)
    if draw(st.booleans()) and type(doc["checkpoint"]) is dict:
        # A hand edit that also recomputes the hash: the fields must still be checked.
        doc["content_hash"] = _rehash(doc)
    return doc


def _rehash(doc: dict[str, Any]) -> Any:
    from phaselog.model.records import parts_hash

    try:
        return parts_hash(doc["checkpoint"], doc["phaselog"])
    except (TypeError, ValueError):
        return doc["content_hash"]


# -- the comparison --------------------------------------------------------------------------------
def _outcome(decode: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return ("ok", decode(*args, **kwargs))
    except (Corrupt, UnsupportedVersion) as exc:
        return ("error", type(exc), exc.context.get("field"), exc.context.get("rule"), exc.message, exc.context)


def _same_record(new: Checkpoint, old: Checkpoint) -> None:
    assert new == old
    for f in dataclass_fields(Checkpoint):
        assert type(getattr(new, f.name)) is type(getattr(old, f.name)), f.name
    assert new.content_hash == old.content_hash


def _same_outcome(new: Any, old: Any) -> None:
    assert new[0] == old[0], (new, old)
    if new[0] == "error":
        assert new[1:] == old[1:]
        return
    new_value, old_value = new[1], old[1]
    if isinstance(new_value, Stored):
        assert (new_value.location, new_value.recorded_hash, new_value.warnings) == (
            old_value.location,
            old_value.recorded_hash,
            old_value.warnings,
        )
        _same_record(new_value.record, old_value.record)
    else:
        _same_record(new_value[0], old_value[0])
        assert new_value[1] == old_value[1]


@settings(max_examples=600)
@given(_documents(), st.integers(1, 3))
def test_record_from_document_decides_as_the_reference(doc: dict[str, Any], ordinal: int) -> None:
    new = _outcome(kernel.record_from_document, copy.deepcopy(doc), ordinal, "loc/x.json")
    old = _outcome(_reference_record_from_document, copy.deepcopy(doc), ordinal, "loc/x.json")
    _same_outcome(new, old)


@settings(max_examples=600)
@given(_documents(), st.integers(1, 3), st.booleans())
def test_checkpoint_from_seed_decides_as_the_reference(doc: dict[str, Any], ordinal: int, with_meta: bool) -> None:
    meta = doc["phaselog"] if with_meta else None
    new = _outcome(
        checkpoint_from_seed, copy.deepcopy(doc["checkpoint"]), phase_ordinal=ordinal, meta=copy.deepcopy(meta)
    )
    old = _outcome(
        _reference_checkpoint_from_seed,
        copy.deepcopy(doc["checkpoint"]),
        phase_ordinal=ordinal,
        meta=copy.deepcopy(meta),
    )
    _same_outcome(new, old)


@given(_records())
def test_a_record_as_written_reads_back_equal(record: Checkpoint) -> None:
    doc = {"content_hash": record.content_hash, "checkpoint": record.seed_dict(), "phaselog": record.meta_dict()}
    stored = kernel.record_from_document(doc, 1, "loc")
    assert stored.record == record
    assert stored.recorded_hash == record.content_hash
    assert not stored.tampered


def test_the_decoded_record_shares_no_container_with_the_document() -> None:
    record = Checkpoint(
        ticket_id="T-1",
        run_id="4fa2159f-9c61-5f8b-9ae5-28692b46cbd7",
        phase="implement",
        phase_ordinal=1,
        attempt_number=1,
        timestamp_utc=datetime(2026, 1, 1, tzinfo=UTC),
        repo_commit_map={"r": "c"},
        phase_payload={"k": "v"},
        decisions=({"id": "d"},),
        forked_from={"run_id": "x"},
        artifact_hashes={"a": "h"},
        basis={"p": BasisEntry(1, "h")},
    )
    doc = {"content_hash": record.content_hash, "checkpoint": record.seed_dict(), "phaselog": record.meta_dict()}
    cp = kernel.record_from_document(doc, 1, "loc").record
    doc["checkpoint"]["repo_commit_map"]["r"] = "changed"
    doc["checkpoint"]["phase_payload"]["k"] = "changed"
    doc["phaselog"]["decisions"][0]["id"] = "changed"
    doc["phaselog"]["forked_from"]["run_id"] = "changed"
    doc["phaselog"]["artifact_hashes"]["a"] = "changed"
    assert cp == record


@pytest.mark.parametrize("offset", ["Z", "+00:00", "+02:00", "-14:00"])
def test_timestamps_in_any_offset_read_as_utc(offset: str) -> None:
    seed = {
        "schema_version": "1.0.0",
        "run_id": "r",
        "ticket_id": "t",
        "phase": "p",
        "timestamp_utc": f"2026-02-09T15:04:27{offset}",
        "repo_commit_map": {},
        "artifact_paths": [],
        "attempt_number": 1,
        "phase_payload": None,
    }
    new, _ = checkpoint_from_seed(seed, phase_ordinal=1)
    old, _ = _reference_checkpoint_from_seed(seed, phase_ordinal=1)
    assert new.timestamp_utc == old.timestamp_utc
    assert new.timestamp_utc.tzinfo is UTC


_FULL = Checkpoint(
    ticket_id="T-1",
    run_id="4fa2159f-9c61-5f8b-9ae5-28692b46cbd7",
    phase="implement",
    phase_ordinal=2,
    attempt_number=3,
    timestamp_utc=datetime(2026, 1, 1, 12, 30, 1, 5, tzinfo=UTC),
    repo_commit_map={"r": "c"},
    artifact_paths=("a.txt",),
    phase_payload={"k": [1, {"x": None}]},
    status="failed",
    error="boom",
    pipeline=PipelineRef("p", "1", "0" * 64),
    basis={"implement": BasisEntry(1, "0" * 64)},
    prev_hash="1" * 64,
    decisions=({"id": "d"},),
    forked_from={"run_id": "x"},
    artifact_hashes={"a.txt": "2" * 64},
    code_fingerprint="sha256:ab",
    run_name="nightly-1",
    started_at=datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
)


def _field_edits() -> list[tuple[str, str, Any]]:
    names = {"checkpoint": [*SEED_FIELDS, "extra"], "phaselog": [*_FULL.meta_dict(), "unknown"]}
    edits: list[tuple[str, str, Any]] = []
    for part, fields in names.items():
        for name in fields:
            edits.append((part, name, _DROP))
            edits.extend((part, name, value) for value in _ODD_VALUES)
    return edits


_DROP = object()


@pytest.mark.parametrize("rehash", [False, True], ids=["edited", "edited-and-rehashed"])
def test_every_field_edited_every_way_decides_as_the_reference(rehash: bool) -> None:
    """Each field of a record with every part set, dropped or set to each odd value, one at a time."""
    for part, name, value in _field_edits():
        doc = copy.deepcopy(
            {"content_hash": _FULL.content_hash, "checkpoint": _FULL.seed_dict(), "phaselog": _FULL.meta_dict()}
        )
        if value is _DROP:
            doc[part].pop(name, None)
        else:
            doc[part][name] = copy.deepcopy(value)
        if rehash:
            doc["content_hash"] = _rehash(doc)
        new = _outcome(kernel.record_from_document, copy.deepcopy(doc), 2, "loc")
        old = _outcome(_reference_record_from_document, copy.deepcopy(doc), 2, "loc")
        _same_outcome(new, old)
