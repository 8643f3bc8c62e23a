"""Store commands: export, import, copy, prune, store migrate."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import click
from click.core import ParameterSource

from phaselog.cli._render import table, write_spooled
from phaselog.cli._scaffold import CONTEXT, Call, Result, cli, command, in_section
from phaselog.model.durations import parse_duration
from phaselog.model.errors import UsageError

if TYPE_CHECKING:  # a SQL store, only for its migration fields
    from phaselog.stores.sql.store import SqlStore


@command(
    cli,
    "export",
    section="Stores",
    formats=None,
    correlation=False,
    root_help="Files store root.",
    store_help="Store URL.",
)
@click.option("--ticket-id", help="Only this ticket (default: every ticket).")
def export_cmd(call: Call, ticket_id: str | None) -> None:
    """Write every record with its content hash as JSON Lines on stdout, in a stable order.

    Nothing is printed until the export is complete: one that fails prints only its error.

    \b
    Example:
      phaselog export --ticket-id PROJ-1234 > dump.jsonl
    """
    from phaselog.transfer.jsonl import export_records  # lazy: `--help` loads every area
    from phaselog.views import streams  # lazy: `--help` loads every area; only `phaselog export` streams

    # Spooled (memory, then a temporary file), printed only once complete (D110): an export that
    # fails half-way prints its error object alone, never lines that look like a whole export.
    with streams.spool() as out:
        for line in export_records(call.ledger.store, ticket_id):
            out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        write_spooled(out, escape=True)


@command(cli, "import", writes=True, section="Stores")
@click.option(
    "--input",
    "input_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    show_default=True,
    help="JSON Lines file to read ('-': standard input).",
)
def import_cmd(call: Call, input_path: str) -> Result:
    """Read an export (JSON Lines), verify every hash, and add what is missing (idempotent).

    Exit 1 when a record conflicts with a different one already stored (it is left as it is).

    \b
    Example:
      phaselog import --store sqlite:///var/lib/phaselog.db < dump.jsonl
    """
    from phaselog.transfer.jsonl import (  # lazy: `--help` loads every area
        import_records,
        read_lines,
    )

    store = call.ledger.store
    try:
        stream = sys.stdin.buffer if input_path == "-" else open(input_path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"--input: cannot read {input_path}: {exc.strerror}", field="input") from None
    with stream:
        # Read once, line by line (every line is checked before anything is stored).
        rep = import_records(store, _reading(read_lines(stream), input_path))
    return Result(
        rep.to_json(),
        lambda d: table(
            [[c["line"], c["path"], c["message"]] for c in d["conflicts"]],
            ["line", "path", "conflict"],
            title=f"added {d['added']}, already present {d['skipped']}, conflicts {len(d['conflicts'])}"
            + (f", pipeline manifests recorded {d['pipelines_recorded']}" if d["pipelines_recorded"] else ""),
        ),
        exit_code=1 if rep.conflicts else 0,
        error=f"{len(rep.conflicts)} line(s) conflict with records already stored",
        error_code="conflict",
    )


@command(
    cli,
    "copy",
    section="Stores",
    formats=None,
    correlation=False,
    root_help="Source files store root when --from is not given (default ~/.phaselog). Env: PHASELOG_HOME.",
    store_help="Source store URL when --from is not given. Env: PHASELOG_STORE.",
)
@click.option("--from", "src", metavar="URL", help="Source store URL (or path). Default: the current store.")
@click.option("--to", "dst", required=True, metavar="URL", help="Target store URL (or path); created if missing.")
@click.option("--ticket-id", help="Only this ticket.")
@click.option(
    "--progress/--no-progress", "show_progress", default=None, help="Progress bar (default: when stderr is a terminal)."
)
def copy_cmd(call: Call, src: str | None, dst: str, ticket_id: str | None, show_progress: bool | None) -> Result:
    """Copy every record from one store to another, verifying hashes (idempotent).

    The source must exist (a typo is an error, not an empty copy); the target is created if it
    does not exist yet.

    \b
    Examples:
      phaselog copy --from ~/.phaselog --to postgresql://ci@db/phaselog
      PHASELOG_STORE=sqlite:///var/lib/phaselog/ledger.db phaselog copy --to ./backup-store
    """
    from phaselog.transfer.jsonl import (  # lazy: `--help` loads every area
        export_records,
        import_records,
    )

    if src is None:
        call.check_root_and_store()
        src = call.store_url or call.root
    elif _given_on_command_line("store_url") or _given_on_command_line("root"):
        raise UsageError("give --from or --store/--root (the source), not both", field="from")
    source = call.open_store(src, create=False)
    target = call.open_store(dst, create=True)
    # Streamed: the records are read once from the source, checked, and stored run by run.
    lines = export_records(source, ticket_id)
    manifests = getattr(source, "root", None)  # the records were written against the source's manifests
    total = 0

    def counted(n: int) -> None:
        nonlocal total
        total = n

    if show_progress is None:
        show_progress = sys.stderr.isatty()
    if show_progress:
        from rich.progress import Progress  # lazy: rich (~17 ms) loads only for `phaselog copy --progress`

        with Progress(transient=False) as bar:
            task = bar.add_task("copying records", total=None)

            def checked(n: int) -> None:
                counted(n)
                bar.update(task, total=n)

            rep = import_records(
                target, lines, on_record=lambda: bar.advance(task), on_total=checked, pipelines_root=manifests
            )
    else:
        rep = import_records(target, lines, on_total=counted, pipelines_root=manifests)
    shown = src if src is not None else source.url
    return Result(
        {"from": shown, "to": dst, "records": total, **rep.to_json()},
        exit_code=1 if rep.conflicts else 0,
        error=f"{len(rep.conflicts)} record(s) conflict with records already in the target",
        error_code="conflict",
    )


def _reading(lines: Iterator[Any], path: str) -> Iterator[Any]:
    """``lines``, with a failure to read the input (not the store: nothing is stored yet) a UsageError."""
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return
        except OSError as exc:
            raise UsageError(f"--input: cannot read {path}: {exc.strerror}", field="input") from None
        yield line


def _given_on_command_line(param: str) -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False

    return ctx.get_parameter_source(param) == ParameterSource.COMMANDLINE


@command(cli, "prune", section="Stores")
@click.option("--ticket-id", help="Only this ticket (required with --run-id).")
@click.option(
    "--older-than", metavar="DURATION", help="Remove attempts older than this (e.g. 30d); whole runs if all is older."
)
@click.option("--keep-last", type=int, metavar="N", help="Per run and phase, keep the newest N attempts.")
@click.option("--run-id", help="Remove this whole run.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def prune_cmd(
    call: Call,
    ticket_id: str | None,
    older_than: str | None,
    keep_last: int | None,
    run_id: str | None,
    dry_run: bool,
) -> Result:
    """Remove old records without breaking resume or verify; print what went and the space freed.

    Never removes the latest completed attempt of a phase, an approved attempt, or one that a kept
    record (or a forked run) still names — unless the whole run goes.

    \b
    Examples:
      phaselog prune --ticket-id PROJ-1234 --keep-last 3 --dry-run
      phaselog prune --older-than 30d
    """
    from phaselog.ledger.retention import prune  # lazy: only `phaselog prune` needs the retention rules

    rep = prune(
        call.ledger,
        ticket_id,
        older_than=parse_duration(older_than, field="--older-than") if older_than else None,
        keep_last=keep_last,
        run_id=run_id,
        dry_run=dry_run,
    )
    verb = "would remove" if dry_run else "removed"
    return Result(
        rep.to_json(),
        lambda d: table(
            [[r["path"], r.get("kind", "checkpoint")] for r in d["removed"]],
            ["path", "kind"],
            title=f"{verb} {d['removed_count']} record(s), {d['bytes_freed']} bytes; kept {len(d['kept'])} protected",
        ),
    )


@cli.group("store", context_settings=CONTEXT)
def store_group() -> None:
    """Store administration.

    \b
    Example:
      phaselog store migrate --store postgresql://postgres@127.0.0.1/test
    """


in_section(store_group, "Stores")


@command(store_group, "migrate", writes=True)
def store_migrate(call: Call) -> Result:
    """Create or upgrade a SQL store's schema (safe to run concurrently; files stores need none).

    \b
    Example:
      phaselog store migrate --store sqlite:///var/lib/phaselog.db
    """
    call.check_root_and_store()
    # The one place a schema is upgraded: opening a store (for anything else) only checks the version.
    store = call.open_store(call.store_url or call.root, migrate=True)

    from phaselog.stores.base import Capability  # lazy: `--help` loads every area

    sql = cast("SqlStore", store)  # what Capability.MIGRATE declares (the SQL stores have it)
    if Capability.MIGRATE not in store.capabilities or sql.migrated is None:
        data: dict[str, Any] = {"store": store.url, "message": "the files store has no schema to migrate"}
    else:
        before, after = sql.migrated
        data = {
            "store": sql.dialect.describe(),
            "from_version": before,
            "to_version": after,
            "schema_version": sql.schema_version(),
        }
    return Result(data, lambda d: table([[k, v] for k, v in d.items() if k != "correlation_id"], ["field", "value"]))
