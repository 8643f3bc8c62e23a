"""The state of a run, derived from one snapshot: ``status`` and ``can_skip_to``.

:class:`RunStates` reads a run once (``Store.snapshot``), finds the attempts in flight
(:func:`phaselog.ledger.progress.flights`), judges the approvals (:func:`phaselog.ledger.derive.judge`, with the
verdicts a forked checkpoint inherits from its source) and hands the rest to the pure
:func:`phaselog.ledger.derive.derive_status`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from phaselog.ledger.derive import APPROVED, COMPLETED, PhaseState, RunStatus, derive_status, judge
from phaselog.ledger.inputs import open_requests
from phaselog.ledger.progress import flights
from phaselog.ledger.reads import Reads
from phaselog.ledger.resolve import PipelineArg, PipelineResolver
from phaselog.model.artifacts import drift
from phaselog.model.entries import Approval, parse_entries
from phaselog.model.errors import Corrupt, NotFound, UsageError
from phaselog.model.ids import given_run_name, normalize_run_id, validate_ticket_id
from phaselog.model.pipelines import Pipeline
from phaselog.model.records import Checkpoint, format_timestamp
from phaselog.stores import Store, Stored
from phaselog.stores.base import state_snapshot
from phaselog.stores.names import parse_event_name
from phaselog.stores.snapshot import RunSnapshot


@dataclass(frozen=True)
class Blocker:
    """Why resume may not skip past a phase."""

    phase: str
    state: str
    reason: str

    def to_json(self) -> dict[str, str]:
        """Return the JSON form."""
        return {"phase": self.phase, "state": self.state, "reason": self.reason}


def blockers_among(
    st: RunStatus,
    names: Collection[str],
    reason: Callable[[PhaseState], str | None],
    check_completed: Callable[[PhaseState], Blocker | None] | None = None,
) -> list[Blocker]:
    """What blocks a phase built on ``names`` (its ancestors): those of them, in order, not completed.

    Each becomes a Blocker with its state and ``reason(ps)`` (None: the phase's own reason, else
    its state). ``check_completed``, when given, may also block on a completed one (a damaged newer
    attempt, a checkpoint that no longer validates). ``can_skip_to``, a strict pipeline's write and
    a fork share this walk; they word their reasons for their own readers.
    """
    blockers: list[Blocker] = []
    for ps in st.phases:
        if ps.phase not in names:
            continue
        if ps.state != COMPLETED:
            blockers.append(Blocker(ps.phase, ps.state, reason(ps) or ps.reason or ps.state))
        elif check_completed is not None and (found := check_completed(ps)) is not None:
            blockers.append(found)
    return blockers


def blockers_before(
    st: RunStatus,
    ordinal: int,
    reason: Callable[[PhaseState], str | None],
    check_completed: Callable[[PhaseState], Blocker | None] | None = None,
) -> list[Blocker]:
    """:func:`blockers_among` the phases listed before ``ordinal`` (in a chain: the phase's ancestors)."""
    return blockers_among(st, {ps.phase for ps in st.phases if ps.ordinal < ordinal}, reason, check_completed)


def resume_advice(flight: dict[str, Any]) -> str:
    """Where an attempt in flight resumes: after the last step recorded done (a step event says so)."""
    done = flight.get("resume_after")
    return (
        "start it over (no step recorded done)"
        if done is None
        else f"resume it after step {done}, the last step recorded done"
    )


def _skip_reason(ps: PhaseState) -> str | None:
    """Why an unfinished phase blocks a skip past it (None: its own reason)."""
    if ps.in_flight is not None:
        return f"attempt {ps.in_flight['attempt_number']} is in progress; {resume_advice(ps.in_flight)}" + (
            f" ({ps.reason})" if ps.in_flight.get("abandoned") else ""
        )
    if ps.state == "pending":
        return "no checkpoint yet"
    if ps.state == "failed":
        return f"latest attempt {ps.latest_attempt} failed: {ps.reason}"
    return None


def _started(snap: RunSnapshot) -> list[tuple[int, str, list[int]]]:
    """Per (ordinal, phase name), the attempts that have progress events (from the event names)."""

    found: dict[tuple[int, str], set[int]] = {}
    for name in snap.event_names:
        parsed = parse_event_name(name)
        if parsed is not None:
            found.setdefault((parsed.ordinal, parsed.phase), set()).add(parsed.attempt)
    return [(o, p, sorted(a)) for (o, p), a in sorted(found.items())]


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


def artifacts_folder(root: str | os.PathLike[str], field: str = "workdir") -> str:
    """``root`` as a folder artifacts are checked in; UsageError naming ``field`` if it is not one."""
    path = os.fspath(root)
    if not os.path.isdir(path):
        raise UsageError(f"{field}: {path} is not a folder; artifacts are checked in a folder", field=field)
    return path


def artifact_drift(records: Sequence[Checkpoint], root: str | os.PathLike[str]) -> dict[str, str]:
    """Content hash → why its artifacts no longer match, for each phase's newest record when it is
    a completed checkpoint that recorded artifact hashes (the only ones a run's state rests on).

    No store read: the records come from the run's snapshot; the files are hashed under ``root``
    (remembered by stat signature, :mod:`phaselog.model.artifacts`; D90).
    """

    newest: dict[str, Checkpoint] = {}
    for cp in records:
        if cp.phase not in newest or cp.attempt_number > newest[cp.phase].attempt_number:
            newest[cp.phase] = cp
    folder = artifacts_folder(root)
    out: dict[str, str] = {}
    for cp in newest.values():
        if cp.completed and cp.artifact_hashes:
            why = drift(folder, cp.artifact_hashes)
            if why is not None:
                out[cp.content_hash] = f"attempt {cp.attempt_number}'s artifacts are not what it recorded: {why}"
    return out


class RunStates:
    """Derive run states from one store; ``reads`` checks the checkpoints a skip relies on."""

    def __init__(self, store: Store, clock: Callable[[], datetime], pipelines: PipelineResolver, reads: Reads) -> None:
        self.store = store
        self.clock = clock
        self.pipelines = pipelines
        self.reads = reads

    def status(
        self,
        ticket_id: str,
        run_id: str,
        *,
        pipeline: PipelineArg = None,
        artifacts_root: str | os.PathLike[str] | None = None,
    ) -> RunStatus:
        """Derive the state of every phase of a run, and the next phase (one store call).

        ``artifacts_root``: the folder the run's artifacts live in (the runner's workdir); a
        completed phase whose recorded artifacts no longer match the files there is ``stale``
        (D89). None: artifacts are not looked at.
        """
        ticket_id = validate_ticket_id(ticket_id)
        given = given_run_name(run_id)
        run_id = normalize_run_id(run_id)
        # The carried records themselves, not a reader's copy: status derives state and hands none out (D192).
        snap = state_snapshot(self.store, ticket_id, run_id)
        pl = self.pipelines.for_run(ticket_id, run_id, pipeline, snapshot=snap)
        return self._status(snap, given, pl, artifacts_root)

    def _status(
        self, snap: RunSnapshot, given: str | None, pl: Pipeline, artifacts_root: str | os.PathLike[str] | None = None
    ) -> RunStatus:
        """``status`` from a snapshot: ``given`` is the run id as the caller wrote it (None: a UUID)."""
        ticket_id, run_id = snap.ticket_id, snap.run_id
        st = self.status_from(snap, pl, artifacts_root=artifacts_root)
        if st.run_name is None and given is not None:
            st = dataclasses.replace(st, run_name=given)  # the name the caller used names this run
        if snap.empty and not snap.approvals:
            known = self.store.runs(ticket_id)  # a second store call, only for a run with nothing in it
            if run_id not in known:  # nothing at all: a run about to start, or a mistyped id
                st = dataclasses.replace(st, recorded=False, known_runs=tuple(known))
        return st

    def status_from(
        self, snap: RunSnapshot, pl: Pipeline, *, artifacts_root: str | os.PathLike[str] | None = None
    ) -> RunStatus:
        """The state of a run as a snapshot shows it (and, given ``artifacts_root``, the files there)."""
        damaged = snap.damaged()
        records = [s.record for s in snap.stored()]
        # No event bodies in the snapshot, no attempt in flight (flights() would find none): the
        # clock and the host's liveness are not asked (D197).
        flying = {name: f.to_json() for name, f in flights(snap, now=self.clock()).items()} if snap.events else {}
        counts = self._attempt_counts(snap)
        verdicts = judge(sorted(parse_entries(Approval, snap.approvals)[0], key=lambda a: a.seq))
        judgements, origins = self._inherited(verdicts, records)
        st = derive_status(
            pl,
            records,
            ticket_id=snap.ticket_id,
            run_id=snap.run_id,
            damaged=[(d.phase, d.attempt_number) for d in damaged],
            judgements=judgements,
            approval_sources=origins,
            flights=flying,
            counts=counts,
            inputs={name: r.to_json() for name, r in open_requests(self.store, snap, pl).items()},
            artifacts=artifact_drift(records, artifacts_root) if artifacts_root is not None else None,
        )
        if damaged:
            extra = tuple(f"{d.location}: {d.message}" for d in damaged)
            st = dataclasses.replace(st, warnings=st.warnings + extra)
        return st

    def _attempt_counts(self, snap: RunSnapshot) -> dict[str, int]:
        """How many attempts each phase has: committed (completed, failed or damaged) and those with
        progress events only (in flight or abandoned), so ``attempts`` agrees with the newest one.

        From the snapshot alone, except when a phase has gaps below its newest record and events of
        attempts in them: then the run's list of attempts (names only) says which have a record."""
        counts = snap.counts()
        committed: set[tuple[int, int]] | None = None
        for ordinal, phase, attempts in _started(snap):
            s = snap.summary(ordinal)
            top = s.newest.attempt_number if s is not None else 0
            extra = [a for a in attempts if a > top]
            below = [a for a in attempts if a <= top]
            if below and s is not None and s.count < top:  # gaps: an attempt without a record, or pruned
                if committed is None:
                    committed = {
                        (r.phase_ordinal, r.attempt_number) for r in self.store.attempts(snap.ticket_id, snap.run_id)
                    }
                extra += [a for a in below if (ordinal, a) not in committed]
            if extra:
                counts[phase] = counts.get(phase, 0) + len(extra)
        return counts

    def _inherited(
        self, verdicts: dict[str, str], records: Sequence[Checkpoint]
    ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        """Add to ``verdicts`` those a forked checkpoint inherits from its source's approvals (D91),
        and say for each where it came from (content hash → ``approval_from``): the source run (read
        once per source run: its approvals and its name), the judged attempt, who judged and when."""
        sources: dict[str, tuple[list[Approval], str | None]] = {}
        origins: dict[str, dict[str, Any]] = {}
        for cp in records:
            src = cp.forked_from
            if not src or cp.content_hash in verdicts:
                continue
            key = f"{src.get('ticket_id')}/{src.get('run_id')}"
            if key not in sources:
                try:
                    other = (validate_ticket_id(str(src.get("ticket_id"))), normalize_run_id(str(src.get("run_id"))))
                    snap = self.store.snapshot(*other)
                    named = next((s.record.run_name for s in snap.stored() if s.record.run_name), None)
                    sources[key] = (sorted(parse_entries(Approval, snap.approvals)[0], key=lambda a: a.seq), named)
                except (Corrupt, NotFound, UsageError):
                    sources[key] = ([], None)
            approvals, run_name = sources[key]
            source_hash = str(src.get("content_hash"))
            inherited = judge(a for a in approvals if a.checkpoint_hash == source_hash).get(source_hash)
            if inherited is None:
                continue
            verdicts[cp.content_hash] = inherited
            same = [a for a in approvals if a.checkpoint_hash == source_hash and a.approved == (inherited == APPROVED)]
            last = same[-1]
            origins[cp.content_hash] = {
                "inherited": True,
                "ticket_id": last.ticket_id,
                "run_id": last.run_id,
                "run_name": run_name,
                "phase": last.phase,
                "attempt_number": last.attempt_number,
                "decision": last.decision,
                "by": last.by,
                "timestamp": format_timestamp(last.timestamp),
            }
        return verdicts, origins

    def can_skip_to(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        *,
        pipeline: PipelineArg = None,
        artifacts_root: str | os.PathLike[str] | None = None,
    ) -> SkipDecision:
        """May the run skip to ``phase``? Only if every phase it needs, directly or not (its ancestors; in a
        chain every earlier phase), is completed, current, and its checkpoint validates; otherwise every
        blocking phase is named with its reason (D282)."""
        ticket_id = validate_ticket_id(ticket_id)
        run_id = normalize_run_id(run_id)
        snap = self.store.snapshot(ticket_id, run_id)  # the run read once: its pipeline, state and links
        pl = self.pipelines.for_run(ticket_id, run_id, pipeline, snapshot=snap)
        return self.skip_from(snap, self._status(snap, None, pl), pl, phase, artifacts_root=artifacts_root)

    def blockers_through(self, ticket_id: str, run_id: str, phase: str | int, pl: Pipeline) -> list[Blocker]:
        """What keeps the run's phases up to ``phase``, in manifest order, from being reused (a fork):
        as :meth:`can_skip_to` the phase after it judges them in a chain (a prefix of the manifest holds
        every phase its phases need, so a fork's copies are complete in a graph too)."""
        snap = self.store.snapshot(ticket_id, run_id)
        last = pl.phase(phase)
        names = [p.name for p in pl.phases if p.ordinal <= last.ordinal]
        return self.blockers_of(snap, self._status(snap, None, pl), pl, names)

    def skip_from(
        self,
        snap: RunSnapshot,
        st: RunStatus,
        pl: Pipeline,
        phase: str | int,
        *,
        artifacts_root: str | os.PathLike[str] | None = None,
    ) -> SkipDecision:
        """:meth:`can_skip_to` judged on a snapshot and the status derived from it (no second read)."""
        target = pl.phase(phase)
        ancestors = pl.graph.ancestors(target.name)
        blockers = self.blockers_of(snap, st, pl, ancestors, artifacts_root=artifacts_root)
        return SkipDecision(target.name, not blockers, tuple(blockers), st, st.phase(target.name).in_flight)

    def blockers_of(
        self,
        snap: RunSnapshot,
        st: RunStatus,
        pl: Pipeline,
        names: Collection[str],
        *,
        artifacts_root: str | os.PathLike[str] | None = None,
    ) -> list[Blocker]:
        """What keeps the phases ``names`` from being built on: those not completed, and the completed
        ones with a damaged newer attempt or a checkpoint that no longer validates (skip, fork)."""
        ticket_id, run_id = snap.ticket_id, snap.run_id

        def completed_blocker(ps: PhaseState) -> Blocker | None:
            newer_damage = [a for a in ps.damaged_attempts if a > (ps.completed_attempt or 0)]
            if newer_damage:
                return Blocker(ps.phase, "damaged", f"attempt(s) {newer_damage} are damaged; run `phaselog verify`")
            stored = snap.record(ps.ordinal, ps.completed_attempt or 0)
            if not isinstance(stored, Stored):
                stored = self.store.get(ticket_id, run_id, ps.ordinal, ps.phase, ps.completed_attempt or 0)
            report = self.reads.full_report(stored, pl, artifacts_root, snapshot=snap)
            if not report.is_valid:
                return Blocker(ps.phase, "invalid", "; ".join(i.text() for i in report.errors))
            return None

        return blockers_among(st, names, _skip_reason, completed_blocker)
