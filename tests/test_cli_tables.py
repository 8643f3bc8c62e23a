"""The CLI as people read it (issue 19): every table at 80 columns with long names, what waits
for a person (`approvals`, `tickets --state`), `progress show` on a finished attempt, and every
failing command saying ``"success": false``.

Real files stores and real subprocesses (``python -m phaselog``); nothing is mocked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import IMPLEMENT
from helpers import cli_env
from helpers import run_cli as run

TICKET = "CUSTOMER-ONBOARDING-2026-EMEA-REGION-42"
RUN = "nightly-build-for-the-emea-region-with-a-long-name"
VID = "VIDEO-LAUNCH-CAMPAIGN-WINTER-2026-EU"
VRUN = "weekly-render-of-the-winter-campaign-second-try"
JOB = "long-phase-names-job"
#: Every word a table may show whole: run and phase states, and the phases' names.
STATES = {
    "completed", "failed", "awaiting_approval", "in_progress", "pending", "rejected", "damaged", "stale",
    "running", "stuck", "complete", "approved", "interrupted", "blocked", "not_reached", "skipped",
}  # fmt: skip
#: Words that are pieces of others and shown on their own (explain's actions).
WORDS = {"skip", "run", "wait"}
PHASE_NAMES = {"implement", "local_review", "create_pr", "research", "proposal", "script", "prepare_inputs"}
#: A timestamp cell as tables show it: today's time, or another day to the minute.
STAMP_PIECE = re.compile(r"\b\d{4}-\d\d-\d\d\b(?! \d\d:\d\d)")

MANIFEST = {
    "name": JOB,
    "version": "1",
    "phases": [
        {"name": "prepare_inputs", "run": """echo '{"ok": 1}'"""},
        {"name": "summarize_everything_that_was_prepared", "run": """echo '{"ok": 2}'"""},
    ],
}


def ok(root: Path, *args: str) -> dict[str, Any]:
    res = run(root, *args)
    assert res.rc == 0, (args, res.out, res.err)
    out: dict[str, Any] = json.loads(res.out)
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A files store with long ticket and run names: a ticket-pipeline run, a video run waiting at
    its gate (with progress events), a shell job run by the runner."""
    root = tmp_path_factory.mktemp("tables") / "store"
    base = ["--ticket-id", TICKET, "--run-id", RUN]
    ok(root, "write", *base, "--phase", "implement", "--payload", json.dumps(IMPLEMENT))
    artifacts = ["--artifact-paths", '["build/report-of-the-whole-region.csv"]']
    ok(
        root,
        "write",
        *base,
        *artifacts,
        "--phase",
        "implement",
        "--payload",
        json.dumps({**IMPLEMENT, "commit_sha": "b2c3d4e"}),
    )
    v = ["--ticket-id", VID, "--run-id", VRUN]
    ok(root, "init", "--ticket-id", VID, "--title", "Winter launch", "--pipeline", "video-pipeline")
    research = {"summary": "s", "sources": ["https://example.org/a"]}
    ok(root, "write", *v, "--phase", "research", "--payload", json.dumps(research))
    ok(root, "progress", *v, "--phase", "proposal", "--event", "start")
    ok(root, "progress", *v, "--phase", "proposal", "--event", "step", "--step", "1", "--status", "drafting it")
    ok(root, "write", *v, "--phase", "proposal", "--payload", json.dumps({"title": "Cats", "concept": "purring"}))
    (root.parent / "job.yaml").write_text(json.dumps(MANIFEST))
    run(root, "run", "--pipeline-file", str(root.parent / "job.yaml"), "--ticket-id", JOB, "--run-id", RUN)
    return root


def _table_commands() -> list[tuple[str, list[str]]]:
    base = ["--ticket-id", TICKET, "--run-id", RUN]
    v = ["--ticket-id", VID, "--run-id", VRUN]
    job = ["--pipeline-file", "job.yaml", "--ticket-id", JOB, "--run-id", RUN]
    return [
        ("list", ["list", "--ticket-id", TICKET]),
        ("read", ["read", *base, "--phase", "implement"]),
        ("validate", ["validate", *base, "--phase", "implement", "--artifacts-root", "."]),
        ("status", ["status", *v]),
        ("status-ticket", ["status", *base]),
        ("resume", ["resume", *v, "--skip-to", "script"]),
        ("verify", ["verify", "--ticket-id", VID]),
        ("pipelines", ["pipelines"]),
        ("pipelines-one", ["pipelines", "video-pipeline"]),
        ("tickets", ["tickets"]),
        ("tickets-state", ["tickets", "--state", "awaiting_approval"]),
        ("runs", ["runs", "--ticket-id", VID]),
        ("approvals", ["approvals"]),
        ("progress-show", ["progress", "show", *v, "--phase", "proposal", "--all"]),
        ("decisions", ["decisions", "--ticket-id", VID]),
        ("history", ["history", "--ticket-id", VID]),
        ("history-ticket", ["history", "--ticket-id", TICKET]),
        ("doctor", ["doctor"]),
        ("explain", ["explain", *job]),
        ("run", ["run", *job]),
        ("guard-status", ["guard", "status", "--name", "nightly-closeout-of-every-region"]),
    ]


def _tokens(line: str) -> list[str]:
    return [t for t in re.split(r"[\s│┃|]+", line) if t]


@pytest.mark.parametrize(("name", "args"), _table_commands(), ids=[c[0] for c in _table_commands()])
def test_every_table_fits_80_columns_and_breaks_no_state_name_or_timestamp(
    store: Path, name: str, args: list[str]
) -> None:
    env = {**cli_env(store), "COLUMNS": "80"}
    res = run(store, *args, "--format", "table", env=env)
    assert res.out.strip(), (name, res.err)
    assert not res.out.lstrip().startswith("{"), res.out
    lines = res.out.splitlines()
    assert max(map(len, lines)) <= 80, res.out
    whole = STATES | PHASE_NAMES
    for line in lines:
        for token in _tokens(line):
            broken = [w for w in whole if len(token) >= 4 and w.startswith(token) and token not in whole | WORDS]
            assert not broken, f"{name}: {token!r} is a piece of {broken}:\n{res.out}"
        assert not STAMP_PIECE.search(line), f"{name}: a timestamp broken in {line!r}:\n{res.out}"


def test_a_listing_shows_todays_times_as_times_and_states_whole(store: Path) -> None:
    env = {**cli_env(store), "COLUMNS": "80"}
    res = run(store, "tickets", "--format", "table", env=env)
    assert "awaiting_approval" in res.out, res.out
    times = re.findall(r"\b\d\d:\d\d:\d\d\b", res.out)
    assert len(times) == 3, res.out  # each ticket's last activity, written today: a time only
    for ticket in (TICKET, VID):  # too long for 80 columns with the rest: shortened, never broken
        assert ticket in res.out or re.search(re.escape(ticket[:3]) + r"\S*…\S*" + re.escape(ticket[-2:]), res.out)


def test_the_table_renderer_keeps_words_whole_and_wraps_free_text() -> None:
    from phaselog.cli._render import column_widths, fit_cell, short_time, shorten

    assert short_time("2026-12-01T21:13:22.123456Z", today="2026-12-01") == "21:13:22"
    assert short_time("2026-11-30T21:13:22.123456Z", today="2026-12-01") == "2026-11-30 21:13"
    assert shorten("a1b2c3d4-e5f6-7890-abcd-ef1234567890", 11) == "a1b2c…67890"
    text = "the artifact report.csv changed after its checkpoint was written"
    assert fit_cell(text, 20).splitlines() == [
        "the artifact",
        "report.csv changed",
        "after its checkpoint",
        "was written",
    ]
    assert fit_cell("2026-11-30 21:13", 16) == "2026-11-30 21:13"  # one piece: never wrapped at its space
    cells = [["awaiting_approval", "2026-11-30 21:13", "x" * 60, "a note that is free text and may wrap"]]
    widths = column_widths(cells, ["state", "since", "ticket", "note"], 80)
    assert sum(widths) + 3 * 4 + 1 <= 80
    assert widths[:2] == [len("awaiting_approval"), len("2026-11-30 21:13")]


# -- what waits for a person ----------------------------------------------------------------------
def test_approvals_lists_what_waits_for_a_person(store: Path) -> None:
    out = ok(store, "approvals")
    assert out["success"] is True
    assert out["count"] == 1
    (waiting,) = out["approvals"]
    status = ok(store, "status", "--ticket-id", VID, "--run-id", VRUN)
    proposal = next(p for p in status["phases"] if p["phase"] == "proposal")
    read = ok(store, "read", "--ticket-id", VID, "--run-id", VRUN, "--phase", "proposal")
    assert waiting == {
        "ticket_id": VID,
        "run_id": status["run_id"],
        "run_name": VRUN,
        "phase": "proposal",
        "attempt_number": proposal["latest_attempt"],
        "content_hash": read["metadata"]["content_hash"],
        "since": read["checkpoint"]["timestamp_utc"],
        "waiting_for": "approval",
        "input_request": None,
    }
    table = run(store, "approvals", "--format", "table", env={**cli_env(store), "COLUMNS": "160"})
    for shown in (VID, VRUN, "proposal", read["metadata"]["content_hash"][:12], "waiting since"):
        assert shown in table.out, table.out
    assert ok(store, "approvals", "--ticket-id", TICKET)["approvals"] == []


def test_tickets_state_filters_by_the_state_of_the_latest_run(store: Path) -> None:
    every = ok(store, "tickets")["tickets"]
    assert len(every) == 3
    waiting = ok(store, "tickets", "--state", "awaiting_approval")
    assert [t["ticket_id"] for t in waiting["tickets"]] == [VID]
    assert [t["ticket_id"] for t in ok(store, "tickets", "--state", "complete")["tickets"]] == [JOB]
    bad = run(store, "tickets", "--state", "waiting")
    assert bad.rc == 2
    err = json.loads(bad.out)
    assert (err["success"], err["field"], err["rule"]) == (False, "state", "enum")
    assert "awaiting_approval" in err["error"]


# -- progress show on a finished attempt ------------------------------------------------------------
def test_progress_show_all_on_a_finished_attempt_shows_the_newest_attempts_events(store: Path) -> None:
    v = ["--ticket-id", VID, "--run-id", VRUN, "--phase", "proposal"]
    shown = ok(store, "progress", "show", *v, "--all")
    assert [e["event"] for e in shown["events"]] == ["start", "step"]
    assert {e["attempt_number"] for e in shown["events"]} == {1}
    assert shown["event"]["status"] == "drafting it"
    assert ok(store, "progress", "show", *v)["event"]["seq"] == 2
    none = run(store, "progress", "show", "--ticket-id", VID, "--run-id", VRUN, "--phase", "research")
    assert none.rc == 1
    assert json.loads(none.out)["error"] == "phase research has no progress events in its newest attempt"


# -- every failure says "success": false ---------------------------------------------------------------
def _failing(root: Path) -> list[tuple[str, list[str], int]]:
    base = ["--ticket-id", TICKET, "--run-id", RUN]
    (root.parent / "conflicting.jsonl").write_text(run(root, "export", "--ticket-id", TICKET).out)
    failing = {"name": "failing", "version": "1", "phases": [{"name": "one", "run": "exit 3", "retries": 0}]}
    (root.parent / "failing.yaml").write_text(json.dumps(failing))
    return [
        ("resume refused", ["resume", "--ticket-id", VID, "--run-id", VRUN, "--skip-to", "script"], 1),
        ("validate invalid", ["validate", *base, "--phase", "implement", "--artifacts-root", "."], 1),
        ("read unknown phase", ["read", *base, "--phase", "nope"], 2),
        ("status missing run", ["status", "--ticket-id", TICKET], 2),
        ("run failed", ["run", "--ticket-id", "FAILING-1", "--pipeline-file", "failing.yaml"], 1),
        ("explain unknown pipeline", ["explain", "--ticket-id", "FAILING-1", "--pipeline", "no-such-pipeline"], 2),
    ]


def test_every_failing_command_says_success_false(store: Path, tmp_path: Path) -> None:
    failures = _failing(store)
    for name, args, rc in failures:
        res = run(store, *args)
        assert res.rc == rc, (name, res.out, res.err)
        out = json.loads(res.out)
        assert out["success"] is False, (name, out)
        assert out["error"], (name, out)
        assert out["error_code"], (name, out)
    refused = json.loads(run(store, *failures[0][1]).out)
    assert refused["error"] == "cannot skip to script (proposal: attempt 1 awaits approval)"
    assert refused["error_code"] == "blocked"
    assert refused["blockers"] == [
        {"phase": "proposal", "state": "awaiting_approval", "reason": "attempt 1 awaits approval"}
    ]
    # verify and doctor on a tampered copy; import of conflicting records
    copy = tmp_path / "store"
    ok(
        copy,
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "implement",
        "--payload",
        json.dumps(IMPLEMENT),
    )
    (cp,) = copy.glob("checkpoints/*/*/phase_1_implement_a1.yaml")
    cp.write_text(cp.read_text().replace("a1b2c3d", "d4c3b2a"))
    for args in (["verify", "--ticket-id", TICKET], ["doctor"]):
        res = run(copy, *args)
        assert res.rc == 1, (args, res.out)
        out = json.loads(res.out)
        assert (out["success"], bool(out["error"]), bool(out["error_code"])) == (False, True, True), out
    other = tmp_path / "other"
    ok(
        other,
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "implement",
        "--payload",
        json.dumps(IMPLEMENT),
    )
    res = run(other, "import", "--input", str(store.parent / "conflicting.jsonl"))
    assert res.rc == 1, res.out
    out = json.loads(res.out)
    assert (out["success"], out["error_code"]) == (False, "conflict"), out
    # and what succeeds still says so
    assert ok(store, "resume", "--ticket-id", VID, "--run-id", VRUN, "--skip-to", "proposal")["success"] is True
