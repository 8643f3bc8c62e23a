"""The command scaffold: the shared options and the one decorator every command uses.

A command is a thin body over a library call::

    @command(cli, pipeline=True)
    @click.option("--ticket-id", required=True)
    @click.option("--run-id", required=True)
    def status(call: Call, ticket_id: str, run_id: str) -> Result:
        \"\"\"Help text (with an example).\"\"\"
        st = call.ledger.status(ticket_id, run_id, pipeline=call.pipeline)
        return Result(views.run_status(st), table=_status_table)

:func:`command` declares the shared options (``--root/--store``, ``--correlation-id``,
``--format``, and with ``pipeline=True`` ``--pipeline/--pipeline-file``), opens the ledger on
first use, maps :class:`~phaselog.model.errors.PhaselogError` to the JSON error object and its exit
code (1 = failed, 2 = bad usage), renders the result in memory before printing it, and always
closes what it opened. Every failure prints ``{"success": false, "error": "…", "error_code": "…"}``
and exits non-zero; never a traceback (``PHASELOG_DEBUG=1`` shows one).

The group lives in :mod:`phaselog.cli._group`, the invocation (:class:`Call`) and what a body
returns (:class:`Result`, :class:`Streamed`) in :mod:`phaselog.cli._call`; both are re-exported
here, so an area module imports everything it needs from this one module. The entry point and the
map of areas to modules are :mod:`phaselog.cli._main` (it imports the areas; they never import it).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import IO, Any, NoReturn

import click

from phaselog.cli import _render
from phaselog.cli._call import Call, Result, Streamed, TableFn, envelope
from phaselog.cli._group import CONTEXT, SECTIONS, PhaselogGroup, cli, in_section
from phaselog.model.errors import PhaselogError

__all__ = [
    "CONTEXT",
    "SECTIONS",
    "Call",
    "PhaselogGroup",
    "Result",
    "Streamed",
    "TableFn",
    "cli",
    "command",
    "envelope",
    "fail",
    "in_section",
]


def fail(err: PhaselogError, correlation_id: str | None = None, fmt: str = "json") -> NoReturn:
    """Print ``err`` (the JSON error object, or lines for people under ``--format table``) and exit
    with its exit code."""
    if fmt == "json":
        _render.write(_render.error_text(err, correlation_id))
    else:
        sys.stderr.write(_render.human_error(err))
        sys.stderr.flush()
    sys.exit(err.exit_code)


# -- shared options -------------------------------------------------------------------------------
ROOT_HELP = "Files store root (default ~/.phaselog). Env: PHASELOG_HOME."
STORE_HELP = "Store URL (file:///path). Env: PHASELOG_STORE."


def _shared_options(
    *,
    store: bool,
    pipeline: bool,
    formats: tuple[str, ...] | None,
    correlation: bool,
    root_help: str,
    store_help: str | None,
    format_help: str,
) -> list[Callable[[Any], Any]]:
    """The shared option decorators, in help order."""
    opts: list[Callable[[Any], Any]] = []
    if pipeline:
        opts.append(
            click.option(
                "--pipeline",
                "pipeline_name",
                metavar="NAME",
                help="Pipeline name: <root>/pipelines/NAME.yaml, PHASELOG_PIPELINES, or a built-in. "
                "Default: the run's recorded pipeline, else ticket-pipeline.",
            )
        )
        opts.append(
            click.option("--pipeline-file", type=click.Path(dir_okay=False), help="A pipeline manifest file to use.")
        )
    if store:
        opts.append(click.option("--root", type=click.Path(file_okay=False), envvar="PHASELOG_HOME", help=root_help))
        if store_help is not None:
            opts.append(click.option("--store", "store_url", metavar="URL", envvar="PHASELOG_STORE", help=store_help))
    if correlation:
        opts.append(click.option("--correlation-id", help="Echoed in the output; a fresh UUID when omitted."))
    if formats:
        opts.append(
            click.option(
                "--format",
                "fmt",
                type=click.Choice(list(formats)),
                default="json",
                show_default=True,
                help=format_help or None,
            )
        )
    return opts


def command(
    group: click.Command,
    name: str | None = None,
    *,
    store: bool = True,
    pipeline: bool = False,
    formats: tuple[str, ...] | None = ("json", "table"),
    correlation: bool = True,
    root_help: str = ROOT_HELP,
    store_help: str | None = STORE_HELP,
    format_help: str = "JSON for scripts and agents, or a readable table.",
    as_group: bool = False,
    writes: bool = False,
    section: str | None = None,
    **settings: Any,
) -> Callable[[Callable[..., Result | Streamed | None]], click.Command]:
    """Make ``fn(call, **options) -> Result | None`` a command of ``group`` with the shared options.

    ``store``: ``--root`` (and ``--store`` unless ``store_help`` is None); ``pipeline``:
    ``--pipeline/--pipeline-file``; ``formats``: the ``--format`` choices (None: JSON only);
    ``correlation``: ``--correlation-id``; ``section``: where ``phaselog --help`` lists it (one of
    :data:`SECTIONS`, or a new one); ``writes``: the command records something (a store
    that does not exist yet may be created; read-only commands must not create one).
    A body returning None has printed its own output.
    """

    if not isinstance(group, click.Group):
        raise TypeError(f"command(): {group.name} is not a group")

    def decorate(fn: Callable[..., Result | Streamed | None]) -> click.Command:
        @functools.wraps(fn)
        def run(**kwargs: Any) -> None:
            shared = {k: kwargs.pop(k) for k in names}
            call = Call(**shared, writes=writes)
            error: PhaselogError | None = None
            result: Result | Streamed | None = None
            text = ""
            spooled: IO[str] | None = None
            try:
                result = fn(call, **kwargs)
                if isinstance(result, Streamed):
                    try:
                        spooled = call.render_stream(result)
                    finally:
                        if result.close is not None:
                            result.close()
                else:
                    text = call.render(result) if result is not None else ""
            except PhaselogError as exc:
                error = exc
            finally:
                call.close()  # always, also when the body raised something unexpected
            if error is not None:
                fail(error, call.correlation_id, call.fmt)
            if text:
                _render.write(text)
            if spooled is not None:
                with spooled:
                    _render.write_spooled(spooled, escape=isinstance(result, Streamed) and not call.table_of(result))
            if result is not None and result.exit_code:
                sys.exit(result.exit_code)

        params_before = list(getattr(fn, "__click_params__", []))
        run.__click_params__ = []  # type: ignore[attr-defined]  # click's own attribute
        for opt in reversed(
            _shared_options(
                store=store,
                pipeline=pipeline,
                formats=formats,
                correlation=correlation,
                root_help=root_help,
                store_help=store_help,
                format_help=format_help,
            )
        ):
            opt(run)
        # Only the options added here go to Call; a command's own --pipeline (init) stays its own.
        names = [p.name for p in run.__click_params__ if p.name]  # type: ignore[attr-defined]
        # The command's own options first, then the shared ones (click lists them in reverse).
        run.__click_params__ = run.__click_params__ + params_before  # type: ignore[attr-defined]
        factory = group.group if as_group else group.command
        cmd = factory(name, context_settings={**CONTEXT, **settings.pop("context_settings", {})}, **settings)(run)
        if section is not None:
            in_section(cmd, section, group)
        return cmd

    return decorate
