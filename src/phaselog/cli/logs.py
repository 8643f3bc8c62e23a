"""``phaselog logs``: an attempt's output as the store keeps it (docs/runner.md "Logs")."""

from __future__ import annotations

import json
import sys

import click

from phaselog.cli._scaffold import Call, cli, command
from phaselog.model.durations import parse_duration
from phaselog.model.errors import UsageError


@command(cli, pipeline=True, formats=None, correlation=False, section="Runner")
@click.option("--ticket-id", required=True, help="Ticket id, e.g. PROJ-1234.")
@click.option("--run-id", required=True, help="The run (a UUID or the name it was given).")
@click.option("--phase", required=True, help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="One attempt (default: the phase's newest).")
@click.option("--follow", is_flag=True, help="Print the output as it reaches the store, until the attempt ends.")
@click.option("--poll", default="0.5s", show_default=True, metavar="DURATION", help="--follow: how often to look.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (with --follow: a line per piece, then it).")
def logs(
    call: Call,
    ticket_id: str,
    run_id: str,
    phase: str,
    attempt: int | None,
    follow: bool,
    poll: str,
    as_json: bool,
) -> None:
    """Print an attempt's stdout and stderr (shell phases) or ctx.logger lines (Python phases).

    The store keeps each attempt's output with the attempt, bounded: the last --log-cap bytes of
    `phaselog run` (default 1 MiB); what was dropped is said on stderr. Works from any machine that
    can open the store. --follow prints a running attempt's output as it comes and exits when the
    attempt ends. Exit 0, or the error's code: not_found (1) for an unknown run or attempt,
    unknown_phase (2) for a phase the pipeline lacks.

    \b
    Example:
      phaselog logs --ticket-id CHURN-7 --run-id nightly-2026-11-30 --phase render
      phaselog logs --ticket-id CHURN-7 --run-id nightly-2026-11-30 --phase render --follow
    """
    if attempt is not None and attempt < 1:
        raise UsageError(f"--attempt: must be 1 or more, not {attempt}", field="--attempt", rule="min")
    ledger = call.ledger
    if follow:
        wait = parse_duration(poll, field="poll").total_seconds()
        try:
            for piece in ledger.logs_reader.follow(
                ticket_id, run_id, phase, attempt, pipeline=call.pipeline, poll=wait
            ):
                _out(json.dumps({"text": piece}, ensure_ascii=False) + "\n" if as_json else piece)
        except KeyboardInterrupt:
            return
    log = ledger.logs(ticket_id, run_id, phase, attempt, pipeline=call.pipeline)
    if as_json:
        _out(json.dumps({"success": True, **log.to_json()}, ensure_ascii=False) + "\n")
        return
    if not follow:
        _out(log.text)
    where = f"phase {log.phase} attempt {log.attempt}"
    if log.dropped_bytes:
        kept = log.total_bytes - log.dropped_bytes
        _note(f"{where}: the last {kept} of {log.total_bytes} bytes (the first {log.dropped_bytes} were not kept)")
    elif not log.complete:
        _note(f"{where}: still running, or ended without its log being kept (the output so far)")
    for message in log.damaged:
        _note(f"damaged log entry: {message}")


def _out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _note(text: str) -> None:
    sys.stderr.write(f"phaselog logs: {text}\n")
