"""The audit trail: the decision log, the history timeline, and forks.

All of it is derived from the records: a refused write can never change the decision log (seed
002 wrote its log before validating), and history is the records themselves, in time order.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from phaselog.errors import UsageError
from phaselog.ids import normalize_run_id, validate_ticket_id
from phaselog.records import Checkpoint, format_timestamp, parse_timestamp

if TYPE_CHECKING:
    from phaselog.gates import Gates
    from phaselog.markers import Markers
    from phaselog.progress import Progress
    from phaselog.reads import Reads
    from phaselog.resolve import PipelineResolver
    from phaselog.stores import Store

DECISION_LOG_VERSION = "1.0"
_KIND_ORDER = {"marker": 0, "progress": 1, "checkpoint": 2, "approval": 3}
_NO_TIME = datetime.min.replace(tzinfo=UTC)  # damaged entries have no time: they sort first


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
        events, checkpoints (completed and failed) and approvals."""
        ticket_id = validate_ticket_id(ticket_id)
        runs = [normalize_run_id(run_id)] if run_id is not None else self.store.runs(ticket_id)
        out: list[dict[str, Any]] = []
        if run_id is None and phase is None:
            for m in self.tickets.markers(ticket_id):
                out.append(
                    _entry(
                        m.timestamp,
                        "marker",
                        None,
                        None,
                        None,
                        None,
                        f"ticket marker revision {m.revision}: {m.title!r} ({m.pipeline})",
                        m.content_hash,
                        m.to_json(),
                    )
                )
        for rid in runs:
            phase_name = self.pipelines.for_run(ticket_id, rid).phase(phase).name if phase is not None else None
            items, damaged = self.reads.run_records(ticket_id, rid)
            for s in items:
                cp = s.record
                if phase_name and cp.phase != phase_name:
                    continue
                what = "completed" if cp.completed else f"failed: {cp.error}"
                out.append(
                    _entry(
                        cp.timestamp_utc,
                        "checkpoint",
                        rid,
                        cp.phase,
                        cp.attempt_number,
                        None,
                        f"{cp.phase} attempt {cp.attempt_number} {what}",
                        cp.content_hash,
                        {**cp.to_json(), "checkpoint_path": s.location},
                        ordinal=cp.phase_ordinal,
                    )
                )
            for (ordinal, attempt), events in self.events.event_index(ticket_id, rid).items():
                for ev in events:
                    if phase_name and ev.phase != phase_name:
                        continue
                    if ev.event == "step":  # "step 3", never "step step 3"
                        what = f"step {ev.step}" if ev.step is not None else "step"
                    else:
                        what = f"{ev.event} (step {ev.step})" if ev.step is not None else ev.event
                    out.append(
                        _entry(
                            ev.timestamp,
                            "progress",
                            rid,
                            ev.phase,
                            attempt,
                            ev.seq,
                            f"{ev.phase} attempt {attempt} {what}",
                            ev.content_hash,
                            ev.to_json(),
                            ordinal=ordinal,
                        )
                    )
            for a in self.gates.approvals(ticket_id, rid):
                if phase_name and a.phase != phase_name:
                    continue
                verb = "approved" if a.approved else "rejected"
                note = f": {a.comment}" if a.comment else ""
                out.append(
                    _entry(
                        a.timestamp,
                        "approval",
                        rid,
                        a.phase,
                        a.attempt_number,
                        a.seq,
                        f"{a.phase} attempt {a.attempt_number} {verb} by {a.by}{note}",
                        a.content_hash,
                        a.to_json(),
                        ordinal=a.phase_ordinal,
                    )
                )
            for d in damaged:
                out.append(
                    {
                        "at": None,
                        "kind": "damaged",
                        "run_id": rid,
                        "phase": d.phase,
                        "attempt_number": d.attempt_number,
                        "seq": None,
                        "summary": f"damaged: {d.location}: {d.message}",
                        "hash": None,
                        "record": d.to_json(),
                    }
                )
        # Sort by the time itself: as strings, "…:00.5Z" sorts before "…:00Z" ('.' < 'Z').
        out.sort(
            key=lambda e: (
                parse_timestamp(e["at"], field="at") if e["at"] else _NO_TIME,
                _KIND_ORDER.get(e["kind"], 9),
                e["run_id"] or "",
                e.pop("_ordinal", 0),
                e["attempt_number"] or 0,
                e["seq"] or 0,
            )
        )
        return out

    # -- diff ---------------------------------------------------------------------------------------
    def diff(self, ticket_id: str, a: str, b: str) -> dict[str, Any]:
        """Field-level differences between two attempts or two progress events."""
        from phaselog.diff import parse_ref

        ticket_id = validate_ticket_id(ticket_id)
        ra, rb = parse_ref(a, field="A"), parse_ref(b, field="B")
        if (ra.seq is None) != (rb.seq is None):
            raise UsageError("compare two attempts or two progress events, not one of each", field="B", rule="ref_kind")
        va, vb = self._diff_view(ticket_id, ra), self._diff_view(ticket_id, rb)
        from phaselog.diff import CHECKPOINT_FIELDS, EVENT_FIELDS, diff_fields

        fields = EVENT_FIELDS if ra.seq is not None else (*CHECKPOINT_FIELDS, "progress")
        changes = diff_fields(va, vb, fields)
        return {"a": va["ref"], "b": vb["ref"], "identical": not changes, "changes": changes}

    def diff_phase(self, ticket_id: str, run_id: str, phase: str | int) -> list[dict[str, Any]]:
        """Diffs of every consecutive pair of attempts of one phase."""
        ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
        ph = self.pipelines.for_run(ticket_id, run_id).phase(phase)
        attempts = sorted(
            r.attempt_number for r in self.store.attempts(ticket_id, run_id) if r.phase_ordinal == ph.ordinal
        )
        return [
            self.diff(ticket_id, f"{run_id}:{ph.name}:{x}", f"{run_id}:{ph.name}:{y}")
            for x, y in itertools.pairwise(attempts)
        ]

    def _diff_view(self, ticket_id: str, ref: Any) -> dict[str, Any]:
        from phaselog.errors import NotFound

        ph = self.pipelines.for_run(ticket_id, ref.run_id).phase(ref.phase)
        if not self.store.attempts(ticket_id, ref.run_id) and not self.events.event_index(ticket_id, ref.run_id):
            raise NotFound(f"no run {ref.run_id} for ticket {ticket_id}", run_id=ref.run_id)
        label = f"{ref.run_id}:{ph.name}:{ref.attempt}" + (f":{ref.seq}" if ref.seq is not None else "")
        events = self.events.event_index(ticket_id, ref.run_id).get((ph.ordinal, ref.attempt), [])
        if ref.seq is not None:
            ev = next((e for e in events if e.seq == ref.seq), None)
            if ev is None:
                raise NotFound(f"no progress event {ref.seq} in attempt {ref.attempt} of {ph.name}", ref=label)
            return {**ev.to_json(), "ref": label}
        stored = self.store.get(ticket_id, ref.run_id, ph.ordinal, ph.name, ref.attempt)
        cp = stored.record
        view = {**cp.seed_dict(), "status": cp.status, "error": cp.error, "content_hash": cp.content_hash, "ref": label}
        if events:
            last = events[-1]
            view["progress"] = {
                "elapsed_sec": last.elapsed_sec,
                "tokens": last.tokens,
                "output_sha256": last.output_sha256,
                "output_length": last.output_length,
            }
        else:
            view["progress"] = None
        return view


def _entry(
    at: datetime,
    kind: str,
    run_id: str | None,
    phase: str | None,
    attempt: int | None,
    seq: int | None,
    summary: str,
    digest: str,
    record: dict[str, Any],
    *,
    ordinal: int = 0,
) -> dict[str, Any]:
    return {
        "at": format_timestamp(at),
        "kind": kind,
        "run_id": run_id,
        "phase": phase,
        "attempt_number": attempt,
        "seq": seq,
        "summary": summary,
        "hash": digest,
        "record": record,
        "_ordinal": ordinal,
    }
