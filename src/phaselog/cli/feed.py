"""``phaselog events``: the event feed as JSON Lines, with the cursor to resume from (docs/notifications.md)."""

from __future__ import annotations

import json
import sys
import threading

import click

from phaselog.cli._scaffold import Call, cli, command
from phaselog.model.durations import parse_duration
from phaselog.model.errors import UsageError


def _line(doc: object) -> None:
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")


@command(cli, section="Audit")
@click.option("--ticket-id", required=True, help="Ticket id, e.g. PROJ-1234.")
@click.option("--run-id", help="Only this run (a UUID or the name it was given).")
@click.option("--after", metavar="CURSOR", help="Only events after this cursor (the last `cursor` line printed).")
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="TYPE",
    help="Only this event type (repeatable): checkpoint.written, phase.failed, phase.awaiting_approval, "
    "phase.approved, phase.rejected, run.completed, run.dead.",
)
@click.option("--limit", type=int, help="At most this many events (then the cursor to go on from).")
@click.option("--base-url", metavar="URL", help="The dashboard's address: each event links to its run's page.")
@click.option("--follow", is_flag=True, help="Keep waiting for new events (Ctrl-C to stop).")
@click.option(
    "--poll",
    default="0.5s",
    show_default=True,
    metavar="DURATION",
    help="--follow: how often to look (PostgreSQL wakes on each write; this is then the longest wait).",
)
def events(
    call: Call,
    ticket_id: str,
    run_id: str | None,
    after: str | None,
    types: tuple[str, ...],
    limit: int | None,
    base_url: str | None,
    follow: bool,
    poll: str,
) -> None:
    """Print a ticket's events as JSON Lines, in the feed's order, then a line {"cursor": …}.

    Each event: event_id (stable: de-duplicate on it), type, ticket_id, run_id, run_name,
    pipeline, phase, attempt, at, data, url. Pass the last cursor as --after to get only what
    came later. --follow prints new events as they are recorded, each batch followed by its
    cursor line. Events come from the store, never from memory.

    \b
    Example:
      phaselog events --ticket-id PROJ-1234 --type phase.awaiting_approval --type phase.failed
      phaselog events --ticket-id PROJ-1234 --follow --after v1.eJyrVkrOz8lJTQ…
    """
    from phaselog.ledger.feed import check_types, decode_cursor  # lazy: only `phaselog events` reads the feed

    try:
        wanted = check_types(types) if types else None
    except UsageError as exc:
        raise UsageError(exc.message.replace("types:", "--type:", 1), field="--type", rule="event_type") from None
    try:
        decode_cursor(after)
    except UsageError as exc:
        raise UsageError(exc.message.replace("after:", "--after:", 1), field="--after", rule="cursor") from None
    if limit is not None and limit < 1:
        raise UsageError(f"--limit: must be 1 or more, not {limit}", field="--limit", rule="min")
    wait = parse_duration(poll, field="poll").total_seconds()
    ledger = call.ledger
    stop = threading.Event()
    cursor = after
    first = True
    try:
        while True:
            page = ledger.feed(
                ticket_id=ticket_id, run_id=run_id, after=cursor, types=wanted, limit=limit, base_url=base_url
            )
            for event in page.events:
                _line(event.to_json())
            if page.events or first:  # --follow: a cursor line after each batch
                _line({"cursor": page.cursor})
            sys.stdout.flush()
            cursor, first = page.cursor, False
            if not follow or stop.wait(wait):
                return
    except KeyboardInterrupt:
        return
