"""Live views: what the dashboard's event stream and ``phaselog status --watch`` send as a run changes.

* :func:`sse_frame` / :func:`sse_comment` — one feed event as a Server-Sent Events frame (its ``id:``
  is the event's ``event_id``, its ``data:`` the event's JSON, docs/notifications.md "Live pages").
* :func:`resume_cursor` — the feed cursor just after the event a reconnecting browser names in
  ``Last-Event-ID`` (the feed's cursor is per stream; the browser only knows ids).
* :func:`watch_status` — a run's status each time it changes, waking on the run's change stamp
  (:mod:`phaselog.stores.stamps`): cheap while nothing moves, and it sees progress events too,
  which are not feed events (D230).

Nothing here holds a connection between two reads: each poll is one short library call.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from phaselog.ledger.feed import advance
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.stores.stamps import run_stamps
from phaselog.views.graph import status_json

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger
    from phaselog.ledger.feed import FeedEvent

#: How long a browser waits before it reconnects a stream that ended (ms, the SSE ``retry:`` field).
RETRY_MS = 1000


def sse_frame(event: FeedEvent) -> str:
    """``event`` as one SSE frame: ``id: <event_id>`` and its JSON on one ``data:`` line."""
    body = json.dumps(event.to_json(), ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    # An id must not hold a line break or NUL (the browser would drop it); the feed's never do
    # (``<type>:<hash>``), and ensure_ascii keeps the data on one line.
    return f"id: {_one_line(event.event_id)}\ndata: {body}\n\n"


def sse_comment(text: str) -> str:
    """An SSE comment (a keep-alive: it tells proxies and the server that the client is still there)."""
    return f": {_one_line(text)}\n\n"


def sse_retry(ms: int = RETRY_MS) -> str:
    """The SSE ``retry:`` field: how long the browser waits before reconnecting."""
    return f"retry: {int(ms)}\n\n"


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ").replace("\0", " ")


def resume_cursor(ledger: Ledger, last_event_id: str | None, **scope: Any) -> str:
    """The feed cursor to go on from: just after ``last_event_id`` in the feed of ``scope``
    (``ticket_id``, ``run_id``), else — no id, or one this feed does not hold (pruned, another
    store) — the feed's end: only what comes later is sent, and the page re-reads itself once."""
    page = ledger.feed(**scope)
    if last_event_id:
        for index, event in enumerate(page.events):
            if event.event_id == last_event_id:
                # The cursor of the feed's first index+1 events marks exactly the ones seen.
                return ledger.feed(**scope, limit=index + 1).cursor
    return page.cursor


def unseen(cursor: str, event: FeedEvent) -> tuple[bool, str]:
    """Is ``event`` past ``cursor``, and the cursor that includes it (``feed.advance``: a cursor
    moves only for an event it had not passed)."""
    after = advance(cursor, event)
    return after != cursor, after


def run_stamp(ledger: Ledger, ticket_id: str, run_id: str) -> str | None:
    """The run's change stamp (None: cannot tell, read again); ``"-"`` for a run with nothing yet."""
    return run_stamps(ledger.store, ticket_id).get(run_id, "-")


def watch_status(
    ledger: Ledger,
    ticket_id: str,
    run_id: str,
    *,
    interval: float,
    stop: threading.Event,
    recheck_every: int = 10,
    **status: Any,
) -> Generator[dict[str, Any], None, None]:
    """The run's status as ``phaselog status`` prints it (``views.graph.status_json``) now, then each
    time it changes, until ``stop`` is set.

    Every ``interval`` seconds the run's change stamp is compared (one cheap call); the status is
    read again when it moved, when the store cannot tell (None), and every ``recheck_every``-th
    look anyway — an attempt in flight turns *abandoned* when its process dies, which writes
    nothing. A status equal to the last one yielded is not yielded again.
    """
    ticket_id = validate_ticket_id(ticket_id)
    run_id = normalize_run_id(run_id)
    last: dict[str, Any] | None = None
    seen: str | None = None
    looks = 0
    while True:
        stamp = run_stamp(ledger, ticket_id, run_id)
        if last is None or stamp is None or stamp != seen or looks % recheck_every == 0:
            current = status_json(ledger.status(ticket_id, run_id, **status))  # `status`'s JSON, with its shape
            seen = stamp
            if current != last:
                last = current
                yield current
        looks += 1
        if stop.wait(interval):
            return
