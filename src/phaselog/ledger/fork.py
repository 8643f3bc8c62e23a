"""``fork``: start a new run whose first phases reuse another run's checkpoints.

A fork is a series of ordinary writes (checked like any other) whose records name the checkpoint
they copy (``forked_from``: source run, attempt and content hash), so ``verify`` checks the lineage
and an approval of the source carries over to the copy (see :mod:`phaselog.ledger.status`).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from phaselog.ledger.writes import WriteRequest
from phaselog.model.errors import InvalidRecord, Prerequisite, UsageError
from phaselog.model.ids import normalize_run_id, validate_ticket_id

if TYPE_CHECKING:
    from phaselog.ledger.resolve import PipelineResolver
    from phaselog.ledger.status import RunStates
    from phaselog.ledger.writes import WriteResult, Writes
    from phaselog.stores import Store


class Forks:
    """Fork runs: ``states`` checks the source's phases, ``writes`` appends the copies."""

    def __init__(self, store: Store, *, pipelines: PipelineResolver, states: RunStates, writes: Writes) -> None:
        self.store = store
        self.pipelines = pipelines
        self.states = states
        self.writes = writes

    def fork(
        self, ticket_id: str, run_id: str, *, through: str | int, new_run_id: str | None = None
    ) -> tuple[str, list[WriteResult]]:
        """Start a new run whose phases up to ``through`` reuse this run's checkpoints.

        Every reused checkpoint must be completed, current and valid (checked first: nothing is
        written otherwise). The new run's checkpoints record ``forked_from`` (the source run,
        attempt and content hash), so ``verify`` can check the lineage and approvals carry over.
        """
        ticket_id, run_id = validate_ticket_id(ticket_id), normalize_run_id(run_id)
        pl = self.pipelines.for_run(ticket_id, run_id)
        last = pl.phase(through)
        following = pl.phase_by_ordinal(last.ordinal + 1)
        if following is not None:  # every phase up to ``last`` completed, current and valid (D282)
            found = self.states.blockers_through(ticket_id, run_id, last.name, pl)
            blockers: list[tuple[str, str, str | None]] = [(b.phase, b.state, b.reason) for b in found]
        else:  # forking through the last phase: every phase must be complete
            st = self.states.status(ticket_id, run_id)
            blockers = [(p.phase, p.state, p.reason) for p in st.phases if p.state != "completed"]
        if blockers:
            details = [{"phase": phase, "state": state, "reason": reason or state} for phase, state, reason in blockers]
            raise Prerequisite(
                f"cannot fork run {run_id} through {last.name}: "
                + "; ".join(f"{d['phase']} is {d['state']} ({d['reason']})" for d in details),
                blockers=details,
            )
        target = normalize_run_id(new_run_id) if new_run_id is not None else str(uuid.uuid4())
        if target == run_id:
            raise UsageError("--new-run-id must differ from the source run", field="new_run_id")
        if self.store.attempts(ticket_id, target):
            raise InvalidRecord(
                f"run {target} already has checkpoints; fork into a new run id",
                errors=[{"field": "new_run_id", "rule": "fresh_run", "message": "run exists"}],
            )
        st = self.states.status(ticket_id, run_id)
        written = []
        for ps in st.phases:
            if ps.ordinal > last.ordinal:
                break
            src = self.store.get(ticket_id, run_id, ps.ordinal, ps.phase, ps.completed_attempt or 0).record
            request = WriteRequest(
                ticket_id,
                new_run_id if new_run_id is not None else target,  # as given: the copies keep its name
                src.phase,
                dict(src.phase_payload or {}),
                repo_commit_map=dict(src.repo_commit_map),
                artifact_paths=list(src.artifact_paths),
                timestamp=src.timestamp_utc,
                pipeline=pl,
                decisions=list(src.decisions),
                artifact_hashes=src.artifact_hashes,
                code_fingerprint=src.code_fingerprint,
                started_at=src.started_at,
                params=src.params,  # the copies keep the run's parameters (D260)
                forked_from={
                    "ticket_id": ticket_id,
                    "run_id": run_id,
                    "phase": src.phase,
                    "attempt_number": src.attempt_number,
                    "content_hash": src.content_hash,
                },
                check_prerequisites=False,
            )
            written.append(self.writes.write_request(request))
        return target, written
