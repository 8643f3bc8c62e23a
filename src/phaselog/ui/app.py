"""The dashboard's application: settings, the ledgers it reads through, rendering, and routes.

Pages read through a read-only ledger (one per worker thread): opening the store for the
dashboard never writes. The three actions that change something (approve, reject, guard reset)
open a writable ledger for that request only and go through the library's own calls.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from phaselog.model.errors import NotFound, PhaselogError
from phaselog.model.ids import run_label
from phaselog.ui import charts, urls
from phaselog.ui.security import Guarding, SecurityMiddleware

HERE = Path(__file__).parent
PAGE_SIZE = 50
STATE_LABELS = {
    "running": "running",
    "stuck": "stuck",
    "awaiting_approval": "waiting for approval",
    "awaiting_input": "waiting for input",
    "failed": "failed",
    "pending": "pending",
    "complete": "complete",
    "completed": "completed",
    "in_progress": "in progress",
    "abandoned": "abandoned",
    "rejected": "rejected",
    "approved": "approved",
    "stale": "stale",
    "damaged": "damaged",
}


@dataclass
class Settings:
    """How ``phaselog ui`` was started."""

    store: str | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    read_only: bool = False
    token: str | None = None
    allow_hosts: tuple[str, ...] = ()
    artifacts_root: str | None = None
    page_size: int = PAGE_SIZE
    guarding: Guarding | None = field(default=None, repr=False)


class Ledgers:
    """A read-only ledger per worker thread; a writable one only for an action's request."""

    def __init__(self, store: str | None) -> None:
        self.store = store
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def reader(self) -> Any:
        """This thread's read-only ledger (opened on first use)."""
        ledger = getattr(self._local, "ledger", None)
        if ledger is None:
            from phaselog.ledger.facade import Ledger
            from phaselog.stores import open_store

            ledger = Ledger(open_store(self.store, read_only=True))
            self._local.ledger = ledger
            with self._lock:
                self._all.append(ledger)
        return ledger

    @contextlib.contextmanager
    def writer(self) -> Iterator[Any]:
        """A writable ledger for one action, closed afterwards."""
        from phaselog.ledger.facade import Ledger
        from phaselog.stores import open_store

        ledger = Ledger(open_store(self.store, create=False))
        try:
            yield ledger
        finally:
            ledger.close()

    def close(self) -> None:
        """Close every reader."""
        with self._lock:
            while self._all:
                with contextlib.suppress(Exception):
                    self._all.pop().close()


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every value from the records is escaped: a payload's <script> is text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["urls"] = urls
    env.globals["duration"] = charts.duration
    env.globals["run_label"] = run_label  # how a run is shown: its name, else its UUID (phaselog.model.ids)
    env.globals["state_label"] = lambda s: STATE_LABELS.get(str(s), str(s).replace("_", " "))
    env.filters["short"] = lambda h, n=12: str(h)[:n] if h else ""
    env.filters["when"] = _when
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, sort_keys=False)
    return env


def _when(value: Any) -> str:
    """An ISO timestamp (or datetime) as ``2026-02-09 15:00:01Z``."""
    if value is None or value == "":
        return "—"
    text = value if isinstance(value, str) else value.isoformat()
    text = text.replace("T", " ").replace("+00:00", "Z")
    if "." in text:
        head, _, tail = text.partition(".")
        text = head + ("Z" if tail.endswith("Z") else "")
    return text


class UI:
    """What every handler needs: settings, ledgers, templates."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ledgers = Ledgers(settings.store)
        self.templates = _environment()
        from phaselog.views.catalog import Catalog

        self.catalog = Catalog()  # run summaries remembered until a run changes (shared by threads)
        self.guarding = settings.guarding or Guarding(
            host=settings.host,
            port=settings.port,
            token=settings.token,
            read_only=settings.read_only,
            allow_hosts=settings.allow_hosts,
        )

    @property
    def ledger(self) -> Any:
        """The read-only ledger of the current worker thread."""
        return self.ledgers.reader()

    def csrf(self, request: Request) -> str:
        """The CSRF token for this browser's forms."""
        return self.guarding.csrf_token(request.state.csrf_cookie)

    def render(self, request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        """Render a template with the common context."""
        tpl = self.templates.get_template(template)
        html = tpl.render(
            read_only=self.settings.read_only,
            store_url=self.ledger_url(),
            csrf_token=self.csrf(request),
            path=request.url.path,
            query=request.query_params,
            flash=request.query_params.get("done"),
            page_url=lambda n: urls.with_query(
                request.url.path, **{**{k: v for k, v in request.query_params.items() if k != "done"}, "page": n}
            ),
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    def ledger_url(self) -> str:
        """The store's URL as shown in the header."""
        try:
            return str(self.ledger.store.url)
        except PhaselogError:
            return str(self.settings.store or "")

    def error(self, request: Request, exc: PhaselogError, status: int | None = None) -> HTMLResponse:
        """An error page naming what failed (never a traceback)."""
        if status is None:
            status = 404 if isinstance(exc, NotFound) else 400 if exc.exit_code == 2 else 409
        return self.render(request, "error.html", status_code=status, error=exc.to_dict(), title="Error")


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
    from phaselog.ui import actions, pages

    ui = UI(settings)

    def wrap(handler: Any) -> Any:
        def endpoint(request: Request) -> Response:
            try:
                response: Response = handler(ui, request)
            except PhaselogError as exc:
                return ui.error(request, exc)
            return response

        return endpoint

    def wrap_post(handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            body = await request.body()
            from starlette.concurrency import run_in_threadpool

            try:
                response: Response = await run_in_threadpool(handler, ui, request, body)
            except PhaselogError as exc:
                return ui.error(request, exc)
            return response

        return endpoint

    def wrap_json(handler: Any) -> Any:
        def endpoint(request: Request) -> Response:
            try:
                response: Response = handler(ui, request)
            except PhaselogError as exc:
                status = 404 if isinstance(exc, NotFound) else 400 if exc.exit_code == 2 else 409
                return JSONResponse(exc.to_dict(), status_code=status)
            return response

        return endpoint

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
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.ui = ui
    guarded = SecurityMiddleware(app, ui.guarding)
    guarded.ui = ui  # type: ignore[attr-defined]  # for serve() and tests
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
    import uvicorn

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
    )
    server = uvicorn.Server(config)
    url = address(settings)
    if announce is not None:
        announce(url, store_url)
    if open_browser:
        import webbrowser

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
