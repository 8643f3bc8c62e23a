"""Records: the seed's checkpoint plus what phaselog adds, as immutable data.

A :class:`Checkpoint` has two parts:

* the **seed part**, field for field seed 000's contract (``SEED_FIELDS``), which the files store
  writes as ``phase_<N>_<name>_a<k>.yaml`` and nothing else;
* the **phaselog part** (status, error, phase ordinal, pipeline, basis, prev_hash, decisions),
  which lives beside it (a JSON sidecar in the files store, columns in the SQL stores).

The content hash is SHA-256 over :func:`canonical_bytes` of both parts; it is the same in every
store. ``docs/record-format.md`` documents the serialisation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Literal

from phaselog.model._json import dumps_canonical, dumps_sorted_fast
from phaselog.model.errors import Corrupt, UnsupportedVersion

SCHEMA_VERSION = "1.0.0"
SUPPORTED_MAJOR = 1
SEED_FIELDS = (
    "schema_version",
    "run_id",
    "ticket_id",
    "phase",
    "timestamp_utc",
    "repo_commit_map",
    "artifact_paths",
    "attempt_number",
    "phase_payload",
)
Status = Literal["completed", "failed"]
STATUSES = ("completed", "failed")


def format_timestamp(ts: datetime) -> str:
    """Format an aware datetime as the seed does: UTC, ``Z``, microseconds only when non-zero."""
    if ts.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware")
    ts = ts.astimezone(UTC)
    # isoformat pads the year to four digits (strftime's %Y does not on glibc: year 999 would
    # format as "999-…", which fromisoformat cannot read back).
    base = ts.replace(tzinfo=None).isoformat(timespec="seconds")
    return f"{base}.{ts.microsecond:06d}Z" if ts.microsecond else f"{base}Z"


def parse_timestamp(value: Any, *, field: str = "timestamp_utc") -> datetime:
    """Parse an ISO-8601 timestamp that carries a timezone; return it in UTC."""
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value)
        except ValueError:
            raise Corrupt(f"{field}: not an ISO-8601 timestamp ({value!r})", field=field, rule="datetime") from None
    else:
        raise Corrupt(f"{field}: must be an ISO-8601 string", field=field, rule="datetime")
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise Corrupt(
            f"{field}: must carry a timezone, e.g. a trailing Z ({value!r})",
            field=field,
            rule="timezone_aware",
        )
    try:
        return ts.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+14:00 is before year 1 in UTC
        raise Corrupt(f"{field}: out of range in UTC ({value!r})", field=field, rule="datetime") from None


def check_schema_version(version: Any, *, field: str = "schema_version") -> list[str]:
    """Return warnings for ``version``; raise UnsupportedVersion for a newer major version."""
    if version == SCHEMA_VERSION and type(version) is str:  # every record phaselog writes: nothing to parse
        return []
    if not isinstance(version, str):
        raise Corrupt(f"{field}: must be a string like '1.0.0'", field=field, rule="type")
    try:
        major = int(version.split(".", 1)[0])
    except ValueError:
        raise Corrupt(f"{field}: not a version number ({version!r})", field=field, rule="semver") from None
    if major > SUPPORTED_MAJOR:
        raise UnsupportedVersion(
            f"{field} {version} is newer than this phaselog reads "
            f"(major {SUPPORTED_MAJOR}); upgrade phaselog to read it",
            field=field,
            found=version,
            supported=SCHEMA_VERSION,
        )
    if version != SCHEMA_VERSION:
        return [f"{field}: {version} differs from the current {SCHEMA_VERSION}"]
    return []


@dataclass(frozen=True, slots=True)
class PipelineRef:
    """The pipeline a run follows: name, version and manifest hash."""

    name: str
    version: str
    manifest_hash: str

    def to_json(self) -> dict[str, str]:
        """Return the JSON form."""
        return {"name": self.name, "version": self.version, "manifest_hash": self.manifest_hash}

    @classmethod
    def from_json(cls, data: Any) -> PipelineRef:
        """Parse the JSON form."""
        if not is_mapping(data) or not all(isinstance(data.get(k), str) for k in ("name", "version", "manifest_hash")):
            raise Corrupt("pipeline: needs string name, version and manifest_hash", field="pipeline")
        return cls(data["name"], data["version"], data["manifest_hash"])


@dataclass(frozen=True, slots=True)
class BasisEntry:
    """What a phase was built on: attempt number and content hash of an earlier checkpoint."""

    attempt: int
    hash: str

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {"attempt": self.attempt, "hash": self.hash}


@dataclass(frozen=True)
class Checkpoint:
    """One finished attempt of one phase: immutable, hash-addressed."""

    ticket_id: str
    run_id: str
    phase: str
    phase_ordinal: int
    attempt_number: int
    timestamp_utc: datetime
    repo_commit_map: Mapping[str, str] = field(default_factory=dict)
    artifact_paths: tuple[str, ...] = ()
    phase_payload: Mapping[str, Any] | None = None
    schema_version: str = SCHEMA_VERSION
    status: Status = "completed"
    error: str | None = None
    pipeline: PipelineRef | None = None
    basis: Mapping[str, BasisEntry] | None = None
    prev_hash: str | None = None
    decisions: tuple[Mapping[str, Any], ...] = ()
    #: For a forked run: the checkpoint this one reuses (ticket_id, run_id, attempt, hash).
    forked_from: Mapping[str, Any] | None = None
    #: SHA-256 (hex) of each artifact, hashed when the checkpoint was written (None: not hashed).
    artifact_hashes: Mapping[str, str] | None = None
    #: The phase's code fingerprint at write time (``fingerprint: code``), e.g. ``sha256:<hex>``.
    code_fingerprint: str | None = None
    #: The run id as the user gave it (``nightly-1``) when it was a name; ``run_id`` is its UUID v5.
    run_name: str | None = None
    #: When the attempt's work started (the runner records it; None: not known). D98.
    started_at: datetime | None = None
    #: The run's parameters (``--param``; model/params.py), recorded by the runner; None: none (D260).
    params: Mapping[str, Any] | None = None
    #: False for a checkpoint the seed tool wrote (no phaselog part on disk).
    has_metadata: bool = True
    #: Keys found in a stored seed file that the contract does not know (validation reports them).
    unknown_fields: tuple[str, ...] = ()

    # -- serialisation -------------------------------------------------------------------------
    def seed_dict(self) -> dict[str, Any]:
        """Return the seed contract's fields in the seed tool's order, JSON-typed."""
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "ticket_id": self.ticket_id,
            "phase": self.phase,
            "timestamp_utc": format_timestamp(self.timestamp_utc),
            "repo_commit_map": dict(self.repo_commit_map),
            "artifact_paths": list(self.artifact_paths),
            "attempt_number": self.attempt_number,
            "phase_payload": _jsonable(self.phase_payload),
        }

    def meta_dict(self) -> dict[str, Any]:
        """Return the phaselog part, JSON-typed (everything beside the seed file).

        ``artifact_hashes`` and ``code_fingerprint`` appear only when set, so records written
        without them keep the bytes (and content hashes) they always had.
        """
        meta = {
            "status": self.status,
            "error": self.error,
            "phase_ordinal": self.phase_ordinal,
            "pipeline": self.pipeline.to_json() if self.pipeline else None,
            "basis": ({k: v.to_json() for k, v in sorted(self.basis.items())} if self.basis is not None else None),
            "prev_hash": self.prev_hash,
            "decisions": [_jsonable(d) for d in self.decisions],
            "forked_from": _jsonable(self.forked_from) if self.forked_from else None,
        }
        if self.artifact_hashes is not None:
            meta["artifact_hashes"] = dict(sorted(self.artifact_hashes.items()))
        if self.code_fingerprint is not None:
            meta["code_fingerprint"] = self.code_fingerprint
        if self.run_name is not None:
            meta["run_name"] = self.run_name
        if self.started_at is not None:
            meta["started_at"] = format_timestamp(self.started_at)
        if self.params is not None:  # only when set: records without params keep their bytes and hashes
            meta["params"] = _jsonable(self.params)
        return meta

    def to_json(self) -> dict[str, Any]:
        """Return the whole record as JSON: ``checkpoint`` (seed part), ``metadata``, hash."""
        return {
            "checkpoint": self.seed_dict(),
            "metadata": {**self.meta_dict(), "has_metadata": self.has_metadata},
            "content_hash": self.content_hash,
        }

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 hex of the canonical serialisation of both parts."""
        return hashlib.sha256(canonical_bytes(self)).hexdigest()

    @property
    def key(self) -> tuple[str, str, int, int]:
        """Sort key: ticket, run, phase ordinal, attempt."""
        return (self.ticket_id, self.run_id, self.phase_ordinal, self.attempt_number)

    @property
    def completed(self) -> bool:
        """True for a completed attempt."""
        return self.status == "completed"

    def evolve(self, **changes: Any) -> Checkpoint:
        """Return a copy with ``changes`` applied (the hash is recomputed)."""
        return replace(self, **changes)


def canonical_bytes(cp: Checkpoint) -> bytes:
    """Serialise ``cp`` canonically: JSON, sorted keys, no spaces, UTF-8, no escapes.

    ``{"checkpoint": <seed dict>, "phaselog": <meta dict>}``. Seed checkpoints without a
    phaselog part hash with the defaults (completed, no pipeline, no basis, no prev_hash).
    """
    return _canonical(cp.seed_dict(), cp.meta_dict())


def _canonical(seed: Any, meta: Any, plain: bool | None = None) -> bytes:
    return dumps_canonical({"checkpoint": seed, "phaselog": meta}, plain=plain)


def parts_hash(seed: Any, meta: Any, *, plain: bool | None = None) -> str:
    """The content hash of a record's two parts as JSON (``seed_dict()``, ``meta_dict()``);
    ``plain``: ``is_plain`` of both parts, when the caller already asked (it writes them too)."""
    return hashlib.sha256(_canonical(seed, meta, plain)).hexdigest()


def stored_parts_match(seed: Any, meta: Any, recorded: str) -> bool:
    """True when a stored record's two parts, as stored (decoded JSON), hash to ``recorded``.

    Then they are what was hashed when the record was written (phaselog stores exactly
    ``seed_dict()`` and ``meta_dict()``, which read back to the same record), so the record read
    from them has that content hash without rebuilding it. orjson's bytes, without the plainness
    check: a float it spells differently from the canonical form just does not match, and the
    caller re-serialises the record the exact way.
    """
    data = dumps_sorted_fast({"checkpoint": seed, "phaselog": meta})
    return data is not None and hashlib.sha256(data).hexdigest() == recorded


def copy_json(value: Any) -> Any:
    """A deep copy of decoded JSON: dicts and lists are copied, everything else (immutable) shared."""
    kind = type(value)
    if kind is dict:
        return {k: copy_json(v) for k, v in value.items()}
    if kind is list:
        return [copy_json(v) for v in value]
    return value


def detached_copy(cp: Checkpoint) -> Checkpoint:
    """An equal record that shares no mutable container with ``cp`` (its computed hash is kept).

    For records decoded from a stored document (plain JSON containers): a store's memo of decoded
    records keeps one and hands out copies, so a caller that edits a record's payload in place
    changes its own copy, never what the next reader gets (docs/decisions.md, "A memo of decoded
    records, handed out as copies").
    """
    new = object.__new__(Checkpoint)
    fields = new.__dict__
    fields.update(cp.__dict__)  # a frozen dataclass: set the fields as its __init__ does
    fields["repo_commit_map"] = dict(cp.repo_commit_map)
    fields["phase_payload"] = copy_json(cp.phase_payload)
    fields["decisions"] = tuple(copy_json(d) for d in cp.decisions)
    if cp.basis is not None:
        fields["basis"] = dict(cp.basis)  # BasisEntry is frozen
    if cp.forked_from is not None:
        fields["forked_from"] = copy_json(cp.forked_from)
    if cp.artifact_hashes is not None:
        fields["artifact_hashes"] = dict(cp.artifact_hashes)
    if cp.params is not None:
        fields["params"] = copy_json(cp.params)
    return new


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _jsonable(value: Any) -> Any:
    # Exact built-in types first: an isinstance check against the Mapping ABC costs more than the
    # rest of this function, and a record's values are nearly all plain JSON (hashing a record
    # walks it twice per write). Anything else takes the general path below, as before.
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): _jsonable(v) for k, v in value.items()}
    if kind is list:
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return format_timestamp(value)
    return value


# -- parsing ------------------------------------------------------------------------------------
def is_mapping(value: Any) -> bool:
    """True for a mapping (a decoded record's containers are plain dicts: that exact check first)."""
    # The ABC's isinstance is several times slower than the exact type check: only for anything else.
    return type(value) is dict or isinstance(value, Mapping)


def is_str_map(value: Mapping[Any, Any]) -> bool:
    """True when every key and value of ``value`` is a string."""
    return all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def required_field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``data[name]``, refused (Corrupt naming the field and rule) when missing or of the wrong type."""
    if name not in data:
        raise Corrupt(f"{name}: missing required field", field=name, rule="required")
    value = data[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise Corrupt(f"{name}: must be {what}", field=name, rule="type")
    return value
