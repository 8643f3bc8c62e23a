"""Audit-trail commands: progress, approve, reject, init, decisions, history, diff, fork, doctor."""

from __future__ import annotations

import itertools
from typing import IO, Any

import click

from phaselog.cli._args import attempt as _attempt
from phaselog.cli._args import read_output, timestamp_opt
from phaselog.cli._render import TABLE_MAX_ROWS, lines, short_time, table, without_path
from phaselog.cli._scaffold import Call, Result, Streamed, cli, command
from phaselog.model.errors import NotFound, UsageError
from phaselog.model.ids import normalize_run_id, run_label, run_title
from phaselog.views import results as views

EVENT_CHOICES = ["start", "step", "complete", "fail", "skip"]


# -- progress ---------------------------------------------------------------------------------------
def _events_table(events: list[dict[str, Any]]) -> str:
    phases = sorted({e["phase"] for e in events})
    return table(
        [
            [
                e["attempt_number"],
                e["seq"],
                e["event"],
                e["step"],
                e["tokens"],
                e["elapsed_sec"],
                (e["output_sha256"] or "")[:12],
                short_time(e["timestamp"]),
            ]
            for e in events
        ],
        ["attempt", "seq", "event", "step", "tokens", "secs", "output", "at"],
        title=f"progress of {', '.join(phases)} (UTC)",
    )


@command(cli, pipeline=True, as_group=True, writes=True, section="Resume", invoke_without_command=True)
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
@click.option(
    "--started-at",
    metavar="ISO",
    help="With start: when the attempt's work started, if before now (ISO-8601 with timezone); default now.",
)
@click.option(
    "--pid",
    type=int,
    help="With start: the process that runs the phase and lives until its checkpoint, e.g. --pid $$ in the "
    "script that runs it. Without it no process is recorded, and the attempt is judged abandoned only "
    "when its last event is too old (a short-lived caller such as a make recipe line cannot vouch for it).",
)
def progress(
    call: Call,
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
    started_at: str | None,
    pid: int | None,
) -> Result | None:
    """Append a progress event to the attempt in flight (seed 003's mid-execution checkpoint).

    \b
    Examples:
      phaselog progress --ticket-id T --run-id R --phase implement --event start
      phaselog progress --ticket-id T --run-id R --phase implement --event step --step 2 \\
        --tokens 1200 --output-file out.txt
      phaselog progress show --ticket-id T --run-id R --phase implement
    """
    if click.get_current_context().invoked_subcommand is not None:
        return None
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
    ledger = call.ledger
    ev = ledger.progress(
        ticket_id,
        run_id,
        phase,
        event,
        attempt=_attempt(attempt),
        step=step,
        output=read_output(output_file, output),
        tokens=tokens,
        provider=provider,
        status=status_text,
        pid=pid,  # None: no process recorded (this command's parent may be gone at once, e.g. under make)
        pipeline=call.pipeline,
        started_at=timestamp_opt(started_at, "--started-at"),
    )
    return Result({"event": views.progress_event(ev)}, lambda d: _events_table([d["event"]]))


@command(progress, "show", pipeline=True)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--phase", required=True, help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="Default: the attempt in flight, else the phase's newest attempt.")
@click.option("--all", "show_all", is_flag=True, help="Every event of the attempt, not just the latest.")
@click.option("--with-output", is_flag=True, help="Include the accumulated output text.")
def progress_show(
    call: Call,
    ticket_id: str,
    run_id: str,
    phase: str,
    attempt: int | None,
    show_all: bool,
    with_output: bool,
) -> Result:
    """Show the latest progress event of the attempt in flight (seed 003's Load), or all of them.

    With no attempt in flight, the phase's newest attempt is shown (a finished one, say).

    \b
    Example:
      phaselog progress show --ticket-id T --run-id R --phase implement --all --format table
    """
    events = call.ledger.progress_events(
        ticket_id, run_id, phase, _attempt(attempt), pipeline=call.pipeline, newest=True
    )
    if not events:
        where = f"attempt {attempt}" if attempt is not None else "its newest attempt"
        raise NotFound(f"phase {phase} has no progress events in {where}", phase=phase)
    data: dict[str, Any] = {"event": views.progress_event(events[-1], with_output=with_output)}
    if show_all:
        data["events"] = [views.progress_event(e, with_output=with_output) for e in events]
    return Result(data, lambda d: _events_table(d.get("events") or [d["event"]]))


# -- approvals ----------------------------------------------------------------------------------------
def _approval_table(d: dict[str, Any]) -> str:
    a = d["approval"]
    return table(
        [[a["phase"], a["attempt_number"], a["decision"], a["by"], d["phase_state"]]],
        ["phase", "attempt", "decision", "by", "phase state now"],
    )


def _judge_command(decision: str) -> click.Command:
    verb = "Approve" if decision == "approve" else "Reject"

    @click.option("--ticket-id", required=True)
    @click.option("--run-id", required=True)
    @click.option("--phase", required=True, help="A phase with requires_approval: true.")
    @click.option("--attempt", type=int, help="Default: the latest completed attempt.")
    @click.option("--by", required=True, metavar="NAME", help="Who decides (recorded).")
    @click.option("--comment", metavar="TEXT", help="Why (recorded).")
    def judge(
        call: Call,
        ticket_id: str,
        run_id: str,
        phase: str,
        attempt: int | None,
        by: str,
        comment: str | None,
    ) -> Result:
        from phaselog.ledger.judging import judge_and_report  # lazy: only `approve`/`reject` judge

        judged = judge_and_report(
            call.ledger,
            ticket_id,
            run_id,
            phase,
            by=by,
            comment=comment,
            attempt=_attempt(attempt),
            decision=decision,
            pipeline=call.pipeline,
        )
        return Result(views.approval(judged.approval, judged.phase_state, judged.warnings), _approval_table)

    judge.__name__ = decision
    example = f"phaselog {decision} --ticket-id T --run-id R --phase proposal --by ana" + (
        ' --comment "too long"' if decision == "reject" else ""
    )
    # "\b" (a real backspace character) tells click to keep the example's line as it is.
    judge.__doc__ = (
        f"{verb} a gated phase's checkpoint; the judgement is bound to its content hash.\n\n"
        f"    \b\n    Example:\n      {example}\n"
    )
    return command(cli, decision, pipeline=True, writes=True, section="Gates")(judge)


approve = _judge_command("approve")
reject = _judge_command("reject")


# -- ticket marker ---------------------------------------------------------------------------------
def _marker_table(d: dict[str, Any]) -> str:
    return table(
        [[k, v] for k, v in d["marker"].items() if k != "kind"],
        ["field", "value"],
        title="new revision" if d["changed"] else "unchanged",
    )


@command(cli, "init", writes=True, section="Tickets and pipelines")
@click.option("--ticket-id", required=True)
@click.option("--title", required=True, metavar="TEXT")
@click.option("--pipeline", "pipeline_name", metavar="NAME", help="The ticket's pipeline (default ticket-pipeline).")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="Metadata; repeatable.")
def init_cmd(call: Call, ticket_id: str, title: str, pipeline_name: str | None, meta: tuple[str, ...]) -> Result:
    """Record a ticket's identity once (title, pipeline, metadata); changes become revisions.

    \b
    Example:
      phaselog init --ticket-id VID-7 --title "Launch video" --pipeline video-pipeline --meta owner=ana
    """
    pairs = {}
    for item in meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta: expected KEY=VALUE (got {item!r})", field="meta", rule="key_value")
        pairs[key] = value
    marker, changed = call.ledger.init_ticket(ticket_id, title=title, pipeline=pipeline_name, meta=pairs)
    return Result(views.marker(marker, changed), _marker_table)


# -- decisions / history ------------------------------------------------------------------------------
@command(cli, section="Audit")
@click.option("--ticket-id", required=True)
def decisions(call: Call, ticket_id: str) -> Result:
    """The ticket's merged decision log across runs (seed 002's decision_log.json shape).

    \b
    Example:
      phaselog decisions --ticket-id VID-7
    """
    log = call.ledger.decisions(ticket_id)
    return Result(
        dict(log),
        lambda d: table(
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


@command(cli, section="Audit")
@click.option("--ticket-id", required=True)
@click.option("--run-id", help="Only this run.")
@click.option("--phase", help="Only this phase (name or ordinal).")
def history(call: Call, ticket_id: str, run_id: str | None, phase: str | None) -> Streamed:
    """Every record in time order: checkpoints, failed attempts, progress, approvals, marker revisions.

    Streamed: memory stays flat however long the history; a table shows the first 1,000 entries.

    \b
    Example:
      phaselog history --ticket-id PROJ-1234 --format table
    """
    from phaselog.views.history import sorted_history  # lazy: only `phaselog history` needs the history view

    entries = sorted_history(call.ledger, ticket_id, run_id, phase)  # reads everything: errors before output

    def show(out: IO[str]) -> None:

        rows = [
            [
                short_time(e["at"]),
                run_label(e["run_id"], e["run_name"], short=True) if e["run_id"] else "",
                e["kind"],
                e["summary"],
                (e["hash"] or "")[:12],
            ]
            for e in itertools.islice(entries, TABLE_MAX_ROWS)
        ]
        rest = entries.count - len(rows)
        out.write(
            lines(
                table(rows, ["at", "run", "kind", "what", "hash"], title=f"history of {ticket_id}"),
                f"… and {rest:,} more (a table shows at most {TABLE_MAX_ROWS:,} rows; --format json lists every one)"
                if rest > 0
                else "",
            )
        )

    return Streamed(lambda: views.history_stream(entries), show, close=entries.close)


# -- diff / fork ---------------------------------------------------------------------------------------
@command(
    cli,
    section="Audit",
    formats=("json", "text", "table"),
    format_help="json, or readable text (table is the same as text).",
    correlation=False,
    root_help="Files store root.",
    store_help="Store URL.",
)
@click.argument("a", required=False)
@click.argument("b", required=False)
@click.option("--ticket-id", required=True)
@click.option("--run-id", help="With --phase: diff every consecutive pair of attempts.")
@click.option("--phase", help="With --run-id: the phase whose attempts to compare.")
def diff(
    call: Call, a: str | None, b: str | None, ticket_id: str, run_id: str | None, phase: str | None
) -> Result | Streamed:
    """Field-level differences between two attempts (RUN:PHASE:ATTEMPT) or progress events
    (RUN:PHASE:ATTEMPT:SEQ), or between every consecutive attempt of a phase.

    Every attempt of a phase is streamed: memory stays flat however many attempts it has.

    \b
    Examples:
      phaselog diff --ticket-id T a1b2c3d4:implement:1 a1b2c3d4:implement:2
      phaselog diff --ticket-id T --run-id a1b2c3d4 --phase implement --format text
    """
    from phaselog.ledger.diff import render_text  # lazy: only `phaselog diff` renders a diff

    if a is not None or b is not None:
        if a is None or b is None or run_id or phase:
            raise UsageError("give two references A B, or --run-id and --phase", field="ref")
        return Result(
            views.diffs([call.ledger.diff(ticket_id, a, b)]),
            lambda d: lines("\n\n".join(render_text(r) for r in d["diffs"])),
        )
    if not (run_id and phase):
        raise UsageError("give two references A B, or --run-id and --phase", field="ref", rule="required")
    results = call.ledger.phase_diffs(ticket_id, run_id, phase)  # ids and phase checked here

    def show(out: IO[str]) -> None:
        first = True
        for r in results:
            out.write(("" if first else "\n\n") + render_text(r))
            first = False
        out.write("(fewer than two attempts)\n" if first else "\n")

    return Streamed(lambda: views.diffs_stream(results), show)


@command(cli, writes=True, section="Resume")
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True, help="The run to fork from.")
@click.option("--through", required=True, metavar="PHASE", help="Reuse checkpoints up to and including this phase.")
@click.option("--new-run-id", help="Id of the new run (default: a fresh UUID).")
def fork(call: Call, ticket_id: str, run_id: str, through: str, new_run_id: str | None) -> Result:
    """Start a new run that reuses this run's checkpoints up to PHASE (validated first; lineage recorded).

    \b
    Example:
      phaselog fork --ticket-id VID-7 --run-id r1 --through script --new-run-id r2
    """

    new_id, written = call.ledger.fork(ticket_id, run_id, through=through, new_run_id=new_run_id)
    return Result(
        views.forked(new_id, normalize_run_id(run_id), written),
        lambda d: table(
            [[c["phase"], c["checkpoint_path"]] for c in d["checkpoints"]],
            ["phase", "reused as"],
            title=f"new run {run_title(d['run_id'], d['run_name'])}",
        ),
    )


# -- doctor --------------------------------------------------------------------------------------------
def _doctor_table(d: dict[str, Any]) -> str:
    return lines(
        table(
            [[f["kind"], f["path"], without_path(f["message"], f["path"])] for f in d["findings"]],
            ["finding", "path", "detail"],
            title=f"{d['tickets']} ticket(s), {d['runs']} run(s): {'healthy' if d['healthy'] else 'needs attention'}",
        ),
        *[f"moved {m['from']} -> {m['to']}" for m in d["moved"]],
        *[f"finished {f['path']}: {f['message']}" for f in d["finished"]],
    )


@command(cli, section="Audit")
@click.option("--ticket-id", help="Only this ticket (default: every ticket).")
@click.option(
    "--quarantine",
    is_flag=True,
    help="Move damaged records aside, never deleted: files into <root>/quarantine/ (with a note each), "
    "SQL rows into the table phaselog_quarantine.",
)
def doctor(call: Call, ticket_id: str | None, quarantine: bool) -> Result:
    """Report damaged records, leftover temp files, abandoned attempts and broken links. Exit 1 if any.

    First finishes any prune a crash interrupted (it removes what that prune had noted it would).

    \b
    Examples:
      phaselog doctor
      phaselog doctor --ticket-id PROJ-1234 --quarantine
    """
    from phaselog.ledger.doctor import doctor as run_doctor  # lazy: only `phaselog doctor` needs it

    rep = run_doctor(call.ledger, ticket_id, quarantine=quarantine)
    return Result(
        rep.to_json(),
        _doctor_table,
        exit_code=0 if rep.healthy else 1,
        error="the store is not healthy (see the findings)",
        error_code="unhealthy",
    )
