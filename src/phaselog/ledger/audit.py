"""The audit trail: the decision log, the history timeline, and forks.

All of it is derived from the records: a refused write can never change the decision log (seed
002 wrote its log before validating), and history is the records themselves, in time order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from phaselog.ledger.diff import checkpoint_view, compare, event_view, parse_ref
from phaselog.ledger.history import history_items
from phaselog.ledger.progress import AttemptEvents
from phaselog.model.errors import NotFound, UsageError
from phaselog.model.ids import normalize_run_id, run_name_of, validate_ticket_id
from phaselog.model.records import Checkpoint
from phaselog.stores.base import Damaged

if TYPE_CHECKING:
    from phaselog.ledger.gates import Gates
    from phaselog.ledger.markers import Markers
    from phaselog.ledger.progress import Progress
    from phaselog.ledger.reads import Reads
    from phaselog.ledger.resolve import PipelineResolver
    from phaselog.stores import Store
    from phaselog.stores.snapshot import RunSnapshot

DECISION_LOG_VERSION = "1.0"


class Audit:
    """The decision log, history and diffs of a ticket, read from one store.

    Takes the services it reads through: ``pipelines`` (a run's phases), ``reads`` (a run's
    records), ``events`` (progress events), ``gates`` (approvals) and ``tickets`` (markers).
    """

    def __init__(
        self,
        store: Store,
        *,
        pipelines: PipelineResolver,
        reads: Reads,
        events: Progress,
        gates: Gates,
        tickets: Markers,
    ) -> None:
        self.store = store
        self.pipelines = pipelines
        self.reads = reads
        self.events = events
        self.gates = gates
        self.tickets = tickets

    # -- decision log -------------------------------------------------------------------------------
    def decisions(self, ticket_id: str) -> dict[str, Any]:
        """The ticket's merged decision log in seed 002's shape (version, ticket, decisions).

        Deduplicated by ``decision_id``: the first record (by checkpoint time, then run, phase,
        attempt) wins; a later record with the same id and different content is reported under
        ``conflicts``. Only completed checkpoints contribute.
        """
        ticket_id = validate_ticket_id(ticket_id)
        sources: list[Checkpoint] = []
        for run_id in self.store.runs(ticket_id):
            items, _damaged = self.reads.run_records(ticket_id, run_id)
            sources.extend(s.record for s in items if s.record.completed and s.record.decisions)
        sources.sort(key=lambda c: (c.timestamp_utc, c.run_id, c.phase_ordinal, c.attempt_number))
        merged: dict[str, dict[str, Any]] = {}
        conflicts: list[dict[str, Any]] = []
        for cp in sources:
            ref = {
                "run_id": cp.run_id,
                "phase": cp.phase,
                "attempt_number": cp.attempt_number,
                "content_hash": cp.content_hash,
                "checkpoint_path": self.store.location(cp),
            }
            for d in cp.decisions:
                body = json.loads(json.dumps(d))
                did = str(body.get("decision_id"))
                if did not in merged:
                    merged[did] = {**body, "source": ref}
                    continue
                first = {k: v for k, v in merged[did].items() if k != "source"}
                if first != body:
                    conflicts.append(
                        {
                            "decision_id": did,
                            "kept": merged[did]["source"],
                            "ignored": ref,
                            "message": f"decision {did} recorded again with different content; the first record wins",
                        }
                    )
        return {
            "version": DECISION_LOG_VERSION,
            "ticket": ticket_id,
            "decisions": list(merged.values()),
            "conflicts": conflicts,
        }

    # -- history ------------------------------------------------------------------------------------
    def history(self, ticket_id: str, run_id: str | None = None, phase: str | None = None) -> list[dict[str, Any]]:
        """Every record of a ticket (or run / phase) in time order: marker revisions, progress
        events, checkpoints (completed and failed) and approvals (see :mod:`phaselog.ledger.history`;
        ``sorted_history`` streams the same entries in bounded memory)."""
        items = list(
            history_items(
                self.store,
                ticket_id,
                run_id,
                phase,
                markers=self.tickets.markers,
                pipeline_for=self.pipelines.for_run,
                event_index=self.events.event_index,
                approvals=self.gates.approvals,
            )
        )
        items.sort(key=lambda kv: kv[0])
        return [entry for _, entry in items]

    # -- diff ---------------------------------------------------------------------------------------
    def diff(self, ticket_id: str, a: str, b: str) -> dict[str, Any]:
        """Field-level differences between two attempts or two progress events.

        Reads each run once (its snapshot: the pipeline, whether it exists), then the two records
        (or events) and their attempts' progress events, nothing else.
        """

        ticket_id = validate_ticket_id(ticket_id)
        ra, rb = parse_ref(a, field="A"), parse_ref(b, field="B")
        if (ra.seq is None) != (rb.seq is None):
            raise UsageError("compare two attempts or two progress events, not one of each", field="B", rule="ref_kind")
        runs: dict[str, RunSnapshot] = {}
        va, vb = self._diff_view(ticket_id, ra, runs), self._diff_view(ticket_id, rb, runs)
        return compare(va, vb, events=ra.seq is not None)

    def diff_phase(self, ticket_id: str, run_id: str, phase: str | int) -> list[dict[str, Any]]:
        """Diffs of every consecutive pair of attempts of one phase (see :meth:`phase_diffs`)."""
        return list(self.phase_diffs(ticket_id, run_id, phase))

    def phase_diffs(self, ticket_id: str, run_id: str, phase: str | int) -> Iterator[dict[str, Any]]:
        """Diffs of every consecutive pair of attempts of one phase, one at a time.

        Streamed: the phase's records come through ``Store.iter_records`` and their progress
        events a block of attempts at a time, so at most two records are held at once, however
        many attempts the phase has. Ids and the phase are checked before this returns.
        """

        ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
        snap = self.store.snapshot(ticket_id, run_id)
        ph = self.pipelines.for_run(ticket_id, run_id, snapshot=snap).phase(phase)
        events = AttemptEvents(self.store, ticket_id, run_id, ph, block=True)
        name = run_name_of(run_id, snap.run_name())

        def diffs() -> Iterator[dict[str, Any]]:
            previous: dict[str, Any] | None = None
            for entry in self.store.iter_records(ticket_id, run_id):
                if isinstance(entry, Damaged):
                    if entry.phase_ordinal != ph.ordinal:
                        continue
                    # Read alone, it raises what a diff of it always raised (Corrupt, naming it).
                    stored = self.store.get(ticket_id, run_id, ph.ordinal, ph.name, entry.attempt_number)
                elif entry.record.phase_ordinal != ph.ordinal:
                    continue
                else:
                    stored = entry
                attempt = stored.record.attempt_number
                view = checkpoint_view(stored, f"{run_id}:{ph.name}:{attempt}", events.of(attempt), name)
                if previous is not None:
                    yield compare(previous, view, events=False)
                previous = view

        return diffs()

    def _diff_view(self, ticket_id: str, ref: Any, runs: dict[str, RunSnapshot]) -> dict[str, Any]:

        snap = runs.get(ref.run_id)
        if snap is None:
            snap = runs[ref.run_id] = self.store.snapshot(ticket_id, ref.run_id)
        ph = self.pipelines.for_run(ticket_id, ref.run_id, snapshot=snap).phase(ref.phase)
        if snap.empty:
            raise NotFound(f"no run {ref.run_id} for ticket {ticket_id}", run_id=ref.run_id)
        label = f"{ref.run_id}:{ph.name}:{ref.attempt}" + (f":{ref.seq}" if ref.seq is not None else "")
        events = AttemptEvents(self.store, ticket_id, ref.run_id, ph).of(ref.attempt)
        name = run_name_of(ref.run_id, snap.run_name())
        if ref.seq is not None:
            ev = next((e for e in events if e.seq == ref.seq), None)
            if ev is None:
                raise NotFound(f"no progress event {ref.seq} in attempt {ref.attempt} of {ph.name}", ref=label)
            return event_view(ev, label, name)
        stored = self.store.get(ticket_id, ref.run_id, ph.ordinal, ph.name, ref.attempt)
        return checkpoint_view(stored, label, events, name)
