"""The command scaffold: the shared options, the one decorator every command uses, and the entry point.

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

The group and its areas live in :mod:`phaselog.cli._group`, the invocation (:class:`Call`) and what a
body returns (:class:`Result`, :class:`Streamed`) in :mod:`phaselog.cli._call`; both are re-exported
here, so an area module imports everything it needs from this one module.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from typing import IO, Any, NoReturn

import click

from phaselog.cli import _render
from phaselog.cli._call import Call, Result, Streamed, TableFn, envelope
from phaselog.cli._group import AREAS, CONTEXT, SECTIONS, PhaselogGroup, cli, in_section
from phaselog.model.errors import PhaselogError, UsageError

__all__ = [
    "AREAS",
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
    "main",
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


def _format_in(args: list[str]) -> str:
    """The ``--format`` given on a command line click could not parse (for its error message)."""
    fmt = "json"
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--format" and i + 1 < len(args):
            fmt = args[i + 1]
        elif arg.startswith("--format="):
            fmt = arg.partition("=")[2]
    return fmt if fmt in ("table", "text") else "json"


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


# -- entry point ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    """Run the CLI; turn every error into a JSON object and an exit code."""
    try:
        _main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    else:
        code = 0
    if argv is not None:  # called in-process (tests, embedding): behave like a normal function
        sys.exit(code)
    _exit(code)


def _exit(code: int) -> None:
    """Flush and leave without the interpreter's teardown (~15 ms of a short command's life).

    Nothing is left to do at teardown: stores fsync or commit before they acknowledge a write,
    and every command closes what it opened.
    """
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    os._exit(code)


def _main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args:  # bare `phaselog`: show the help, as `phaselog --help` does
        args = ["--help"]
    for stream in (sys.stdout, sys.stderr):
        # A non-UTF-8 terminal must not turn non-ASCII data into a crash.
        if (getattr(stream, "encoding", "") or "").lower().replace("-", "") != "utf8":
            with contextlib.suppress(AttributeError, ValueError):
                stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    fmt = _format_in(args)
    try:
        cli.main(args=args, prog_name="phaselog", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.NoSuchOption as exc:
        fail(UsageError(f"{exc.format_message()} (see --help)", field=exc.option_name), fmt=fmt)
    except click.exceptions.MissingParameter as exc:  # before BadParameter: it is a subclass
        fail(UsageError(exc.format_message(), field=exc.param.name if exc.param else None, rule="required"), fmt=fmt)
    except click.exceptions.BadParameter as exc:
        field = exc.param.name if exc.param is not None else None
        fail(UsageError(exc.format_message(), field=field), fmt=fmt)
    except click.ClickException as exc:
        fail(UsageError(exc.format_message()), fmt=fmt)
    except click.exceptions.Abort:
        fail(PhaselogError("interrupted"), fmt=fmt)
    except PhaselogError as exc:
        fail(exc, fmt=fmt)
    except BrokenPipeError:
        os._exit(0)  # the reader went away (e.g. `| head`): not an error of ours
    except Exception as exc:
        if os.environ.get("PHASELOG_DEBUG"):
            raise
        if isinstance(exc, UnicodeEncodeError):
            bad = exc.object[exc.start : exc.end]
            if all("\udc80" <= c <= "\udcff" for c in bad):  # bytes in argv that are not UTF-8
                fail(UsageError(f"an argument is not valid UTF-8 text ({bad!r})", rule="utf-8"), fmt=fmt)
        fail(
            PhaselogError(f"internal error: {type(exc).__name__}: {exc} (set PHASELOG_DEBUG=1 for a traceback)"),
            fmt=fmt,
        )
