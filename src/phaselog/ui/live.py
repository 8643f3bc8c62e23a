"""``/live``: the event feed as Server-Sent Events, for the pages that update themselves (D231).

``GET /live[?ticket=T[&run=R]]`` answers ``text/event-stream``: one frame per feed event of that
scope (``id:`` its ``event_id``, ``data:`` its JSON — :func:`phaselog.views.live.sse_frame`), from
when the stream opened, or just after the event a reconnecting browser names in ``Last-Event-ID``.
The page's script (static/app.js) re-reads the live part of the page on each event; without
JavaScript, or while the stream is down, the pages poll as before.

Resources: no thread and no connection while a stream waits. The streams of one ticket (its page
and its runs' pages), or of the whole store, share one :class:`Poller` (an asyncio task): each
``POLL_S`` it makes one short ``Ledger.feed`` call in the server's thread pool (through that
thread's read-only ledger, the same the pages use) and hands what it found to each stream's
:class:`Subscriber` (a run's keeps only its run's events) — N browsers on the tickets page cost one poll,
not N; it stops when its last stream leaves. ``Ledger.follow`` is not used: it would hold a thread
per browser. At most ``Settings.max_streams`` streams (32) are open at once (a 503 beyond: the page
polls instead). A stream ends when its browser goes away (Starlette cancels it on the disconnect;
a keep-alive every ``KEEPALIVE_S`` finds a peer that vanished silently), when the server shuts
down, when its backlog passes ``BACKLOG`` (a browser that does not read), and after
``LIFETIME_S`` (the browser reconnects with ``Last-Event-ID`` and misses nothing). Access: the
same middleware as every page (host, token).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from phaselog.ledger.feed import FeedEvent, FeedPage
from phaselog.model.errors import NotFound, PhaselogError, UsageError
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.ui.context import UI
from phaselog.views.live import resume_cursor, sse_comment, sse_frame, sse_retry, unseen

POLL_S = 0.5  # how often a scope's feed is looked at (the pages' 2 s bar with room to spare)
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
LIFETIME_S = 300.0  # a stream ends after this; the browser reconnects where it stopped
BACKLOG = 1000  # events waiting for one slow browser; past it its stream ends (it resumes by id)

#: A poller's scope: (ticket or None for the whole store, None) — a run's stream uses its ticket's.
Key = tuple[str | None, str | None]


class Subscriber:
    """One stream's inbox: what its scope's poller found, until the stream sends it."""

    def __init__(self, run_id: str | None = None) -> None:
        #: Only this run's events (a run page's stream, on its ticket's poller); None: all of them.
        self.run_id = run_id
        self.events: deque[FeedEvent] = deque()
        self.wake = asyncio.Event()
        self.ended = False  # the poller gave up on it (a backlog past BACKLOG, the store failed)

    def push(self, event: FeedEvent) -> None:
        if self.run_id is not None and event.run_id != self.run_id:
            return
        if len(self.events) >= BACKLOG:
            self.end()
            return
        self.events.append(event)
        self.wake.set()

    def end(self) -> None:
        self.ended = True
        self.wake.set()

    async def next(self, timeout: float) -> list[FeedEvent]:
        """What arrived, waiting up to ``timeout`` s for something."""
        if not self.events and not self.ended:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout)
        self.wake.clear()
        out = list(self.events)
        self.events.clear()
        return out


class Poller:
    """One scope's look at the feed every POLL_S, shared by all its streams (one call, not one per browser)."""

    def __init__(self, cursor: str) -> None:
        self.cursor = cursor
        self.subscribers: set[Subscriber] = set()
        self.task: asyncio.Task[None] | None = None


class Streams:
    """The open streams: a cap on their number, and a poller per scope (everything on the event loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.pollers: dict[Key, Poller] = {}
        #: True once the server is shutting down: every stream and poller ends at its next look.
        self.stopping: Callable[[], bool] = lambda: False

    def acquire(self) -> bool:
        """Take a place (False: the cap is reached)."""
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        """Give a place back."""
        self.open -= 1

    def join(self, ui: UI, scope: dict[str, Any], cursor: str) -> tuple[Key, Subscriber]:
        """Subscribe to the poller of ``scope``'s ticket (or of the whole store), started from
        ``cursor`` when it is the first stream there. A run's stream shares its ticket's poller
        (the feed of one run reads its ticket's stamps anyway) and keeps only that run's events."""
        ticket = scope.get("ticket_id")
        key: Key = (ticket, None)
        poller = self.pollers.get(key)
        if poller is None:
            poller = self.pollers[key] = Poller(cursor)
            polled = {"ticket_id": ticket} if ticket else {}
            poller.task = asyncio.get_running_loop().create_task(self._poll(ui, key, polled, poller))
        sub = Subscriber(scope.get("run_id"))
        poller.subscribers.add(sub)
        return key, sub

    def leave(self, key: Key, sub: Subscriber) -> None:
        """Unsubscribe (the poller stops at its next look when nobody is left)."""
        poller = self.pollers.get(key)
        if poller is not None:
            poller.subscribers.discard(sub)

    async def _poll(self, ui: UI, key: Key, scope: dict[str, Any], poller: Poller) -> None:
        def read(after: str) -> FeedPage:  # on a worker thread: its own read-only ledger
            return ui.ledger.feed(**scope, after=after)

        try:
            while poller.subscribers and not self.stopping():
                try:
                    page = await run_in_threadpool(read, poller.cursor)
                except PhaselogError:  # the store went away or was damaged: end; the browsers retry
                    for sub in poller.subscribers:
                        sub.end()
                    return
                poller.cursor = page.cursor
                for event in page.events:
                    for sub in list(poller.subscribers):
                        sub.push(event)
                await asyncio.sleep(POLL_S)
        finally:
            if self.pollers.get(key) is poller:  # no await since the loop's test: nobody joined since
                del self.pollers[key]
            for sub in poller.subscribers:
                sub.end()


class EventStream(StreamingResponse):
    """A streaming response that runs ``done`` however it ends (sent, cancelled on disconnect, failed)."""

    def __init__(self, content: AsyncIterator[str], done: Callable[[], None]) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},  # nginx: pass each frame on at once
        )
        self._done = done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._done()


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
    key, sub = streams.join(ui, scope, cursor)

    def done() -> None:
        streams.leave(key, sub)
        streams.release()

    return EventStream(_frames(ui, streams, scope, cursor, sub), done)


async def _frames(ui: UI, streams: Streams, scope: dict[str, Any], cursor: str, sub: Subscriber) -> AsyncIterator[str]:
    """The stream's text: the retry delay, what came since ``cursor``, then each new event, with keep-alives."""
    yield sse_retry()
    yield sse_comment("open")  # the browser's `open` fires now, not with the first event
    started = last_sent = time.monotonic()
    try:
        # Read once more after joining: a round of the scope's poller that ran between the resume
        # read and the join was not this stream's (D231); what the poller brings twice is dropped.
        page = await run_in_threadpool(lambda: ui.ledger.feed(**scope, after=cursor))
    except PhaselogError as exc:
        yield sse_comment(f"error: {exc}")
        return
    for event in page.events:
        yield sse_frame(event)
    cursor = page.cursor
    while not (streams.stopping() or sub.ended):
        for event in await sub.next(POLL_S):
            fresh, cursor = unseen(cursor, event)
            if fresh:
                yield sse_frame(event)
                last_sent = time.monotonic()
        now = time.monotonic()
        if now - started >= LIFETIME_S:
            return
        if now - last_sent >= KEEPALIVE_S:
            yield sse_comment("keep-alive")
            last_sent = now
