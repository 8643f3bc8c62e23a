"""The ``phaselog`` command line: parse, call the library, print JSON (or a table).

Every failure prints ``{"success": false, "error": "…", "error_code": "…"}`` on stdout and exits
non-zero: 1 for a failed operation, 2 for bad usage. Never a traceback (set
``PHASELOG_DEBUG=1`` to see one). Heavy modules are imported inside the commands that need them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from phaselog.errors import PhaselogError, UsageError

F = TypeVar("F", bound=Callable[..., Any])
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# -- output -------------------------------------------------------------------------------------
class Output:
    """Renders results and errors; one per invocation."""

    def __init__(self, fmt: str, correlation_id: str | None) -> None:
        self.fmt = fmt
        self.correlation_id = correlation_id or _uuid4()

    def emit(self, data: dict[str, Any], table: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Print ``data`` as JSON, or through ``table`` under ``--format table``."""
        data.setdefault("correlation_id", self.correlation_id)
        if self.fmt == "table" and table is not None:
            table(data)
        else:
            _print_json(data)


def _uuid4() -> str:
    """A random UUID (v4) without importing uuid (which costs the CLI start-up a few ms)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _print_json(data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False)
    try:
        text.encode(sys.stdout.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):  # a non-UTF-8 terminal, or undecodable input echoed
        text = json.dumps(data, indent=2, ensure_ascii=True)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _fail(err: PhaselogError, correlation_id: str | None = None) -> NoReturn:
    out = err.to_dict()
    if correlation_id:
        out["correlation_id"] = correlation_id
    _print_json(out)
    sys.exit(err.exit_code)


def _table(rows: list[list[Any]], headers: list[str], title: str | None = None, empty: str = "nothing to show") -> None:
    from rich.console import Console
    from rich.table import Table

    if not rows:
        click.echo(": ".join(x for x in (title, empty) if x) or "nothing to show")
        return
    t = Table(title=title, show_lines=False, header_style="bold")
    for i, h in enumerate(headers):
        last = i == len(headers) - 1
        t.add_column(h, overflow="fold", no_wrap=not last)  # only the last column wraps
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    console = Console()
    Console(width=max(120, console.width), soft_wrap=False).print(t)


# -- shared options -----------------------------------------------------------------------------
def store_options(fn: F) -> F:
    """Options every command that touches a store takes."""
    fn = click.option(
        "--format",
        "fmt",
        type=click.Choice(["json", "table"]),
        default="json",
        show_default=True,
        help="JSON for scripts and agents, or a readable table.",
    )(fn)
    fn = click.option("--correlation-id", help="Echoed in the output; a fresh UUID when omitted.")(fn)
    fn = click.option(
        "--store",
        "store_url",
        metavar="URL",
        envvar="PHASELOG_STORE",
        help="Store URL (file:///path). Env: PHASELOG_STORE.",
    )(fn)
    return click.option(
        "--root",
        type=click.Path(file_okay=False),
        envvar="PHASELOG_HOME",
        help="Files store root (default ~/.phaselog). Env: PHASELOG_HOME.",
    )(fn)


def pipeline_options(fn: F) -> F:
    """--pipeline / --pipeline-file."""
    fn = click.option(
        "--pipeline-file",
        type=click.Path(dir_okay=False),
        help="A pipeline manifest file to use.",
    )(fn)
    return click.option(
        "--pipeline",
        "pipeline_name",
        metavar="NAME",
        help="Pipeline name: <root>/pipelines/NAME.yaml, PHASELOG_PIPELINES, or a built-in. "
        "Default: the run's recorded pipeline, else ticket-pipeline.",
    )(fn)


def _ledger(root: str | None, store_url: str | None) -> Any:
    from phaselog.ledger import Ledger
    from phaselog.stores import open_store

    _check_root_and_store(root, store_url)
    # --store (or PHASELOG_STORE) names the store completely, so it wins over PHASELOG_HOME.
    return Ledger(open_store(store_url or root))


def _check_root_and_store(root: str | None, store_url: str | None) -> None:
    """Both given on the command line is ambiguous; an environment default yields to a flag."""
    if not (root and store_url):
        return
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    from click.core import ParameterSource

    explicit = {ParameterSource.COMMANDLINE}
    if ctx.get_parameter_source("root") in explicit and ctx.get_parameter_source("store_url") in explicit:
        raise UsageError("give --root or --store, not both", field="store")


def _pipeline(ledger: Any, name: str | None, path: str | None) -> Any:
    if name and path:
        raise UsageError("give --pipeline or --pipeline-file, not both", field="pipeline")
    if path:
        from phaselog.pipelines import load_manifest

        return load_manifest(path)
    return name


def _json_opt(value: str | None, option: str, kind: type, items: type | None = None) -> Any:
    if value is None:
        return None
    text = value
    source = "stdin" if value == "-" else value[1:]
    try:
        if value == "-":
            text = sys.stdin.buffer.read().decode("utf-8")
        elif value.startswith("@"):
            with open(value[1:], encoding="utf-8") as fh:
                text = fh.read()
    except OSError as exc:
        raise UsageError(f"{option}: cannot read {source}: {exc.strerror}", field=option) from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{option}: {source} is not UTF-8 text ({exc.reason} at byte {exc.start})",
            field=option,
            rule="utf-8",
        ) from None
    try:
        data = json.loads(text)
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # lone surrogates (\ud800) fail here
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"{option}: contains a lone surrogate escape ({exc.object[exc.start : exc.end]!r}); "
            "strings must be valid Unicode",
            field=option,
            rule="utf-8",
        ) from None
    except RecursionError:
        raise UsageError(f"{option}: JSON nested too deeply", field=option, rule="json") from None
    except ValueError as exc:
        raise UsageError(f"{option}: not valid JSON ({exc})", field=option, rule="json") from None
    if not isinstance(data, kind):
        want = "a JSON object" if kind is dict else "a JSON array"
        raise UsageError(f"{option}: must be {want}", field=option, rule="type")
    if items is not None:
        values: Any = data.values() if isinstance(data, dict) else data
        bad = [v for v in values if not isinstance(v, items)]
        if bad:
            what = "value" if kind is dict else "item"
            raise UsageError(
                f"{option}: every {what} must be a JSON string (got {json.dumps(bad[0])})",
                field=option,
                rule="type",
            )
    return data


def _attempt(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise UsageError("--attempt: must be >= 1", field="attempt", rule="attempt_number")
    return value


class PhaselogGroup(click.Group):
    """Lists commands in the order they were added (the order of a pipeline's life)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=PhaselogGroup, context_settings=CONTEXT)
@click.version_option(package_name="phaselog", message="phaselog %(version)s")
def cli() -> None:
    """Durable checkpoints for multi-phase pipelines: record, resume, validate, audit.

    \b
    Seed-compatible commands:  write, read, validate, list
    Resume and integrity:      status, resume, verify
    Pipelines:                 pipelines

    Output is JSON on stdout (--format table for people). Exit 0 on success, 1 when an
    operation fails or a check says no, 2 for bad usage.
    """


# -- write ----------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", required=True, help="Ticket id, e.g. PROJ-1234.")
@click.option("--run-id", required=True, help="Run id: a UUID, or any string (mapped to UUID v5).")
@click.option("--phase", required=True, help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="Attempt number (>= 1). Omitted: the next one, atomically.")
@click.option("--repo-commit-map", metavar="JSON", help='Repo → commit SHA, e.g. \'{"app": "a1b2c3d"}\'.')
@click.option("--artifact-paths", metavar="JSON", help="JSON array of relative artifact paths.")
@click.option("--payload", metavar="JSON", help="Phase payload as JSON, @FILE, or - for stdin.")
@click.option("--timestamp", metavar="ISO", help="Completion time (ISO-8601 with timezone); default now.")
@click.option("--status", type=click.Choice(["completed", "failed"]), default="completed", show_default=True)
@click.option("--error", "error_text", metavar="TEXT", help="Why the attempt failed (with --status failed).")
@click.option(
    "--decisions",
    "decisions_json",
    metavar="JSON",
    help="Decision log entries (JSON array, @FILE or -): decision_id, category, subject, "
    "options_considered, selected, reason.",
)
@click.option("--best-effort", is_flag=True, help="A failed write prints a warning and exits 0.")
@pipeline_options
@store_options
def write(
    ticket_id: str,
    run_id: str,
    phase: str,
    attempt: int | None,
    repo_commit_map: str | None,
    artifact_paths: str | None,
    payload: str | None,
    timestamp: str | None,
    status: str,
    error_text: str | None,
    decisions_json: str | None,
    best_effort: bool,
    pipeline_name: str | None,
    pipeline_file: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Record one phase attempt (append-only; an existing attempt is never replaced).

    \b
    Example:
      phaselog write --ticket-id PROJ-1234 --run-id a1b2c3d4 --phase implement --attempt 1 \\
        --repo-commit-map '{"omniclaude": "a1b2c3d"}' \\
        --artifact-paths '["src/foo.py", "tests/test_foo.py"]' \\
        --payload '{"branch_name": "feat/PROJ-1234", "commit_sha": "a1b2c3d", "files_changed": ["src/foo.py"]}'
    """
    out = Output(fmt, correlation_id)
    try:
        ledger = _ledger(root, store_url)
        pl = _pipeline(ledger, pipeline_name, pipeline_file)
        ts = None
        if timestamp is not None:
            from phaselog.records import parse_timestamp

            try:
                ts = parse_timestamp(timestamp, field="--timestamp")
            except PhaselogError as exc:
                raise UsageError(exc.message, field="timestamp", rule="datetime") from None
        if status == "failed" and not error_text:
            raise UsageError("--status failed needs --error TEXT saying why", field="error")
        if status == "completed" and error_text:
            raise UsageError("--error goes with --status failed", field="error")
        result = ledger.write(
            ticket_id,
            run_id,
            phase,
            _json_opt(payload, "--payload", dict),
            repo_commit_map=_json_opt(repo_commit_map, "--repo-commit-map", dict, str),
            artifact_paths=_json_opt(artifact_paths, "--artifact-paths", list, str) or (),
            attempt=_attempt(attempt),
            timestamp=ts,
            pipeline=pl,
            status=status,
            error=error_text,
            decisions=_json_opt(decisions_json, "--decisions", list) or (),
        )
    except Exception as exc:
        if not isinstance(exc, PhaselogError):
            if not best_effort:
                raise
            exc = PhaselogError(f"internal error: {type(exc).__name__}: {exc}")
        if best_effort:
            data = exc.to_dict()
            data.update(best_effort=True, correlation_id=out.correlation_id)
            click.echo(f"phaselog: warning: checkpoint not written: {exc.message}", err=True)
            _print_json(data)
            return
        _fail(exc, out.correlation_id)
    rec = result.record
    out.emit(
        {
            "success": True,
            "checkpoint_path": result.location,
            "correlation_id": out.correlation_id,
            "run_id": rec.run_id,
            "phase": rec.phase,
            "attempt_number": rec.attempt_number,
            "status": rec.status,
            "content_hash": rec.content_hash,
            "warnings": list(result.warnings),
        },
        lambda d: _table(
            [[d["checkpoint_path"], d["attempt_number"], d["status"], d["content_hash"][:12]]],
            ["written", "attempt", "status", "hash"],
        ),
    )


# -- read -----------------------------------------------------------------------------------------
def _record_json(stored: Any) -> dict[str, Any]:
    rec = stored.record
    meta = rec.meta_dict()
    meta.update(
        has_metadata=rec.has_metadata,
        content_hash=rec.content_hash,
        recorded_hash=stored.recorded_hash,
    )
    return {"checkpoint": rec.seed_dict(), "metadata": meta}


def _show_record(d: dict[str, Any]) -> None:
    cp, meta = d["checkpoint"], d["metadata"]
    rows = [[k, json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list) else v] for k, v in cp.items()]
    rows += [["status", meta["status"]], ["content_hash", meta["content_hash"]]]
    if meta.get("error"):
        rows.append(["error", meta["error"]])
    _table(rows, ["field", "value"], title=d.get("checkpoint_path"))


@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--phase", required=True, help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="A specific attempt (default: the latest completed).")
@pipeline_options
@store_options
def read(
    ticket_id: str,
    run_id: str,
    phase: str,
    attempt: int | None,
    pipeline_name: str | None,
    pipeline_file: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Read the latest completed checkpoint of a phase (or one attempt).

    \b
    Example:
      phaselog read --ticket-id PROJ-1234 --run-id a1b2c3d4 --phase implement
    """
    out = Output(fmt, correlation_id)
    try:
        ledger = _ledger(root, store_url)
        stored = ledger.read(
            ticket_id,
            run_id,
            phase,
            _attempt(attempt),
            pipeline=_pipeline(ledger, pipeline_name, pipeline_file),
        )
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)
    data = {"success": True, "correlation_id": out.correlation_id, **_record_json(stored)}
    data["checkpoint_path"] = stored.location
    data["warnings"] = list(stored.warnings)
    out.emit(data, _show_record)


# -- validate -------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--phase", required=True, help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="A specific attempt (default: the latest completed).")
@click.option(
    "--artifacts-root",
    type=click.Path(file_okay=False),
    help="Also check that every artifact path exists under this folder.",
)
@pipeline_options
@store_options
def validate(
    ticket_id: str,
    run_id: str,
    phase: str,
    attempt: int | None,
    artifacts_root: str | None,
    pipeline_name: str | None,
    pipeline_file: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """Check a checkpoint: seed rules, payload schema, hash links, artifacts. Exit 1 if invalid.

    \b
    Example:
      phaselog validate --ticket-id PROJ-1234 --run-id a1b2c3d4 --phase implement
    """
    out = Output(fmt, correlation_id)
    try:
        ledger = _ledger(root, store_url)
        stored, report = ledger.validate(
            ticket_id,
            run_id,
            phase,
            _attempt(attempt),
            pipeline=_pipeline(ledger, pipeline_name, pipeline_file),
            artifacts_root=artifacts_root,
        )
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)
    data = {
        "is_valid": report.is_valid,
        "success": True,
        "errors": [i.text() for i in report.errors],
        "warnings": [i.text() for i in report.warnings],
        "issues": [i.to_json() for i in report.issues],
        "correlation_id": out.correlation_id,
        **_record_json(stored),
        "checkpoint_path": stored.location,
    }

    def table(d: dict[str, Any]) -> None:
        rows = [[i["severity"], i["field"], i["rule"], i["message"]] for i in d["issues"]]
        verdict = "valid" if d["is_valid"] else "INVALID"
        _table(rows, ["severity", "field", "rule", "message"], title=f"{d['checkpoint_path']}: {verdict}")

    out.emit(data, table)
    if not report.is_valid:
        sys.exit(1)


# -- list -----------------------------------------------------------------------------------------
@cli.command("list", context_settings=CONTEXT)
@click.option("--ticket-id", required=True)
@click.option("--run-id", help="Only this run.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many records (then use --after).")
@click.option("--after", metavar="CURSOR", help="Continue after this cursor (next_after of the last page).")
@store_options
def list_cmd(
    ticket_id: str,
    run_id: str | None,
    limit: int | None,
    after: str | None,
    root: str | None,
    store_url: str | None,
    correlation_id: str | None,
    fmt: str,
) -> None:
    """List checkpoints ordered by run, phase ordinal and attempt; damaged files under warnings.

    \b
    Examples:
      phaselog list --ticket-id PROJ-1234
      phaselog list --ticket-id PROJ-1234 --run-id a1b2c3d4 --limit 100
    """
    out = Output(fmt, correlation_id)
    try:
        ledger = _ledger(root, store_url)
        page = ledger.list(ticket_id, run_id, after=after, limit=limit)
    except PhaselogError as exc:
        _fail(exc, out.correlation_id)
    completed = page.completed
    data = {
        "success": True,
        "count": len(completed),
        "checkpoints": [s.record.seed_dict() for s in completed],
        "failed_attempts": [{**s.record.seed_dict(), "status": "failed", "error": s.record.error} for s in page.failed],
        "warnings": [{**d.to_json(), "message": f"skipped damaged file: {d.message}"} for d in page.damaged],
        "next_after": page.next_after,
        "correlation_id": out.correlation_id,
    }

    def table(_: dict[str, Any]) -> None:
        rows = [
            [
                s.record.run_id[:8],
                f"{s.record.phase_ordinal} {s.record.phase}",
                s.record.attempt_number,
                s.record.status,
                s.record.seed_dict()["timestamp_utc"],
                s.record.content_hash[:12],
            ]
            for s in page.items
        ]
        rows += [
            [d.run_id[:8], f"{d.phase_ordinal} {d.phase}", d.attempt_number, "DAMAGED", "", d.message[:60]]
            for d in page.damaged
        ]
        rows.sort(key=lambda r: (r[0], int(str(r[1]).split()[0]), r[2]))
        _table(rows, ["run", "phase", "attempt", "status", "timestamp_utc", "hash / note"], title=f"ticket {ticket_id}")
        if page.next_after:
            click.echo(f"more: --after {page.next_after}")

    out.emit(data, table)


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

    Nothing is left to do at teardown: stores fsync or commit before they acknowledge a write.
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
    try:
        cli.main(args=args, prog_name="phaselog", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.NoSuchOption as exc:
        _fail(UsageError(f"{exc.format_message()} (see --help)", field=exc.option_name))
    except click.exceptions.MissingParameter as exc:  # before BadParameter: it is a subclass
        _fail(UsageError(exc.format_message(), field=exc.param.name if exc.param else None, rule="required"))
    except click.exceptions.BadParameter as exc:
        field = exc.param.name if exc.param is not None else None
        _fail(UsageError(exc.format_message(), field=field))
    except click.ClickException as exc:
        _fail(UsageError(exc.format_message()))
    except click.exceptions.Abort:
        _fail(PhaselogError("interrupted"))
    except PhaselogError as exc:
        _fail(exc)
    except BrokenPipeError:
        os._exit(0)  # the reader went away (e.g. `| head`): not an error of ours
    except Exception as exc:
        if os.environ.get("PHASELOG_DEBUG"):
            raise
        if isinstance(exc, UnicodeEncodeError):
            bad = exc.object[exc.start : exc.end]
            if all("\udc80" <= c <= "\udcff" for c in bad):  # bytes in argv that are not UTF-8
                _fail(UsageError(f"an argument is not valid UTF-8 text ({bad!r})", rule="utf-8"))
        _fail(PhaselogError(f"internal error: {type(exc).__name__}: {exc} (set PHASELOG_DEBUG=1 for a traceback)"))


# The audit-trail commands live in their own module; importing it registers them on ``cli``.
from phaselog import cli_state, cli_audit, cli_guard, cli_store  # noqa: E402, F401  # isort: skip - registration order is help order

if __name__ == "__main__":  # pragma: no cover
    main()
