"""``phaselog step N``: a shell phase's command records a progress event for its own attempt.

Everything it needs comes from the environment the runner gave the command (PHASELOG_STORE,
PHASELOG_TICKET_ID, PHASELOG_RUN_ID, PHASELOG_PHASE, PHASELOG_ATTEMPT, PHASELOG_PIPELINE_FILE,
PHASELOG_LEASE_TOKEN). A command whose runner lost the run's lease is refused (fenced).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from phaselog.ledger.pool import ledger_for
from phaselog.model.errors import AlreadyExists, Conflict, Corrupt, Fenced, UsageError
from phaselog.model.pipelines import load_manifest
from phaselog.model.records import parse_timestamp
from phaselog.runner.lease import leases_of

if TYPE_CHECKING:
    from phaselog.model.entries import ProgressEvent
    from phaselog.model.pipelines import Pipeline
    from phaselog.stores.base import Store

NEEDED = ("PHASELOG_TICKET_ID", "PHASELOG_RUN_ID", "PHASELOG_PHASE", "PHASELOG_ATTEMPT")


def step_from_env(
    step: int,
    *,
    output: str | bytes | None = None,
    tokens: int | None = None,
    env: Mapping[str, str] | None = None,
    store: Store | None = None,
) -> ProgressEvent:
    """Record step ``step`` of the attempt the runner is running (the ProgressEvent written)."""
    env = os.environ if env is None else env
    missing = [k for k in NEEDED if not env.get(k)]
    if missing:
        raise UsageError(
            f"phaselog step runs inside a shell phase started by `phaselog run` ({', '.join(missing)} not set)",
            field=missing[0].lower(),
            rule="not_in_a_phase",
        )
    try:
        attempt = int(env["PHASELOG_ATTEMPT"])
    except ValueError:
        raise UsageError("PHASELOG_ATTEMPT must be an integer", field="phaselog_attempt") from None

    ledger, owned = ledger_for(store if store is not None else env.get("PHASELOG_STORE") or None)
    try:
        manifest = env.get("PHASELOG_PIPELINE_FILE")
        pipeline: Pipeline | None = load_manifest(manifest) if manifest else None
        ticket, run, phase = env["PHASELOG_TICKET_ID"], env["PHASELOG_RUN_ID"], env["PHASELOG_PHASE"]
        token = env.get("PHASELOG_LEASE_TOKEN")
        if token:
            _check_lease(ledger.store, ticket, run, int(token))
        started = _started_at(env.get("PHASELOG_ATTEMPT_STARTED_AT"))
        with contextlib.suppress(AlreadyExists, Conflict):  # started already (the heartbeat, an earlier step)
            ledger.progress(ticket, run, phase, "start", attempt=attempt, pipeline=pipeline, started_at=started)
        return ledger.progress(
            ticket, run, phase, "step", attempt=attempt, step=step, output=output, tokens=tokens, pipeline=pipeline
        )
    finally:
        if owned:
            ledger.close()


def _check_lease(store: Store, ticket: str, run: str, token: int) -> None:

    state = leases_of(store).read(ticket, run)
    if state is None or state.token != token or state.holder is None:
        raise Fenced(
            f"run {run}: the runner that started this command no longer holds the run (fencing token {token}, "
            f"now {state.token if state else 'none'}); the step was not recorded",
            rule="fencing_token",
        )


def _started_at(text: str | None) -> datetime | None:
    """PHASELOG_ATTEMPT_STARTED_AT (when the runner began the attempt), or None when unset."""
    if not text:
        return None

    try:
        return parse_timestamp(text, field="PHASELOG_ATTEMPT_STARTED_AT")
    except Corrupt as exc:
        raise UsageError(exc.message, field="phaselog_attempt_started_at", rule="datetime") from None
