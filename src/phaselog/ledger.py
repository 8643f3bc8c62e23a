"""The Python API: write, read, list, validate, derive status, check resume, verify.

Everything that is the same for every store lives here: identifiers, pipelines, validation,
hashing, attempt numbering and its retry, basis and prev_hash. A store only appends and reads.

    >>> import phaselog
    >>> ledger = phaselog.open("/tmp/pl-doc")                      # files store at that root
    >>> run = ledger.run("PROJ-1234", "a1b2c3d4")                   # ticket-pipeline by default
    >>> run.write("implement", {"branch_name": "feat/x", "commit_sha": "a1b2c3d",
    ...                          "files_changed": ["src/x.py"]}).record.attempt_number
    1
    >>> run.status().next_phase
    'local_review'
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from phaselog.artifacts import hash_artifacts
from phaselog.audit import AuditMixin
from phaselog.errors import (
    AlreadyExists,
    Conflict,
    Corrupt,
    InvalidRecord,
    NotFound,
    NotMonotonic,
    PipelineMismatch,
    Prerequisite,
    UnsupportedVersion,
    UsageError,
)
from phaselog.gates import GatesMixin, judge
from phaselog.ids import normalize_run_id, validate_ticket_id
from phaselog.limits import MAX_ATTEMPT, check_attempt, check_json_data, is_attempt
from phaselog.markers import MarkersMixin
from phaselog.pipelines import DEFAULT_PIPELINE, Phase, Pipeline, builtin, find_pipeline
from phaselog.progress import ProgressMixin, flights
from phaselog.records import Approval, BasisEntry, Checkpoint, Marker, PipelineRef, Status, parse_entries
from phaselog.state import COMPLETED, RunStatus, derive_status
from phaselog.stores import Damaged, Store, Stored, open_store
from phaselog.stores.base import RunFence
from phaselog.stores.snapshot import RunSnapshot
from phaselog.validation import Report, check_artifacts, check_links, check_record
from phaselog.verify import VerifyMixin, VerifyReport

PipelineArg = Pipeline | str | None
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
class Page:
    """One page of a listing."""

    items: list[Stored]
    damaged: list[Damaged]
    next_after: str | None = None

    @property
    def completed(self) -> list[Stored]:
        """Completed checkpoints of this page."""
        return [s for s in self.items if s.record.completed]

    @property
    def failed(self) -> list[Stored]:
        """Failed attempts of this page."""
        return [s for s in self.items if not s.record.completed]


@dataclass(frozen=True)
class Blocker:
    """Why resume may not skip past a phase."""

    phase: str
    state: str
    reason: str

    def to_json(self) -> dict[str, str]:
        """Return the JSON form."""
        return {"phase": self.phase, "state": self.state, "reason": self.reason}


@dataclass(frozen=True)
class SkipDecision:
    """Whether a run may skip to a phase."""

    target: str
    allowed: bool
    blockers: tuple[Blocker, ...] = ()
    status: RunStatus | None = None
    #: The target phase's attempt in flight, if any: where to restart it (``resume_from_step``).
    in_flight: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "skip_to": self.target,
            "allowed": self.allowed,
            "blockers": [b.to_json() for b in self.blockers],
            "next_phase": self.status.next_phase if self.status else None,
            "completed_phases": self.status.completed_phases if self.status else [],
            "in_progress": self.in_flight,
        }


def parse_cursor(after: str | None) -> tuple[str, int, int] | None:
    """Parse a listing cursor ``<run_uuid>:<phase ordinal>:<attempt>``."""
    if after is None:
        return None
    parts = after.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise UsageError(
            f"--after must be a cursor RUN_UUID:PHASE_ORDINAL:ATTEMPT as printed in next_after (got {after!r})",
            field="after",
        )
    return (normalize_run_id(parts[0], field="after"), int(parts[1]), int(parts[2]))


class Ledger(ProgressMixin, GatesMixin, MarkersMixin, AuditMixin, VerifyMixin):
    """The checkpoint ledger over one store."""

    def __init__(
        self,
        store: Store | None = None,
        *,
        pipelines_root: str | os.PathLike[str] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store: Store = store if store is not None else open_store()
        root = getattr(self.store, "root", None)
        self.pipelines_root = pipelines_root if pipelines_root is not None else root
        self.clock = clock or (lambda: datetime.now(UTC))
        self._recorded: dict[tuple[str, str], PipelineRef] = {}

    def __repr__(self) -> str:
        return f"Ledger({self.store!r})"

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, ticket_id: str, run_id: str, *, pipeline: PipelineArg = None) -> Run:
        """A handle on one run (ticket and run id validated now)."""
        return Run(self, validate_ticket_id(ticket_id), normalize_run_id(run_id), pipeline)

    # -- pipelines --------------------------------------------------------------------------------
    def load_pipeline(self, pipeline: PipelineArg) -> Pipeline:
        """Resolve a Pipeline object, a name, or None (the default pipeline)."""
        if isinstance(pipeline, Pipeline):
            return pipeline
        name = pipeline or DEFAULT_PIPELINE
        if name == DEFAULT_PIPELINE and self.pipelines_root is None:
            return builtin(name)
        return find_pipeline(name, self.pipelines_root)

    def recorded_pipeline(self, ticket_id: str, run_id: str) -> PipelineRef | None:
        """The pipeline a run recorded with its first phaselog checkpoint (None: none yet)."""
        cached = self._recorded.get((ticket_id, run_id))
        if cached is not None:
            return cached  # a run's pipeline never changes once recorded
        found = self._find_recorded_pipeline(ticket_id, run_id)
        if found is not None:
            if len(self._recorded) > 10_000:
                self._recorded.clear()
            self._recorded[(ticket_id, run_id)] = found
        return found

    def _find_recorded_pipeline(self, ticket_id: str, run_id: str) -> PipelineRef | None:
        for ref in self.store.attempts(ticket_id, run_id):
            try:
                stored = self.store.get(ticket_id, run_id, ref.phase_ordinal, ref.phase, ref.attempt_number)
            except (Corrupt, UnsupportedVersion, NotFound):
                continue
            if stored.record.pipeline is not None:
                return stored.record.pipeline
        return None

    def pipeline_for(
        self, ticket_id: str, run_id: str, requested: PipelineArg = None, *, snapshot: RunSnapshot | None = None
    ) -> Pipeline:
        """The run's pipeline; refuse one that differs from what the run recorded.

        With ``snapshot`` the recorded pipeline (and the ticket's marker) come from it: no store call.
        """
        if snapshot is not None:
            recorded = snapshot.pipeline_ref()
            if recorded is None and snapshot.markers:
                revs = sorted(parse_entries(Marker, snapshot.markers)[0], key=lambda m: m.revision)
                if revs:
                    recorded = PipelineRef(revs[-1].pipeline, "", "")
        else:
            recorded = self.recorded_pipeline(ticket_id, run_id)
            if recorded is None:
                marker = self.marker(ticket_id)
                if marker is not None:
                    recorded = PipelineRef(marker.pipeline, "", "")
        if requested is None:
            if recorded is None:  # nothing says which pipeline: the default, and say so if a phase is unknown
                return dataclasses.replace(
                    self.load_pipeline(None),
                    fallback_note=(
                        f"run {run_id} has no checkpoint and ticket {ticket_id} no marker, so the default "
                        f"pipeline {DEFAULT_PIPELINE} was used: name the pipeline (--pipeline NAME or "
                        f"--pipeline-file FILE; Python: pipeline=...), or record it for the ticket once with "
                        f"`phaselog init --ticket-id {ticket_id} --title TEXT --pipeline NAME`"
                    ),
                )
            return self.load_pipeline(recorded.name)
        pipeline = self.load_pipeline(requested)
        if recorded is not None and recorded.name != pipeline.name:
            raise PipelineMismatch(
                f"run {run_id} follows pipeline {recorded.name!r}, not {pipeline.name!r}: use "
                f"{recorded.name!r} (or name no pipeline, and the run's own is used), or start a new run",
                recorded=recorded.name,
                requested=pipeline.name,
            )
        return pipeline

    # -- writing ----------------------------------------------------------------------------------
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
    ) -> WriteResult:
        """Append a checkpoint for one attempt of ``phase``; return it once durable.

        ``attempt=None`` takes the attempt in flight (one with progress events) or else the next
        attempt number, atomically. Raises InvalidRecord (nothing written) when a rule at error
        level is broken, AlreadyExists when ``attempt`` is taken, NotMonotonic when it is below
        the latest attempt, Prerequisite when an earlier phase blocks a completed checkpoint in a
        pipeline with ``order: strict``.

        ``artifacts_root``: hash every artifact (SHA-256, relative to that folder) now and record
        the hashes, so a later skip can tell that an artifact changed. ``code_fingerprint``: the
        phase's code hash, recorded for ``fingerprint: code``. ``fence``: write only while the
        run's lease still carries that fencing token (Fenced otherwise; see phaselog.runner).
        ``check_prerequisites=False``: the caller has checked the earlier phases itself (the
        runner does, when it plans the run under its lease); the write skips deriving the run's
        state again.
        """
        return self._write(
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
            artifact_hashes=hash_artifacts(artifacts_root, artifact_paths) if artifacts_root is not None else None,
            code_fingerprint=code_fingerprint,
            fence=fence,
            check_prerequisites=check_prerequisites,
        )

    def _write(
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
        forked_from: Mapping[str, Any] | None = None,
        check_prerequisites: bool = True,
        artifact_hashes: Mapping[str, str] | None = None,
        code_fingerprint: str | None = None,
        fence: RunFence | None = None,
    ) -> WriteResult:
        ticket_id = validate_ticket_id(ticket_id)
        run_id = normalize_run_id(run_id)
        snap = self.store.snapshot(ticket_id, run_id)
        pl = self.pipeline_for(ticket_id, run_id, pipeline, snapshot=snap)
        ph = pl.phase(phase)
        if attempt is not None and not is_attempt(attempt):
            raise InvalidRecord(
                f"attempt_number: must be an integer from 1 to {MAX_ATTEMPT} (got {_short(attempt)})",
                errors=[{"field": "attempt_number", "rule": "attempt_number", "message": f"must be 1..{MAX_ATTEMPT}"}],
                rule="max_attempt",
            )
        if status not in ("completed", "failed"):
            raise UsageError(f"status must be 'completed' or 'failed' (got {status!r})", field="status")
        body = _payload(ph, payload, status)
        _check_json_fields(body, repo_commit_map, artifact_paths, decisions, error)
        if timestamp is not None and (not isinstance(timestamp, datetime) or timestamp.utcoffset() is None):
            raise UsageError("timestamp must be a timezone-aware datetime", field="timestamp")
        try:
            ts = timestamp.astimezone(UTC) if timestamp is not None else self.clock()
        except OverflowError:
            raise UsageError(f"timestamp {timestamp} is out of range in UTC", field="timestamp") from None
        for tries in range(MAX_APPEND_RETRIES):
            if tries:
                snap = self.store.snapshot(ticket_id, run_id)  # someone appended meanwhile: re-read
            if check_prerequisites and status == "completed" and pl.order == "strict":
                self._check_prerequisites(snap, pl, ph)
            mine = [r.attempt_number for r in snap.phase_attempts(ph.ordinal)]
            latest = mine[-1] if mine else 0
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
                repo_commit_map=dict(repo_commit_map or {}),
                artifact_paths=tuple(artifact_paths),
                phase_payload=body,
                status=status,
                error=error,
                pipeline=pl.ref,
                basis=basis,
                prev_hash=prev_hash,
                decisions=tuple(dict(d) for d in decisions),
                forked_from=dict(forked_from) if forked_from else None,
                artifact_hashes=dict(artifact_hashes) if artifact_hashes is not None else None,
                code_fingerprint=code_fingerprint,
            )
            report = check_record(cp, pl, now=self.clock())
            if not report.is_valid:
                raise InvalidRecord(
                    "checkpoint refused: " + "; ".join(i.text() for i in report.errors),
                    errors=[i.to_json() for i in report.errors],
                )
            if attempt is not None:
                if number in mine:
                    raise AlreadyExists(
                        f"attempt {number} of phase {ph.name} already exists; the next free attempt is {latest + 1}",
                        path=self.store.location(cp),
                        next_attempt=latest + 1,
                    )
                if number < latest:
                    raise NotMonotonic(
                        f"attempt {number} is below the latest attempt {latest} of phase "
                        f"{ph.name}; attempts only rise (next: {latest + 1})",
                        next_attempt=latest + 1,
                    )
            try:
                location = (
                    self.store.append(cp, expected_latest=latest)
                    if fence is None
                    else self.store.append(cp, expected_latest=latest, fence=fence)
                )
            except Conflict:
                continue  # someone appended to this phase meanwhile: re-read and retry
            except AlreadyExists:
                if attempt is not None:
                    raise  # the caller asked for this very attempt: another writer has it
                continue  # another writer took the number we read as next: re-read and retry
            stored = Stored(cp, location, cp.content_hash)
            return WriteResult(stored, tuple(i.text() for i in report.warnings))
        raise Conflict(f"could not append to phase {ph.name} after {MAX_APPEND_RETRIES} retries")

    def _check_prerequisites(self, snap: RunSnapshot, pl: Pipeline, ph: Phase) -> None:
        earlier = pl.earlier(ph)
        if not earlier:
            return
        st = self._status_from(snap, pl)
        blockers = []
        for ps in st.phases:
            if ps.ordinal >= ph.ordinal:
                break
            if ps.state != COMPLETED:
                reason = {
                    "pending": "missing: no checkpoint yet",
                    "awaiting_approval": f"unapproved: attempt {ps.completed_attempt} awaits approval",
                }.get(ps.state, ps.reason or ps.state)
                blockers.append(Blocker(ps.phase, ps.state, reason))
        if blockers:
            raise Prerequisite(
                f"cannot complete {ph.name}: "
                + "; ".join(f"{b.phase} is {b.state} ({b.reason})" for b in blockers)
                + " (the pipeline's order is strict)",
                phase=ph.name,
                blockers=[b.to_json() for b in blockers],
            )

    # -- reading ----------------------------------------------------------------------------------
    def read(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        attempt: int | None = None,
        *,
        pipeline: PipelineArg = None,
    ) -> Stored:
        """Read one attempt, or (``attempt=None``) the latest completed checkpoint of a phase.

        A damaged latest checkpoint raises Corrupt naming the file and the newest intact attempt.
        """
        ticket_id = validate_ticket_id(ticket_id)
        run_id = normalize_run_id(run_id)
        all_refs = self.store.attempts(ticket_id, run_id)
        ph = _phase_from_refs(all_refs, phase) if pipeline is None else None
        if ph is None:
            ph = self._phase(ticket_id, run_id, phase, pipeline)
        refs = [r for r in all_refs if r.phase_ordinal == ph.ordinal]
        if attempt is not None:
            return self.store.get(ticket_id, run_id, ph.ordinal, ph.name, check_attempt(attempt))
        completed = sorted((r for r in refs if r.completed), key=lambda r: r.attempt_number)
        if not completed:
            failed = [r.attempt_number for r in refs]
            hint = f" (failed attempts: {failed})" if failed else ""
            raise NotFound(
                f"no completed checkpoint of phase {ph.name} in run {run_id}{hint}",
                ticket_id=ticket_id,
                run_id=run_id,
                phase=ph.name,
            )
        latest = completed[-1]
        for r in refs:
            if r.attempt_number > latest.attempt_number:
                # A newer attempt is listed as failed. Read it: if it is damaged (a SQL row whose
                # status was flipped, a planted file), the older checkpoint is not the latest.
                try:
                    self.store.get(ticket_id, run_id, ph.ordinal, ph.name, r.attempt_number)
                except (Corrupt, UnsupportedVersion) as exc:
                    exc.message = (
                        f"{exc.message}; it is newer than attempt {latest.attempt_number}, so that attempt is not "
                        f"returned as the latest (read it with --attempt {latest.attempt_number})"
                    )
                    raise
        try:
            return self.store.get(ticket_id, run_id, ph.ordinal, ph.name, latest.attempt_number)
        except (Corrupt, UnsupportedVersion) as exc:
            intact = None
            for r in reversed(completed[:-1]):
                try:
                    self.store.get(ticket_id, run_id, ph.ordinal, ph.name, r.attempt_number)
                except (Corrupt, UnsupportedVersion):
                    continue
                intact = r.attempt_number
                break
            hint = (
                f"; the newest intact attempt is {intact} (read it with --attempt {intact})"
                if intact
                else "; no intact attempt remains"
            )
            exc.message = f"{exc.message}{hint}"
            exc.context["newest_intact_attempt"] = intact
            raise

    def _phase(self, ticket_id: str, run_id: str, phase: str | int, pipeline: PipelineArg) -> Phase:
        return self.pipeline_for(ticket_id, run_id, pipeline).phase(phase)

    def list(
        self,
        ticket_id: str,
        run_id: str | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> Page:
        """List records ordered by (run, phase ordinal, attempt); damaged ones reported apart."""
        ticket_id = validate_ticket_id(ticket_id)
        run = normalize_run_id(run_id) if run_id is not None else None
        cursor = parse_cursor(after)
        if limit is not None and limit < 1:
            raise UsageError("--limit must be >= 1", field="limit")
        items: builtins.list[Stored] = []
        damaged: builtins.list[Damaged] = []
        next_after = None
        for entry in self.store.iter_records(ticket_id, run):
            if isinstance(entry, Damaged):
                key = (entry.run_id, entry.phase_ordinal, entry.attempt_number)
            else:
                r = entry.record
                key = (r.run_id, r.phase_ordinal, r.attempt_number)
            if cursor is not None and key <= cursor:
                continue
            if limit is not None and len(items) + len(damaged) >= limit:
                last = items[-1].record if items else None
                next_after = f"{last.run_id}:{last.phase_ordinal}:{last.attempt_number}" if last else None
                if damaged and (
                    last is None
                    or (damaged[-1].run_id, damaged[-1].phase_ordinal, damaged[-1].attempt_number)
                    > (last.run_id, last.phase_ordinal, last.attempt_number)
                ):
                    d = damaged[-1]
                    next_after = f"{d.run_id}:{d.phase_ordinal}:{d.attempt_number}"
                break
            if isinstance(entry, Damaged):
                damaged.append(entry)
            else:
                items.append(entry)
        return Page(items, damaged, next_after)

    def run_records(self, ticket_id: str, run_id: str) -> tuple[builtins.list[Stored], builtins.list[Damaged]]:
        """Every record of one run, and what is damaged."""
        items: builtins.list[Stored] = []
        damaged: builtins.list[Damaged] = []
        for entry in self.store.iter_records(ticket_id, run_id):
            (damaged if isinstance(entry, Damaged) else items).append(entry)  # type: ignore[arg-type]
        return items, damaged

    # -- validation, state, resume ----------------------------------------------------------------
    def validate(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        attempt: int | None = None,
        *,
        pipeline: PipelineArg = None,
        artifacts_root: str | os.PathLike[str] | None = None,
    ) -> tuple[Stored, Report]:
        """Read a checkpoint and check it: its own rules, its links, optionally its artifacts."""
        ticket_id = validate_ticket_id(ticket_id)
        run_id = normalize_run_id(run_id)
        pl = self.pipeline_for(ticket_id, run_id, pipeline)
        stored = self.read(ticket_id, run_id, phase, attempt, pipeline=pl)
        return stored, self._full_report(stored, pl, artifacts_root)

    def _full_report(self, stored: Stored, pl: Pipeline, artifacts_root: str | os.PathLike[str] | None) -> Report:
        cp = stored.record
        report = check_record(cp, pl, now=self.clock())
        for w in stored.warnings:
            report.warn(stored.location, "read", w)
        if stored.tampered:
            report.error(
                "content_hash",
                "content_hash",
                f"{stored.location} changed after it was written (recorded "
                f"{(stored.recorded_hash or '')[:12]}, now {cp.content_hash[:12]})",
            )
        report.extend(self._links(cp))
        if artifacts_root is not None:
            report.extend(check_artifacts(cp, artifacts_root))
        return report

    def _links(self, cp: Checkpoint) -> Report:
        previous = None
        refs = self.store.attempts(cp.ticket_id, cp.run_id)
        earlier = [
            r.attempt_number
            for r in refs
            if r.phase_ordinal == cp.phase_ordinal and r.attempt_number < cp.attempt_number
        ]
        if earlier:
            try:
                previous = self.store.get(cp.ticket_id, cp.run_id, cp.phase_ordinal, cp.phase, max(earlier)).record
            except (Corrupt, UnsupportedVersion):
                previous = None
        lookup: dict[tuple[str, int], Checkpoint | None] = {}
        by_name = {r.phase: r.phase_ordinal for r in refs}
        for name, entry in (cp.basis or {}).items():
            ordinal = by_name.get(name)
            target = None
            if ordinal is not None:
                try:
                    target = self.store.get(cp.ticket_id, cp.run_id, ordinal, name, entry.attempt).record
                except (Corrupt, NotFound, UnsupportedVersion):
                    target = None
            lookup[(name, entry.attempt)] = target
        from phaselog.pruned import read_notes

        report = check_links(
            cp, previous=previous, lookup=lookup, pruned=read_notes(self.store, cp.ticket_id, cp.run_id).records
        )
        if earlier and previous is None and cp.has_metadata:
            report.error("prev_hash", "prev_hash", f"attempt {max(earlier)} is damaged; the link cannot be checked")
        return report

    def status(self, ticket_id: str, run_id: str, *, pipeline: PipelineArg = None) -> RunStatus:
        """Derive the state of every phase of a run, and the next phase (one store call)."""
        ticket_id = validate_ticket_id(ticket_id)
        run_id = normalize_run_id(run_id)
        snap = self.store.snapshot(ticket_id, run_id)
        st = self._status_from(snap, self.pipeline_for(ticket_id, run_id, pipeline, snapshot=snap))
        if snap.empty and not snap.approvals:
            known = self.store.runs(ticket_id)  # a second store call, only for a run with nothing in it
            if run_id not in known:  # nothing at all: a run about to start, or a mistyped id
                st = dataclasses.replace(st, recorded=False, known_runs=tuple(known))
        return st

    def _status_from(self, snap: RunSnapshot, pl: Pipeline) -> RunStatus:
        """The state of a run as a snapshot shows it."""
        damaged = snap.damaged()
        records = [s.record for s in snap.stored()]
        flying = {name: f.to_json() for name, f in flights(snap, now=self.clock()).items()}
        counts: dict[str, int] = {}
        for ref in snap.attempts:
            counts[ref.phase] = counts.get(ref.phase, 0) + 1
        verdicts = judge(sorted(parse_entries(Approval, snap.approvals)[0], key=lambda a: a.seq))
        st = derive_status(
            pl,
            records,
            ticket_id=snap.ticket_id,
            run_id=snap.run_id,
            damaged=[(d.phase, d.attempt_number) for d in damaged],
            judgements=self._inherited(verdicts, records),
            flights=flying,
            counts=counts,
        )
        if damaged:
            extra = tuple(f"{d.location}: {d.message}" for d in damaged)
            st = RunStatus(st.ticket_id, st.run_id, st.pipeline, st.phases, st.warnings + extra)
        return st

    def _judgements(self, ticket_id: str, run_id: str, records: Sequence[Checkpoint]) -> dict[str, str]:
        """Approval verdicts by checkpoint hash, including those a forked checkpoint inherits."""
        return self._inherited(judge(self.approvals(ticket_id, run_id)), records)

    def _inherited(self, verdicts: dict[str, str], records: Sequence[Checkpoint]) -> dict[str, str]:
        """Add to ``verdicts`` those a forked checkpoint inherits from its source's approvals."""
        sources: dict[str, dict[str, str]] = {}
        for cp in records:
            src = cp.forked_from
            if not src or cp.content_hash in verdicts:
                continue
            key = f"{src.get('ticket_id')}/{src.get('run_id')}"
            if key not in sources:
                try:
                    sources[key] = judge(self.approvals(str(src.get("ticket_id")), str(src.get("run_id"))))
                except (Corrupt, NotFound, UsageError):
                    sources[key] = {}
            inherited = sources[key].get(str(src.get("content_hash")))
            if inherited is not None:
                verdicts[cp.content_hash] = inherited
        return verdicts

    def can_skip_to(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        *,
        pipeline: PipelineArg = None,
        artifacts_root: str | os.PathLike[str] | None = None,
    ) -> SkipDecision:
        """May the run skip to ``phase``? Only if every earlier phase is completed, current,
        and its checkpoint validates; otherwise every blocking phase is named with its reason."""
        ticket_id = validate_ticket_id(ticket_id)
        run_id = normalize_run_id(run_id)
        pl = self.pipeline_for(ticket_id, run_id, pipeline)
        target = pl.phase(phase)
        st = self.status(ticket_id, run_id, pipeline=pl)
        blockers: builtins.list[Blocker] = []
        for ps in st.phases:
            if ps.ordinal >= target.ordinal:
                break
            if ps.state != COMPLETED:
                reason = {
                    "pending": "no checkpoint yet",
                    "failed": f"latest attempt {ps.latest_attempt} failed: {ps.reason}",
                }.get(ps.state, ps.reason or ps.state)
                if ps.in_flight is not None:
                    reason = (
                        f"attempt {ps.in_flight['attempt_number']} is in progress; restart it from step "
                        f"{ps.in_flight['resume_from_step']}"
                        + (f" ({ps.reason})" if ps.in_flight.get("abandoned") else "")
                    )
                blockers.append(Blocker(ps.phase, ps.state, reason))
                continue
            newer_damage = [a for a in ps.damaged_attempts if a > (ps.completed_attempt or 0)]
            if newer_damage:
                blockers.append(
                    Blocker(ps.phase, "damaged", f"attempt(s) {newer_damage} are damaged; run `phaselog verify`")
                )
                continue
            stored = self.store.get(ticket_id, run_id, ps.ordinal, ps.phase, ps.completed_attempt or 0)
            report = self._full_report(stored, pl, artifacts_root)
            if not report.is_valid:
                blockers.append(Blocker(ps.phase, "invalid", "; ".join(i.text() for i in report.errors)))
        return SkipDecision(target.name, not blockers, tuple(blockers), st, st.phase(target.name).in_flight)


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
    """The newest completed attempt of each earlier phase, with its hash: what ``ph`` builds on."""
    basis: dict[str, BasisEntry] = {}
    for ordinal in sorted({r.phase_ordinal for r in snap.attempts}):
        if ordinal >= ph.ordinal or pl.phase_by_ordinal(ordinal) is None:
            continue
        ref = snap.latest_completed(ordinal)
        if ref is None:
            continue
        cp = _record_or_corrupt(snap, ref.phase, ordinal, ref.attempt_number)
        basis[ref.phase] = BasisEntry(ref.attempt_number, cp.content_hash)
    return basis


def _phase_from_refs(refs: Sequence[Any], phase: str | int) -> Phase | None:
    """The phase as the stored file names give it (name and ordinal), without loading the pipeline.

    Reading is then one directory listing and one record; an unknown phase still goes through
    the pipeline, whose error lists the valid phases.
    """
    for r in refs:
        if r.phase == phase or (isinstance(phase, int | str) and str(r.phase_ordinal) == str(phase)):
            return Phase(r.phase, r.phase_ordinal)
    return None


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


class Run:
    """One run of a pipeline for a ticket: the everyday API."""

    def __init__(self, ledger: Ledger, ticket_id: str, run_id: str, pipeline: PipelineArg) -> None:
        self.ledger = ledger
        self.ticket_id = ticket_id
        self.run_id = run_id
        self._pipeline = pipeline

    def __repr__(self) -> str:
        return f"Run({self.ticket_id!r}, {self.run_id!r})"

    @property
    def pipeline(self) -> Pipeline:
        """The run's pipeline."""
        return self.ledger.pipeline_for(self.ticket_id, self.run_id, self._pipeline)

    def write(self, phase: str | int, payload: Mapping[str, Any] | None = None, **kw: Any) -> WriteResult:
        """Record a completed attempt of ``phase`` (see Ledger.write)."""
        return self.ledger.write(self.ticket_id, self.run_id, phase, payload, pipeline=self._pipeline, **kw)

    def fail(self, phase: str | int, error: str, **kw: Any) -> WriteResult:
        """Record a failed attempt of ``phase``; the next try gets the next attempt number."""
        return self.ledger.write(
            self.ticket_id,
            self.run_id,
            phase,
            kw.pop("payload", None),
            pipeline=self._pipeline,
            status="failed",
            error=error,
            **kw,
        )

    def read(self, phase: str | int, attempt: int | None = None) -> Stored:
        """Read the latest completed checkpoint of ``phase`` (or one attempt)."""
        return self.ledger.read(self.ticket_id, self.run_id, phase, attempt, pipeline=self._pipeline)

    def status(self) -> RunStatus:
        """Derive the run's state."""
        return self.ledger.status(self.ticket_id, self.run_id, pipeline=self._pipeline)

    def can_skip_to(self, phase: str | int, **kw: Any) -> SkipDecision:
        """May the run skip to ``phase``?"""
        return self.ledger.can_skip_to(self.ticket_id, self.run_id, phase, pipeline=self._pipeline, **kw)

    def validate(self, phase: str | int, attempt: int | None = None, **kw: Any) -> tuple[Stored, Report]:
        """Validate a checkpoint of ``phase``."""
        return self.ledger.validate(self.ticket_id, self.run_id, phase, attempt, pipeline=self._pipeline, **kw)

    def verify(self) -> VerifyReport:
        """Verify this run's hash links."""
        return self.ledger.verify(self.ticket_id, self.run_id)
