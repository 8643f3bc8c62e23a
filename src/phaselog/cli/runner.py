"""Runner commands: run, explain, step.

``run`` executes a pipeline's phases (shell ``run:`` commands from a manifest) durably: one runner
per run (exit 75 when another holds it), completed phases skipped only while still true, every
attempt recorded. ``explain`` says what ``run`` would do and why; ``step`` records progress from
inside a shell phase. Guide: docs/runner.md.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from phaselog.cli._args import read_output
from phaselog.cli._render import lines, table, terminal_width
from phaselog.cli._scaffold import Call, Result, cli, command
from phaselog.model.errors import Fenced, PhaseFailed, RunInterrupted, UsageError
from phaselog.model.ids import run_title
from phaselog.views import results as views
from phaselog.views.graph import explanation_json, needs_cells, shape_lines

if TYPE_CHECKING:  # the runner is imported by the commands that run something
    from phaselog.runner import PipelineRunner


def _runner(call: Call, ticket_id: str, run_id: str | None) -> PipelineRunner:
    """The pipeline to run: --pipeline-file, --pipeline, else the run's recorded pipeline."""
    from phaselog.runner import pipeline  # lazy: `phaselog step` builds no runner

    requested = call.pipeline
    if requested is None and run_id is None:
        raise UsageError("name the pipeline to run: --pipeline NAME or --pipeline-file PATH", field="pipeline")
    if requested is None or isinstance(requested, str):
        return pipeline(
            call.ledger.pipeline_for(ticket_id, run_id, requested) if run_id else call.ledger.load_pipeline(requested)
        )
    return pipeline(requested)


def _run_table(d: dict[str, Any]) -> str:
    rows = [
        [p["phase"], p["outcome"], ",".join(map(str, p["attempts"])), p["error"] or p["reason"]] for p in d["phases"]
    ]

    head = f"run {run_title(d['run_id'], d['run_name'])} ({d['pipeline']}): "
    head += (
        "done"
        if d["done"]
        else f"waiting at {d['waiting']}"
        if d["waiting"]
        else f"{d['failed']} failed"
        if d["failed"]
        else f"interrupted (exit {d['exit_code']})"
        if d["interrupted"]
        else "not done"
    )
    return table(rows, ["phase", "outcome", "attempts", "note"], title=head)


@command(cli, pipeline=True, writes=True, section="Runner")
@click.option("--ticket-id", required=True)
@click.option("--run-id", help="The run to start or resume (default: a new run; its id is printed).")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="Where commands run and artifacts are (default: the current folder).",
)
@click.option("--wait", is_flag=True, help="Wait for a runner that holds the run instead of exiting 75.")
@click.option("--log-dir", type=click.Path(file_okay=False), help="Where shell phases' logs go.")
@click.option("--quiet", is_flag=True, help="Do not echo progress and the commands' output on stderr.")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A run parameter (repeatable), typed by the manifest's params schema: --param limit=3.",
)
@click.option(
    "--params-file",
    type=click.Path(dir_okay=False),
    help="Run parameters from a JSON object file (--param values override its keys).",
)
@click.option(
    "--log-cap", metavar="SIZE", help="What the store keeps of each attempt's output, its tail (default 1MiB; 0: none)."
)
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Run up to N phases whose needs are met side by side (a manifest with needs:).",
)
@click.option("--fail-fast", is_flag=True, help="A failed phase interrupts the phases still running.")
def run(
    call: Call,
    ticket_id: str,
    run_id: str | None,
    workdir: str | None,
    wait: bool,
    log_dir: str | None,
    quiet: bool,
    params: tuple[str, ...],
    params_file: str | None,
    log_cap: str | None,
    max_parallel: int,
    fail_fast: bool,
) -> Result:
    """Run a pipeline's phases durably: skip what is done and still true, record every attempt.

    Shell phases come from the manifest (run:, env:, timeout:, retries:, artifacts:). Exit 0
    complete, 1 a phase failed after its retries, 3 waiting for approval, 75 the run is held by
    another runner, 130/143 interrupted (SIGINT/SIGTERM; the attempt is recorded). Parameters are
    checked against the manifest's params before anything runs; a rerun reuses the recorded ones.

    \b
    Example:
      phaselog run --pipeline-file job.yaml --ticket-id CHURN-7 --run-id nightly-2026-11-30
      phaselog run --pipeline-file job.yaml --ticket-id CHURN-7 --param date=2026-11-30 --param limit=3
      phaselog run --pipeline-file examples/video-dag.yaml --ticket-id VID-2 --max-parallel 2
    """
    from phaselog.model.params import from_cli  # lazy: only `phaselog run` reads parameters

    pipe = _runner(call, ticket_id, run_id)
    given = from_cli(pipe.pipeline.params, params, params_file)
    try:
        result = pipe.run(
            ticket_id,
            run_id,
            store=call.ledger,
            workdir=workdir,
            wait=wait,
            log_dir=log_dir,
            quiet=quiet,
            params=given,
            log_cap=log_cap,
            max_parallel=max_parallel,
            fail_fast=fail_fast,
        )
    except (PhaseFailed, RunInterrupted) as exc:
        result = exc.result  # recorded; the result says what happened
        data = {**views.run_result(result), "error": exc.message, "error_code": exc.error_code}
        return Result(data, _run_table, exit_code=result.exit_code, error_code=exc.error_code)
    except Fenced as exc:
        exc.exit_code = 75  # another runner took the run over: as "held", try later
        raise
    blocked = next((p for p in result.phases if p.outcome in ("blocked", "failed")), None)
    return Result(
        views.run_result(result),
        _run_table,
        exit_code=result.exit_code,
        pending=result.waiting is not None and result.exit_code == 3,  # stopped at a gate: not a failure
        error=f"the run cannot go on: {blocked.phase}: {blocked.reason}" if blocked else "the run did not complete",
        error_code="blocked" if blocked else "not_done",
    )


def _explain_table(d: dict[str, Any]) -> str:
    needs = needs_cells(d)  # a "needs" column only for a pipeline that is not a chain (D300)
    rows = [
        [
            p["ordinal"],
            p["phase"],
            *([needs.get(p["phase"], "")] if needs is not None else []),
            p["action"],
            p["state"],
            p["reason"],
        ]
        for p in d["phases"]
    ]
    lease = d.get("lease")
    held = ""
    if lease and lease.get("holder"):
        held = f"lease: {'held' if lease['held'] else 'free'}: {lease['reason']}"
    nxt = d["next_phase"] or "— nothing to do"

    title = f"run {run_title(d['run_id'], d['run_name'])} ({d['pipeline']}) next: {nxt}"
    return lines(
        table(rows, ["#", "phase", *(["needs"] if needs is not None else []), "action", "state", "why"], title=title),
        *(shape_lines(d["graph"], terminal_width() - 2) if needs is not None else []),
        held,
    )


@command(cli, pipeline=True, section="Runner")
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--workdir", type=click.Path(file_okay=False), help="Where artifacts are checked (default: here).")
def explain(call: Call, ticket_id: str, run_id: str, workdir: str | None) -> Result:
    """Why each phase will run or be skipped (what `phaselog run` would do now), and who holds the run.

    \b
    Example:
      phaselog explain --ticket-id CHURN-7 --run-id nightly-2026-11-30 --format table
    """
    from phaselog.runner.definition import explain_for  # lazy: only `phaselog explain` needs the explainer

    e = explain_for(call.ledger, ticket_id, run_id, pipeline=call.pipeline, workdir=workdir)
    return Result(explanation_json(views.explanation(e), e.status), _explain_table)  # its shape: e.status's


@command(cli, writes=True, formats=None, correlation=False, section="Runner")
@click.argument("step", type=click.IntRange(min=0))
@click.option("--output-file", type=click.Path(dir_okay=False), help="The output so far, read from this file.")
@click.option("--output", metavar="-", help="'-': read the output so far from standard input.")
@click.option("--tokens", type=click.IntRange(min=0), help="Cumulative tokens so far.")
def step(call: Call, step: int, output_file: str | None, output: str | None, tokens: int | None) -> Result | None:
    """Record progress (step N) from inside a shell phase that `phaselog run` started.

    \b
    Example (in a manifest phase):
      run: ./fetch.sh && phaselog step 1 && ./parse.sh && phaselog step 2 --output-file parse.log
    """
    from phaselog.runner.step import step_from_env  # lazy: only `phaselog step` needs the step helper

    text = read_output(output_file, output)
    event = step_from_env(step, output=text, tokens=tokens, store=call.ledger.store)
    # Nothing on stdout: a shell phase's stdout may carry its payload (its last JSON line).
    print(f"phaselog step: step {event.step} of {event.phase} attempt {event.attempt_number} recorded", file=sys.stderr)
    return None
