"""The seed-compatible record commands: write, read, validate, list."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

import click

from phaselog.cli._args import attempt as _attempt
from phaselog.cli._args import json_opt, timestamp_opt
from phaselog.cli._render import TABLE_MAX_ROWS, lines, short_time, table
from phaselog.cli._scaffold import Call, Result, Streamed, cli, command
from phaselog.model.errors import PhaselogError, UsageError
from phaselog.model.records import parse_timestamp
from phaselog.stores.base import Damaged, Stored
from phaselog.views import results as views
from phaselog.views.listing import cursor_of, iter_listing

if TYPE_CHECKING:  # records.py is imported by the write itself, not at start-up
    from phaselog.model.records import Status


# -- write ----------------------------------------------------------------------------------------
def _written_table(d: dict[str, Any]) -> str:
    return table(
        [[d["checkpoint_path"], d["attempt_number"], d["status"], d["content_hash"][:12]]],
        ["written", "attempt", "status", "hash"],
    )


@command(cli, pipeline=True, writes=True, section="Record")
@click.option("--ticket-id", required=True, help="Ticket id, e.g. PROJ-1234.")
@click.option("--run-id", required=True, help="Run id: a UUID, or any string (mapped to UUID v5).")
@click.option("--phase", required=True, help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="Attempt number (>= 1). Omitted: the next one, atomically.")
@click.option("--repo-commit-map", metavar="JSON", help='Repo → commit SHA, e.g. \'{"app": "a1b2c3d"}\'.')
@click.option("--artifact-paths", metavar="JSON", help="JSON array of relative artifact paths.")
@click.option("--payload", metavar="JSON", help="Phase payload as JSON, @FILE, or - for stdin.")
@click.option("--timestamp", metavar="ISO", help="Completion time (ISO-8601 with timezone); default now.")
@click.option(
    "--started-at", metavar="ISO", help="When the attempt's work started (ISO-8601 with timezone): its duration."
)
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
def write(
    call: Call,
    ticket_id: str,
    run_id: str,
    phase: str,
    attempt: int | None,
    repo_commit_map: str | None,
    artifact_paths: str | None,
    payload: str | None,
    timestamp: str | None,
    started_at: str | None,
    status: Status,  # click.Choice: one of the two
    error_text: str | None,
    decisions_json: str | None,
    best_effort: bool,
) -> Result:
    """Record one phase attempt (append-only; an existing attempt is never replaced).

    \b
    Example:
      phaselog write --ticket-id PROJ-1234 --run-id a1b2c3d4 --phase implement --attempt 1 \\
        --repo-commit-map '{"omniclaude": "a1b2c3d"}' \\
        --artifact-paths '["src/foo.py", "tests/test_foo.py"]' \\
        --payload '{"branch_name": "feat/PROJ-1234", "commit_sha": "a1b2c3d", "files_changed": ["src/foo.py"]}'
    """
    try:
        ledger = call.ledger
        pl = call.pipeline
        ts = None
        if timestamp is not None:
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
            json_opt(payload, "--payload", dict),
            repo_commit_map=json_opt(repo_commit_map, "--repo-commit-map", dict, str),
            artifact_paths=json_opt(artifact_paths, "--artifact-paths", list, str) or (),
            attempt=_attempt(attempt),
            timestamp=ts,
            pipeline=pl,
            status=status,
            error=error_text,
            decisions=json_opt(decisions_json, "--decisions", list) or (),
            started_at=timestamp_opt(started_at, "--started-at"),
        )
    except Exception as exc:
        if not best_effort:
            raise
        err = exc if isinstance(exc, PhaselogError) else PhaselogError(f"internal error: {type(exc).__name__}: {exc}")
        data = err.to_dict()
        data.update(best_effort=True, correlation_id=call.correlation_id)
        click.echo(f"phaselog: warning: checkpoint not written: {err.message}", err=True)
        return Result(data, envelope=False)
    return Result(views.written(result), _written_table)


# -- read -----------------------------------------------------------------------------------------
def _record_table(d: dict[str, Any]) -> str:
    cp, meta = d["checkpoint"], d["metadata"]
    rows = [[k, json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list) else v] for k, v in cp.items()]
    rows += [["status", meta["status"]], ["content_hash", meta["content_hash"]]]
    if meta.get("error"):
        rows.append(["error", meta["error"]])
    return table(rows, ["field", "value"], title=d.get("checkpoint_path"))


@command(cli, pipeline=True, section="Record")
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--phase", required=True, help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="A specific attempt (default: the latest completed).")
def read(call: Call, ticket_id: str, run_id: str, phase: str, attempt: int | None) -> Result:
    """Read the latest completed checkpoint of a phase (or one attempt).

    \b
    Example:
      phaselog read --ticket-id PROJ-1234 --run-id a1b2c3d4 --phase implement
    """
    stored = call.ledger.read(ticket_id, run_id, phase, _attempt(attempt), pipeline=call.pipeline)
    return Result(views.read(stored), _record_table)


# -- validate -------------------------------------------------------------------------------------
def _validation_table(d: dict[str, Any]) -> str:
    rows = [[i["severity"], i["field"], i["rule"], i["message"]] for i in d["issues"]]
    verdict = "valid" if d["is_valid"] else "INVALID"
    return table(rows, ["severity", "field", "rule", "message"], title=f"{d['checkpoint_path']}: {verdict}")


@command(cli, pipeline=True, section="Record")
@click.option("--ticket-id", required=True)
@click.option("--run-id", required=True)
@click.option("--phase", required=True, help="Phase name or ordinal.")
@click.option("--attempt", type=int, help="A specific attempt (default: the latest completed).")
@click.option(
    "--artifacts-root",
    type=click.Path(file_okay=False),
    help="Also check that every artifact path exists under this folder.",
)
def validate(
    call: Call, ticket_id: str, run_id: str, phase: str, attempt: int | None, artifacts_root: str | None
) -> Result:
    """Check a checkpoint: seed rules, payload schema, hash links, artifacts. Exit 1 if invalid.

    \b
    Example:
      phaselog validate --ticket-id PROJ-1234 --run-id a1b2c3d4 --phase implement
    """
    stored, report = call.ledger.validate(
        ticket_id, run_id, phase, _attempt(attempt), pipeline=call.pipeline, artifacts_root=artifacts_root
    )
    return Result(
        views.validation(stored, report),
        _validation_table,
        exit_code=0 if report.is_valid else 1,
        error=f"the checkpoint is not valid: {len(report.errors)} error(s)",
        error_code="invalid",
    )


# -- list -----------------------------------------------------------------------------------------
@command(cli, "list", section="Record")
@click.option("--ticket-id", required=True)
@click.option("--run-id", help="Only this run.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many records (then use --after).")
@click.option("--after", metavar="CURSOR", help="Continue after this cursor (next_after of the last page).")
def list_cmd(call: Call, ticket_id: str, run_id: str | None, limit: int | None, after: str | None) -> Result | Streamed:
    """List checkpoints ordered by run, phase ordinal and attempt; damaged files under warnings.

    Without --limit the whole listing is streamed (memory stays flat); a table shows at most
    1,000 rows and the --after cursor to continue.

    \b
    Examples:
      phaselog list --ticket-id PROJ-1234
      phaselog list --ticket-id PROJ-1234 --run-id a1b2c3d4 --limit 100
    """
    if limit is None:
        store = call.ledger.store
        iter_listing(store, ticket_id, run_id, after=after)  # bad ids or cursor: an error before any output

        def show_stream(out: IO[str]) -> None:
            entries = iter_listing(store, ticket_id, run_id, after=after)
            shown = list(itertools.islice(entries, TABLE_MAX_ROWS))
            more = next(entries, None) is not None
            out.write(_list_table(ticket_id, shown, cursor_of(shown[-1]) if more else None, capped=more))

        return Streamed(lambda: views.page_stream(iter_listing(store, ticket_id, run_id, after=after)), show_stream)

    page = call.ledger.list(ticket_id, run_id, after=after, limit=limit)
    return Result(views.page(page), lambda _: _list_table(ticket_id, [*page.items, *page.damaged], page.next_after))


def _list_table(
    ticket_id: str, entries: Sequence[Stored | Damaged], next_after: str | None, *, capped: bool = False
) -> str:
    rows: list[list[Any]] = []
    for e in entries:
        if isinstance(e, Damaged):
            rows.append([e.run_id[:8], f"{e.phase_ordinal} {e.phase}", e.attempt_number, "DAMAGED", "", e.message[:60]])
            continue
        r = e.record
        rows.append(
            [
                r.run_id[:8],
                f"{r.phase_ordinal} {r.phase}",
                r.attempt_number,
                r.status,
                short_time(r.seed_dict()["timestamp_utc"]),
                r.content_hash[:12],
            ]
        )
    rows.sort(key=lambda r: (r[0], int(str(r[1]).split()[0]), r[2]))
    more = f"more: --after {next_after}" if next_after else ""
    if capped:
        more += f" (a table shows at most {TABLE_MAX_ROWS:,} rows; --format json lists every record)"
    return lines(
        table(rows, ["run", "phase", "attempt", "status", "time (UTC)", "hash / note"], title=f"ticket {ticket_id}"),
        more,
    )
