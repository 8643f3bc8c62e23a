"""``phaselog notify``: deliver events to webhooks and commands; ``notify status``: where it stands."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from phaselog.cli._render import table
from phaselog.cli._scaffold import Call, Result, cli, command

SECTION = "Notify"
STORE_HELP = "Store URL whose events are delivered; it also keeps the deliverer's lease, cursors and dead letters."
config_option = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The rules file (YAML): which events go to which webhook or command.",
)


@command(cli, as_group=True, writes=True, formats=None, correlation=False, store_help=STORE_HELP,
         section=SECTION, invoke_without_command=True)  # fmt: skip
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="The rules file (YAML): which events go to which webhook or command.",
)
@click.option("--burst", is_flag=True, help="Exit once nothing is left to deliver or retry (batch jobs, tests).")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
def notify(call: Call, config_path: str | None, burst: bool, quiet: bool) -> Result | None:
    """Deliver events to webhooks and commands: at least once, in order per run (a long-running process).

    The cursor, lease and dead letters live in the store: a killed deliverer resumes where it
    stopped; a second one on the same store and config stands by until the first is gone.
    SIGTERM/SIGINT finish the attempts in flight and exit.

    \b
    Example:
      PHASELOG_HOOK_SECRET=… phaselog notify --config hooks.yaml --store postgresql://db/phaselog
      phaselog notify status --config hooks.yaml
    """
    if click.get_current_context().invoked_subcommand is not None:
        return None
    from phaselog.notify import Deliverer, load_config  # lazy: `--help` loads every area

    if config_path is None:
        from phaselog.model.errors import UsageError  # lazy: as above

        raise UsageError("Missing option --config (the rules file)", field="config", rule="required")
    config = load_config(config_path)  # checked whole before anything is delivered
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    say = None if quiet else (lambda text: print(f"phaselog notify: {text}", file=sys.stderr, flush=True))
    stats = Deliverer(call.ledger, config, say=say).run(stop, idle_exit=burst)
    return Result(
        {
            "name": config.name,
            "delivered": stats.delivered,
            "failed_attempts": stats.failed_attempts,
            "dead_letters": stats.dead_letters,
            "passed_over": stats.skipped,
        }
    )


def _status_table(view: dict[str, Any]) -> str:
    lease = view["lease"]  # None: free; else the lock as stored, with a verdict on its holder
    held = "free" if lease is None else lease.get("damaged") or f"{lease.get('verdict')}: {lease.get('reason')}"
    rows = [[r["rule"], r["after_cursor"], "yes" if r["started"] else "no"] for r in view["rules"]]
    out = [table(rows, ["rule", "events after cursor", "started"], title=f"notify {view['name']} (lease: {held})")]
    dead = [[d["rule"], d["event_id"], d["attempts"], d["at"], d["error"]] for d in view["dead_letters"]]
    out.append(table(dead, ["rule", "event", "attempts", "at", "last error"], title="dead letters", empty="none"))
    return "\n".join(out)


@command(notify, "status", formats=("json", "table"), correlation=False, store_help=STORE_HELP)
@config_option
def notify_status(call: Call, config_path: str) -> Result:
    """Show a deliverer's lease, each rule's position and its dead letters.

    \b
    Example:
      phaselog notify status --config hooks.yaml --store sqlite:///srv/phaselog.db
    """
    from phaselog.notify import load_config, status  # lazy: `--help` loads every area

    config = load_config(config_path, env=None)
    return Result(status(call.ledger, config), _status_table)
