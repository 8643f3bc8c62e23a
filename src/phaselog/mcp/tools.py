"""The MCP server's tools: for each, what a model reads (name, description, argument docs), the
JSON Schemas of its arguments and result, and a body that is one library call rendered by a view.

The bodies hold no logic the library lacks: each calls what the CLI command of the same question
calls and returns the same view (:mod:`phaselog.views.results`), so a tool's result is the CLI's JSON
without its envelope (``success``, ``correlation_id``). Nothing here imports the MCP SDK
(:mod:`phaselog.mcp.server` does), so the catalogue is plain data any test can read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from phaselog.ledger.facade import Ledger
from phaselog.ledger.gates import approval_queue
from phaselog.ledger.judging import judge_and_report
from phaselog.mcp import schemas as s
from phaselog.model.errors import UsageError
from phaselog.model.ids import validate_ticket_id
from phaselog.model.records import parse_timestamp
from phaselog.runner.definition import explain_for
from phaselog.views import results as views
from phaselog.views.catalog import Catalog, check_run_state
from phaselog.views.graph import explanation_json, status_json
from phaselog.views.history import sorted_history

Body = Callable[[Ledger, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Tool:
    """One tool: what the model sees, and the body that answers it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    body: Body
    #: It records something (hidden by --read-only).
    writes: bool = False
    #: It records a person's judgement (listed only with --allow-judgements).
    judges: bool = False


def _ids(required: tuple[str, ...] = ("ticket_id", "run_id"), **more: Any) -> dict[str, Any]:
    props: dict[str, Any] = {"ticket_id": s.TICKET, "run_id": s.RUN, **more}
    return s.obj(props, required)


def _ts(value: str | None, field: str) -> Any:
    if value is None:
        return None
    try:
        return parse_timestamp(value, field=field)
    except UsageError:
        raise
    except Exception as exc:  # the record model's error: say it as bad input of this argument
        raise UsageError(f"argument {field}: {exc}", field=field, rule="datetime") from None


# -- the bodies: one library call each, rendered by the CLI's view -------------------------------------
def list_tickets(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    state = a.get("state")
    if state is not None:
        check_run_state(state)
    return views.tickets(Catalog().tickets(ledger, state=state))


def list_runs(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    ticket_id = validate_ticket_id(a["ticket_id"])
    found = Catalog().runs(ledger, ticket_id)
    return views.runs(ticket_id, found, known=bool(found) or ledger.marker(ticket_id) is not None)


def run_status(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    st = ledger.status(a["ticket_id"], a["run_id"], artifacts_root=a.get("workdir") or ".")
    return status_json(st)  # `phaselog status`'s JSON, with the graph of a pipeline that is no chain


def explain(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    e = explain_for(ledger, a["ticket_id"], a["run_id"], workdir=a.get("workdir"))
    return explanation_json(views.explanation(e), e.status)


def read_checkpoint(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    return views.read(ledger.read(a["ticket_id"], a["run_id"], a["phase"], a.get("attempt")))


def read_logs(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    return ledger.logs(a["ticket_id"], a["run_id"], a["phase"], a.get("attempt")).to_json()  # `logs --json`'s


def validate_checkpoint(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    stored, report = ledger.validate(a["ticket_id"], a["run_id"], a["phase"], a.get("attempt"))
    return views.validation(stored, report)


def list_checkpoints(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    return views.page(ledger.list(a["ticket_id"], a.get("run_id"), after=a.get("after"), limit=a.get("limit")))


def write_checkpoint(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    status = a.get("status", "completed")
    if status == "failed" and not a.get("error"):
        raise UsageError("argument error: a failed attempt needs error (why it failed)", field="error")
    if status == "completed" and a.get("error"):
        raise UsageError("argument error: goes with status failed", field="error")
    result = ledger.write(
        a["ticket_id"],
        a["run_id"],
        a["phase"],
        a.get("payload"),
        repo_commit_map=a.get("repo_commit_map"),
        artifact_paths=a.get("artifact_paths") or (),
        attempt=a.get("attempt"),
        status=status,
        error=a.get("error"),
        started_at=_ts(a.get("started_at"), "started_at"),
        pipeline=a.get("pipeline"),
    )
    return views.written(result)


def record_progress(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    ev = ledger.progress(
        a["ticket_id"],
        a["run_id"],
        a["phase"],
        a["event"],
        attempt=a.get("attempt"),
        step=a.get("step"),
        output=a.get("output"),
        tokens=a.get("tokens"),
        status=a.get("status"),
        pid=None,  # the server outlives no attempt: staleness alone judges one abandoned (as the CLI)
    )
    return {"event": views.progress_event(ev)}


def history(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    entries = sorted_history(ledger, a["ticket_id"], a.get("run_id"), a.get("phase"))
    try:
        return views.history(list(entries))
    finally:
        entries.close()


def diff(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    return views.diffs([ledger.diff(a["ticket_id"], a["a"], a["b"])])


def phase_diffs(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    return views.diffs(list(ledger.phase_diffs(a["ticket_id"], a["run_id"], a["phase"])))


def approvals(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    tickets = [validate_ticket_id(a["ticket_id"])] if a.get("ticket_id") is not None else None
    return views.approvals(*approval_queue(ledger, tickets))


def verify(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    return views.verify_report(ledger.verify(a["ticket_id"], a.get("run_id")))


def can_skip_to(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
    decision = ledger.can_skip_to(a["ticket_id"], a["run_id"], a["phase"], artifacts_root=a.get("artifacts_root"))
    return views.skip_decision(decision)


def _judge(decision: str) -> Body:
    def body(ledger: Ledger, a: dict[str, Any]) -> dict[str, Any]:
        judged = judge_and_report(
            ledger,
            a["ticket_id"],
            a["run_id"],
            a["phase"],
            by=a["by"],
            decision=decision,
            comment=a.get("comment"),
            attempt=a.get("attempt"),
            checkpoint_hash=a.get("checkpoint_hash"),
            via="mcp",
        )
        return views.approval(judged.approval, judged.phase_state, judged.warnings)

    return body


# -- the catalogue ---------------------------------------------------------------------------------------
_ERRORS = " On error the result has isError and a JSON object with error, error_code and field (the argument at fault)."
_STATE = "One of: running, stuck, awaiting_approval, failed, pending, complete, damaged (its latest run's state)."
_HASH = {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "The content hash you were shown (optional)."}

TOOLS: tuple[Tool, ...] = (
    Tool(
        "list_tickets",
        "List every ticket in the store, newest activity first: its pipeline, the state of its latest run, "
        "how many runs. Call it first when you do not know which ticket to look at. Reads only." + _ERRORS,
        s.obj({"state": s.text("Only tickets whose latest run is in this state. " + _STATE, 40)}),
        s.TICKETS,
        list_tickets,
    ),
    Tool(
        "list_runs",
        "List the runs of one ticket (run_id, the name it was given, state, next phase). Call it to find "
        "the run to resume; an unknown ticket returns no runs and a message. Reads only." + _ERRORS,
        s.obj({"ticket_id": s.TICKET}, ("ticket_id",)),
        s.RUNS,
        list_runs,
    ),
    Tool(
        "run_status",
        "The state of every phase of a run (pending, in_progress, completed, failed, awaiting_approval, "
        "stale) and next_phase: the phase to work on now (null when done). Call it before you start or "
        "resume work on a run. awaiting_approval means a person must approve; do not redo the phase. "
        "Reads only." + _ERRORS,
        _ids(workdir=s.WORKDIR),
        s.STATUS,
        run_status,
    ),
    Tool(
        "explain",
        "What `phaselog run` would do with each phase of a run now (run, skip, wait) and why, and who holds "
        "the run. Call it when run_status is not enough to decide where to resume. Reads only." + _ERRORS,
        _ids(workdir=s.WORKDIR),
        s.EXPLANATION,
        explain,
    ),
    Tool(
        "read_checkpoint",
        "Read the latest completed checkpoint of a phase (or one attempt): its payload, artifacts, commits "
        "and metadata. Call it to recover what an earlier phase produced. error_code not_found: the phase "
        "has no completed checkpoint; corrupt: the record is damaged (never use it). Reads only." + _ERRORS,
        _ids(("ticket_id", "run_id", "phase"), phase=s.PHASE, attempt=s.ATTEMPT),
        s.READ,
        read_checkpoint,
    ),
    Tool(
        "read_logs",
        "Read what a phase attempt printed (a shell phase's stdout and stderr, a Python phase's ctx.logger "
        "lines), as the store keeps it: the last cap_bytes of it (dropped_bytes says how much was not kept; "
        "complete is false while the attempt runs). Call it to learn why an attempt failed. error_code "
        "not_found: no such run, phase or attempt, or nothing was printed. Reads only." + _ERRORS,
        _ids(("ticket_id", "run_id", "phase"), phase=s.PHASE, attempt=s.ATTEMPT),
        s.LOGS,
        read_logs,
    ),
    Tool(
        "validate_checkpoint",
        "Check a phase's checkpoint (seed rules, payload schema, hash links): is_valid, errors, warnings. "
        "Call it before you rely on a checkpoint you did not write. Reads only." + _ERRORS,
        _ids(("ticket_id", "run_id", "phase"), phase=s.PHASE, attempt=s.ATTEMPT),
        s.VALIDATION,
        validate_checkpoint,
    ),
    Tool(
        "list_checkpoints",
        "List a ticket's checkpoints (optionally one run's) by run, phase and attempt; failed attempts and "
        "damaged entries apart. Use limit and after (next_after of the last page) for long ones. Reads only." + _ERRORS,
        s.obj(
            {
                "ticket_id": s.TICKET,
                "run_id": s.RUN,
                "limit": {"type": "integer", "minimum": 1, "maximum": 10_000},
                "after": s.text("The next_after cursor of the previous page.", 1_000),
            },
            ("ticket_id",),
        ),
        s.LISTING,
        list_checkpoints,
    ),
    Tool(
        "write_checkpoint",
        "Record that a phase FINISHED (append-only; never while it is still running; use record_progress "
        "for that). payload is the phase's result and must match the phase's payload schema. The attempt "
        "number is the next one unless given. Writes one immutable record. error_code invalid: the "
        "payload breaks the schema (see errors, fix and call again); already_exists: that attempt is "
        "recorded (omit attempt); prerequisite: an earlier phase is not complete; unknown_phase: see "
        "valid_phases." + _ERRORS,
        _ids(
            ("ticket_id", "run_id", "phase"),
            phase=s.PHASE,
            payload={"type": "object", "description": "The phase's result (its payload schema: the pipeline's)."},
            attempt=s.ATTEMPT,
            repo_commit_map={
                "type": "object",
                "additionalProperties": {"type": "string", "maxLength": 64},
                "description": 'Repository name → commit SHA, e.g. {"app": "a1b2c3d"}.',
            },
            artifact_paths={
                "type": "array",
                "items": {"type": "string", "maxLength": 4096},
                "maxItems": 10_000,
                "description": "Relative paths of the files the phase produced.",
            },
            status={"enum": ["completed", "failed"], "description": "completed (default), or failed (with error)."},
            error=s.text("Why the attempt failed (only with status failed)."),
            started_at=s.text("When the phase's work started (ISO-8601 with timezone), for its duration.", 64),
            pipeline=s.text(
                "The pipeline's name (default: the run's recorded one, else ticket-pipeline); only a run's "
                "first write needs it.",
                200,
            ),
        ),
        s.WRITTEN,
        write_checkpoint,
        writes=True,
    ),
    Tool(
        "record_progress",
        "Record a progress event inside a long phase: event start when you begin it, step (with step N) "
        "after each part, so a resumed agent knows how far it got. It writes an event, not a checkpoint: "
        "finish the phase with write_checkpoint." + _ERRORS,
        _ids(
            ("ticket_id", "run_id", "phase", "event"),
            phase=s.PHASE,
            event={"enum": ["start", "step", "complete", "fail", "skip"], "description": "What happened."},
            step={"type": "integer", "minimum": 0, "maximum": 1_000_000, "description": "The step number."},
            attempt=s.ATTEMPT,
            output=s.text("The accumulated output so far (optional).", s.MAX_OUTPUT_CHARS),
            tokens={"type": "integer", "minimum": 0, "maximum": 10**12},
            status=s.text("A short status line."),
        ),
        s.PROGRESS,
        record_progress,
        writes=True,
    ),
    Tool(
        "history",
        "Every record of a ticket in time order (checkpoints, failed attempts, progress, approvals), "
        "optionally one run's or one phase's. Call it to audit what happened. Reads only." + _ERRORS,
        s.obj({"ticket_id": s.TICKET, "run_id": s.RUN, "phase": s.text("Only this phase.", 200)}, ("ticket_id",)),
        s.HISTORY,
        history,
    ),
    Tool(
        "diff",
        "Field-level differences between two attempts, each named RUN:PHASE:ATTEMPT (or a progress event "
        "RUN:PHASE:ATTEMPT:SEQ). Call it to see what a retry changed. Reads only." + _ERRORS,
        s.obj(
            {"ticket_id": s.TICKET, "a": s.text("First reference.", 600), "b": s.text("Second.", 600)},
            ("ticket_id", "a", "b"),
        ),
        s.DIFFS,
        diff,
    ),
    Tool(
        "phase_diffs",
        "Field-level differences between every consecutive attempt of one phase of a run. Reads only." + _ERRORS,
        _ids(("ticket_id", "run_id", "phase"), phase=s.PHASE),
        s.DIFFS,
        phase_diffs,
    ),
    Tool(
        "approvals",
        "Every phase waiting for a person (a gate's approval, or input), oldest first, optionally of one "
        "ticket. A gated phase waits for a PERSON: tell the user, do not try to approve it yourself. "
        "Reads only." + _ERRORS,
        s.obj({"ticket_id": s.TICKET}),
        s.APPROVALS,
        approvals,
    ),
    Tool(
        "verify",
        "Recompute every content hash and link of a ticket (or one run): ok, checked, problems. Call it "
        "when a pipeline is finished, or when you suspect tampering. Reads only." + _ERRORS,
        s.obj({"ticket_id": s.TICKET, "run_id": s.RUN}, ("ticket_id",)),
        s.VERIFY,
        verify,
    ),
    Tool(
        "can_skip_to",
        "May the run skip straight to a phase? allowed is true only if every phase it needs (directly or not; "
        "in a linear pipeline every earlier one) is complete, current and valid; "
        "otherwise blockers says which phase blocks and why (redo that one first). "
        "Call it before resuming at a later phase. Reads only." + _ERRORS,
        _ids(("ticket_id", "run_id", "phase"), phase=s.PHASE, artifacts_root=s.WORKDIR),
        s.SKIP,
        can_skip_to,
    ),
    *(
        Tool(
            verb,
            f"{verb.capitalize()} a gated phase's latest completed checkpoint on behalf of the PERSON named in "
            f"by (recorded with via: mcp). Only offered because a person started this server with "
            f"--allow-judgements; never {verb} your own work unless that person told you to." + _ERRORS,
            _ids(
                ("ticket_id", "run_id", "phase", "by"),
                phase=s.PHASE,
                by=s.text("The person who decides (recorded).", 200),
                comment=s.text("Why (recorded)."),
                attempt=s.ATTEMPT,
                checkpoint_hash=_HASH,
            ),
            s.JUDGED,
            _judge(verb),
            writes=True,
            judges=True,
        )
        for verb in ("approve", "reject")
    ),
)


def offered(*, read_only: bool, allow_judgements: bool) -> dict[str, Tool]:
    """The tools a server started with these flags lists and answers, by name."""
    return {t.name: t for t in TOOLS if not (read_only and t.writes) and not (t.judges and not allow_judgements)}


def call(ledger: Ledger, tools: Mapping[str, Tool], name: str, arguments: Any) -> dict[str, Any]:
    """Check ``arguments`` against the tool's schema and answer (PhaselogError: a tool error)."""
    tool = tools.get(name)
    if tool is None:
        raise UsageError(
            f"no tool {name!r} on this server (read-only servers list no writing tool; approve and reject "
            "exist only with --allow-judgements)",
            field="name",
            rule="unknown_tool",
        )
    return tool.body(ledger, s.check_arguments(tool.input_schema, arguments))
