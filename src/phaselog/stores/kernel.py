"""The store kernel: the rules every backend shares, defined once.

Every store (files, SQLite, PostgreSQL, and any new one) uses these functions, so a record one
store takes every store takes, reads back the same way and is judged damaged for the same reason:

* **keys**: which ticket / run / entry keys a store accepts (:func:`check_run_key`,
  :func:`check_entry_key`, :func:`check_entry`);
* **locations**: the logical path of a record or an audit entry, the same string on every store
  (:func:`record_location`, :func:`entry_location`); the name formats live in
  :mod:`phaselog.stores.names`;
* **the record codec**: the stored JSON document (a files store's sidecar, a SQL row's body) and
  how it is decoded (:func:`record_document`, :func:`encode_record`, :func:`decode_document`,
  :func:`record_from_document`);
* **tamper and identity checks**: a record whose content no longer hashes to what was recorded, or
  whose content names another key than where it lives, is Corrupt (:func:`check_tamper`,
  :func:`check_identity`);
* **the append decision**: duplicate (AlreadyExists) vs someone appended meanwhile (Conflict)
  (:func:`decide_append`);
* **damage**: the :class:`~phaselog.stores.base.Damaged` entry for a record that exists but cannot
  be read (:func:`damaged_from`).

A backend keeps only what is its own: where bytes live and how they are locked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from phaselog.model._json import dumps_compact, is_plain
from phaselog.model.decoding import checkpoint_from_seed
from phaselog.model.errors import (
    AlreadyExists,
    Conflict,
    Corrupt,
    Fenced,
    InvalidRecord,
    StoreError,
    TooLarge,
    UnsupportedVersion,
)
from phaselog.model.ids import is_canonical_uuid, validate_ticket_id
from phaselog.model.limits import (
    MAX_PHASE_ORDINAL,
    MAX_RECORD_BYTES,
    check_record_size,
    is_phase_ordinal,
    json_loads,
    yaml_size_matters,
)
from phaselog.model.records import (
    SCHEMA_VERSION,
    Checkpoint,
    check_schema_version,
    detached_copy,
    parts_hash,
    stored_parts_match,
)
from phaselog.stores.names import (
    ENTRY_KINDS,
    checkpoint_name,
    is_entry_name,
    parse_checkpoint_name,
    parse_failed_name,
    record_name,
)
from phaselog.stores.values import Damaged, Stored

if TYPE_CHECKING:
    from phaselog.stores.admin_values import RunFence

#: A store's cap on one record unless it is opened with another.
DEFAULT_MAX_RECORD_BYTES = MAX_RECORD_BYTES
#: The ``kind`` of a stored record document.
RECORD_KIND = "phaselog.checkpoint"
#: How many more bytes a document's ``checkpoint_file_sha256`` takes than ``null``.
_SHA_FIELD_EXTRA = len('"' + 64 * "0" + '"') - len("null")


# -- keys ------------------------------------------------------------------------------------------
def check_run_key(ticket_id: str, run_id: str) -> None:
    """Refuse a ticket id that is not valid or a run id that is not a canonical UUID."""
    validate_ticket_id(ticket_id)
    if not is_canonical_uuid(run_id):
        raise StoreError(f"run_id {run_id!r} is not a canonical UUID")


def check_record_key(record: Checkpoint) -> None:
    """Refuse a record whose key cannot be stored (ids, or a phase / attempt no name can hold)."""
    check_run_key(record.ticket_id, record.run_id)
    ordinal, phase, attempt = record.phase_ordinal, record.phase, record.attempt_number
    if not is_phase_ordinal(ordinal):  # the bound a reader applies: never acknowledge what reads as damage
        message = f"must be an integer from 1 to {MAX_PHASE_ORDINAL} (a pipeline has at most that many phases)"
        raise InvalidRecord(
            f"phase_ordinal: {message} (got {ordinal!r:.40})",
            errors=[{"field": "phase_ordinal", "rule": "max_phase_ordinal", "message": message}],
            field="phase_ordinal",
            rule="max_phase_ordinal",
        )
    if attempt < 1 or parse_checkpoint_name(checkpoint_name(ordinal, phase, attempt)) != (ordinal, phase, attempt):
        raise StoreError(f"phase {phase!r} / ordinal {ordinal} / attempt {attempt} cannot name a file")


def check_entry_key(kind: str, ticket_id: str, run_id: str | None) -> None:
    """Refuse an unknown audit entry kind, an invalid ticket id, or a run id that is not a UUID."""
    if kind not in ENTRY_KINDS:
        raise StoreError(f"unknown entry kind {kind!r}")
    validate_ticket_id(ticket_id)
    if run_id is not None and not is_canonical_uuid(run_id):
        raise StoreError(f"run_id {run_id!r} is not a canonical UUID")


def entry_cap(max_record_bytes: int) -> int:
    """The cap on one audit entry: progress output escaped as JSON can grow sixfold."""
    return 4 * max_record_bytes


def check_entry(name: str, body: bytes, max_record_bytes: int) -> None:
    """Refuse an entry name that is not safe as a file name, or a body over the entry cap."""
    if not is_entry_name(name):
        raise StoreError(f"entry name {name!r} is not safe as a file name")
    cap = entry_cap(max_record_bytes)
    if len(body) > cap:
        raise TooLarge(f"entry of {len(body)} bytes exceeds the cap of {cap} bytes", rule="max_record_bytes")


# -- locations -------------------------------------------------------------------------------------
def attempt_location(ticket_id: str, run_id: str, ordinal: int, phase: str, attempt: int, *, completed: bool) -> str:
    """The logical path of an attempt's record (relative to a files store's checkpoints folder)."""
    return f"{ticket_id}/{run_id}/{record_name(ordinal, phase, attempt, completed=completed)}"


def record_location(record: Checkpoint) -> str:
    """Where ``record`` lives or would live, the same string on every store."""
    return attempt_location(
        record.ticket_id,
        record.run_id,
        record.phase_ordinal,
        record.phase,
        record.attempt_number,
        completed=record.completed,
    )


def entry_dir_location(kind: str, ticket_id: str, run_id: str | None) -> str:
    """The logical folder of a kind's audit entries (a run's, or the ticket's when ``run_id`` is None)."""
    return "/".join(filter(None, [ticket_id, run_id, f".{kind}"]))


def entry_location(kind: str, ticket_id: str, run_id: str | None, name: str) -> str:
    """The logical path of one audit entry."""
    return f"{entry_dir_location(kind, ticket_id, run_id)}/{name}.json"


class Located(NamedTuple):
    """What a logical location names: a record (``kind`` ``record``) or an audit entry of ``kind``."""

    kind: str
    ticket_id: str
    #: "" for a ticket's own entries (markers).
    run_id: str
    #: An entry's name; a record's file name.
    name: str
    ordinal: int = 0
    phase: str = ""
    attempt: int = 0


def parse_location(location: str) -> Located | None:
    """What ``location`` names (the inverse of the two functions above), or None. Ids are not
    validated here."""
    segs = location.split("/")
    if len(segs) == 3 and not segs[1].startswith("."):
        got = parse_checkpoint_name(segs[2]) or parse_failed_name(segs[2])
        return None if got is None else Located("record", segs[0], segs[1], segs[2], *got)
    if len(segs) in (3, 4) and segs[-2].startswith(".") and segs[-1].endswith(".json"):
        kind, name = segs[-2][1:], segs[-1][: -len(".json")]
        if kind in ENTRY_KINDS and is_entry_name(name):
            return Located(kind, segs[0], segs[1] if len(segs) == 4 else "", name)
    return None


# -- the record codec ------------------------------------------------------------------------------
def render_seed_file(record: Checkpoint) -> bytes:
    """The seed tool's YAML file of a completed record."""
    from phaselog.model import _yaml  # lazy: YAML (~15 ms) only for seed files; `phaselog read` must not load it

    return _yaml.dump(record.seed_dict()).encode("utf-8")


def record_document(record: Checkpoint, seed_sha256: str | None = None) -> bytes:
    """The stored JSON document of ``record`` (a SQL row's body; with the seed file's hash, a sidecar)."""
    seed, meta = record.seed_dict(), record.meta_dict()
    # One walk of the record's values decides the codec of both byte strings (the sorted one hashed,
    # the stored one in the parts' own order: readers show a payload's keys as written, D178); the
    # envelope around the parts adds only strings, an int and None.
    plain = is_plain((seed, meta))
    if "content_hash" not in record.__dict__:  # not hashed yet: hash these very parts (same bytes)
        record.__dict__["content_hash"] = parts_hash(seed, meta, plain=plain)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": RECORD_KIND,
        "content_hash": record.content_hash,
        "checkpoint_file_sha256": seed_sha256,
        "checkpoint": seed,
        "phaselog": meta,
    }
    return dumps_compact(doc, newline=True, plain=plain)


def encode_record(record: Checkpoint, max_record_bytes: int, *, seed_file: bytes | None = None) -> bytes:
    """The stored document of ``record``, refused (TooLarge) when over the cap on any store.

    Every store counts the same two sizes: the document without the seed file's hash, and the
    YAML seed file a completed record is (or would be, in a files store). ``seed_file`` is that
    YAML when the caller has it (the files store writes it); its hash then goes in the document.
    """
    sha = hashlib.sha256(seed_file).hexdigest() if seed_file is not None else None
    document = record_document(record, sha)
    body_size = len(document) - (_SHA_FIELD_EXTRA if sha is not None else 0)
    yaml_size = None
    if record.completed:
        if seed_file is not None:
            yaml_size = len(seed_file)
        elif yaml_size_matters(body_size, max_record_bytes):
            yaml_size = len(render_seed_file(record))
    check_record_size(body_size, yaml_size, max_record_bytes, path=record_location(record))
    return document


def decode_document(raw: bytes, location: str) -> dict[str, Any]:
    """Parse a stored document: Corrupt unless it is a phaselog record of a supported version."""
    try:
        doc = json_loads(raw)
    except (ValueError, RecursionError) as exc:
        raise Corrupt(f"{location}: not valid JSON ({exc})", path=location, rule="json") from None
    if not isinstance(doc, dict) or doc.get("kind") != RECORD_KIND:
        raise Corrupt(f"{location}: not a phaselog record", path=location)
    try:
        check_schema_version(doc.get("schema_version"))
    except (Corrupt, UnsupportedVersion) as exc:
        raise _at(exc, location) from None
    return doc


def decode_seed_file(raw: bytes, location: str) -> Any:
    """Parse a YAML seed file (JSON-compatible YAML only); Corrupt naming ``location`` otherwise."""
    from phaselog.model import _yaml  # lazy: YAML (~15 ms) only for seed files; `phaselog read` must not load it

    try:
        return _yaml.load(raw, json_only=True)
    except Corrupt as exc:
        raise Corrupt(f"{location}: {exc.message}", path=location, rule=exc.context.get("rule")) from None


def checkpoint_at(tree: Any, ordinal: int, meta: dict[str, Any] | None, location: str) -> tuple[Checkpoint, list[str]]:
    """The checkpoint a seed tree (and phaselog's part) holds, with read warnings; errors name ``location``."""
    try:
        return checkpoint_from_seed(tree, phase_ordinal=ordinal, meta=meta)
    except (Corrupt, UnsupportedVersion) as exc:
        raise _at(exc, location) from None


#: ``record_from_document``'s default: the seed part is the document's own (None is a seed tree too).
_DOCUMENT_SEED: Any = object()


def record_from_document(
    doc: dict[str, Any],
    ordinal: int,
    location: str,
    *,
    seed: Any = _DOCUMENT_SEED,
    warnings: tuple[str, ...] = (),
    known_hash: str | None = None,
) -> Stored:
    """The record a decoded document holds, checked against tampering.

    ``seed``: a seed tree that replaces the document's (the files store's seed file, when it
    changed since it was written). ``known_hash``: the content hash this very document was
    found to have before (a cache), so it is not re-serialised and re-hashed.
    """
    try:  # a document as phaselog writes it has all three
        recorded, stored_seed, meta = doc["content_hash"], doc["checkpoint"], doc["phaselog"]
    except KeyError:
        recorded, stored_seed, meta = doc.get("content_hash"), doc.get("checkpoint"), doc.get("phaselog")
    try:
        cp, read_warns = checkpoint_from_seed(
            stored_seed if seed is _DOCUMENT_SEED else seed, phase_ordinal=ordinal, meta=meta or {}
        )
    except (Corrupt, UnsupportedVersion) as exc:
        raise _at(exc, location) from None
    if type(recorded) is not str and not isinstance(recorded, str):
        recorded = None
    # The parts as stored hash to the recorded hash: they are what was hashed at write time, and the
    # record read from them hashes the same (records.stored_parts_match). Otherwise the record is
    # re-serialised and hashed (Stored.tampered, below), as before, and a changed record is reported.
    if (
        known_hash is None
        and seed is _DOCUMENT_SEED
        and recorded is not None
        and stored_parts_match(stored_seed, meta, recorded)
    ):
        known_hash = recorded
    if known_hash is not None:
        cp.__dict__["content_hash"] = known_hash  # the cached_property's value: same input, same hash
    # Stored is a frozen dataclass without __post_init__ or slots: its fields are its __dict__.
    stored = object.__new__(Stored)
    stored.__dict__.update(
        record=cp,
        location=location,
        recorded_hash=recorded,
        warnings=(*warnings, *read_warns) if read_warns else warnings,
    )
    if recorded is not None and recorded != cp.content_hash:
        check_tamper(stored)
    return stored


class DecodedRecords:
    """Records decoded and found intact before, by (phase ordinal, stored document): a memo.

    A record read from a document is a pure function of the document's bytes and the ordinal it is
    stored under, so a document seen again (the same run read by the next write or status) is not
    parsed, checked and hashed again. A document edited in the store is different bytes: a miss,
    decoded and tamper-checked in full. Only intact records are kept, each as a detached copy, and
    every hit hands out another copy (:func:`phaselog.model.records.detached_copy`): a caller that edits
    a payload in place never changes what the next reader gets. The checks that depend on where
    the document lives (identity, a SQL row's key columns) stay with the caller, hit or miss.
    Bounded by the characters of the documents it keeps (oldest out first).
    """

    def __init__(self, max_chars: int = 2 * 1024 * 1024, max_document: int = 64 * 1024) -> None:
        self.max_chars = max_chars
        self.max_document = max_document
        self._kept: dict[tuple[int, str], tuple[Checkpoint, str | None, tuple[str, ...]]] = {}
        self._chars = 0

    def get(self, ordinal: int, document: str, location: str, *, copy: bool = True) -> Stored | None:
        """A fresh copy of the record ``document`` held when first decoded, at ``location`` (None: unseen).

        ``copy=False``: the kept record itself, for a caller whose records never reach a user
        uncopied (a SQL run snapshot: readers get it detached, status and writes only read it; D192)."""
        hit = self._kept.get((ordinal, document))
        if hit is None:
            return None
        return Stored(detached_copy(hit[0]) if copy else hit[0], location, hit[1], hit[2])

    def put(self, ordinal: int, document: str, stored: Stored, *, copy: bool = True) -> None:
        """Keep an intact record decoded from ``document`` (a copy of it; ``copy=False``: the record
        itself, under the same promise as :meth:`get`'s)."""
        size = len(document)
        if size > min(self.max_document, self.max_chars) or stored.tampered or (ordinal, document) in self._kept:
            return
        kept = self._kept
        while kept and self._chars + size > self.max_chars:
            oldest = next(iter(kept))
            del kept[oldest]
            self._chars -= len(oldest[1])
        kept[(ordinal, document)] = (
            detached_copy(stored.record) if copy else stored.record,
            stored.recorded_hash,
            stored.warnings,
        )
        self._chars += size

    def clear(self) -> None:
        """Forget every record."""
        self._kept.clear()
        self._chars = 0


def _at(exc: Corrupt | UnsupportedVersion, location: str) -> Corrupt | UnsupportedVersion:
    """``exc`` with ``location`` in its context and message."""
    exc.context["path"] = location
    exc.message = f"{location}: {exc.message}"
    return exc


# -- tamper and identity ---------------------------------------------------------------------------
def check_tamper(stored: Stored) -> None:
    """Corrupt (rule ``content_hash``) when the content no longer hashes to what was recorded.

    Damaged from outside (edited or truncated after it was written): never used as a record.
    read/validate/verify name it, list skips it, doctor can quarantine it.
    """
    if stored.tampered:
        raise Corrupt(
            f"{stored.location}: content changed after it was written (recorded hash "
            f"{(stored.recorded_hash or '')[:12]}, content now hashes to {stored.record.content_hash[:12]})",
            path=stored.location,
            rule="content_hash",
        )


def check_identity(stored: Stored, ticket_id: str, run_id: str, ordinal: int, phase: str, attempt: int) -> None:
    """Corrupt (rule ``location_mismatch``) when the content names another key than where it lives."""
    cp = stored.record
    found = (cp.ticket_id, cp.run_id, cp.phase_ordinal, cp.phase, cp.attempt_number)
    expected = (ticket_id, run_id, ordinal, phase, attempt)
    if found != expected:
        names = ("ticket_id", "run_id", "phase ordinal", "phase", "attempt_number")
        diffs = [f"{n} {f!r} (path says {e!r})" for n, f, e in zip(names, found, expected, strict=True) if f != e]
        raise Corrupt(
            f"{stored.location}: content does not match its location: {'; '.join(diffs)}",
            path=stored.location,
            rule="location_mismatch",
        )


# -- the append decision ---------------------------------------------------------------------------
def decide_append(
    record: Checkpoint,
    *,
    exists: bool,
    latest: int,
    expected_latest: int,
    check_fence: Callable[[], None] | None = None,
) -> None:
    """Decide an append from what the store read under its lock or in its transaction.

    ``exists``: the attempt is already stored; ``latest``: the phase's latest attempt (0: none).
    Raises AlreadyExists for a duplicate (the stored record stays as it is), then whatever
    ``check_fence`` raises (Fenced: the run's lease moved on), then Conflict when someone appended
    meanwhile (the caller re-reads and retries); returns when the append may go on. A duplicate is
    decided first, so a writer that re-sends its own record learns it is stored even after its
    lease moved on.
    """
    location = record_location(record)
    if exists:
        raise AlreadyExists(
            f"attempt {record.attempt_number} of phase {record.phase} already exists ({location}); "
            f"write attempt {max(latest, record.attempt_number) + 1} instead",
            path=location,
        )
    if check_fence is not None:
        check_fence()
    if latest != expected_latest:
        raise Conflict(
            f"phase {record.phase} changed while writing: latest attempt is {latest}, expected {expected_latest}",
            latest_attempt=latest,
        )


def fenced(fence: RunFence, token: object, *, released: bool) -> Fenced:
    """The error for an append whose run lease moved on: ``token`` is the lease's now (None: no lease)."""
    now = "no lease" if token is None else f"token {token}" + (", released" if released else "")
    return Fenced(
        f"run {fence.run_id}: this runner's lease (fencing token {fence.token}) was taken over ({now}); "
        "nothing was written",
        rule="fencing_token",
        token=fence.token,
    )


# -- damage ----------------------------------------------------------------------------------------
def damaged_from(
    exc: Corrupt | UnsupportedVersion, ticket_id: str, run_id: str, ordinal: int, phase: str, attempt: int
) -> Damaged:
    """The Damaged entry for a record that exists but cannot be read (every store builds it here)."""
    return Damaged(
        location=str(exc.context.get("path") or f"{ticket_id}/{run_id}/{checkpoint_name(ordinal, phase, attempt)}"),
        ticket_id=ticket_id,
        run_id=run_id,
        phase=phase,
        phase_ordinal=ordinal,
        attempt_number=attempt,
        error_code=exc.error_code,
        message=exc.message,
        rule=exc.context.get("rule"),
    )
