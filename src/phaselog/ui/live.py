"""``/live``: the event feed as Server-Sent Events, for the pages that update themselves (D231).

``GET /live[?ticket=T[&run=R]]`` answers ``text/event-stream``: one frame per feed event of that
scope (``id:`` its ``event_id``, ``data:`` its JSON — :func:`phaselog.views.live.sse_frame`), from
when the stream opened, or just after the event a reconnecting browser names in ``Last-Event-ID``.
The page's script (static/app.js) re-reads the live part of the page on each event; without
JavaScript, or while the stream is down, the pages poll as before.

Resources, per stream: no thread and no connection while idle. Each ``POLL_S`` the stream makes one
short ``Ledger.feed`` call in the server's thread pool (through that thread's read-only ledger, the
same the pages use; it returns before the stream sleeps again) — never ``Ledger.follow``, which
would hold a thread per browser. At most ``Settings.max_streams`` streams (32) are open at once (a 503 beyond:
the page polls instead); a stream ends when its browser goes away (Starlette cancels it on the
disconnect; a keep-alive every ``KEEPALIVE_S`` finds a peer that vanished silently), when the server
shuts down, and after ``LIFETIME_S`` (the browser reconnects with
``Last-Event-ID`` and misses nothing). Access: the same middleware as every page (host, token).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from phaselog.ledger.feed import FeedPage
from phaselog.model.errors import NotFound, PhaselogError, UsageError
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.ui.context import UI
from phaselog.views.live import resume_cursor, sse_comment, sse_frame, sse_retry

POLL_S = 0.5  # how often a stream looks for new events (the pages' 2 s bar with room to spare)
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
LIFETIME_S = 300.0  # a stream ends after this; the browser reconnects where it stopped


class Streams:
    """How many streams are open, under a cap (shared by the event loop and tests)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()
        #: True once the server is shutting down: every stream ends at its next look.
        self.stopping: Callable[[], bool] = lambda: False

    def acquire(self) -> bool:
        """Take a place (False: the cap is reached)."""
        with self._lock:
            if self.open >= self.limit:
                return False
            self.open += 1
            return True

    def release(self) -> None:
        """Give a place back."""
        with self._lock:
            self.open -= 1


class EventStream(StreamingResponse):
    """A streaming response that gives its place back however it ends (done, cancelled, failed)."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None]) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},  # nginx: pass each frame on at once
        )
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _scope(request: Request) -> dict[str, Any]:
    """``ticket`` and ``run`` of the query, checked as the pages check them (``run`` needs ``ticket``)."""
    ticket = request.query_params.get("ticket", "").strip()
    run = request.query_params.get("run", "").strip()
    if run and not ticket:
        raise UsageError("run: needs ticket (a run id is unique within its ticket)", field="run")
    scope: dict[str, Any] = {}
    if ticket:
        scope["ticket_id"] = validate_ticket_id(ticket)
    if run:
        scope["run_id"] = normalize_run_id(run, field="run")
    return scope


async def stream(ui: UI, streams: Streams, request: Request) -> Response:
    """``GET /live``: the feed of a scope as Server-Sent Events (see the module docstring)."""
    try:
        scope = _scope(request)
        last_id = request.headers.get("last-event-id") or None
        cursor = await run_in_threadpool(lambda: resume_cursor(ui.ledger, last_id, **scope))
    except PhaselogError as exc:
        status = 404 if isinstance(exc, NotFound) else 400 if exc.exit_code == 2 else 409
        return JSONResponse(exc.to_dict(), status_code=status)
    if not streams.acquire():
        return Response(
            f"too many live pages open (at most {streams.limit}): this page refreshes by polling\n",
            status_code=503,
            media_type="text/plain",
            headers={"retry-after": "30"},
        )
    return EventStream(_frames(ui, streams, scope, cursor), streams.release)


async def _frames(ui: UI, streams: Streams, scope: dict[str, Any], cursor: str) -> AsyncIterator[str]:
    """The stream's text: the retry delay, then each new event, with keep-alives in between."""
    yield sse_retry()
    yield sse_comment("open")  # the browser's `open` fires now, not with the first event
    started = last_sent = time.monotonic()

    def read(after: str) -> FeedPage:  # on a worker thread: its own read-only ledger
        return ui.ledger.feed(**scope, after=after)

    while not streams.stopping():
        try:
            page = await run_in_threadpool(read, cursor)
        except PhaselogError as exc:  # the store went away or was damaged: say so, end; the browser retries
            yield sse_comment(f"error: {exc}")
            return
        for event in page.events:
            yield sse_frame(event)
            last_sent = time.monotonic()
        cursor = page.cursor
        now = time.monotonic()
        if now - started >= LIFETIME_S:
            return
        if now - last_sent >= KEEPALIVE_S:
            yield sse_comment("keep-alive")
            last_sent = now
        await asyncio.sleep(POLL_S)
