"""The queue of runs, for people and scripts: submit, list, show, cancel, retry (and their JSON views).

    from phaselog.runner import queue
    entry = queue.submit(store, ticket_id="CHURN-7", pipeline_file="job.yaml", priority=5)
    queue.list_view(store)        # {"runs": [{ticket_id, run_id, state, worker, phase, since, …}], "counts": {…}}

The rows live in the PostgreSQL store (:mod:`phaselog.stores.sql.queue.rows`); workers drain them
(:mod:`phaselog.runner.worker`). Files and SQLite stores are refused with QueueRefused (one
machine: ``phaselog run``). Guide: docs/workers.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from phaselog.ledger.attempts import process_gone
from phaselog.model.durations import parse_duration
from phaselog.model.errors import PipelineError, UsageError
from phaselog.model.ids import given_run_name, normalize_run_id, validate_ticket_id
from phaselog.model.params import from_cli
from phaselog.model.params import resolve as resolve_params
from phaselog.model.pipelines import (
    Pipeline,
    check_schemas,
    find_pipeline,
    is_pipeline_name,
    load_manifest,
    manifest_dict,
)
from phaselog.runner.lease import leases_of, process_start_time
from phaselog.stores.base import Store
from phaselog.stores.sql.queue import claim as flow
from phaselog.stores.sql.queue.rows import DEFAULT_QUEUE, STATES, QueueEntry, SqlQueue

_QUEUE_NAME_MAX = 64


def check_queue_name(name: str) -> str:
    """A queue name: 1-64 of [A-Za-z0-9._-]."""

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name or ""):
        raise UsageError(f"queue name must be 1-64 of [A-Za-z0-9._-] (got {name!r})", field="queue", rule="name")
    return name


def parse_not_before(text: str | None) -> tuple[float | None, float | None]:
    """``--not-before``: an ISO-8601 time with a timezone, or a delay (``10m``) from now.

    Returns (epoch, None) or (None, delay seconds); (None, None) for nothing.
    """
    if text is None:
        return None, None

    if text[:1].isdigit() and not any(c in text for c in "-T:"):
        return None, parse_duration(text, field="not_before").total_seconds()
    try:
        ts = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"not_before: {text!r} is neither an ISO-8601 time (2026-11-30T18:00:00Z) nor a delay (10m, 2h)",
            field="not_before",
            rule="time",
        ) from None
    if ts.tzinfo is None:
        raise UsageError(
            f"not_before: {text!r} has no timezone; add one (e.g. a trailing Z for UTC)",
            field="not_before",
            rule="timezone_aware",
        )
    return ts.astimezone(UTC).timestamp(), None


def submit(
    store: Store,
    *,
    ticket_id: str,
    pipeline: str | None = None,
    pipeline_file: str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    priority: int = 0,
    not_before: str | None = None,
    dedup_key: str | None = None,
    queue: str = DEFAULT_QUEUE,
    params: Mapping[str, Any] | None = None,
    param_pairs: Sequence[str] = (),
    params_file: str | None = None,
) -> dict[str, Any]:
    """Queue a run and return its view with ``position`` and ``created`` (idempotent by run id and dedup key).

    ``pipeline``: a name the workers resolve (their ``--pipelines`` folder, ``PHASELOG_PIPELINES``,
    built-ins); ``pipeline_file``: a manifest whose content goes into the queue, so every worker
    runs exactly what was submitted. ``params`` (or ``param_pairs``, ``key=value`` text typed by the
    manifest's params schema, and ``params_file``): the run's parameters, kept with the queue row
    and given to the worker's run; checked now when the manifest is known here (D262).
    """

    q = SqlQueue(store)
    validate_ticket_id(ticket_id)
    check_queue_name(queue)
    if (pipeline is None) == (pipeline_file is None):
        raise UsageError("name the pipeline: --pipeline NAME or --pipeline-file PATH (one of them)", field="pipeline")
    if not -1_000_000 <= priority <= 1_000_000:
        raise UsageError("priority must be between -1000000 and 1000000", field="priority", rule="range")
    if dedup_key is not None and (not 0 < len(dedup_key) <= 200 or "\x00" in dedup_key):
        raise UsageError("dedup key must be 1-200 characters without NUL", field="dedup_key", rule="length")
    at, delay = parse_not_before(not_before)
    known: Pipeline | None = None
    if pipeline_file is not None:
        known = pl = load_manifest(pipeline_file)
        check_schemas(pl)  # refused at submit, as `phaselog run` refuses it: before a worker runs anything
        name, manifest, digest = pl.name, manifest_dict(pl), pl.manifest_hash
    else:
        assert pipeline is not None
        if not is_pipeline_name(pipeline):
            raise UsageError(f"pipeline name must be 1-64 of [A-Za-z0-9._-] (got {pipeline!r})", field="pipeline")
        name, manifest, digest = pipeline, None, None
        if param_pairs or params_file is not None or params is not None:
            with contextlib.suppress(PipelineError):  # a name only the workers know: they check them
                known = find_pipeline(pipeline)
    given = submitted_params(known, params, param_pairs, params_file)
    rid = normalize_run_id(run_id) if run_id is not None else str(uuid.uuid4())
    entry, created = q.submit(
        ticket_id,
        rid,
        pipeline=name,
        manifest=manifest,
        manifest_hash=digest,
        queue=queue,
        priority=priority,
        not_before=at,
        delay=delay,
        dedup_key=dedup_key,
        run_name=given_run_name(run_id),  # the name given is kept: the worker runs the run by it
        params=given,
    )
    return {**entry_view(entry), "created": created, "position": q.position(entry)}


def submitted_params(
    known: Pipeline | None, params: Mapping[str, Any] | None, pairs: Sequence[str], file: str | None
) -> dict[str, Any] | None:
    """The parameters a submit gives (None: none), typed and checked by ``known``'s schema when the
    pipeline is known here; else ``--param`` values are JSON when they parse, text otherwise."""
    if known is not None:
        given = from_cli(known.params, pairs, file)
        if params is not None:
            given = {**(given or {}), **params}
        resolve_params(known.params, given)  # refused now, naming the parameter: nothing is queued
        return given
    loose = from_cli({"properties": {}}, (), file) or {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq or not key:
            raise UsageError(f"--param takes key=value (got {pair!r})", field="param", rule="key_value")
        try:
            loose[key.strip()] = json.loads(text)
        except ValueError:
            loose[key.strip()] = text
    merged = {**loose, **(params or {})}
    return merged if (pairs or file is not None or params is not None) else None


def entry_view(entry: QueueEntry) -> dict[str, Any]:
    """One run of the queue as JSON (the row's fields; times ISO-8601 UTC)."""
    return entry.to_json()


def list_view(
    store: Store,
    *,
    queue: str | None = None,
    states: tuple[str, ...] = (),
    ticket_id: str | None = None,
    limit: int = 1000,
) -> dict[str, Any]:
    """``{"runs": [...], "counts": {state: n}, "workers": [...]}``: the queue in one read per table."""
    q = SqlQueue(store)
    bad = [s for s in states if s not in STATES]
    if bad:
        raise UsageError(f"state must be one of {', '.join(STATES)} (got {bad[0]!r})", field="state", rule="enum")
    runs = q.entries(queue=queue, states=states, ticket_id=ticket_id, limit=limit)
    return {
        "runs": [entry_view(e) for e in runs],
        "counts": q.counts(queue),
        "workers": workers_view(q.workers()),
        "truncated": len(runs) >= limit,
    }


def workers_view(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The registered workers, each with its ``state``: ``gone`` when its process is provably gone
    (on this host: pid absent or reused, :func:`phaselog.ledger.attempts.process_gone`; at once, whatever
    its heartbeat row says), ``expired`` when its heartbeat is older than its ttl, else ``alive``."""

    here = socket.gethostname()
    out = []
    for row in rows:
        why = process_gone(row["host"], row["pid"], row["process_start"], here=here, start_time_of=process_start_time)
        state = "gone" if why is not None else "expired" if row["expired"] else "alive"
        out.append({**row, "state": state, "gone": why is not None, "gone_reason": why})
    return out


def show_view(store: Store, ticket_id: str, run_id: str) -> dict[str, Any]:
    """One run's queue row, its position if queued, and its lease holder if one holds it."""

    q = SqlQueue(store)
    entry = q.get(ticket_id, normalize_run_id(run_id))
    lease = leases_of(store).read(entry.ticket_id, entry.run_id)
    holder = dict(lease.holder) if lease is not None and lease.holder else None
    return {**entry_view(entry), "position": q.position(entry), "lease_holder": holder}


def cancel(store: Store, ticket_id: str, run_id: str, *, by: str | None = None) -> dict[str, Any]:
    """Cancel a run: now if it waits, between phases if it runs (the view says which)."""

    reason = f"cancelled by {by}" if by else "cancelled"
    entry = flow.cancel(SqlQueue(store), ticket_id, normalize_run_id(run_id), reason=reason)
    return {**entry_view(entry), "stops": "between phases" if entry.state == "running" else "now"}


def retry(store: Store, ticket_id: str, run_id: str) -> dict[str, Any]:
    """Queue a dead or cancelled run again; it resumes at its first incomplete phase."""

    q = SqlQueue(store)
    entry = flow.retry(q, ticket_id, normalize_run_id(run_id))
    return {**entry_view(entry), "position": q.position(entry)}


def after_judgement(store: Store, ticket_id: str, run_id: str) -> bool:
    """After ``approve``/``reject``: a submitted run waiting at that gate goes back to the queue."""
    return flow.after_judgement(store, ticket_id, run_id)
