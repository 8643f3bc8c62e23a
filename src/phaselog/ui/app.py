"""The dashboard's application: its routes, and serving it.

Pages read through a read-only ledger (one per worker thread, :class:`phaselog.ledger.pool.LedgerPool`):
opening the store for the dashboard never writes. The three actions that change something (approve,
reject, guard reset) open a writable ledger for that request only and go through the library's own
calls. What every handler is handed (:class:`UI`, :class:`Settings`) lives in :mod:`phaselog.ui.context`.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Awaitable, Callable

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from phaselog.model.errors import NotFound, PhaselogError
from phaselog.ui import actions, live, pages
from phaselog.ui.context import HERE, UI, Settings
from phaselog.ui.security import SecurityMiddleware

__all__ = ["UI", "Settings", "address", "bind", "create_app", "serve"]

#: A page: the UI and the request in, a response out.
Page = Callable[[UI, Request], Response]
#: An action: also the posted body (read before the handler runs in a worker thread).
Action = Callable[[UI, Request, bytes], Response]
Endpoint = Callable[[Request], Response]


class Digits(Convertor[str]):
    """A path segment of ASCII digits, handed over as text: ``pages.attempt_param`` bounds it (the
    ``int`` convertor would call ``int()`` on 5,000 digits and answer 500)."""

    regex = "[0-9]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return str(value)


register_url_convertor("digits", Digits())


def create_app(settings: Settings) -> Starlette:
    """The ASGI application for ``settings``."""
    ui = UI(settings)

    def wrap(handler: Page) -> Endpoint:
        def endpoint(request: Request) -> Response:
            try:
                response: Response = handler(ui, request)
            except PhaselogError as exc:
                return ui.error(request, exc)
            return response

        return endpoint

    def wrap_post(handler: Action) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            body = await request.body()

            try:
                response: Response = await run_in_threadpool(handler, ui, request, body)
            except PhaselogError as exc:
                return ui.error(request, exc)
            return response

        return endpoint

    def wrap_json(handler: Page) -> Endpoint:
        def endpoint(request: Request) -> Response:
            try:
                response: Response = handler(ui, request)
            except PhaselogError as exc:
                status = 404 if isinstance(exc, NotFound) else 400 if exc.exit_code == 2 else 409
                return JSONResponse(exc.to_dict(), status_code=status)
            return response

        return endpoint

    streams = live.Streams(settings.max_streams)

    async def live_stream(request: Request) -> Response:
        return await live.stream(ui, streams, request)

    run_path = "/tickets/{ticket}/runs/{run}"
    attempt_path = run_path + "/phases/{phase}/attempts/{attempt:digits}"
    routes = [
        Route("/", wrap(pages.home)),
        Route(run_path + "/overview.json", wrap_json(pages.run_json)),
        Route(run_path + "/attempts.json", wrap_json(pages.attempts_json)),
        Route(attempt_path + "/events", wrap(pages.events)),
        Route(attempt_path + "/events.json", wrap_json(pages.events_json)),
        Route(attempt_path + "/events/{seq:digits}/output", wrap(pages.event_output)),
        Route("/tickets", wrap(pages.tickets)),
        Route("/tickets/{ticket}", wrap(pages.ticket)),
        Route("/tickets/{ticket}/runs/{run}", wrap(pages.run)),
        Route("/tickets/{ticket}/runs/{run}/version", wrap_json(pages.run_version)),
        Route("/tickets/{ticket}/runs/{run}/explain", wrap(pages.explain)),
        Route("/tickets/{ticket}/runs/{run}/phases/{phase}/attempts/{attempt:digits}", wrap(pages.checkpoint)),
        Route("/tickets/{ticket}/runs/{run}/phases/{phase}/attempts/{attempt:digits}.{fmt}", wrap(pages.raw)),
        Route(
            "/tickets/{ticket}/runs/{run}/phases/{phase}/attempts/{attempt:digits}/judge",
            wrap_post(actions.judge),
            methods=["POST"],
        ),
        Route("/diff", wrap(pages.diff)),
        Route("/approvals", wrap(pages.approvals)),
        Route("/guards", wrap(pages.guards)),
        Route("/guards/{name}", wrap(pages.guard)),
        Route("/guards/{name}/reset", wrap_post(actions.guard_reset), methods=["POST"]),
        Route("/health", wrap(pages.health)),
        Route("/live", live_stream),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.ui = ui
    app.state.streams = streams
    guarded = SecurityMiddleware(app, ui.guarding)
    guarded.ui = ui  # type: ignore[attr-defined]  # for serve() and tests
    guarded.streams = streams  # type: ignore[attr-defined]  # for serve(): ended at shutdown
    return guarded  # type: ignore[return-value]  # an ASGI app like Starlette's


def bind(host: str, port: int) -> socket.socket:
    """Listen on ``host:port`` (0: any free port); a clear error when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PhaselogError(
            f"cannot listen on {host}:{port}: {exc.strerror} (choose another --port, or 0 for any free one)",
            field="port",
            rule="listen",
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    settings: Settings,
    *,
    open_browser: bool = False,
    announce: Callable[[str, str], None] | None = None,
) -> None:
    """Run the dashboard until interrupted (uvicorn, one process, on a socket bound here)."""

    sock = bind(settings.host, settings.port)
    settings.port = sock.getsockname()[1]
    app = create_app(settings)
    ui: UI = app.ui  # type: ignore[attr-defined]  # set by create_app
    ui.ledger.store.tickets()  # a missing or unreadable store fails now, not on the first page
    store_url = str(ui.ledger.store.url)
    config = uvicorn.Config(
        app,
        log_level=os.environ.get("PHASELOG_UI_LOG_LEVEL", "warning"),
        access_log=False,
        server_header=False,
        proxy_headers=False,
        lifespan="off",
        timeout_graceful_shutdown=5,  # a live page's stream never ends by itself: do not wait for it forever
    )
    server = uvicorn.Server(config)
    streams: live.Streams = app.streams  # type: ignore[attr-defined]  # set by create_app
    streams.stopping = lambda: server.should_exit  # each stream ends at its next look (≤ POLL_S)
    url = address(settings)
    if announce is not None:
        announce(url, store_url)
    if open_browser:
        import webbrowser  # lazy: only `phaselog ui --open` starts a browser (webbrowser, ~4 ms)

        threading.Timer(0.8, lambda: webbrowser.open(url)).start()
    try:
        server.run(sockets=[sock])
    finally:
        ui.ledgers.close()
        sock.close()


def address(settings: Settings) -> str:
    """The URL to open (with the token, when there is one)."""
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    if host in ("0.0.0.0", "[::]"):  # noqa: S104 - naming the wildcard, not binding to it
        host = "127.0.0.1"
    base = f"http://{host}:{settings.port}/tickets"
    return f"{base}?token={settings.token}" if settings.token else base
