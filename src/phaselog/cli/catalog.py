"""Listing what a store holds: ``phaselog tickets`` and ``phaselog runs --ticket-id T``.

Thin commands over :class:`phaselog.views.catalog.Catalog` (the dashboard's Tickets page uses the same
summaries): each run is read once, as one snapshot, never record by record.
"""

from __future__ import annotations

import json
from typing import Any

import click

from phaselog.cli._render import lines, short_time, table
from phaselog.cli._scaffold import Call, Result, cli, command
from phaselog.model.ids import run_label, validate_ticket_id
from phaselog.views import results as views


def _tickets_table(d: dict[str, Any]) -> str:

    rows = [
        [
            t["ticket_id"],
            t["pipeline"] or "",
            t["state"],
            t["runs"],
            short_time(t["last_activity"]),
            # A name, or the UUID's first digits: `phaselog runs --ticket-id T` shows it whole.
            run_label(t["latest_run"], t["latest_run_name"], short=True) if t["latest_run"] else "",
        ]
        for t in d["tickets"]
    ]
    return table(
        rows,
        ["ticket", "pipeline", "state", "runs", "last activity", "latest run"],
        title=f"{d['count']} tickets (UTC)",
    )


def _params_cell(params: dict[str, Any] | None) -> str:
    return " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted((params or {}).items()))


def _runs_table(d: dict[str, Any]) -> str:

    pipelines = {r["pipeline"] for r in d["runs"]}
    shared = len(pipelines) == 1  # the usual case: the pipeline goes in the title, the run id fits
    with_params = any(r.get("params") for r in d["runs"])  # the column only when a run has parameters
    rows = [
        [
            run_label(r["run_id"], r["run_name"]),
            *([] if shared else [r["pipeline"] or ""]),
            r["state"],
            short_time(r["last_activity"]),
            *([_params_cell(r.get("params"))] if with_params else []),
        ]
        for r in d["runs"]
    ]
    headers = ["run", *([] if shared else ["pipeline"]), "state", "last activity", *(["params"] if with_params else [])]
    title = f"ticket {d['ticket_id']}" + (f" ({next(iter(pipelines))})" if shared and None not in pipelines else "")
    return table(rows, headers, title=f"{title}: {d['count']} runs (UTC)", empty=d.get("message") or "nothing to show")


@command(cli, section="Tickets and pipelines")
@click.option(
    "--state",
    metavar="STATE",
    help="Only tickets whose latest run is in this state: running, stuck, awaiting_approval, failed, "
    "pending, complete, damaged.",
)
def tickets(call: Call, state: str | None) -> Result:
    """Every ticket of the store: pipeline, state and last activity of its latest run, how many runs.

    Newest activity first; the latest run is shown by the id it was given (`nightly-1`).
    `phaselog approvals` lists every phase waiting for a person, in any run.

    \b
    Examples:
      phaselog tickets --format table
      phaselog tickets --state awaiting_approval
    """
    from phaselog.views.catalog import (  # lazy: `--help` loads every area; only `tickets` and `runs` need it
        Catalog,
        check_run_state,
    )

    if state is not None:
        check_run_state(state)  # before the store is opened: bad input is refused as such
    return Result(views.tickets(Catalog().tickets(call.ledger, state=state)), _tickets_table)


def _approvals_table(d: dict[str, Any]) -> str:

    rows = [
        [
            a["ticket_id"],
            run_label(a["run_id"], a["run_name"]),
            a["phase"] if a.get("waiting_for", "approval") == "approval" else f"{a['phase']} ({a['waiting_for']})",
            a["attempt_number"],
            short_time(a["since"]),
            a["content_hash"][:12],
        ]
        for a in d["approvals"]
    ]
    out = table(
        rows,
        ["ticket", "run", "phase", "attempt", "waiting since", "content hash"],
        title=f"approvals: {d['count']} waiting (UTC, oldest first)",
        empty="nothing awaits approval",
    )
    return lines(out, *(f"could not read {p}" for p in d["problems"]))


@command(cli, section="Gates")
@click.option("--ticket-id", help="Only this ticket's runs.")
def approvals(call: Call, ticket_id: str | None) -> Result:
    """Every phase waiting for a person, oldest first, across tickets: a gate's judgement, or input.

    One line each: ticket, run, phase, attempt, since when, and the content hash of the checkpoint
    that waits (`phaselog approve` judges it). Runs that cannot be read are listed under `problems`.

    \b
    Examples:
      phaselog approvals --format table
      phaselog approvals --ticket-id VID-7
    """
    from phaselog.ledger.gates import approval_queue  # lazy: only `phaselog approvals` needs the gates (~30 ms)

    tickets = [validate_ticket_id(ticket_id)] if ticket_id is not None else None
    queue, problems = approval_queue(call.ledger, tickets)
    return Result(views.approvals(queue, problems), _approvals_table)


@command(cli, section="Tickets and pipelines")
@click.option("--ticket-id", required=True)
def runs(call: Call, ticket_id: str) -> Result:
    """Every run of a ticket: its id as given, pipeline, state, next phase, last activity.

    Newest activity first. `run_name` is the run id as it was given (`nightly-1`), `run_id` its UUID.

    \b
    Example:
      phaselog runs --ticket-id CHURN-7 --format table
    """
    from phaselog.views.catalog import Catalog  # lazy: `--help` loads every area; only `tickets` and `runs` need it

    ledger = call.ledger
    ticket_id = validate_ticket_id(ticket_id)
    found = Catalog().runs(ledger, ticket_id)
    known = bool(found) or ledger.marker(ticket_id) is not None
    return Result(views.runs(ticket_id, found, known=known), _runs_table)
