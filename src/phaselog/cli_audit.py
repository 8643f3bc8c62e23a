"""Audit-trail commands: progress, approve, reject, init, decisions, history, diff, fork, doctor.

Registered on the ``phaselog`` group by :mod:`phaselog.cli`; same conventions (JSON by default,
``--format table``, typed errors → JSON + exit code).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from phaselog.cli import (
    CONTEXT,
    Output,
    _attempt,
    _fail,
    _ledger,
    _pipeline,
    _table,
    cli,
    pipeline_options,
    store_options,
)
from phaselog.errors import PhaselogError, UsageError
from phaselog.ids import normalize_run_id

EVENT_CHOICES = ["start", "step", "complete", "fail", "skip"]


def _read_output(output_file: str | None, output: str | None) -> bytes | None:
    if output_file and output:
        raise UsageError("give --output-file or --output, not both", field="output")
    if output is not None:
        if output != "-":
            raise UsageError("--output takes '-' (read standard input); use --output-file for a file", field="output")
        return sys.stdin.buffer.read()
    if output_file is not None:
        try:
            with open(output_file, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise UsageError(f"--output-file: cannot read {output_file}: {exc.strerror}", field="output_file") from None
    return None


# -- progress ---------------------------------------------------------------------------------------
@cli.group(invoke_without_command=True, context_settings=CONTEXT)
@click.option("--ticket-id")
@click.option("--run-id")
@click.option("--phase", help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="Default: the attempt in flight (for start: the next one).")
@click.option("--event", type=click.Choice(EVENT_CHOICES), help="What happened.")
@click.option("--step", type=click.IntRange(min=0), help="Step number within the attempt.")
@click.option("--output-file", type=click.Path(dir_okay=False), help="File holding the accumulated output so far.")
@click.option("--output", metavar="-", help="'-': read the accumulated output from standard input.")
@click.option("--tokens", type=click.IntRange(min=0), help="Cumulative token count so far.")
@click.option("--provider", metavar="NAME", help="Model or service provider.")
@click.option("--status", "status_text", metavar="TEXT", help="Free-text task status.")
@click.option("--pid", type=int, help="With start: the pipeline's process id (default: the parent of this command).")
@pipeline_options
@store_options
@click.pass_context
def progress(
    ctx: click.Context,
    ticket_id: str | None,
    run_id: str | None,
    phase: str | None,
    attempt: int | None,
    event: str | None,
    step: int | None,
    output_file: str | None,
    output: str | None,
    tokens: int | None,
    provider: str | None,
    status_text: str | None,
    pid: int | None,
    pipeline_name: str | None,
    pipeline_file: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Append a progress event to the attempt in flight (seed 003's mid-execution checkpoint).

    \b
    Examples:
      phaselog progress --ticket-id T --run-id R --phase implement --event start
      phaselog progress --ticket-id T --run-id R --phase implement --event step --step 2 \\
        --tokens 1200 --output-file out.txt
      phaselog progress show --ticket-id T --run-id R --phase implement
    """
    if ctx.invoked_subcommand is not None:
        return
    out = Output(fmt, correlation_id)
    try:
        missing = [
            n
            for n, v in (("--ticket-id", ticket_id), ("--run-id", run_id), ("--phase", phase), ("--event", event))
            if v is None
        ]
        if missing:
            raise UsageError(
                f"Missing option(s): {', '.join(missing)}",
                field=missing[0].strip("-").replace("-", "_"),
                rule="required",
            )
        assert ticket_id is not None
        assert run_id is not None
        assert phase is not None
        assert event is not None
        import os

        ledger = _ledger(root, store_url)
        ev = ledger.progress(
            ticket_id,
            run_id,
            phase,
            event,
            attempt=_attempt(attempt),
            step=step,
            output=_read_output(output_file, output),
            tokens=tokens,
            provider=provider,
            status=status_text,
            pid=pid if pid is not None else os.getppid(),
            pipeline=_pipeline(ledger, pipeline_name, pipeline_file),
        )
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)
    data = {"success": True, "event": _event_json(ev), "correlation_id": out.correlation_id}
    out.emit(data, lambda d: _events_table([d["event"]]))


def _event_json(ev: Any) -> dict[str, Any]:
    d: dict[str, Any] = ev.to_json()
    d.pop("output", None)  # the text can be 8 MiB; its hash and length identify it
    d["content_hash"] = ev.content_hash
    return d


def _events_table(events: list[dict[str, Any]]) -> None:
    _table(
        [
            [
                e["phase"],
                e["attempt_number"],
                e["seq"],
                e["event"],
                e["step"],
                e["tokens"],
                e["elapsed_sec"],
                (e["output_sha256"] or "")[:12],
                e["timestamp"],
            ]
            for e in events
        ],
        ["phase", "attempt", "seq", "event", "step", "tokens", "elapsed s", "output", "at"],
    )


@progress.command("show", context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--phase", required=True, help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="Default: the attempt in flight.")
@click.option("--all", "show_all", is_flag=True, help="Every event of the attempt, not just the latest.")
@click.option("--with-output", is_flag=True, help="Include the accumulated output text.")
@pipeline_options
@store_options
def progress_show(
    ticket_id: str,
    run_id: str,
    phase: str,
    attempt: int | None,
    show_all: bool,
    with_output: bool,
    pipeline_name: str | None,
    pipeline_file: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Show the latest progress event of the attempt in flight (seed 003's Load), or all of them.

    \b
    Example:
      phaselog progress show --ticket-id T --run-id R --phase implement --all --format table
    """
    out = Output(fmt, correlation_id)
    try:
        ledger = _ledger(root, store_url)
        events = ledger.progress_events(
            ticket_id, run_id, phase, _attempt(attempt), pipeline=_pipeline(ledger, pipeline_name, pipeline_file)
        )
        if not events:
            raise PhaselogError("no progress events")
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)

    def js(ev: Any) -> dict[str, Any]:
        d = _event_json(ev)
        if with_output:
            d["output"] = ev.output
        return d

    data: dict[str, Any] = {"success": True, "event": js(events[-1])}
    if show_all:
        data["events"] = [js(e) for e in events]
    out.emit(data, lambda d: _events_table(d.get("events") or [d["event"]]))


# -- approvals ----------------------------------------------------------------------------------------
def _judge_command(decision: str) -> Any:
    verb = "Approve" if decision == "approve" else "Reject"

    @click.option("--ticket-id", required=True)
    @click.option("--run-id", required=True)
    @click.option("--phase", required=True, help="A phase with requires_approval: true.")
    @click.option("--attempt", type=int, help="Default: the latest completed attempt.")
    @click.option("--by", required=True, metavar="NAME", help="Who decides (recorded).")
    @click.option("--comment", metavar="TEXT", help="Why (recorded).")
    @pipeline_options
    @store_options
    def command(
        ticket_id: str,
        run_id: str,
        phase: str,
        attempt: int | None,
        by: str,
        comment: str | None,
        pipeline_name: str | None,
        pipeline_file: str | None,
        root: str | None,
        store_url: str | None,
        correlation_id: str | None,
        fmt: str,
    ) -> None:
        out = Output(fmt, correlation_id)
        try:
            ledger = _ledger(root, store_url)
            approval, warnings = ledger.approve(
                ticket_id,
                run_id,
                phase,
                by=by,
                comment=comment,
                attempt=_attempt(attempt),
                decision=decision,
                pipeline=_pipeline(ledger, pipeline_name, pipeline_file),
            )
            state = ledger.status(ticket_id, run_id).phase(approval.phase).state
        except PhaselogError as exc:
            _fail(exc, out.correlation_id)
        data = {
            "success": True,
            "approval": {**approval.to_json(), "content_hash": approval.content_hash},
            "phase_state": state,
            "warnings": warnings,
        }
        out.emit(
            data,
            lambda d: _table(
                [
                    [
                        d["approval"]["phase"],
                        d["approval"]["attempt_number"],
                        d["approval"]["decision"],
                        d["approval"]["by"],
                        d["phase_state"],
                    ]
                ],
                ["phase", "attempt", "decision", "by", "phase state now"],
            ),
        )

    command.__doc__ = (
        f"{verb} a gated phase's checkpoint; the judgement is bound to its content hash.\n\n"
        f"    \\b\n    Example:\n      phaselog {decision} --ticket-id T --run-id R --phase proposal --by ana"
        + (' --comment "too long"' if decision == "reject" else "")
    )
    return cli.command(decision, context_settings=CONTEXT)(command)


approve = _judge_command("approve")
reject = _judge_command("reject")


# -- ticket marker ---------------------------------------------------------------------------------
@cli.command("init", context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--title", required=True, metavar="TEXT")
@click.option("--pipeline", "pipeline_name", metavar="NAME", help="The ticket's pipeline (default ticket-pipeline).")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="Metadata; repeatable.")
@store_options
def init_cmd(
    ticket_id: str,
    title: str,
    pipeline_name: str | None,
    meta: tuple[str, ...],
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Record a ticket's identity once (title, pipeline, metadata); changes become revisions.

    \b
    Example:
      phaselog init --ticket-id VID-7 --title "Launch video" --pipeline video-pipeline --meta owner=ana
    """
    out = Output(fmt, correlation_id)
    try:
        pairs = {}
        for item in meta:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise UsageError(f"--meta: expected KEY=VALUE (got {item!r})", field="meta", rule="key_value")
            pairs[key] = value
        marker, changed = _ledger(root, store_url).init_ticket(
            ticket_id, title=title, pipeline=pipeline_name, meta=pairs
        )
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)
    data = {"success": True, "changed": changed, "marker": {**marker.to_json(), "content_hash": marker.content_hash}}
    out.emit(
        data,
        lambda d: _table(
            [[k, v] for k, v in d["marker"].items() if k != "kind"],
            ["field", "value"],
            title="new revision" if d["changed"] else "unchanged",
        ),
    )


# -- decisions / history ------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@store_options
def decisions(ticket_id: str, root: str | None, store_url: str | None, correlation_id: str | None, fmt: str) -> None:
    """The ticket's merged decision log across runs (seed 002's decision_log.json shape).

    \b
    Example:
      phaselog decisions --ticket-id VID-7
    """
    out = Output(fmt, correlation_id)
    try:
        log = _ledger(root, store_url).decisions(ticket_id)
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)
    out.emit(
        {"success": True, **log},
        lambda d: _table(
            [
                [
                    x["decision_id"],
                    x.get("category"),
                    x.get("subject"),
                    x.get("selected"),
                    x.get("reason"),
                    f"{x['source']['phase']} a{x['source']['attempt_number']}",
                ]
                for x in d["decisions"]
            ],
            ["id", "category", "subject", "selected", "reason", "from"],
            title=f"decisions of {ticket_id}",
        ),
    )


@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--run-id", help="Only this run.")
@click.option("--phase", help="Only this phase (name or ordinal).")
@store_options
def history(
    ticket_id: str,
    run_id: str | None,
    phase: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Every record in time order: checkpoints, failed attempts, progress, approvals, marker revisions.

    \b
    Example:
      phaselog history --ticket-id PROJ-1234 --format table
    """
    out = Output(fmt, correlation_id)
    try:
        entries = _ledger(root, store_url).history(ticket_id, run_id, phase)
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)
    out.emit(
        {"success": True, "count": len(entries), "history": entries},
        lambda d: _table(
            [[e["at"], (e["run_id"] or "")[:8], e["kind"], e["summary"], (e["hash"] or "")[:12]] for e in d["history"]],
            ["at", "run", "kind", "what", "hash"],
            title=f"history of {ticket_id}",
        ),
    )


# -- diff / fork ---------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.argument("a", required=False)
@click.argument("b", required=False)
@click.option("--ticket-id", required=True)
@click.option("--run-id", help="With --phase: diff every consecutive pair of attempts.")
@click.option("--phase", help="With --run-id: the phase whose attempts to compare.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "text", "table"]),
    default="json",
    show_default=True,
    help="json, or readable text (table is the same as text).",
)
@click.option("--root", type=click.Path(file_okay=False), envvar="PHASELOG_HOME", help="Files store root.")
@click.option("--store", "store_url", metavar="URL", envvar="PHASELOG_STORE", help="Store URL.")
def diff(
    a: str | None,
    b: str | None,
    ticket_id: str,
    run_id: str | None,
    phase: str | None,
    fmt: str,
    root: str | None,
    store_url: str | None,
) -> None:
    """Field-level differences between two attempts (RUN:PHASE:ATTEMPT) or progress events
    (RUN:PHASE:ATTEMPT:SEQ), or between every consecutive attempt of a phase.

    \b
    Examples:
      phaselog diff --ticket-id T a1b2c3d4:implement:1 a1b2c3d4:implement:2
      phaselog diff --ticket-id T --run-id a1b2c3d4 --phase implement --format text
    """
    from phaselog.diff import render_text

    try:
        ledger = _ledger(root, store_url)
        if a is not None or b is not None:
            if a is None or b is None or run_id or phase:
                raise UsageError("give two references A B, or --run-id and --phase", field="ref")
            results = [ledger.diff(ticket_id, a, b)]
        elif run_id and phase:
            results = ledger.diff_phase(ticket_id, run_id, phase)
        else:
            raise UsageError("give two references A B, or --run-id and --phase", field="ref", rule="required")
    except PhaselogError as exc:
        _fail(exc)
    if fmt in ("text", "table"):
        click.echo("\n\n".join(render_text(r) for r in results) or "(fewer than two attempts)")
        return
    Output("json", None).emit({"success": True, "diffs": results})


@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True, help="The run to fork from.")
@click.option("--through", required=True, metavar="PHASE", help="Reuse checkpoints up to and including this phase.")
@click.option("--new-run-id", help="Id of the new run (default: a fresh UUID).")
@store_options
def fork(
    ticket_id: str,
    run_id: str,
    through: str,
    new_run_id: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Start a new run that reuses this run's checkpoints up to PHASE (validated first; lineage recorded).

    \b
    Example:
      phaselog fork --ticket-id VID-7 --run-id r1 --through script --new-run-id r2
    """
    out = Output(fmt, correlation_id)
    try:
        new_id, written = _ledger(root, store_url).fork(ticket_id, run_id, through=through, new_run_id=new_run_id)
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)
    data = {
        "success": True,
        "run_id": new_id,
        "forked_from": normalize_run_id(run_id),
        "checkpoints": [
            {"checkpoint_path": w.location, "phase": w.record.phase, "content_hash": w.record.content_hash}
            for w in written
        ],
    }
    out.emit(
        data,
        lambda d: _table(
            [[c["phase"], c["checkpoint_path"]] for c in d["checkpoints"]],
            ["phase", "reused as"],
            title=f"new run {d['run_id']}",
        ),
    )


# -- doctor --------------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", help="Only this ticket (default: every ticket).")
@click.option("--quarantine", is_flag=True, help="Move damaged files into <root>/quarantine/ (with a note each).")
@store_options
def doctor(
    ticket_id: str | None,
    quarantine: bool,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Report damaged files, leftover temp files, abandoned attempts and broken links. Exit 1 if any.

    \b
    Examples:
      phaselog doctor
      phaselog doctor --ticket-id PROJ-1234 --quarantine
    """
    from phaselog.doctor import doctor as run_doctor

    out = Output(fmt, correlation_id)
    try:
        rep = run_doctor(_ledger(root, store_url), ticket_id, quarantine=quarantine)
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)

    def table(d: dict[str, Any]) -> None:
        _table(
            [[f["kind"], f["path"], f["message"]] for f in d["findings"]],
            ["finding", "path", "detail"],
            title=f"{d['tickets']} ticket(s), {d['runs']} run(s): {'healthy' if d['healthy'] else 'needs attention'}",
        )
        for m in d["moved"]:
            click.echo(f"moved {m['from']} -> {m['to']}")

    out.emit({"success": True, **rep.to_json()}, table)
    if not rep.healthy:
        sys.exit(1)
