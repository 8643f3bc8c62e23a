"""Queue commands: submit, worker, queue list|show|cancel|retry (PostgreSQL stores).

``submit`` puts a run in the store's queue; ``worker`` processes on any number of machines
claim runs from it and run them with the runner; ``queue`` shows and steers the queue. The
JSON views come from :mod:`phaselog.runner.queue`. Guide: docs/workers.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from phaselog.cli._render import lines, short_time, table
from phaselog.cli._scaffold import CONTEXT, Call, Result, cli, command, in_section
from phaselog.model.durations import parse_duration
from phaselog.model.errors import UsageError
from phaselog.model.ids import run_label
from phaselog.model.logs import parse_log_cap

STORE_HELP = "The PostgreSQL store holding the queue (postgresql://…). Env: PHASELOG_STORE."
SECTION = "Workers"
STATE_CHOICES = ("queued", "running", "awaiting_approval", "dead", "done", "cancelled")


def _entry_table(d: dict[str, Any]) -> str:
    keys = ("ticket_id", *(("run_name",) if d.get("run_name") else ()), "run_id", "state", "worker", "phase", "since")
    rows = [[k, d.get(k)] for k in (*keys, "reason")]
    extra = [[k, d[k]] for k in ("position", "created", "stops", "recoveries", "pipeline") if d.get(k) is not None]
    return table(rows + extra, ["field", "value"])


@command(cli, pipeline=True, writes=True, store_help=STORE_HELP, section=SECTION)
@click.option("--ticket-id", required=True)
@click.option("--run-id", help="The run to queue (default: a new run). Submitting it again changes nothing.")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option(
    "--not-before", metavar="TIME", help="Not before this ISO-8601 time (2026-12-01T06:00:00Z) or delay (10m)."
)
@click.option("--dedup-key", metavar="KEY", help="At most one unfinished run per key; a second submit returns it.")
@click.option("--queue", "queue_name", default="default", show_default=True, help="The queue's name.")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A run parameter (repeatable), typed by the manifest's params schema; the worker's run gets it.",
)
@click.option("--params-file", type=click.Path(dir_okay=False), help="Run parameters from a JSON object file.")
def submit(
    call: Call,
    ticket_id: str,
    run_id: str | None,
    priority: int,
    not_before: str | None,
    dedup_key: str | None,
    queue_name: str,
    params: tuple[str, ...],
    params_file: str | None,
) -> Result:
    """Queue a run for the workers; JSON with its state and queue position.

    --pipeline NAME is resolved by each worker (its --pipelines folder, PHASELOG_PIPELINES,
    built-ins); --pipeline-file puts the manifest's content in the queue. Idempotent by run id
    and by dedup key.

    \b
    Example:
      phaselog submit --pipeline-file job.yaml --ticket-id CHURN-7 --priority 5 --store postgresql://db/phaselog
    """
    from phaselog.runner import queue  # lazy: `--help` loads every area; the runner's queue is ~47 ms

    view = queue.submit(
        call.ledger.store,
        ticket_id=ticket_id,
        pipeline=call.pipeline_name,
        pipeline_file=call.pipeline_file,
        run_id=run_id,
        priority=priority,
        not_before=not_before,
        dedup_key=dedup_key,
        queue=queue_name,
        param_pairs=params,
        params_file=params_file,
    )
    return Result(view, _entry_table)


@cli.group(context_settings=CONTEXT)
def queue() -> None:
    """Show and steer the queue of runs that workers drain (PostgreSQL stores).

    \b
    Example:
      phaselog queue list --state running --format table
    """


in_section(queue, SECTION)


def _list_table(d: dict[str, Any]) -> str:

    keys = ("ticket_id", "run_id", "state", "worker", "phase", "since", "reason")
    rows = [[r[k] or "" for k in keys] for r in d["runs"]]
    for row, r in zip(rows, d["runs"], strict=True):
        row[1] = run_label(r["run_id"], r.get("run_name"), short=True)
        row[5] = short_time(row[5])
    counts = ", ".join(f"{k} {v}" for k, v in d["counts"].items() if v)
    states = [w["state"] for w in d["workers"]]
    workers = ", ".join(f"{states.count(s)} {s}" for s in ("alive", "expired", "gone") if s in states)
    return lines(
        table(rows, ["ticket", "run", "state", "worker", "phase", "since", "reason"], title="queue", empty="empty"),
        f"{counts or 'nothing queued'}; workers: {workers or 'none registered'}",
        *(f"worker {w['worker']}: {w['gone_reason']}" for w in d["workers"] if w["gone"]),
    )


@command(queue, "list", store_help=STORE_HELP)
@click.option("--state", "states", multiple=True, type=click.Choice(STATE_CHOICES), help="Only these (repeatable).")
@click.option("--ticket-id", help="Only this ticket's runs.")
@click.option("--queue", "queue_name", help="Only this queue.")
@click.option("--limit", type=click.IntRange(min=1, max=100_000), default=1000, show_default=True)
def list_(call: Call, states: tuple[str, ...], ticket_id: str | None, queue_name: str | None, limit: int) -> Result:
    """The runs in the queue (oldest first) with state, worker, phase and since; counts per state.

    \b
    Example:
      phaselog queue list --state dead --format table
    """
    from phaselog.runner import queue as q  # lazy: `--help` loads every area; the runner's queue is ~47 ms

    view = q.list_view(call.ledger.store, queue=queue_name, states=states, ticket_id=ticket_id, limit=limit)
    return Result(view, _list_table)


@command(queue, "show", store_help=STORE_HELP)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
def show(call: Call, ticket_id: str, run_id: str) -> Result:
    """One run's queue entry: state, worker, phase, recoveries, reason, position, lease holder.

    \b
    Example:
      phaselog queue show --ticket-id CHURN-7 --run-id nightly-2026-11-30
    """
    from phaselog.runner import queue as q  # lazy: `--help` loads every area; the runner's queue is ~47 ms

    return Result(q.show_view(call.ledger.store, ticket_id, run_id), _entry_table)


@command(queue, "cancel", writes=True, store_help=STORE_HELP)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--by", metavar="NAME", help="Who cancels (kept as the reason).")
def cancel(call: Call, ticket_id: str, run_id: str, by: str | None) -> Result:
    """Cancel a run: now if it waits, between phases if a worker runs it ("stops" says which).

    \b
    Example:
      phaselog queue cancel --ticket-id CHURN-7 --run-id nightly-2026-11-30 --by ana
    """
    from phaselog.runner import queue as q  # lazy: `--help` loads every area; the runner's queue is ~47 ms

    return Result(q.cancel(call.ledger.store, ticket_id, run_id, by=by), _entry_table)


@command(queue, "retry", writes=True, store_help=STORE_HELP)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
def retry(call: Call, ticket_id: str, run_id: str) -> Result:
    """Queue a dead or cancelled run again; it resumes at its first incomplete phase.

    \b
    Example:
      phaselog queue retry --ticket-id CHURN-7 --run-id nightly-2026-11-30
    """
    from phaselog.runner import queue as q  # lazy: `--help` loads every area; the runner's queue is ~47 ms

    return Result(q.retry(call.ledger.store, ticket_id, run_id), _entry_table)


@command(cli, writes=True, formats=None, correlation=False, store_help=STORE_HELP, section=SECTION)
@click.option("--concurrency", type=click.IntRange(1, 256), default=1, show_default=True, help="Worker processes.")
@click.option("--queue", "queue_name", default="default", show_default=True, help="The queue to drain.")
@click.option(
    "--pipelines",
    type=click.Path(file_okay=False, exists=True),
    help="Folder of manifests (NAME.yaml) for runs submitted by name; also first on sys.path for call: modules.",
)
@click.option("--workdir", type=click.Path(file_okay=False), help="Where phases run (default: the current folder).")
@click.option("--log-dir", type=click.Path(file_okay=False), help="Where shell phases' logs go.")
@click.option(
    "--log-cap", metavar="SIZE", help="What the store keeps of each attempt's output, its tail (default 1MiB; 0: none)."
)
@click.option(
    "--grace", default="30s", show_default=True, metavar="DURATION", help="SIGTERM: time to finish the phase."
)
@click.option(
    "--max-recoveries",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="A run whose worker died more often than this is dead (with the reason).",
)
@click.option("--lease-ttl", default="30s", show_default=True, metavar="DURATION", help="Heartbeat expiry.")
@click.option("--poll", default="2s", show_default=True, metavar="DURATION", help="Idle polling (NOTIFY wakes sooner).")
@click.option("--burst", is_flag=True, help="Exit when nothing is left to claim (batch jobs, CI).")
@click.option("--max-runs", type=click.IntRange(min=1), help="Exit after this many runs.")
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Phases of one run side by side, as `phaselog run --max-parallel` (a manifest with needs:).",
)
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option("--summary-file", type=click.Path(dir_okay=False), hidden=True)  # a pool's child: its summary goes here
def worker(
    call: Call,
    concurrency: int,
    queue_name: str,
    pipelines: str | None,
    workdir: str | None,
    log_dir: str | None,
    log_cap: str | None,
    grace: str,
    max_recoveries: int,
    lease_ttl: str,
    poll: str,
    burst: bool,
    max_runs: int | None,
    max_parallel: int,
    quiet: bool,
    summary_file: str | None,
) -> Result | None:
    """Claim queued runs and run them (FOR UPDATE SKIP LOCKED; one run per process at a time).

    Runs resume at their first incomplete phase; a run whose worker died is recovered (at once
    when that process is gone on this host, else when its heartbeat expires). SIGTERM finishes
    the current phase (interrupts it after --grace), releases the run and exits.

    \b
    Example:
      phaselog worker --store postgresql://db/phaselog --concurrency 4 --pipelines /srv/pipelines
    """

    from phaselog.runner.queue import check_queue_name  # lazy: `--help` loads every area; the runner's queue is ~47 ms

    check_queue_name(queue_name)
    secs = {k: parse_duration(v, field=k).total_seconds() for k, v in (("grace", grace), ("lease_ttl", lease_ttl))}
    secs["poll"] = parse_duration(poll, field="poll").total_seconds()
    if secs["lease_ttl"] < 1:
        raise UsageError("--lease-ttl must be at least 1s", field="lease_ttl", rule="range")
    echo = None if quiet else (lambda text: print(f"phaselog worker: {text}", file=sys.stderr, flush=True))
    store = call.ledger.store  # opened (and refused unless PostgreSQL) before any child starts
    from phaselog.stores.sql.queue.rows import require_postgres  # lazy: only `phaselog worker`

    require_postgres(store)
    from phaselog.runner.prelude import default_workdir  # lazy: only `phaselog worker` runs phases (the engine)
    from phaselog.runner.worker import Worker, WorkerOptions  # lazy: only `phaselog worker` runs phases (the worker)

    options = WorkerOptions(
        queue=queue_name,
        pipelines=Path(pipelines).absolute() if pipelines else None,
        workdir=default_workdir(workdir),
        log_dir=Path(log_dir).absolute() if log_dir else None,
        log_cap=parse_log_cap(log_cap, field="log_cap") if log_cap is not None else None,
        ttl=secs["lease_ttl"],
        grace=secs["grace"],
        max_recoveries=max_recoveries,
        poll=max(0.05, secs["poll"]),
        burst=burst,
        max_runs=max_runs,
        max_parallel=max_parallel,
    )
    if concurrency > 1:
        from phaselog.runner.pool import run_pool  # lazy: only `phaselog worker --concurrency` runs a pool of workers

        done = run_pool(store.url, options, concurrency, quiet=quiet, echo=echo or (lambda _t: None))
        code = done["exit_code"]
        return Result(
            {"concurrency": concurrency, **done},
            exit_code=code,
            error=f"a worker process exited {code}",
            error_code="worker_failed",
        )
    w = Worker(store.url, options, echo=echo)
    code = w.serve()
    summary = {"worker": w.worker_id, "runs": w.runs, "outcomes": w.counts, "exit_code": code}
    if summary_file is not None:  # a child of --concurrency N: the pool prints one document for all
        Path(summary_file).write_text(json.dumps(summary), encoding="utf-8")
        sys.exit(code)
    return Result(summary, exit_code=code, error=f"the worker exited {code}", error_code="worker_failed")
