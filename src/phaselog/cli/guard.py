"""``phaselog guard``: run a scheduled job under a lock and a circuit breaker."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from phaselog.cli._args import duration
from phaselog.cli._render import table
from phaselog.cli._scaffold import CONTEXT, Call, Result, cli, command, in_section
from phaselog.model.errors import UsageError

if TYPE_CHECKING:
    from phaselog.views.guard import GuardHome

STORE_HELP = "Store URL; sqlite:// or postgresql:// keep the lock as a lease row (shared by machines)."


def _home(call: Call) -> GuardHome:
    """The guard's home: a files-store root (path), or the store named by --store (it keeps the guard)."""
    call.check_root_and_store()
    if call.store_url:  # --store wins over PHASELOG_HOME, as for every command
        return call.open_store(call.store_url)  # the store keeps the guard (Capability.GUARD_STORAGE)
    from phaselog.stores.files.store import default_root  # lazy: `--help` loads every area

    return call.root or str(default_root())


name_option = click.option("--name", required=True, help="The guard's name, e.g. cron-closeout.")


@cli.group(context_settings=CONTEXT)
def guard() -> None:
    """Run a scheduled job under a lock and a circuit breaker (seed 000's cron-closeout protocol).

    \b
    Example (crontab):
      */15 * * * * phaselog guard run --name closeout --max-failures 3 --cooldown 2h -- ./closeout.sh
    """


in_section(guard, "Guard")


@command(
    guard,
    "run",
    writes=True,
    formats=None,
    correlation=False,
    store_help=STORE_HELP,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@name_option
@click.option(
    "--stale-after",
    default="45m",
    show_default=True,
    metavar="DURATION",
    help="A lock older than this is stale when its holder is on another host; a live local holder "
    "older than this is reported as hung.",
)
@click.option("--kill-stale", is_flag=True, help="End a hung local holder (TERM, then KILL) and take over.")
@click.option(
    "--max-failures",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Consecutive failures that open the circuit breaker.",
)
@click.option("--max-passes", type=click.IntRange(min=0), help="Stop (SKIP) once this many passes have run.")
@click.option("--cooldown", metavar="DURATION", help="After this long, an open breaker lets one probe run.")
@click.option("--dry-run", is_flag=True, help="Run COMMAND with PHASELOG_DRY_RUN=1; recorded in the state.")
@click.option(
    "--outcome-from-output",
    is_flag=True,
    help="The last of success|noop|failure|halt in COMMAND's output decides (none: unknown).",
)
@click.option("--json", "as_json", is_flag=True, help="Also print a JSON summary of the invocation on stderr.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def guard_run(
    call: Call,
    name: str,
    stale_after: str,
    kill_stale: bool,
    max_failures: int,
    max_passes: int | None,
    cooldown: str | None,
    dry_run: bool,
    outcome_from_output: bool,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Take the lock, check the breaker, run COMMAND, record the outcome, release the lock.

    Exits with COMMAND's exit code; 0 on SKIP (another run holds the lock, or --max-passes is
    reached); 1 on HALT (the breaker is open). COMMAND's output passes through; the guard's own
    lines go to stderr, except SKIP/HALT which go to stdout.

    \b
    Example:
      phaselog guard run --name closeout --stale-after 45m --max-failures 3 -- ./closeout.sh --all
    """
    from phaselog.guard import (  # lazy: `--help` loads every area
        Guard,
        GuardConfig,
        PassNotRecorded,
    )
    from phaselog.views import guard as views  # lazy: `--help` loads every area

    args = command
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        raise UsageError(
            "guard run needs a command: phaselog guard run --name N -- COMMAND [ARGS…]",
            field="command",
            rule="required",
        )
    if args[0].startswith("-"):
        raise UsageError(
            f"unknown option {args[0]!r} for guard run (see --help); the command goes after --: "
            "phaselog guard run --name N [OPTIONS] -- COMMAND [ARGS…]",
            field=args[0].lstrip("-").replace("-", "_"),
            rule="unknown_option",
        )
    cfg = GuardConfig(
        stale_after=duration(stale_after, "--stale-after"),
        kill_stale=kill_stale,
        max_failures=max_failures,
        max_passes=max_passes,
        cooldown=duration(cooldown, "--cooldown"),
        dry_run=dry_run,
        outcome_from_output=outcome_from_output,
    )
    try:
        result = Guard(_home(call), name).run(args, cfg)
    except PassNotRecorded as exc:  # the job ran: say so where cron's log keeps it, then fail
        click.echo(f"phaselog guard {name}: ERROR: {exc.message}", err=True)
        click.echo(json.dumps(views.guard_pass_not_recorded(name, exc), ensure_ascii=False), err=True)
        raise
    if result.action in ("skip", "halt"):
        click.echo(result.message)
    else:
        click.echo(f"phaselog guard {name}: {result.message} (exit {result.exit_code})", err=True)
    if as_json:
        click.echo(json.dumps(views.guard_pass(name, result)), err=True)
    sys.exit(result.exit_code)


def _guard_status_table(d: dict[str, Any]) -> str:
    rows = [[k, v] for k, v in d["state"].items()]
    rows += [["breaker", d["breaker"]], ["max_failures", d["max_failures"]]]
    lock = d["lock"]
    rows.append(["lock", "free" if not lock else f"{lock.get('verdict', '?')}: {lock.get('reason', lock)}"])
    return table(rows, ["field", "value"], title=f"guard {d['name']}")


@command(guard, "status", correlation=False, store_help=STORE_HELP, format_help="")
@name_option
@click.option("--max-failures", type=click.IntRange(min=1), help="Judge the breaker with this (default: last pass's).")
@click.option("--cooldown", metavar="DURATION", help="Judge the breaker with this (default: last pass's).")
@click.option("--stale-after", default="45m", show_default=True, metavar="DURATION")
def guard_status(call: Call, name: str, max_failures: int | None, cooldown: str | None, stale_after: str) -> Result:
    """Loop state, circuit breaker (closed / open / half-open) and the lock holder.

    \b
    Example:
      phaselog guard status --name closeout --format table
    """
    from phaselog.views.guard import guard_status as view  # lazy: `--help` loads every area

    data = view(
        _home(call),
        name,
        max_failures=max_failures,
        cooldown=duration(cooldown, "--cooldown"),
        stale_after=duration(stale_after, "--stale-after"),
    )
    return Result(data, _guard_status_table)


@command(guard, "reset", correlation=False, store_help=STORE_HELP, format_help="")
@name_option
@click.option("--by", metavar="NAME", help="Who resets (default: $USER); recorded in the guard's history.")
def guard_reset(call: Call, name: str, by: str | None) -> Result:
    """Close the breaker: zero consecutive_failures, and note who reset it and when.

    \b
    Example:
      phaselog guard reset --name closeout --by ana
    """
    from phaselog.guard import Guard  # lazy: `--help` loads every area

    data = Guard(_home(call), name).reset(by=by)
    return Result(
        data,
        lambda d: table(
            [[k, v] for k, v in d["state"].items()] + [["reset by", d["reset"]["by"]], ["reset at", d["reset"]["at"]]],
            ["field", "value"],
            title=f"guard {d['name']} reset",
        ),
    )


def _last_line(text: Any) -> str:
    """The last non-empty line of a job's output tail, safe in a table (no control characters,
    no rich markup)."""
    if not isinstance(text, str):
        return ""
    from rich.markup import escape  # lazy: rich (~14 ms) loads only for --format table

    line = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
    return escape("".join(c if c.isprintable() else "?" for c in line.strip())[-200:])


def _guard_history_table(d: dict[str, Any], name: str) -> str:
    rows = []
    for e in d["history"]:
        if e.get("kind") == "pass":
            said = _last_line(e.get("stderr_tail")) or _last_line(e.get("stdout_tail"))
            rows.append(
                [
                    e["seq"],
                    "pass",
                    e.get("started_at"),
                    f"{e.get('outcome')} (exit {e.get('exit_code')}, "
                    f"{e.get('duration_sec')} s{', probe' if e.get('probe') else ''}"
                    f"{', dry run' if e.get('dry_run') else ''})" + (f": {said}" if said else ""),
                ]
            )
        elif e.get("kind") == "reset":
            rows.append(
                [e["seq"], "reset", e.get("at"), f"by {e.get('by')} (was {e.get('previous_consecutive_failures')})"]
            )
        else:
            rows.append([e.get("seq"), e.get("kind"), e.get("at"), e.get("reason") or e.get("error")])
    return table(rows, ["#", "kind", "at", "detail"], title=f"guard {name}")


@command(guard, "history", correlation=False, store_help=STORE_HELP, format_help="")
@name_option
def guard_history(call: Call, name: str) -> Result:
    """Every pass (start, end, outcome, exit code, duration), takeover and reset of a guard.

    A failed pass keeps the last 4 KiB of the job's stdout and stderr (stdout_tail, stderr_tail);
    the table shows the last line.

    \b
    Example:
      phaselog guard history --name closeout --format table
    """
    from phaselog.guard import Guard  # lazy: `--help` loads every area
    from phaselog.views.guard import guard_history as view  # lazy: `--help` loads every area

    return Result(view(Guard(_home(call), name).history()), lambda d: _guard_history_table(d, name))
