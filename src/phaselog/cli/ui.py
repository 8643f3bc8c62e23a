"""``phaselog ui``: serve the dashboard (the web app lives in :mod:`phaselog.ui`)."""

from __future__ import annotations

import sys

import click

from phaselog.cli._scaffold import Call, Result, cli, command
from phaselog.model.errors import UsageError


def _require_extra() -> None:
    try:
        import jinja2  # noqa: F401  # lazy: the ui extra may be absent (this import is the check)
        import starlette  # noqa: F401  # lazy: the ui extra may be absent (this import is the check)
        import uvicorn  # noqa: F401  # lazy: the ui extra may be absent (this import is the check)
    except ImportError as exc:
        raise UsageError(
            f"phaselog ui needs the 'ui' extra ({exc.name or 'a dependency'} is not installed): "
            "pip install 'phaselog[ui]'",
            field="ui",
            rule="missing_dependency",
        ) from None


@command(cli, "ui", formats=None, correlation=False)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to listen on; beyond loopback needs --token."
)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port).")
@click.option("--read-only", is_flag=True, help="Hide every button and refuse every change (POST).")
@click.option("--open", "open_browser", is_flag=True, help="Open the dashboard in a browser.")
@click.option(
    "--token",
    envvar="PHASELOG_UI_TOKEN",
    metavar="TOKEN",
    help="Require this token on every request (needed for any --host but loopback). Env: PHASELOG_UI_TOKEN.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also accept this Host header (the name a reverse proxy forwards); repeatable.",
)
@click.option(
    "--artifacts-root",
    type=click.Path(file_okay=False),
    help="Check each checkpoint's artifacts (present, recorded hash matches) under this folder.",
)
@click.option(
    "--max-streams",
    default=32,
    show_default=True,
    type=click.IntRange(0, 10_000),
    help="Live pages' event streams open at once; beyond it (and with 0) pages refresh by polling.",
)
def ui(
    call: Call,
    host: str,
    port: int,
    read_only: bool,
    open_browser: bool,
    token: str | None,
    allow_hosts: tuple[str, ...],
    artifacts_root: str | None,
    max_streams: int,
) -> Result | None:
    """Serve a local dashboard of the store: tickets, runs, checkpoints, diffs, approvals, guards, health.

    Pages read the store without ever writing to it; approve, reject and guard reset are the only
    changes (POST with a CSRF token), and --read-only refuses those too. Ctrl-C stops it.

    \b
    Examples:
      phaselog ui --open
      phaselog ui --store sqlite:///var/lib/phaselog/ledger.db --read-only
      PHASELOG_UI_TOKEN=$(openssl rand -hex 16) phaselog ui --host 0.0.0.0
    """
    _require_extra()
    from phaselog.ui.app import Settings, serve  # lazy: the ui extra may be absent (starlette, uvicorn, jinja2)
    from phaselog.ui.security import check_bind  # lazy: the ui extra may be absent (starlette, uvicorn, jinja2)

    check_bind(host, token)
    call.check_root_and_store()
    settings = Settings(
        store=call.store_url or call.root,
        host=host,
        port=port,
        read_only=read_only,
        token=token,
        allow_hosts=allow_hosts,
        artifacts_root=artifacts_root,
        max_streams=max_streams,
    )

    def announce(url: str, store_url: str) -> None:
        mode = " (read-only)" if read_only else ""
        sys.stderr.write(f"phaselog ui: {store_url}{mode}\nphaselog ui: open {url}  (Ctrl-C stops)\n")
        sys.stderr.flush()

    serve(settings, open_browser=open_browser, announce=announce)
    return None
