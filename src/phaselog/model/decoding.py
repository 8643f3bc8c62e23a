"""Decoding a record: a stored seed dict and phaselog part back into a :class:`Checkpoint`.

Every field is checked on every read (a content hash can be recomputed after a hand edit, so a
matching hash vouches for nothing). A record as phaselog writes it passes every check in one pass
of inline type tests (:func:`_plain_checkpoint`, a few calls in all); anything that pass cannot
vouch for is judged field by field (:func:`_checked_checkpoint`), which accepts it or raises the
error naming the field and the rule. docs/decisions.md D170.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime
from typing import Any

from phaselog.model.errors import Corrupt
from phaselog.model.limits import MAX_ATTEMPT, MAX_PHASE_ORDINAL, is_phase_ordinal
from phaselog.model.records import (
    SCHEMA_VERSION,
    SEED_FIELDS,
    STATUSES,
    BasisEntry,
    Checkpoint,
    PipelineRef,
    check_schema_version,
    is_mapping,
    is_str_map,
    parse_timestamp,
    required_field,
)

_SEED_COUNT = len(SEED_FIELDS)


#: The fields a Checkpoint takes from a default (every other one :func:`checkpoint_from_seed` gives).
_DEFAULTS = {f.name: f.default for f in dataclass_fields(Checkpoint) if f.default is not MISSING}


def _decoded_checkpoint(**values: Any) -> Checkpoint:
    """``Checkpoint(**values)`` for a decoded record, without the frozen dataclass's ``__init__``.

    That ``__init__`` sets its 22 fields one ``object.__setattr__`` at a time: a quarter of
    decoding a record. ``values`` must name every field without a default (the records tests
    compare the two constructions).
    """
    cp = object.__new__(Checkpoint)
    state = cp.__dict__
    state.update(_DEFAULTS)
    state.update(values)
    return cp


def checkpoint_from_seed(
    data: Any, *, phase_ordinal: int, meta: Mapping[str, Any] | None = None
) -> tuple[Checkpoint, list[str]]:
    """Build a Checkpoint from a seed dict (and an optional phaselog part).

    Returns the checkpoint and read warnings (older schema version). Raises Corrupt for a
    structurally broken record and UnsupportedVersion for a newer major version.
    """
    # Every check is made on every read (a hash can be recomputed after a hand edit). A record as
    # phaselog writes it passes them all in one pass of inline type tests (_plain_checkpoint);
    # anything that pass cannot vouch for (a broken field, an older version, a subclass, an extra
    # key) is judged field by field (_checked_checkpoint), which accepts or names what is wrong.
    if type(data) is dict:
        cp = _plain_checkpoint(data, phase_ordinal, meta)
        if cp is not None:
            return cp, []
    return _checked_checkpoint(data, phase_ordinal, meta)


def _utc(stamp: Any) -> datetime | None:
    """``stamp`` as parse_timestamp reads it when it is a string in UTC already (None: anything else)."""
    try:
        ts = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    # fromisoformat gives the UTC singleton for ``Z`` and ``+00:00``; astimezone(UTC) of such a
    # timestamp is the timestamp itself, so this is what parse_timestamp returns.
    return ts if ts.tzinfo is UTC else None


def _plain_checkpoint(data: dict[str, Any], ordinal: int, meta: Mapping[str, Any] | None) -> Checkpoint | None:
    """The checkpoint of a record exactly as phaselog writes it, checked in one pass; None: not such a record.

    Accepts only what :func:`_checked_checkpoint` accepts, without warnings, and builds the same
    Checkpoint (tests/test_decode_equivalence.py holds both to the decode this replaced).
    """
    try:
        version, ticket_id, run_id = data["schema_version"], data["ticket_id"], data["run_id"]
        phase, stamp, attempt = data["phase"], data["timestamp_utc"], data["attempt_number"]
        rcm, paths, payload = data["repo_commit_map"], data["artifact_paths"], data["phase_payload"]
    except KeyError:
        return None
    if not (
        type(version) is str
        and version == SCHEMA_VERSION
        and type(ticket_id) is str
        and type(run_id) is str
        and type(phase) is str
        and type(attempt) is int
        and 1 <= attempt <= MAX_ATTEMPT
        and (payload is None or type(payload) is dict)
        and len(data) == _SEED_COUNT  # every field is present, so none is unknown
    ):
        return None
    if rcm is None:
        rcm = {}
    elif type(rcm) is not dict:
        return None
    for repo, commit in rcm.items():
        if type(repo) is not str or type(commit) is not str:
            return None
    if paths is None:
        paths = ()
    elif type(paths) is not list:
        return None
    for path in paths:
        if type(path) is not str:
            return None
    ts = _utc(stamp)
    if ts is None:
        return None
    state = {
        "ticket_id": ticket_id,
        "run_id": run_id,
        "phase": phase,
        "phase_ordinal": ordinal,
        "attempt_number": attempt,
        "timestamp_utc": ts,
        "repo_commit_map": dict(rcm),
        "artifact_paths": tuple(paths),
        "phase_payload": dict(payload) if payload is not None else None,
        "schema_version": version,
        "status": "completed",
        "error": None,
        "pipeline": None,
        "basis": None,
        "prev_hash": None,
        "decisions": (),
        "forked_from": None,
        "artifact_hashes": None,
        "code_fingerprint": None,
        "run_name": None,
        "started_at": None,
        "params": None,
        "has_metadata": meta is not None,
        "unknown_fields": (),
    }
    if meta is not None and not _plain_meta(meta, state):
        return None
    cp = object.__new__(Checkpoint)  # a frozen dataclass without __post_init__: its fields are its __dict__
    cp.__dict__.update(state)
    return cp


#: PipelineRef by (name, version, manifest hash): a run's records all name the same one (immutable).
_PIPELINE_REFS: dict[tuple[str, str, str], PipelineRef] = {}


def _plain_meta(meta: Mapping[str, Any], state: dict[str, Any]) -> bool:
    """Put a phaselog part as phaselog writes it into ``state`` (as _meta_kwargs reads it); False: not such a part."""
    if type(meta) is not dict:
        return False
    try:
        status, ordinal, basis_raw = meta["status"], meta["phase_ordinal"], meta["basis"]
        prev, err, decisions = meta["prev_hash"], meta["error"], meta["decisions"]
        pipeline, forked = meta["pipeline"], meta["forked_from"]
    except KeyError:
        return False
    if not (
        type(status) is str
        and status in {"completed", "failed"}
        and type(ordinal) is int
        and 1 <= ordinal <= MAX_PHASE_ORDINAL
        and (prev is None or type(prev) is str)
        and (err is None or type(err) is str)
        and (forked is None or type(forked) is dict)
    ):
        return False
    if decisions is None:
        decisions = ()
    elif type(decisions) is not list:
        return False
    for decision in decisions:
        if type(decision) is not dict:
            return False
    basis: dict[str, BasisEntry] | None = None
    if basis_raw is not None:
        if type(basis_raw) is not dict:
            return False
        basis = {}
        for name, entry in basis_raw.items():
            if not (
                type(entry) is dict
                and "attempt" in entry
                and "hash" in entry
                and type(entry["attempt"]) is int
                and type(entry["hash"]) is str
            ):
                return False
            basis[name] = BasisEntry(entry["attempt"], entry["hash"])
    ref: PipelineRef | None = None
    if pipeline is not None:
        if not (
            type(pipeline) is dict and "name" in pipeline and "version" in pipeline and "manifest_hash" in pipeline
        ):
            return False
        key = (pipeline["name"], pipeline["version"], pipeline["manifest_hash"])
        if type(key[0]) is not str or type(key[1]) is not str or type(key[2]) is not str:
            return False
        try:
            ref = _PIPELINE_REFS[key]
        except KeyError:
            if len(_PIPELINE_REFS) >= 256:  # bounded: forget them all, they are rebuilt on the next read
                _PIPELINE_REFS.clear()
            ref = _PIPELINE_REFS[key] = PipelineRef(*key)
    # The optional fields appear only when set (Checkpoint.meta_dict); absent reads as None.
    hashes = meta.get("artifact_hashes")
    if hashes is not None:
        if type(hashes) is not dict:
            return False
        for path, digest in hashes.items():
            if type(path) is not str or type(digest) is not str:
                return False
        hashes = dict(hashes)
    fingerprint = meta.get("code_fingerprint")
    run_name = meta.get("run_name")
    started = meta.get("started_at")
    if not (
        (fingerprint is None or type(fingerprint) is str) and (run_name is None or (type(run_name) is str and run_name))
    ):
        return False
    if started is not None:
        if type(started) is not str:
            return False
        started = _utc(started)
        if started is None:
            return False
    state["status"] = status
    state["error"] = err
    state["phase_ordinal"] = ordinal
    state["pipeline"] = ref
    state["basis"] = basis
    state["prev_hash"] = prev
    state["decisions"] = tuple(map(dict, decisions))
    state["forked_from"] = dict(forked) if forked is not None else None
    state["artifact_hashes"] = hashes
    state["code_fingerprint"] = fingerprint
    state["run_name"] = run_name
    state["started_at"] = started
    params = meta.get("params")
    if params is not None:
        if type(params) is not dict:
            return False
        state["params"] = params
    return True


def _checked_checkpoint(data: Any, phase_ordinal: int, meta: Mapping[str, Any] | None) -> tuple[Checkpoint, list[str]]:
    """checkpoint_from_seed field by field: the checks that accept any record or say what is wrong with it."""
    if not is_mapping(data):
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
    if not is_mapping(rcm) or not is_str_map(rcm):
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
    if payload is not None and not is_mapping(payload):
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
        if not is_mapping(basis_raw):
            raise Corrupt("basis: must be a mapping", field="basis", rule="type")
        basis = {}
        for name, entry in basis_raw.items():
            if (
                not is_mapping(entry)
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
    if not isinstance(decisions, list) or not all(is_mapping(d) for d in decisions):
        raise Corrupt("decisions: must be a list of mappings", field="decisions", rule="type")
    pipeline = meta.get("pipeline")
    forked = meta.get("forked_from")
    if forked is not None and not is_mapping(forked):
        raise Corrupt("forked_from: must be a mapping or null", field="forked_from", rule="type")
    hashes = meta.get("artifact_hashes")
    if hashes is not None and (not is_mapping(hashes) or not is_str_map(hashes)):
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
    params = meta.get("params")
    if params is not None and not is_mapping(params):
        raise Corrupt("params: must be a mapping or absent", field="params", rule="type")
    return {
        "params": dict(params) if params is not None else None,
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
