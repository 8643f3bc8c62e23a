"""The command scaffold: the group, the shared options, and the one decorator every command uses.

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
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import IO, Any, NoReturn

import click

from phaselog.cli import _render
from phaselog.model.errors import PhaselogError, UsageError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
TableFn = Callable[[dict[str, Any]], str]


# -- the group ------------------------------------------------------------------------------------
#: Sections of ``phaselog --help``, in this order; a command declared without one is listed under "Other".
SECTIONS = ("Record", "Resume", "Runner", "Workers", "Audit", "Gates", "Tickets and pipelines", "Guard", "Stores")


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
    "queue": ("submit", "queue", "worker"),
    "guard": ("guard",),
    "store": ("export", "import", "copy", "prune", "store"),
    "ui": ("ui",),
}
_AREA_OF = {name: area for area, names in AREAS.items() for name in names}


class PhaselogGroup(click.Group):
    """Loads a command's module on first use, lists commands by area, and the top-level help by section."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._commands: dict[str, click.Command] = {}
        self._loaded = False
        super().__init__(*args, **kwargs)
        self.sections: dict[str, str] = {}

    @property  # click has a plain attribute here; a property loads every area on first access
    def commands(self) -> MutableMapping[str, click.Command]:
        """Every command (importing every area's module on first access)."""
        self._load_all()
        return self._commands

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        self._commands = dict(value)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        name = name or cmd.name
        if name is None:  # pragma: no cover - click refuses nameless commands earlier
            raise TypeError("Command has no name.")
        self._commands[name] = cmd

    def _load_all(self) -> None:
        if not self._loaded:
            self._loaded = True
            for area in AREAS:
                importlib.import_module(f"phaselog.cli.{area}")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self._commands and cmd_name in _AREA_OF:
            importlib.import_module(f"phaselog.cli.{_AREA_OF[cmd_name]}")
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_all()
        known = [name for names in AREAS.values() for name in names if name in self._commands]
        return known + [name for name in self._commands if name not in _AREA_OF]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Every command by section, subcommands by their full name (``guard run``), one list."""
        grouped: dict[str, list[tuple[str, click.Command]]] = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows = grouped.setdefault(self.sections.get(name, "Other"), [])
            if not isinstance(cmd, click.Group) or cmd.invoke_without_command:
                rows.append((name, cmd))  # a group that does something itself (progress) has a row too
            if isinstance(cmd, click.Group):
                rows += [(f"{name} {n}", sub) for n, sub in cmd.commands.items() if not sub.hidden]
        order = [*SECTIONS, *sorted(k for k in grouped if k not in SECTIONS and k != "Other"), "Other"]
        pad = max((len(label) for rows in grouped.values() for label, _ in rows), default=0)
        limit = max(formatter.width - formatter.current_indent - pad - 4, 30)
        for section in order:
            if grouped.get(section):
                with formatter.section(section):
                    formatter.write_dl(
                        [(label.ljust(pad), cmd.get_short_help_str(limit=limit)) for label, cmd in grouped[section]]
                    )


@click.group(cls=PhaselogGroup, context_settings=CONTEXT)
@click.version_option(package_name="phaselog", message="phaselog %(version)s")
def cli() -> None:
    """Durable checkpoints for multi-phase pipelines: record, resume, validate, audit.

    Output is JSON on stdout (--format table for people). Exit 0 on success, 1 when an
    operation fails or a check says no, 2 for bad usage. `phaselog COMMAND --help` shows a
    command's options and an example.
    """


# -- results --------------------------------------------------------------------------------------
@dataclass
class Result:
    """What a command's body returns: a JSON view, how to show it to people, and the exit code.

    ``data`` is wrapped as ``{"success": …, **data, "correlation_id": …}`` unless
    ``envelope`` is false (the body built the whole object, e.g. a best-effort warning).
    ``success`` is false whenever the exit code says the command failed (a check that says no,
    a refused skip, conflicts), and the object then has ``error`` and ``error_code`` as every
    error object does (:func:`envelope`).
    ``table`` renders the wrapped object as text for ``--format table`` (or ``text``).
    """

    data: dict[str, Any]
    table: TableFn | None = None
    exit_code: int = 0
    envelope: bool = True
    #: Why the command failed, when ``exit_code`` says it did: the JSON's ``error`` and ``error_code``.
    error: str | None = None
    error_code: str | None = None
    #: The exit code says "not done yet", not "failed" (``run`` stopped at a gate exits 3).
    pending: bool = False

    @property
    def success(self) -> bool:
        """The JSON's ``success``: false whenever the command failed (a non-zero exit code that is not ``pending``)."""
        return self.exit_code == 0 or self.pending


@dataclass
class Streamed:
    """A result written piece by piece (listings of a whole ticket): memory stays flat.

    ``fields`` yields the JSON object's (key, value) pairs; a value may be
    :class:`phaselog.views.streams.Items` or :class:`~phaselog.views.streams.SpooledArray`, written item by
    item (the bytes are those of the whole-list JSON). ``table`` writes the ``--format table``
    output into a text sink. Either is written into a spooled buffer first and printed only once
    complete, so a failure half-way still prints just the error. ``close`` runs at the end.
    """

    fields: Callable[[], Iterable[tuple[str, Any]]]
    table: Callable[[IO[str]], None] | None = None
    exit_code: int = 0
    close: Callable[[], None] | None = None

    @property
    def success(self) -> bool:
        """The JSON's ``success``: the exit code is 0."""
        return self.exit_code == 0


def envelope(result: Result) -> dict[str, Any]:
    """The JSON object of ``result``: ``success`` first, and for a failure ``error`` and ``error_code``.

    The one place a command's ``success`` is decided (D105): true exactly when the command did not
    fail (exit 0, or ``pending``), so no failing command says ``"success": true``.
    """
    if not result.envelope:
        return result.data
    out = {"success": result.success, **result.data}
    if not result.success:
        out.setdefault("error", result.error or f"the command failed (exit {result.exit_code})")
        out.setdefault("error_code", result.error_code or "failed")
    return out


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


# -- the invocation -------------------------------------------------------------------------------
class Call:
    """One invocation: the shared options' values, and what was opened for it (closed at the end)."""

    def __init__(
        self,
        *,
        root: str | None = None,
        store_url: str | None = None,
        correlation_id: str | None = None,
        fmt: str = "json",
        pipeline_name: str | None = None,
        pipeline_file: str | None = None,
        writes: bool = False,
    ) -> None:
        self.root = root
        #: The command records something: a store that does not exist yet may be created.
        self.writes = writes
        self.store_url = store_url
        self.correlation_id = correlation_id or _render.new_correlation_id()
        self.fmt = fmt
        self.pipeline_name = pipeline_name
        self.pipeline_file = pipeline_file
        self._ledger: Any = None
        self._opened: list[Any] = []

    @property
    def ledger(self) -> Any:
        """The :class:`~phaselog.ledger.facade.Ledger` on ``--store`` / ``--root``, opened on first use."""
        if self._ledger is None:
            from phaselog.ledger.facade import Ledger

            self.check_root_and_store()
            # --store (or PHASELOG_STORE) names the store completely, so it wins over PHASELOG_HOME.
            self._ledger = Ledger(self.open_store(self.store_url or self.root))
        return self._ledger

    def open_store(self, url: str | None, *, create: bool | None = None, migrate: bool = False) -> Any:
        """Open a store by URL or path; it is closed when the command ends (SQLite: WAL checkpointed).

        A command that only reads (``writes`` false, or ``create=False``) gets StoreNotFound for a
        store that does not exist, and creates nothing; one that writes creates it on its first write.
        """
        from phaselog.stores import open_store

        store = open_store(url, create=self.writes if create is None else create, migrate=migrate)
        self._opened.append(store)
        return store

    @property
    def pipeline(self) -> Any:
        """``--pipeline NAME`` (a name), ``--pipeline-file PATH`` (a loaded manifest), or None."""
        if self.pipeline_name and self.pipeline_file:
            raise UsageError("give --pipeline or --pipeline-file, not both", field="pipeline")
        if self.pipeline_file:
            from phaselog.model.pipelines import load_manifest

            return load_manifest(self.pipeline_file)
        return self.pipeline_name

    def check_root_and_store(self) -> None:
        """Both given on the command line is ambiguous; an environment default yields to a flag."""
        if not (self.root and self.store_url):
            return
        ctx = click.get_current_context(silent=True)
        if ctx is None:
            return
        from click.core import ParameterSource

        explicit = {ParameterSource.COMMANDLINE}
        if ctx.get_parameter_source("root") in explicit and ctx.get_parameter_source("store_url") in explicit:
            raise UsageError("give --root or --store, not both", field="store")

    def close(self) -> None:
        """Close every store opened for this call (newest first); a failing close is not the command's."""
        while self._opened:
            store = self._opened.pop()
            with contextlib.suppress(Exception):
                store.close()

    def render(self, result: Result) -> str:
        """The whole output of ``result`` as text (a table renderer that fails falls back to JSON)."""
        data = envelope(result)
        data.setdefault("correlation_id", self.correlation_id)
        if self.fmt != "json" and result.table is not None:
            try:
                return result.table(data)
            except Exception:  # rendering must not turn a success into a failure
                if os.environ.get("PHASELOG_DEBUG"):
                    raise
        return _render.json_text(data)

    def render_stream(self, result: Streamed) -> IO[str]:
        """The whole output of a streamed result, in a spooled buffer (rewound by the printer)."""
        from phaselog.views import streams

        out = streams.spool()
        try:
            if self.table_of(result):
                assert result.table is not None
                try:
                    result.table(out)
                except PhaselogError:
                    raise
                except Exception:  # rendering must not turn a success into a failure: JSON instead
                    if os.environ.get("PHASELOG_DEBUG"):
                        raise
                    out.seek(0)
                    out.truncate()
                    streams.write_object(out, self._envelope(result))
            else:
                streams.write_object(out, self._envelope(result))
        except BaseException:
            out.close()
            raise
        return out

    def table_of(self, result: Streamed) -> bool:
        """Whether ``result`` is shown as a table (else JSON)."""
        return self.fmt != "json" and result.table is not None

    def _envelope(self, result: Streamed) -> Iterator[tuple[str, Any]]:
        seen = False
        yield "success", result.success
        for key, value in result.fields():
            seen = seen or key == "correlation_id"
            yield key, value
        if not seen:
            yield "correlation_id", self.correlation_id


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


def in_section(cmd: click.Command, section: str, group: click.Command | None = None) -> click.Command:
    """List ``cmd`` under ``section`` in ``phaselog --help`` (for groups made with ``cli.group``)."""
    parent = group if group is not None else cli
    if isinstance(parent, PhaselogGroup) and cmd.name:
        parent.sections[cmd.name] = section
    return cmd


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
