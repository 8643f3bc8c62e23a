"""Reading checkpoints: one attempt, the latest completed one, a listing, a check of one record.

:class:`Reads` is the Ledger's read side. It reads through the store contract (``attempts``,
``get``, ``iter_records``) and resolves phase names with the run's pipeline only when the stored
entry names do not already say which phase is meant.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from phaselog.ledger.resolve import PipelineArg, PipelineResolver
from phaselog.model.errors import Corrupt, NotFound, PhaselogError, UnsupportedVersion, UsageError
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.model.limits import check_attempt, is_attempt, is_digits
from phaselog.model.records import Checkpoint
from phaselog.stores import Damaged, Store, Stored
from phaselog.stores.base import phase_reader

if TYPE_CHECKING:
    from phaselog.model.pipelines import Pipeline
    from phaselog.model.validation import Report
    from phaselog.stores.snapshot import RunSnapshot


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


def parse_cursor(after: str | None) -> tuple[str, int, int] | None:
    """Parse a listing cursor ``<run_uuid>:<phase ordinal>:<attempt>``."""
    if after is None:
        return None
    parts = after.split(":")
    if len(parts) != 3 or not is_digits(parts[1]) or not is_digits(parts[2]):
        raise UsageError(
            f"--after must be a cursor RUN_UUID:PHASE_ORDINAL:ATTEMPT as printed in next_after (got {after!r})",
            field="after",
        )
    return (normalize_run_id(parts[0], field="after"), int(parts[1]), int(parts[2]))


class Reads:
    """Read records of one store; ``pipelines`` resolves phases, ``clock`` dates validation."""

    def __init__(self, store: Store, clock: Callable[[], datetime], pipelines: PipelineResolver) -> None:
        self.store = store
        self.clock = clock
        self.pipelines = pipelines

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
        return self.read_checked(ticket_id, run_id, phase, attempt, pipeline=pipeline, checked=None)

    def read_checked(
        self,
        ticket_id: str,
        run_id: str,
        phase: str | int,
        attempt: int | None,
        *,
        pipeline: PipelineArg,
        checked: Pipeline | None,
    ) -> Stored:
        """:meth:`read`, where ``checked`` is ``pipeline`` as the caller resolved and checked it for
        this run before (a :class:`~phaselog.ledger.facade.Run` does it once): the phase is found
        without resolving the pipeline again."""
        ticket_id = validate_ticket_id(ticket_id)
        run_id = normalize_run_id(run_id)
        if (attempt is None or is_attempt(attempt)) and (reader := phase_reader(self.store)) is not None:
            # One store call for the plain case; anything else (unknown phase, no checkpoint, damage,
            # a record of another pipeline) goes the general way below, which explains it.
            if pipeline is None:
                stored: Stored | None = reader.read_phase(ticket_id, run_id, phase, attempt)
            else:
                stored = self._read_checked(ticket_id, run_id, phase, attempt, checked)
            if stored is not None:
                return stored
        all_refs = self.store.attempts(ticket_id, run_id)
        found = _phase_from_refs(all_refs, phase) if pipeline is None else None
        if found is None:
            ph = self.pipelines.phase(ticket_id, run_id, phase, pipeline)
            found = (ph.name, ph.ordinal)
        name, ordinal = found
        refs = [r for r in all_refs if r.phase_ordinal == ordinal]
        if attempt is not None:
            return self.store.get(ticket_id, run_id, ordinal, name, check_attempt(attempt))
        completed = sorted((r for r in refs if r.completed), key=lambda r: r.attempt_number)
        if not completed:
            failed = [r.attempt_number for r in refs]
            hint = f" (failed attempts: {failed})" if failed else ""
            raise NotFound(
                f"no completed checkpoint of phase {name} in run {run_id}{hint}",
                ticket_id=ticket_id,
                run_id=run_id,
                phase=name,
            )
        latest = completed[-1]
        for r in refs:
            if r.attempt_number > latest.attempt_number:
                # A newer attempt is listed as failed. Read it: if it is damaged (a SQL row whose
                # status was flipped, a planted file), the older checkpoint is not the latest.
                try:
                    self.store.get(ticket_id, run_id, ordinal, name, r.attempt_number)
                except (Corrupt, UnsupportedVersion) as exc:
                    exc.message = (
                        f"{exc.message}; it is newer than attempt {latest.attempt_number}, so that attempt is not "
                        f"returned as the latest (read it with --attempt {latest.attempt_number})"
                    )
                    raise
        try:
            return self.store.get(ticket_id, run_id, ordinal, name, latest.attempt_number)
        except (Corrupt, UnsupportedVersion) as exc:
            intact = None
            for r in reversed(completed[:-1]):
                try:
                    self.store.get(ticket_id, run_id, ordinal, name, r.attempt_number)
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

    def _read_checked(
        self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None, pl: Pipeline | None
    ) -> Stored | None:
        """The phase's record by ``pl``'s ordinal, in one store call, when it is plainly the one the
        general path would return: the phase is ``pl``'s, and the record was written under ``pl``'s
        very manifest (its name and hash), so the run still follows it. Else None."""
        reader = phase_reader(self.store)
        if pl is None or reader is None:
            return None
        try:
            ph = pl.phase(phase)
        except PhaselogError:
            return None  # the general path raises it, after the checks it makes first
        stored = reader.read_phase(ticket_id, run_id, ph.ordinal, attempt)
        ref = stored.record.pipeline if stored is not None else None
        if stored is None or ref is None or stored.record.phase != ph.name:
            return None
        return stored if (ref.name, ref.manifest_hash) == (pl.name, pl.manifest_hash) else None

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
            if isinstance(entry, Damaged):
                damaged.append(entry)
            else:
                items.append(entry)
        return items, damaged

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
        pl = self.pipelines.for_run(ticket_id, run_id, pipeline)
        stored = self.read(ticket_id, run_id, phase, attempt, pipeline=pl)
        return stored, self.full_report(stored, pl, artifacts_root)

    def full_report(
        self,
        stored: Stored,
        pl: Pipeline,
        artifacts_root: str | os.PathLike[str] | None,
        *,
        snapshot: RunSnapshot | None = None,
    ) -> Report:
        """Check a stored checkpoint: its own rules, its tamper state, its links, optionally its artifacts.

        With ``snapshot`` (the run's, read by the caller) the links are found without listing the run
        while the attempt just below exists.
        """
        cp = stored.record
        from phaselog.model.validation import check_artifacts, check_record  # lazy: `read` never validates

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
        report.extend(self._links(cp, snapshot))
        if artifacts_root is not None:
            report.extend(check_artifacts(cp, artifacts_root))
        return report

    def _below(self, cp: Checkpoint) -> tuple[builtins.list[int], Checkpoint | None] | None:
        """The attempts below ``cp`` that the link check needs, and the previous record (None:
        damaged), when the attempt just below exists or ``cp`` is the first; None otherwise (a gap:
        the caller lists the run). The largest attempt number below ``cp`` is ``cp`` minus one."""
        if cp.attempt_number <= 1:
            return [], None
        below = cp.attempt_number - 1
        try:
            return [below], self.store.get(cp.ticket_id, cp.run_id, cp.phase_ordinal, cp.phase, below).record
        except (Corrupt, UnsupportedVersion):
            return [below], None
        except NotFound:
            return None

    def _links(self, cp: Checkpoint, snap: RunSnapshot | None = None) -> Report:
        below = self._below(cp) if snap is not None else None
        if snap is not None and below is not None:  # no listing: the snapshot names the phases
            earlier, previous = below
            by_name = {name: s.ordinal for s in snap.summaries for name, _ in s.counts}
        else:
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
            by_name = {r.phase: r.phase_ordinal for r in refs}
        lookup: dict[tuple[str, int], Checkpoint | None] = {}
        for name, entry in (cp.basis or {}).items():
            ordinal = by_name.get(name)
            target = None
            if ordinal is not None:
                try:
                    target = self.store.get(cp.ticket_id, cp.run_id, ordinal, name, entry.attempt).record
                except (Corrupt, NotFound, UnsupportedVersion):
                    target = None
            lookup[(name, entry.attempt)] = target
        # lazy (the three): `phaselog read` checks no links, and must not load them (start-up)
        from phaselog.ledger.prune_notes import read_notes  # lazy: `phaselog read` reads no notes
        from phaselog.ledger.quarantined import quarantined_attempts  # lazy: `phaselog read` needs none
        from phaselog.model.validation import check_links  # lazy: `phaselog read` validates nothing

        report = check_links(
            cp,
            previous=previous,
            lookup=lookup,
            pruned=read_notes(self.store, cp.ticket_id, cp.run_id).records,
            quarantined=quarantined_attempts(self.store, cp.ticket_id, cp.run_id),
        )
        if earlier and previous is None and cp.has_metadata:
            report.error("prev_hash", "prev_hash", f"attempt {max(earlier)} is damaged; the link cannot be checked")
        return report


def _phase_from_refs(refs: Sequence[Any], phase: str | int) -> tuple[str, int] | None:
    """The phase (name, ordinal) as the stored file names give it, without loading the pipeline.

    Reading is then one directory listing and one record; an unknown phase still goes through
    the pipeline, whose error lists the valid phases.
    """
    for r in refs:
        if r.phase == phase or (isinstance(phase, int | str) and str(r.phase_ordinal) == str(phase)):
            return r.phase, r.phase_ordinal
    return None
