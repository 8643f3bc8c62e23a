"""What every page and action is handed: the settings, the ledgers, the templates (:class:`UI`),
and the request parameters they all read.

The routes (:mod:`phaselog.ui.app`) import the pages and the actions, which import this module;
nothing here imports them (one direction).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from phaselog.ledger.facade import Ledger
from phaselog.ledger.pool import LedgerPool
from phaselog.model.errors import NotFound, PhaselogError
from phaselog.model.ids import run_label
from phaselog.model.limits import MAX_ATTEMPT, parse_number
from phaselog.ui import charts, urls
from phaselog.ui.security import Guarding
from phaselog.views.catalog import Catalog

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
    #: Live pages' event streams open at once; beyond it a page polls (phaselog.ui.live, D231).
    max_streams: int = 32
    guarding: Guarding | None = field(default=None, repr=False)


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
        self.ledgers = LedgerPool(settings.store)
        self.templates = _environment()

        self.catalog = Catalog()  # run summaries remembered until a run changes (shared by threads)
        self.guarding = settings.guarding or Guarding(
            host=settings.host,
            port=settings.port,
            token=settings.token,
            read_only=settings.read_only,
            allow_hosts=settings.allow_hosts,
        )

    @property
    def ledger(self) -> Ledger:
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


# -- request parameters ---------------------------------------------------------------------------
def number_param(request: Request, name: str, default: int, *, minimum: int = 0) -> int:
    """The query parameter ``name`` as a whole number (``default`` when absent or empty): every number
    a page takes is read here, by ``limits.parse_number`` (ASCII digits, bounded), a 400 naming it."""
    raw = request.query_params.get(name, "")
    return default if raw == "" else parse_number(raw, field=name, minimum=minimum)


def attempt_param(request: Request) -> int:
    """The ``{attempt}`` of a path, 1 to MAX_ATTEMPT (the route matches ASCII digits only)."""
    return parse_number(request.path_params["attempt"], field="attempt", minimum=1, maximum=MAX_ATTEMPT)
