"""The entry point of ``phaselog``: which module registers which command, and running a command line.

A command line imports only the module of its command (``phaselog read``: cli.records), so a
command does not pay for the others' imports; help, completion and ``cli.commands`` load them all.
The area modules import :mod:`phaselog.cli._scaffold` to register their commands on ``cli``; this
module imports them (by name, when needed), never the other way round.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

import click

from phaselog.cli._group import Areas, cli
from phaselog.cli._scaffold import fail
from phaselog.model.errors import PhaselogError, UsageError

__all__ = ["AREAS", "cli", "main"]

#: The modules that register the top-level commands, in help order, and what each registers.
#: A command line imports only the module of its command (``phaselog read``: cli.records), so a
#: command does not pay for the others' imports; help, completion and ``cli.commands`` load them
#: all. tests/test_cli_usability.py checks this map against what the modules register.
AREAS: dict[str, tuple[str, ...]] = {
    "records": ("write", "read", "validate", "list"),
    "state": ("status", "resume", "verify", "pipelines"),
    "catalog": ("tickets", "runs", "approvals"),
    "audit": ("progress", "approve", "reject", "init", "decisions", "history", "diff", "fork", "doctor"),
    "runner": ("run", "explain", "step"),
    "logs": ("logs",),
    "queue": ("submit", "queue", "worker"),
    "guard": ("guard",),
    "feed": ("events",),
    "notify": ("notify",),
    "store": ("export", "import", "copy", "prune", "store"),
    "ui": ("ui",),
    "agents": ("mcp", "skill"),
    "proofs": ("keys", "anchor", "prove"),
}


def _load(area: str) -> object:
    """Import the module of ``area`` (it registers its commands on ``cli``)."""
    return importlib.import_module(f"phaselog.cli.{area}")


cli.areas = Areas(AREAS, _load)


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
