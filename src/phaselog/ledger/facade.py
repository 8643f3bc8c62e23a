"""The Python API: the Ledger over one store, and the Run facade over one run.

    >>> import phaselog
    >>> ledger = phaselog.open("/tmp/pl-doc")                      # files store at that root
    >>> run = ledger.run("PROJ-1234", "a1b2c3d4")                   # ticket-pipeline by default
    >>> run.write("implement", {"branch_name": "feat/x", "commit_sha": "a1b2c3d",
    ...                          "files_changed": ["src/x.py"]}).record.attempt_number
    1
    >>> run.status().next_phase
    'local_review'

The Ledger is composed of services (:mod:`phaselog.ledger.services` builds each on first use; none
knows the Ledger); each public method calls its service. ``Run`` is the facade of one run. Writes and
judgements raise typed events after the durable write (:mod:`phaselog.ledger.events`); ``feed``
derives them (:mod:`phaselog.ledger.feed`). Import/export, ``doctor``, the queue: functions over a Ledger.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Unpack

import phaselog.ledger.anchorer  # noqa: F401  (registers automatic anchoring's anchorer: D323)
from phaselog.ledger.reads import Page
from phaselog.ledger.resolve import PipelineArg
from phaselog.ledger.services import Services
from phaselog.model.ids import given_run_name, normalize_run_id, validate_ticket_id
from phaselog.model.limits import MAX_OUTPUT_BYTES
from phaselog.stores import Damaged, Stored

if TYPE_CHECKING:
    from phaselog.ledger.derive import RunStatus
    from phaselog.ledger.feed import FeedEvent, FeedPage, FeedQuery, FollowQuery
    from phaselog.ledger.logs import PhaseLog
    from phaselog.ledger.progress import Flight
    from phaselog.ledger.retention import PruneReport
    from phaselog.ledger.status import SkipDecision
    from phaselog.ledger.verify import VerifyReport
    from phaselog.ledger.writes import WriteResult
    from phaselog.model.entries import Approval, Marker, ProgressEvent
    from phaselog.model.errors import Corrupt
    from phaselog.model.pipelines import Pipeline
    from phaselog.model.records import PipelineRef, Status
    from phaselog.model.validation import Report
    from phaselog.stores.base import RunFence
    from phaselog.stores.snapshot import RunSnapshot

__all__ = ["Ledger", "Page", "PipelineArg", "Run"]


class Ledger(Services):
    """The checkpoint ledger over one store: plain methods over its services (:mod:`phaselog.ledger.services`)."""

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
        run = Run(self, validate_ticket_id(ticket_id), rid := normalize_run_id(run_id), pipeline)
        run.run_name = None if rid == run_id else given_run_name(run_id)  # equal: a canonical UUID
        return run

    # -- pipelines (resolve.py) -------------------------------------------------------------------------
    def load_pipeline(self, pipeline: PipelineArg, *, manifest_hash: str | None = None) -> Pipeline:
        """Resolve a Pipeline object, a name, or None (the default pipeline)."""
        return self.pipelines.load(pipeline, manifest_hash=manifest_hash)

    def recorded_pipeline(self, ticket_id: str, run_id: str) -> PipelineRef | None:
        """The pipeline a run recorded with its first phaselog checkpoint (None: none yet)."""
        return self.pipelines.recorded(ticket_id, run_id)

    def pipeline_for(
        self, ticket_id: str, run_id: str, requested: PipelineArg = None, *, snapshot: RunSnapshot | None = None
    ) -> Pipeline:
        """The run's pipeline; refuse one that differs from what the run recorded."""
        return self.pipelines.for_run(ticket_id, run_id, requested, snapshot=snapshot)

    # -- checkpoints: write (writes.py), read (reads.py), state (status.py) -----------------------------
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
        """Append a checkpoint for one attempt of ``phase``; return it once durable."""
        return self.writes.write(
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
            artifacts_root=artifacts_root,
            code_fingerprint=code_fingerprint,
            fence=fence,
            check_prerequisites=check_prerequisites,
            started_at=started_at,
            params=params,
        )

    def read(
        self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None = None, *, pipeline: PipelineArg = None
    ) -> Stored:
        """Read one attempt, or (``attempt=None``) the latest completed checkpoint of a phase."""
        return self.reads.read(ticket_id, run_id, phase, attempt, pipeline=pipeline)

    def list(
        self, ticket_id: str, run_id: str | None = None, *, after: str | None = None, limit: int | None = None
    ) -> Page:
        """List records ordered by (run, phase ordinal, attempt); damaged ones reported apart."""
        return self.reads.list(ticket_id, run_id, after=after, limit=limit)

    def run_records(self, ticket_id: str, run_id: str) -> tuple[builtins.list[Stored], builtins.list[Damaged]]:
        """Every record of one run, and what is damaged."""
        return self.reads.run_records(ticket_id, run_id)

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
        return self.reads.validate(ticket_id, run_id, phase, attempt, pipeline=pipeline, artifacts_root=artifacts_root)

    def status(
        self,
        ticket_id: str,
        run_id: str,
        *,
        pipeline: PipelineArg = None,
        artifacts_root: str | os.PathLike[str] | None = None,
    ) -> RunStatus:
        """Derive the state of every phase of a run, and the next phase (one store call)."""
        return self.states.status(ticket_id, run_id, pipeline=pipeline, artifacts_root=artifacts_root)

    def can_skip_to(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        *,
        pipeline: PipelineArg = None,
        artifacts_root: str | os.PathLike[str] | None = None,
    ) -> SkipDecision:
        """May the run skip to ``phase``? Only if its ancestors (D282) are completed, current and valid."""
        return self.states.can_skip_to(ticket_id, run_id, phase, pipeline=pipeline, artifacts_root=artifacts_root)

    # -- progress events (progress.py) ------------------------------------------------------------------
    def progress(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        event: str,
        *,
        attempt: int | None = None,
        step: int | None = None,
        output: str | bytes | None = None,
        tokens: int | None = None,
        provider: str | None = None,
        status: str | None = None,
        pid: int | Literal["self"] | None = "self",
        pipeline: PipelineArg = None,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        started_at: datetime | None = None,
    ) -> ProgressEvent:
        """Append a progress event to the attempt in flight (``start`` opens a new attempt)."""
        return self.events.progress(ticket_id, run_id, phase, event, attempt=attempt, step=step, output=output,
                                    tokens=tokens, provider=provider, status=status, pid=pid, pipeline=pipeline,
                                    max_output_bytes=max_output_bytes, started_at=started_at)  # fmt: skip

    def progress_events(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        attempt: int | None = None,
        *,
        pipeline: PipelineArg = None,
        newest: bool = False,
    ) -> builtins.list[ProgressEvent]:
        """Every event of an attempt (default: the attempt in flight), oldest first."""
        return self.events.progress_events(ticket_id, run_id, phase, attempt, pipeline=pipeline, newest=newest)

    def progress_latest(
        self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None = None, *, pipeline: PipelineArg = None
    ) -> ProgressEvent:
        """The latest event of the attempt in flight (seed 003's Load)."""
        return self.events.progress_latest(ticket_id, run_id, phase, attempt, pipeline=pipeline)

    def progress_event(
        self, ticket_id: str, run_id: str, phase: str | int, attempt: int, seq: int, *, pipeline: PipelineArg = None
    ) -> ProgressEvent:
        """One event by its sequence number (seed 003's LoadHistoryEntry)."""
        return self.events.progress_event(ticket_id, run_id, phase, attempt, seq, pipeline=pipeline)

    def damaged_events(self, ticket_id: str, run_id: str) -> builtins.list[Corrupt]:
        """Progress events that exist but cannot be used (damaged or edited after writing)."""
        return self.events.damaged_events(ticket_id, run_id)

    def event_index(self, ticket_id: str, run_id: str) -> dict[tuple[int, int], builtins.list[ProgressEvent]]:
        """Every progress event of a run, grouped by (phase ordinal, attempt)."""
        return self.events.event_index(ticket_id, run_id)

    def in_flight(self, ticket_id: str, run_id: str, *, stale_after: timedelta | None = None) -> dict[str, Flight]:
        """Per phase, the newest attempt that has events but no checkpoint (if any)."""
        return self.events.in_flight(ticket_id, run_id, stale_after=stale_after)

    def logs(
        self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None = None, *, pipeline: PipelineArg = None
    ) -> PhaseLog:
        """An attempt's log as the store keeps it (default: the phase's newest attempt; ledger/logs.py)."""
        return self.logs_reader.read(ticket_id, run_id, phase, attempt, pipeline=pipeline)

    # -- approvals (gates.py) ---------------------------------------------------------------------------
    def approve(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        *,
        by: str,
        comment: str | None = None,
        attempt: int | None = None,
        decision: str = "approve",
        pipeline: PipelineArg = None,
        checkpoint_hash: str | None = None,
        via: str | None = None,
    ) -> tuple[Approval, builtins.list[str]]:
        """Record that ``by`` approves (or rejects) a checkpoint of a gated phase (``via``: the door, e.g. mcp)."""
        return self.gates.approve(
            ticket_id,
            run_id,
            phase,
            by=by,
            comment=comment,
            attempt=attempt,
            decision=decision,
            pipeline=pipeline,
            checkpoint_hash=checkpoint_hash,
            via=via,
        )

    def reject(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        *,
        by: str,
        comment: str | None = None,
        attempt: int | None = None,
        pipeline: PipelineArg = None,
        checkpoint_hash: str | None = None,
        via: str | None = None,
    ) -> tuple[Approval, builtins.list[str]]:
        """Record a rejection (see :meth:`approve`)."""
        return self.gates.reject(
            ticket_id,
            run_id,
            phase,
            by=by,
            comment=comment,
            attempt=attempt,
            pipeline=pipeline,
            checkpoint_hash=checkpoint_hash,
            via=via,
        )

    def approvals(self, ticket_id: str, run_id: str) -> builtins.list[Approval]:
        """Every approval and rejection of a run, in the order they were recorded."""
        return self.gates.approvals(ticket_id, run_id)

    def damaged_approvals(self, ticket_id: str, run_id: str) -> builtins.list[Corrupt]:
        """Approvals that exist but cannot be used (damaged or edited after writing): not counted."""
        return self.gates.damaged_approvals(ticket_id, run_id)

    # -- the event feed (feed.py) -----------------------------------------------------------------------
    def feed(self, **query: Unpack[FeedQuery]) -> FeedPage:
        """The events derived from the store (after the cursor ``after``), in the feed's order."""
        return self.feed_reader.page(**query)

    def follow(self, **query: Unpack[FollowQuery]) -> Iterator[FeedEvent]:
        """Every event after ``after``, then each new one as it is recorded, until ``stop`` is set (``poll`` s)."""
        return self.feed_reader.follow(**query)

    # -- ticket markers (markers.py) --------------------------------------------------------------------
    def init_ticket(
        self, ticket_id: str, *, title: str, pipeline: PipelineArg = None, meta: Mapping[str, str] | None = None
    ) -> tuple[Marker, bool]:
        """Record (or confirm) a ticket's identity; returns the marker and whether it changed."""
        return self.tickets.init_ticket(ticket_id, title=title, pipeline=pipeline, meta=meta)

    def markers(self, ticket_id: str) -> builtins.list[Marker]:
        """Every revision of a ticket's marker, oldest first (empty if never initialised)."""
        return self.tickets.markers(ticket_id)

    def marker(self, ticket_id: str) -> Marker | None:
        """The current revision of a ticket's marker, or None."""
        return self.tickets.marker(ticket_id)

    def damaged_markers(self, ticket_id: str) -> builtins.list[Corrupt]:
        """Marker revisions that exist but cannot be used (damaged or edited after writing)."""
        return self.tickets.damaged_markers(ticket_id)

    # -- audit trail (audit.py, fork.py, verify.py) -----------------------------------------------------
    def decisions(self, ticket_id: str) -> dict[str, Any]:
        """The ticket's merged decision log in seed 002's shape (version, ticket, decisions)."""
        return self.audit.decisions(ticket_id)

    def history(
        self, ticket_id: str, run_id: str | None = None, phase: str | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Every record of a ticket (or run / phase) in time order: markers, progress events, checkpoints, approvals."""
        return self.audit.history(ticket_id, run_id, phase)

    def diff(self, ticket_id: str, a: str, b: str) -> dict[str, Any]:
        """Field-level differences between two attempts or two progress events."""
        return self.audit.diff(ticket_id, a, b)

    def diff_phase(self, ticket_id: str, run_id: str, phase: str | int) -> builtins.list[dict[str, Any]]:
        """Diffs of every consecutive pair of attempts of one phase (see :meth:`phase_diffs`)."""
        return self.audit.diff_phase(ticket_id, run_id, phase)

    def phase_diffs(self, ticket_id: str, run_id: str, phase: str | int) -> Iterator[dict[str, Any]]:
        """Diffs of every consecutive pair of attempts of one phase, one at a time."""
        return self.audit.phase_diffs(ticket_id, run_id, phase)

    def fork(
        self, ticket_id: str, run_id: str, *, through: str | int, new_run_id: str | None = None
    ) -> tuple[str, builtins.list[WriteResult]]:
        """Start a new run whose phases up to ``through`` reuse this run's checkpoints."""
        return self.forks.fork(ticket_id, run_id, through=through, new_run_id=new_run_id)

    def verify(self, ticket_id: str, run_id: str | None = None) -> VerifyReport:
        """Recompute every hash and link of a ticket (or one run); report what is broken."""
        return self.verifier.verify(ticket_id, run_id)

    # -- retention (retention.py) -----------------------------------------------------------------------
    def prune(
        self,
        ticket_id: str | None = None,
        *,
        older_than: timedelta | None = None,
        keep_last: int | None = None,
        run_id: str | None = None,
        dry_run: bool = False,
    ) -> PruneReport:
        """Remove old records (see the module docstring)."""
        return self.retention.prune(
            ticket_id, older_than=older_than, keep_last=keep_last, run_id=run_id, dry_run=dry_run
        )


class Run:
    """One run of a pipeline for a ticket: the everyday API (a facade over :class:`Ledger`)."""

    def __init__(self, ledger: Ledger, ticket_id: str, run_id: str, pipeline: PipelineArg) -> None:
        self.ledger = ledger
        self.ticket_id = ticket_id
        self.run_id = run_id
        #: The run id as given (``nightly-1``), kept with each checkpoint; None for a UUID.
        self.run_name: str | None = None
        self._pipeline = pipeline
        #: The pipeline asked for, resolved and checked for this run once (see :meth:`_checked`).
        self._resolved: Pipeline | None = None

    def __repr__(self) -> str:
        return f"Run({self.ticket_id!r}, {self.run_id!r})"

    @property
    def pipeline(self) -> Pipeline:
        """The run's pipeline."""
        return self.ledger.pipeline_for(self.ticket_id, self.run_id, self._pipeline)

    # -- checkpoints ------------------------------------------------------------------------------
    def write(self, phase: str | int, payload: Mapping[str, Any] | None = None, **kw: Any) -> WriteResult:
        """Record a completed attempt of ``phase`` (keywords as :meth:`Ledger.write`)."""
        rid = self.run_name or self.run_id
        return self.ledger.write(self.ticket_id, rid, phase, payload, pipeline=self._pipeline, **kw)

    def fail(self, phase: str | int, error: str, **kw: Any) -> WriteResult:
        """Record a failed attempt of ``phase``; the next try gets the next attempt number."""
        rid, payload = self.run_name or self.run_id, kw.pop("payload", None)
        return self.ledger.write(
            self.ticket_id, rid, phase, payload, pipeline=self._pipeline, status="failed", error=error, **kw
        )

    def _checked(self) -> Pipeline | None:
        """The pipeline this Run was given, resolved and checked against the run once (None: none
        given, the run's own is used). A record the run gains under another manifest is not taken
        on the strength of it: reads check each record's pipeline (``Reads.read``'s ``checked``)."""
        if self._pipeline is not None and self._resolved is None:
            self._resolved = self.ledger.pipeline_for(self.ticket_id, self.run_id, self._pipeline)
        return self._resolved

    def read(self, phase: str | int, attempt: int | None = None) -> Stored:
        """Read the latest completed checkpoint of ``phase`` (or one attempt)."""
        return self.ledger.reads.read_checked(
            self.ticket_id, self.run_id, phase, attempt, pipeline=self._pipeline, checked=self._checked()
        )

    def validate(self, phase: str | int, attempt: int | None = None, **kw: Any) -> tuple[Stored, Report]:
        """Validate a checkpoint of ``phase`` (keywords as :meth:`Ledger.validate`)."""
        return self.ledger.validate(self.ticket_id, self.run_id, phase, attempt, pipeline=self._pipeline, **kw)

    # -- state ------------------------------------------------------------------------------------
    def status(self) -> RunStatus:
        """Derive the run's state (one snapshot of the run)."""
        # The pipeline this Run resolved already (if it did) is not looked up again; the snapshot still
        # checks that the run follows it.
        return self.ledger.status(self.ticket_id, self.run_id, pipeline=self._resolved or self._pipeline)

    def can_skip_to(self, phase: str | int, **kw: Any) -> SkipDecision:
        """May the run skip to ``phase``? (keywords as :meth:`Ledger.can_skip_to`)"""
        return self.ledger.can_skip_to(self.ticket_id, self.run_id, phase, pipeline=self._pipeline, **kw)

    def in_flight(self, *, stale_after: timedelta | None = None) -> dict[str, Flight]:
        """Per phase, the attempt in flight (progress events, no checkpoint yet)."""
        return self.ledger.in_flight(self.ticket_id, self.run_id, stale_after=stale_after)

    # -- progress events --------------------------------------------------------------------------
    def progress(self, phase: str | int, event: str, **kw: Any) -> ProgressEvent:
        """Append a progress event to ``phase``'s attempt in flight (``"start"`` opens one;
        keywords as :meth:`Ledger.progress`: step, output, tokens, provider, status, pid …)."""
        return self.ledger.progress(self.ticket_id, self.run_id, phase, event, pipeline=self._pipeline, **kw)

    def progress_events(self, phase: str | int, attempt: int | None = None) -> list[ProgressEvent]:
        """Every event of an attempt of ``phase`` (default: the attempt in flight), oldest first."""
        return self.ledger.progress_events(self.ticket_id, self.run_id, phase, attempt, pipeline=self._pipeline)

    def logs(self, phase: str | int, attempt: int | None = None) -> PhaseLog:
        """The log of an attempt of ``phase`` (default: its newest), as :meth:`Ledger.logs`."""
        return self.ledger.logs(self.ticket_id, self.run_id, phase, attempt, pipeline=self._pipeline)

    # -- approvals --------------------------------------------------------------------------------
    def approve(self, phase: str | int, *, by: str, **kw: Any) -> tuple[Approval, list[str]]:
        """Record that ``by`` approves ``phase``'s latest completed checkpoint (or ``attempt=``;
        keywords as :meth:`Ledger.approve`: comment, attempt, checkpoint_hash)."""
        return self.ledger.approve(self.ticket_id, self.run_id, phase, by=by, pipeline=self._pipeline, **kw)

    def reject(self, phase: str | int, *, by: str, **kw: Any) -> tuple[Approval, list[str]]:
        """Record that ``by`` rejects ``phase``'s latest completed checkpoint (see :meth:`approve`)."""
        return self.ledger.reject(self.ticket_id, self.run_id, phase, by=by, pipeline=self._pipeline, **kw)

    def approvals(self) -> list[Approval]:
        """Every approval and rejection of the run, in the order they were recorded."""
        return self.ledger.approvals(self.ticket_id, self.run_id)

    # -- audit ------------------------------------------------------------------------------------
    def history(self, phase: str | None = None) -> list[dict[str, Any]]:
        """Every record of the run (or of one phase) in time order: events, checkpoints, approvals."""
        return self.ledger.history(self.ticket_id, self.run_id, phase)

    def verify(self) -> VerifyReport:
        """Verify this run's hash links."""
        return self.ledger.verify(self.ticket_id, self.run_id)
