"""State commands: status, resume, verify, pipelines.

Registered on the ``phaselog`` group by :mod:`phaselog.cli` (right after the seed's commands, so
``phaselog --help`` lists them in the order of a pipeline's life).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from phaselog.cli import CONTEXT, Output, _fail, _ledger, _pipeline, _table, cli, pipeline_options, store_options
from phaselog.errors import PhaselogError


# -- status / resume / verify -----------------------------------------------------------------------
def _status_table(d: dict[str, Any]) -> None:
    rows = [
        [p["ordinal"], p["phase"], p["state"], p["latest_attempt"], p["latest_timestamp"], p["reason"] or ""]
        for p in d["phases"]
    ]
    _table(
        rows,
        ["#", "phase", "state", "attempt", "latest_timestamp", "note"],
        title=f"run {d['run_id']} ({d['pipeline']}) next: {d['next_phase'] or '— done'}",
    )
    for w in d.get("warnings", []):
        click.echo(f"warning: {w}")


@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@pipeline_options
@store_options
def status(
    ticket_id: str,
    run_id: str,
    pipeline_name: str | None,
    pipeline_file: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Derived state of every phase (pending, completed, failed, stale) and the next phase.

    \b
    Example:
      phaselog status --ticket-id PROJ-1234 --run-id a1b2c3d4 --format table
    """
    out = Output(fmt, correlation_id)
    try:
        ledger = _ledger(root, store_url)
        st = ledger.status(ticket_id, run_id, pipeline=_pipeline(ledger, pipeline_name, pipeline_file))
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)
    out.emit({"success": True, **st.to_json()}, _status_table)


@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--skip-to", required=True, metavar="PHASE", help="Phase name or ordinal to skip to.")
@click.option("--artifacts-root", type=click.Path(file_okay=False), help="Also require every artifact to exist here.")
@pipeline_options
@store_options
def resume(
    ticket_id: str,
    run_id: str,
    skip_to: str,
    artifacts_root: str | None,
    pipeline_name: str | None,
    pipeline_file: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """May the run skip to PHASE? Exit 0 if every earlier phase is done, current and valid; else 1
    with every blocking phase and its reason.

    \b
    Example:
      phaselog resume --ticket-id PROJ-1234 --run-id a1b2c3d4 --skip-to create_pr
    """
    out = Output(fmt, correlation_id)
    try:
        ledger = _ledger(root, store_url)
        decision = ledger.can_skip_to(
            ticket_id,
            run_id,
            skip_to,
            pipeline=_pipeline(ledger, pipeline_name, pipeline_file),
            artifacts_root=artifacts_root,
        )
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)

    def table(d: dict[str, Any]) -> None:
        verdict = "allowed" if d["allowed"] else "NOT allowed"
        _table(
            [[b["phase"], b["state"], b["reason"]] for b in d["blockers"]],
            ["blocking phase", "state", "reason"],
            title=f"skip to {d['skip_to']}: {verdict}",
            empty="",
        )
        flight = d.get("in_progress")
        if flight:
            note = f" ({flight['abandoned_reason']})" if flight.get("abandoned") else ""
            click.echo(
                f"{d['skip_to']} attempt {flight['attempt_number']} is in progress{note}: "
                f"restart from step {flight['resume_from_step']}"
            )

    out.emit({"success": True, **decision.to_json()}, table)
    if not decision.allowed:
        sys.exit(1)


@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--run-id", help="Only this run.")
@store_options
def verify(
    ticket_id: str,
    run_id: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Recompute content hashes and links (prev_hash, basis); report tampering. Exit 1 if any.

    \b
    Example:
      phaselog verify --ticket-id PROJ-1234
    """
    out = Output(fmt, correlation_id)
    try:
        report = _ledger(root, store_url).verify(ticket_id, run_id)
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)

    def table(d: dict[str, Any]) -> None:
        verdict = "ok" if d["ok"] else f"{len(d['problems'])} problem(s)"
        _table(
            [[p["path"], p["rule"], p["message"]] for p in d["problems"]],
            ["path", "rule", "problem"],
            title=f"verified {d['checked']} record(s): {verdict}",
            empty="",
        )

    out.emit({"success": True, "ok": report.ok, "checked": report.checked, "problems": report.problems}, table)
    if not report.ok:
        sys.exit(1)


# -- pipelines -----------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.argument("name", required=False)
@click.option(
    "--root",
    type=click.Path(file_okay=False),
    envvar="PHASELOG_HOME",
    help="Store root (its pipelines/ folder is searched).",
)
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="json", show_default=True)
def pipelines(name: str | None, root: str | None, fmt: str) -> None:
    """List the pipelines found, or show one (phases, approval gates, payload schemas).

    \b
    Examples:
      phaselog pipelines
      phaselog pipelines ticket-pipeline --format table
    """
    from phaselog.pipelines import available_pipelines, check_schemas, find_pipeline
    from phaselog.stores.files import default_root

    out = Output(fmt, None)
    base = root or str(default_root())
    try:
        found = [find_pipeline(name, base)] if name else available_pipelines(base)
        for p in found:
            if name:
                check_schemas(p)
    except PhaselogError as exc:
        _fail(exc)

    def describe(p: Any, full: bool) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": p.name,
            "version": p.version,
            "description": p.description,
            "order": p.order,
            "manifest_hash": p.manifest_hash,
            "source": p.source,
            "phases": [
                {
                    "ordinal": ph.ordinal,
                    "name": ph.name,
                    "description": ph.description,
                    "requires_approval": ph.requires_approval,
                    **({"payload_schema": ph.payload_schema} if full else {}),
                }
                for ph in p.phases
            ],
        }
        return d

    data: dict[str, Any] = {"success": True}
    if name:
        data["pipeline"] = describe(found[0], True)
    else:
        data["pipelines"] = [describe(p, False) for p in found]

    def table(d: dict[str, Any]) -> None:
        for p in [d["pipeline"]] if "pipeline" in d else d["pipelines"]:
            _table(
                [
                    [ph["ordinal"], ph["name"], "yes" if ph["requires_approval"] else "", ph["description"]]
                    for ph in p["phases"]
                ],
                ["#", "phase", "approval", "description"],
                title=f"{p['name']} {p['version']} ({p['source']})",
            )

    out.emit(data, table)
