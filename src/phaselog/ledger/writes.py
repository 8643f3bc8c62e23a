"""Writing checkpoints: one snapshot of the run, the record built from it, one append.

:class:`Writes` is the Ledger's write side. A write reads the run once (``Store.snapshot``), takes
from that snapshot the run's pipeline, the strict order's prerequisites (:class:`RunStates`), the
attempt number, ``prev_hash`` and ``basis``, validates the record against the manifest, and appends
it with ``expected_latest``: the store re-checks the phase's latest attempt inside its lock or
transaction, and a ``Conflict`` (someone appended meanwhile) sends the write back to the snapshot.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from phaselog.ledger import recorded_pipelines as pipeline_shelf
from phaselog.ledger.derive import PhaseState
from phaselog.ledger.events import (
    checkpoint_events,
    completes_run,
    failed_for_good,
    raise_events,
    run_finishers,
    snapshot_lookup,
)
from phaselog.ledger.resolve import PipelineArg, PipelineResolver
from phaselog.ledger.status import RunStates, blockers_among
from phaselog.model.artifacts import hash_artifacts
from phaselog.model.durations import aware_utc
from phaselog.model.errors import (
    AlreadyExists,
    Conflict,
    Corrupt,
    InvalidRecord,
    NotFound,
    NotMonotonic,
    OutcomeUnknown,
    PhaselogError,
    Prerequisite,
    UsageError,
)
from phaselog.model.ids import given_run_name, normalize_run_id, validate_ticket_id
from phaselog.model.limits import MAX_ATTEMPT, check_json_data, is_attempt
from phaselog.model.pipelines import Phase, Pipeline
from phaselog.model.records import BasisEntry, Checkpoint, Status, format_timestamp
from phaselog.model.validation import check_record
from phaselog.stores import Store, Stored
from phaselog.stores.base import RunFence, premise_snapshot
from phaselog.stores.snapshot import RunSnapshot

MAX_APPEND_RETRIES = 1000


@dataclass(frozen=True)
class WriteResult:
    """What a write produced."""

    stored: Stored
    warnings: tuple[str, ...] = ()

    @property
    def record(self) -> Checkpoint:
        """The record as written."""
        return self.stored.record

    @property
    def location(self) -> str:
        """Where it lives (path relative to the checkpoints root for the files store)."""
        return self.stored.location


@dataclass(frozen=True)
class WriteRequest:
    """One checkpoint to write: :meth:`Writes.write`'s arguments, the artifacts' hashes already taken.

    ``forked_from`` names the checkpoint a fork copies (:mod:`phaselog.ledger.fork`); the rest is as
    :meth:`Writes.write` documents it.
    """

    ticket_id: str
    run_id: str
    phase: str | int
    payload: Mapping[str, Any] | None = None
    repo_commit_map: Mapping[str, str] | None = None
    artifact_paths: Sequence[str] = ()
    attempt: int | None = None
    timestamp: datetime | None = None
    pipeline: PipelineArg = None
    status: Status = "completed"
    error: str | None = None
    decisions: Sequence[Mapping[str, Any]] = ()
    forked_from: Mapping[str, Any] | None = None
    artifact_hashes: Mapping[str, str] | None = None
    code_fingerprint: str | None = None
    fence: RunFence | None = None
    check_prerequisites: bool = True
    started_at: datetime | None = None
    params: Mapping[str, Any] | None = None


class _Stale(Exception):
    """A write decided on a carried snapshot found that the run moved: decide it again on a fresh read."""


@dataclass(frozen=True)
class _Durable:
    """A record just made durable, with what its aftermath needs."""

    record: Checkpoint
    location: str
    warnings: tuple[str, ...]
    snap: RunSnapshot
    pipeline: Pipeline
    phase: Phase
    manifest: Any


class Writes:
    """Append checkpoints to one store; ``states`` checks a strict pipeline's earlier phases."""

    def __init__(
        self, store: Store, clock: Callable[[], datetime], pipelines: PipelineResolver, states: RunStates
    ) -> None:
        self.store = store
        self.clock = clock
        self.pipelines = pipelines
        self.states = states

    def write(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        payload: Mapping[str, Any] | None = None,
        *,
        repo_commit_map: Mapping[str, str] | None = None,
        artifact_paths: Sequence[str] = (),
        attempt: int | None = None,
        timestamp: datetime | None = None,
        pipeline: PipelineArg = None,
        status: Status = "completed",
        error: str | None = None,
        decisions: Sequence[Mapping[str, Any]] = (),
        artifacts_root: str | os.PathLike[str] | None = None,
        code_fingerprint: str | None = None,
        fence: RunFence | None = None,
        check_prerequisites: bool = True,
        started_at: datetime | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> WriteResult:
        """Append a checkpoint for one attempt of ``phase``; return it once durable.

        ``attempt=None`` takes the attempt in flight (one with progress events) or else the next
        attempt number, atomically. Raises InvalidRecord (nothing written) when a rule at error
        level is broken, AlreadyExists when ``attempt`` is taken, NotMonotonic when it is below
        the latest attempt, Prerequisite when a phase it needs (directly or not) blocks a completed
        checkpoint in a pipeline with ``order: strict``.

        ``artifacts_root``: hash every artifact (SHA-256, relative to that folder) now and record
        the hashes, so a later skip can tell that an artifact changed. ``code_fingerprint``: the
        phase's code hash, recorded for ``fingerprint: code``. ``fence``: write only while the
        run's lease still carries that fencing token (Fenced otherwise; see phaselog.runner).
        ``check_prerequisites=False``: the caller has checked the earlier phases itself (the
        runner does, when it plans the run under its lease); the write skips deriving the run's
        state again. ``started_at``: when the attempt's work started (a timezone-aware datetime,
        not after ``timestamp``); recorded with the checkpoint, it gives the attempt a duration even
        without a ``start`` progress event. ``params``: the run's parameters (the runner records them, D260).
        """
        hashes = hash_artifacts(artifacts_root, artifact_paths) if artifacts_root is not None else None
        return self.write_request(
            WriteRequest(
                ticket_id,
                run_id,
                phase,
                payload,
                repo_commit_map=repo_commit_map,
                artifact_paths=artifact_paths,
                attempt=attempt,
                timestamp=timestamp,
                pipeline=pipeline,
                status=status,
                error=error,
                decisions=decisions,
                artifact_hashes=hashes,
                code_fingerprint=code_fingerprint,
                fence=fence,
                check_prerequisites=check_prerequisites,
                started_at=started_at,
                params=params,
            )
        )

    def write_request(self, req: WriteRequest) -> WriteResult:
        """:meth:`write` of one request: the artifacts' hashes already taken, and ``forked_from`` (a fork's copy)."""
        ticket_id = validate_ticket_id(req.ticket_id)
        run_id = normalize_run_id(req.run_id)
        # The run as this store handle last saw it (stores/sql/carried.py): the append checks that it
        # did not move. On a snapshot that may be stale, whatever is decided short of a durable
        # record — a refusal too — is decided again on a fresh read.
        snap, stale = premise_snapshot(self.store, ticket_id, run_id)
        if stale:
            try:
                return self._write(req, ticket_id, run_id, snap, True)
            except _Stale:
                snap = self.store.snapshot(ticket_id, run_id)
        return self._write(req, ticket_id, run_id, snap, False)

    def _write(self, req: WriteRequest, ticket_id: str, run_id: str, snap: RunSnapshot, carried: bool) -> WriteResult:
        """:meth:`write_request` on ``snap``. ``carried``: ``snap`` may be stale, so any refusal before
        the record is durable raises _Stale instead (the caller decides again on a fresh read)."""
        try:
            done = self._append(req, ticket_id, run_id, snap, carried)
        except (_Stale, OutcomeUnknown):
            raise  # OutcomeUnknown: it may be stored; deciding again could write it twice
        except PhaselogError:
            if carried:
                raise _Stale from None
            raise
        return self._announce(done)

    def _append(self, req: WriteRequest, ticket_id: str, run_id: str, snap: RunSnapshot, carried: bool) -> _Durable:
        """Decide the record on ``snap`` and append it (re-reading after a conflict unless ``carried``)."""
        given = given_run_name(req.run_id)
        attempt, status, timestamp = req.attempt, req.status, req.timestamp
        run_name = given or snap.run_name()  # the name stays with the run, also when written to by UUID
        pl = self.pipelines.for_run(ticket_id, run_id, req.pipeline, snapshot=snap)
        ph = pl.phase(req.phase)
        if attempt is not None and not is_attempt(attempt):
            raise InvalidRecord(
                f"attempt_number: must be an integer from 1 to {MAX_ATTEMPT} (got {_short(attempt)})",
                errors=[{"field": "attempt_number", "rule": "attempt_number", "message": f"must be 1..{MAX_ATTEMPT}"}],
                rule="max_attempt",
            )
        if status not in ("completed", "failed"):
            raise UsageError(f"status must be 'completed' or 'failed' (got {status!r})", field="status")
        body = _payload(ph, req.payload, status)
        _check_json_fields(body, req.repo_commit_map, req.artifact_paths, req.decisions, req.error)
        if timestamp is not None and (not isinstance(timestamp, datetime) or timestamp.utcoffset() is None):
            raise UsageError("timestamp must be a timezone-aware datetime", field="timestamp")
        try:
            ts = timestamp.astimezone(UTC) if timestamp is not None else self.clock()
        except OverflowError:
            raise UsageError(f"timestamp {timestamp} is out of range in UTC", field="timestamp") from None
        started_at = _started_at(req.started_at, ts)
        for tries in range(MAX_APPEND_RETRIES):
            if tries:
                snap = self.store.snapshot(ticket_id, run_id)  # someone appended meanwhile: re-read
            if req.check_prerequisites and status == "completed" and pl.order == "strict":
                self._check_prerequisites(snap, pl, ph)
            newest = snap.latest(ph.ordinal)
            latest = newest.attempt_number if newest is not None else 0
            number = attempt if attempt is not None else latest + 1
            if attempt is None:
                started = snap.started_attempts(ph.ordinal, ph.name)
                if started and started[-1] > latest:
                    number = started[-1]  # the attempt in flight: it has progress events
                if number > MAX_ATTEMPT:
                    raise InvalidRecord(
                        f"phase {ph.name} has used every attempt number up to {MAX_ATTEMPT}; start a new run",
                        errors=[{"field": "attempt_number", "rule": "max_attempt", "message": f"over {MAX_ATTEMPT}"}],
                        rule="max_attempt",
                    )
            basis = _basis(snap, pl, ph)
            prev_hash = _hash_of(snap, ph, latest) if latest else None
            cp = Checkpoint(
                ticket_id=ticket_id,
                run_id=run_id,
                phase=ph.name,
                phase_ordinal=ph.ordinal,
                attempt_number=number,
                timestamp_utc=ts,
                repo_commit_map=dict(req.repo_commit_map or {}),
                artifact_paths=tuple(req.artifact_paths),
                phase_payload=body,
                status=status,
                error=req.error,
                pipeline=pl.ref,
                basis=basis,
                prev_hash=prev_hash,
                decisions=tuple(dict(d) for d in req.decisions),
                forked_from=dict(req.forked_from) if req.forked_from else None,
                artifact_hashes=dict(req.artifact_hashes) if req.artifact_hashes is not None else None,
                code_fingerprint=req.code_fingerprint,
                run_name=run_name,
                started_at=started_at,
                params=dict(req.params) if req.params is not None else None,
            )
            report = check_record(cp, pl, now=self.clock())
            if not report.is_valid:
                raise InvalidRecord(
                    "checkpoint refused: " + "; ".join(i.text() for i in report.errors),
                    errors=[i.to_json() for i in report.errors],
                )
            if attempt is not None and number <= latest:
                # At or below the latest: does that very attempt exist? (a listing, only on this rare path)
                if number == latest or any(
                    (r.phase_ordinal, r.attempt_number) == (ph.ordinal, number)
                    for r in self.store.attempts(ticket_id, run_id)
                ):
                    raise AlreadyExists(
                        f"attempt {number} of phase {ph.name} already exists; the next free attempt is {latest + 1}",
                        path=self.store.location(cp),
                        next_attempt=latest + 1,
                    )
                raise NotMonotonic(
                    f"attempt {number} is below the latest attempt {latest} of phase "
                    f"{ph.name}; attempts only rise (next: {latest + 1})",
                    next_attempt=latest + 1,
                )
            # The pipeline's manifest travels with the run's first write (stores/manifests.py).
            manifest = pipeline_shelf.to_record(self.store, snap, pl)
            extra: dict[str, Any] = {} if manifest is None else {"manifest": manifest}
            if req.fence is not None:
                extra["fence"] = req.fence
            try:
                location = self.store.append(cp, expected_latest=latest, **extra)
            except Conflict:
                if carried:
                    raise _Stale from None  # the run moved since this handle saw it: decide it all again
                continue  # someone appended to this phase meanwhile: re-read and retry
            except AlreadyExists:
                if attempt is not None:
                    raise  # the caller asked for this very attempt: another writer has it
                if carried:
                    raise _Stale from None
                continue  # another writer took the number we read as next: re-read and retry
            return _Durable(cp, location, tuple(i.text() for i in report.warnings), snap, pl, ph, manifest)
        raise Conflict(f"could not append to phase {ph.name} after {MAX_APPEND_RETRIES} retries")

    def _announce(self, done: _Durable) -> WriteResult:
        """The durable record's aftermath: its manifest noted, the subscribers told, the result."""
        cp, pl, ph = done.record, done.pipeline, done.phase
        if done.manifest is not None:
            pipeline_shelf.recorded(self.store, done.manifest)
        stored = Stored(cp, done.location, cp.content_hash)
        # Durable now: tell the subscribers; what they say joins the warnings, the record stays.
        events = checkpoint_events(
            cp,
            gated=ph.requires_approval,
            completes_run=self._completes(done.snap, pl, cp),
            for_good=failed_for_good(cp, ph.execution.retries),
        )
        said = raise_events(events, self.store)
        return WriteResult(stored, done.warnings + tuple(said))

    def _completes(self, snap: RunSnapshot, pl: Pipeline, cp: Checkpoint) -> bool:
        """Does ``cp`` complete the run? A sink's (not gated), built on every other phase (D206, D280)."""
        ph = pl.phase(cp.phase)
        return not ph.requires_approval and completes_run(cp, run_finishers(pl), snapshot_lookup(snap, pl, self.store))

    def _check_prerequisites(self, snap: RunSnapshot, pl: Pipeline, ph: Phase) -> None:
        """A strict pipeline's rule: every phase ``ph`` needs, directly or not, is completed (D281)."""
        ancestors = pl.graph.ancestors(ph.name)
        if not ancestors:
            return
        st = self.states.status_from(snap, pl)
        blockers = blockers_among(st, ancestors, strict_reason)
        if blockers:
            raise Prerequisite(
                f"cannot complete {ph.name}: "
                + "; ".join(f"{b.phase} is {b.state} ({b.reason})" for b in blockers)
                + " (the pipeline's order is strict)",
                phase=ph.name,
                blockers=[b.to_json() for b in blockers],
            )


def strict_reason(ps: PhaseState) -> str | None:
    """Why an unfinished ancestor blocks a completed checkpoint of a strict pipeline (None: its own reason)."""
    if ps.state == "pending":
        return "missing: no checkpoint yet"
    if ps.state == "awaiting_approval":
        return f"unapproved: attempt {ps.completed_attempt} awaits approval"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _record_or_corrupt(snap: RunSnapshot, ph_name: str, ordinal: int, attempt: int) -> Checkpoint:
    """The record of an attempt a new checkpoint links to; Corrupt when it is damaged."""
    entry = snap.record(ordinal, attempt)
    if isinstance(entry, Stored):
        return entry.record
    if entry is None:  # the snapshot reads every attempt a write links to: it vanished (pruned)
        raise NotFound(f"attempt {attempt} of {ph_name} is no longer stored", phase=ph_name, attempt=attempt)
    raise Corrupt(
        f"cannot link to attempt {attempt} of {ph_name}: {entry.message} "
        "(run `phaselog verify` to see what is damaged)",
        path=entry.location,
        rule=entry.rule,
    )


def _hash_of(snap: RunSnapshot, ph: Phase, attempt: int) -> str:
    """The content hash of the phase's latest attempt (the new attempt's prev_hash)."""
    return _record_or_corrupt(snap, ph.name, ph.ordinal, attempt).content_hash


def _basis(snap: RunSnapshot, pl: Pipeline, ph: Phase) -> dict[str, BasisEntry]:
    """The newest completed attempt of each phase that is neither ``ph`` nor after it in the graph (not
    one of its descendants), with its hash: what ``ph`` builds on. In a chain: every earlier phase.

    In a graph it names completed phases beside ``ph`` too (a b-roll beside the voice-over): staleness
    looks only at a phase's ancestors, and a sink's basis naming every other phase is what makes its
    checkpoint the one that completes the run, decided from the record alone (D280)."""
    basis: dict[str, BasisEntry] = {}
    chain = pl.graph.is_chain  # then "after it" is "at or after its ordinal", as it always was
    after = set() if chain else {ph.name, *pl.graph.descendants(ph.name)}
    for summary in snap.summaries:  # sorted by ordinal
        ordinal, ref = summary.ordinal, summary.newest_completed
        at = pl.phase_by_ordinal(ordinal)
        if at is None or ref is None or (ordinal >= ph.ordinal if chain else at.name in after):
            continue
        cp = _record_or_corrupt(snap, ref.phase, ordinal, ref.attempt_number)
        basis[ref.phase] = BasisEntry(ref.attempt_number, cp.content_hash)
    return basis


def _check_json_fields(body: Any, repo_commit_map: Any, artifact_paths: Any, decisions: Any, error: Any) -> None:
    """The record's JSON-typed fields hold JSON data of the right shape (InvalidRecord otherwise)."""
    check_json_data(body, field="phase_payload")
    if repo_commit_map is not None and (
        not isinstance(repo_commit_map, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in repo_commit_map.items())
    ):
        raise InvalidRecord(
            "repo_commit_map: must map repo names to commit SHA strings",
            errors=[{"field": "repo_commit_map", "rule": "type", "message": "strings to strings"}],
        )
    if isinstance(artifact_paths, str | bytes) or not all(isinstance(p, str) for p in artifact_paths):
        raise InvalidRecord(
            "artifact_paths: must be a list of path strings",
            errors=[{"field": "artifact_paths", "rule": "type", "message": "a list of strings"}],
        )
    check_json_data(list(decisions), field="decisions")
    if error is not None and not isinstance(error, str):
        raise InvalidRecord("error: must be text", errors=[{"field": "error", "rule": "type", "message": "text"}])


def _payload(ph: Phase, payload: Mapping[str, Any] | None, status: str) -> dict[str, Any] | None:
    if payload is None:
        return None if status == "failed" else ph.order_payload({"phase": ph.name})
    if not isinstance(payload, Mapping):
        raise InvalidRecord(
            "phase_payload: must be a JSON object",
            errors=[{"field": "phase_payload", "rule": "type", "message": "must be an object"}],
        )
    body = dict(payload)
    body.setdefault("phase", ph.name)
    return ph.order_payload(body)


def _started_at(given: Any, ts: datetime) -> datetime | None:
    """``started_at`` checked: an aware datetime, in UTC, not after the checkpoint's ``timestamp``."""
    if given is None:
        return None
    started = aware_utc(given, "started_at")
    if started > ts:
        raise UsageError(
            f"started_at: {format_timestamp(started)} is after the checkpoint's timestamp {format_timestamp(ts)}; "
            "an attempt starts before it ends",
            field="started_at",
            rule="started_before_end",
        )
    return started
