"""State commands: status, resume, verify, pipelines.

Registered on the ``phaselog`` group right after the seed's commands, so ``phaselog --help``
lists them in the order of a pipeline's life.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

import click

from phaselog.cli._render import lines, short_time, table, terminal_width, without_path, write
from phaselog.cli._scaffold import Call, Result, cli, command, envelope
from phaselog.model.errors import UsageError
from phaselog.model.ids import run_title
from phaselog.views import results as views
from phaselog.views.graph import graph_view, needs_cells, shape_lines, status_json


# -- status / resume / verify -----------------------------------------------------------------------
def _named(d: dict[str, Any]) -> str:
    """A run as people call it: ``nightly-1 (8f9bade3…)``, or its UUID when it has no name."""

    return run_title(str(d["run_id"]), d.get("run_name"))


def _status_table(d: dict[str, Any]) -> str:
    needs = needs_cells(d)  # a "needs" column only for a pipeline that is not a chain (D300)
    rows = [
        [
            p["ordinal"],
            p["phase"],
            *([needs.get(p["phase"], "")] if needs is not None else []),
            p["state"],
            p["latest_attempt"],
            short_time(p["latest_timestamp"]),
            p["reason"] or "",
        ]
        for p in d["phases"]
    ]
    params = d.get("params")  # the run's parameters, when its pipeline declares them
    return lines(
        f"note: {d['message']}" if d.get("message") else "",
        table(
            rows,
            ["#", "phase", *(["needs"] if needs is not None else []), "state", "attempt", "latest (UTC)", "note"],
            title=f"run {_named(d)} ({d['pipeline']}) next: {d['next_phase'] or '— done'}",
        ),
        *(shape_lines(d["graph"], terminal_width() - 2) if needs is not None else []),
        "params: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(params.items())) if params else "",
        *[f"warning: {w}" for w in d.get("warnings", [])],
    )


@command(cli, pipeline=True, section="Resume")
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="Where the run's artifacts are checked against their recorded SHA-256 (default: here, as `run`).",
)
@click.option("--watch", is_flag=True, help="Print the status again each time the run changes, until Ctrl-C.")
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    metavar="SECONDS",
    help="With --watch: how often to look for a change (one cheap stamp read).",
)
def status(call: Call, ticket_id: str, run_id: str, workdir: str | None, watch: bool, interval: float) -> Result | None:
    """Derived state of every phase (pending, completed, failed, stale) and the next phase.

    A completed phase whose recorded artifacts changed (or are gone) under --workdir is stale,
    exactly as `explain` and `run` judge it. With --watch the status is printed again whenever
    it changes: on a terminal with --format table the table is redrawn in place; otherwise each new
    table (or, as JSON, each new status on one line) is printed once. Ctrl-C ends it (exit 130).

    \b
    Examples:
      phaselog status --ticket-id PROJ-1234 --run-id a1b2c3d4 --format table
      phaselog status --ticket-id PROJ-1234 --run-id a1b2c3d4 --format table --watch
    """
    root = workdir if workdir is not None else os.getcwd()
    if watch:
        _watch(call, ticket_id, run_id, root, interval)
        return None
    st = call.ledger.status(ticket_id, run_id, pipeline=call.pipeline, artifacts_root=root)
    return Result(status_json(st), _status_table)


_REDRAW = "\x1b[H\x1b[2J"  # cursor home, clear the screen


def _watch(call: Call, ticket_id: str, run_id: str, root: str, interval: float) -> None:
    """``status --watch``: print each new status (views.live.watch_status) until Ctrl-C (exit 130)."""
    from phaselog.views.live import watch_status  # lazy: `--help` loads every area

    redraw = call.fmt == "table" and sys.stdout.isatty()
    changes = watch_status(
        call.ledger,
        ticket_id,
        run_id,
        interval=interval,
        stop=threading.Event(),
        pipeline=call.pipeline,
        artifacts_root=root,
    )
    try:
        for data in changes:
            result = Result(data, _status_table)
            if call.fmt == "table":
                text = call.render(result)
                footer = f"watching every {interval:g}s (Ctrl-C stops)\n" if redraw else "\n"
                write((_REDRAW if redraw else "") + text + footer)
            else:  # JSON Lines: one status per line, as it changes
                body = {**envelope(result), "correlation_id": call.correlation_id}
                write(json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n")
    except KeyboardInterrupt:
        changes.close()
        sys.exit(130)  # interrupted by its user: the usual way a watch ends, never a traceback


def _skip_table(d: dict[str, Any]) -> str:
    verdict = "allowed" if d["allowed"] else "NOT allowed"
    out = [
        table(
            [[b["phase"], b["state"], b["reason"]] for b in d["blockers"]],
            ["blocking phase", "state", "reason"],
            title=f"skip to {d['skip_to']}: {verdict}",
            empty="",
        )
    ]
    flight = d.get("in_progress")
    if flight:
        from phaselog.ledger.status import resume_advice  # lazy: `--help` loads every area

        note = f" ({flight['abandoned_reason']})" if flight.get("abandoned") else ""
        out.append(f"{d['skip_to']} attempt {flight['attempt_number']} is in progress{note}: {resume_advice(flight)}")
    return lines(*out)


@command(cli, pipeline=True, section="Resume")
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--skip-to", required=True, metavar="PHASE", help="Phase name or ordinal to skip to.")
@click.option("--artifacts-root", type=click.Path(file_okay=False), help="Also require every artifact to exist here.")
def resume(call: Call, ticket_id: str, run_id: str, skip_to: str, artifacts_root: str | None) -> Result:
    """May the run skip to PHASE? Exit 0 if every phase it needs (every earlier one in a chain) is done,
    current and valid; else 1 with every blocking phase and its reason.

    \b
    Example:
      phaselog resume --ticket-id PROJ-1234 --run-id a1b2c3d4 --skip-to create_pr
    """
    decision = call.ledger.can_skip_to(
        ticket_id, run_id, skip_to, pipeline=call.pipeline, artifacts_root=artifacts_root
    )
    why = "; ".join(f"{b.phase}: {b.reason}" for b in decision.blockers)
    return Result(
        views.skip_decision(decision),
        _skip_table,
        exit_code=0 if decision.allowed else 1,
        error=f"cannot skip to {decision.target}" + (f" ({why})" if why else ""),
        error_code="blocked",
    )


def _verify_table(d: dict[str, Any]) -> str:
    verdict = "ok" if d["ok"] else f"{len(d['problems'])} problem(s)"
    return table(
        [[p["path"], p["rule"], without_path(p["message"], p["path"])] for p in d["problems"]],
        ["path", "rule", "problem"],
        title=f"verified {d['checked']} record(s): {verdict}",
        empty="",
    )


@command(cli, section="Audit")
@click.option("--ticket-id", help="The ticket to verify (required unless --against).")
@click.option("--run-id", help="Only this run.")
@click.option(
    "--against",
    help="A witness (a directory, or a store URL): check every head anchored there against today's history "
    "(docs/anchoring.md).",
)
@click.option("--key", type=click.Path(dir_okay=False), help="--against: the public key every head must be signed by.")
def verify(call: Call, ticket_id: str | None, run_id: str | None, against: str | None, key: str | None) -> Result:
    """Recompute content hashes and links (prev_hash, basis); report tampering. Exit 1 if any.

    With --against WITNESS: check that today's history extends every signed head in the witness (a
    directory or another store's URL; a removed or rewritten entry, the newest included, is reported
    with the head it broke).

    \b
    Example:
      phaselog verify --ticket-id PROJ-1234
      phaselog verify --against /mnt/witness --key anchor.key.pub
    """
    if against is not None:
        from phaselog.cli.proofs import verify_against  # lazy: signatures and trees only for --against

        return verify_against(call, against, key)
    if ticket_id is None:
        raise UsageError("--ticket-id: required (unless --against DIR)", field="--ticket-id", rule="required")
    if key is not None:
        raise UsageError("--key: only with --against", field="--key", rule="requires")
    report = call.ledger.verify(ticket_id, run_id)
    return Result(
        views.verify_report(report),
        _verify_table,
        exit_code=0 if report.ok else 1,
        error=f"verify found {len(report.problems)} problem(s)",
        error_code="corrupt",  # what verify finds is damage: records that are not what was written
    )


# -- pipelines -----------------------------------------------------------------------------------------
def _pipelines_table(d: dict[str, Any]) -> str:
    return lines(*[_pipeline_table(p) for p in ([d["pipeline"]] if "pipeline" in d else d["pipelines"])])


def _pipeline_table(p: dict[str, Any]) -> str:
    graph = p.get("graph")  # `pipelines NAME`: its shape, and what each phase needs when it is not a chain
    needs = needs_cells(p) if graph and not graph["is_chain"] else None
    return lines(
        table(
            [
                [
                    ph["ordinal"],
                    ph["name"],
                    *([needs.get(ph["name"], "")] if needs is not None else []),
                    "yes" if ph["requires_approval"] else "",
                    ph["description"],
                ]
                for ph in p["phases"]
            ],
            ["#", "phase", *(["needs"] if needs is not None else []), "approval", "description"],
            title=f"{p['name']} {p['version']} ({p['source']})",
        ),
        *(shape_lines(graph, terminal_width() - 2) if graph else []),
    )


@command(
    cli,
    section="Tickets and pipelines",
    store_help=None,
    correlation=False,
    root_help="Store root (its pipelines/ folder is searched).",
    format_help="",
)
@click.argument("name", required=False)
def pipelines(call: Call, name: str | None) -> Result:
    """List the pipelines found, or show one (by name, or a manifest file): its phases, what each
    needs, approval gates, payload schemas, and its graph (the waves of phases that may run side by side).

    \b
    Examples:
      phaselog pipelines
      phaselog pipelines ticket-pipeline --format table
      phaselog pipelines examples/video-dag.yaml --format table
    """
    from phaselog.model.pipelines import (  # lazy: `--help` loads every area
        available_pipelines,
        check_schemas,
        find_pipeline,
        load_manifest,
    )
    from phaselog.stores.files.store import default_root  # lazy: `--help` loads every area

    base = call.root or str(default_root())
    if name:
        is_file = name.endswith((".yaml", ".yml", ".json")) or os.sep in name
        found = load_manifest(name) if is_file else find_pipeline(name, base)
        check_schemas(found)
        shown = {**views.pipeline(found, full=True), "graph": graph_view(found).to_json()}
        return Result({"pipeline": shown}, _pipelines_table)
    return Result({"pipelines": [views.pipeline(p, full=False) for p in available_pipelines(base)]}, _pipelines_table)
