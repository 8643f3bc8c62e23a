"""The audit-trail commands on the real CLI: progress, approve, reject, init, decisions, history,
diff, fork, doctor — and status / resume / write where the audit trail changes what they say.

Every call is ``python -m phaselog`` in a subprocess with ``PHASELOG_HOME`` (and ``HOME``) under
tmp_path; stdout must be one JSON document (or a table under ``--format table``), never a
traceback. Exit codes: 0 success, 1 a failed operation or a check that says no, 2 bad usage.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW
from helpers import Result, tree
from helpers import cli_env as env_for
from helpers import run_cli as cli
from phaselog.ledger.progress import DEFAULT_MAX_OUTPUT_BYTES
from phaselog.model.ids import normalize_run_id
from phaselog.stores.files.store import FilesStore

T = "CLI-7"
V = "VID-7"
R = "run-1"
RUN = normalize_run_id(R)
RESEARCH = {"summary": "s", "sources": ["https://example.org/a"]}
PROPOSAL = {"title": "Launch", "concept": "c"}
SCRIPT = {"script_path": "script.md", "word_count": 120}
DECISION = {
    "decision_id": "d1",
    "category": "creative_direction",
    "subject": "tone",
    "options_considered": [
        {"option_id": "a", "label": "Bold", "score": 0.8, "reason": "memorable"},
        {"option_id": "b", "label": "Calm", "score": 0.3, "reason": "safe"},
    ],
    "selected": "a",
    "reason": "fits the brand",
}


def ok(root: Path, *args: str, **kw: Any) -> dict[str, Any]:
    res = cli(root, *args, **kw)
    assert res.rc == 0, res.out + res.err
    data = res.json
    assert data["success"] is True, data
    return data  # type: ignore[no-any-return]


def fails(res: Result, rc: int, code: str) -> dict[str, Any]:
    data = res.json
    assert data["success"] is False, data
    assert data["error_code"] == code, data
    assert isinstance(data["error"], str)
    assert data["error"].strip()
    assert res.rc == rc, (res.rc, data)
    return data  # type: ignore[no-any-return]


def prog(root: Path, event: str, *extra: str, ticket: str = T, phase: str = "implement", **kw: Any) -> dict[str, Any]:
    return ok(
        root,
        "progress",
        "--ticket-id",
        ticket,
        "--run-id",
        R,
        "--phase",
        phase,
        "--event",
        event,
        *extra,
        **kw,
    )


def write(
    root: Path,
    phase: str,
    payload: dict[str, Any] | None,
    *extra: str,
    ticket: str = T,
    run: str = R,
) -> dict[str, Any]:
    args = ["write", "--ticket-id", ticket, "--run-id", run, "--phase", phase, *extra]
    if payload is not None:
        args += ["--payload", json.dumps(payload)]
    return ok(root, *args)


def library(root: Path) -> phaselog.Ledger:
    """Setup that is not itself under test goes through the library (faster than the CLI)."""
    return phaselog.Ledger(FilesStore(root))


@pytest.fixture
def video(root: Path) -> Path:
    """A video ticket (strict order, gates) with research done and a proposal awaiting approval."""
    led = library(root)
    led.init_ticket(V, title="Launch video", pipeline="video-pipeline")
    led.write(V, R, "research", RESEARCH)
    led.write(V, R, "proposal", PROPOSAL)
    return root


# -- progress --------------------------------------------------------------------------------------
def test_progress_start_step_show(root: Path, tmp_path: Path) -> None:
    start = prog(root, "start", "--provider", "claude")["event"]
    assert (start["seq"], start["event"], start["attempt_number"]) == (1, "start", 1)
    # no --pid: nobody vouched for a process (decisions.md: "The CLI records a pipeline's pid only when …")
    assert start["pid"] is None
    assert start["host"]
    assert start["process_start"] is None  # … so no process start time either
    out_file = tmp_path / "out.txt"
    out_file.write_bytes("partial output ✓\n".encode())
    step = prog(
        root,
        "step",
        "--step",
        "2",
        "--tokens",
        "1200",
        "--output-file",
        str(out_file),
        "--status",
        "writing tests",
    )["event"]
    assert step["seq"] == 2
    assert step["step"] == 2
    assert step["tokens"] == 1200
    assert step["output_sha256"] == hashlib.sha256(out_file.read_bytes()).hexdigest()
    assert step["output_length"] == len(out_file.read_bytes())
    assert step["provider"] == "claude"
    assert step["status"] == "writing tests"
    assert len(step["content_hash"]) == 64
    assert "output" not in step  # the text can be 8 MiB: its hash and length identify it
    show = ok(root, "progress", "show", "--ticket-id", T, "--run-id", R, "--phase", "implement")
    assert show["event"]["seq"] == 2
    assert "events" not in show
    assert "output" not in show["event"]
    full = ok(
        root,
        "progress",
        "show",
        "--ticket-id",
        T,
        "--run-id",
        R,
        "--phase",
        "1",
        "--all",
        "--with-output",
    )
    assert [e["seq"] for e in full["events"]] == [1, 2]
    assert full["event"]["output"] == "partial output ✓\n"


def test_progress_output_from_stdin(root: Path) -> None:
    prog(root, "start")
    ev = prog(root, "step", "--output", "-", stdin=b"from a pipe\n")["event"]
    assert ev["output_sha256"] == hashlib.sha256(b"from a pipe\n").hexdigest()


def test_progress_output_over_the_cap_is_refused_and_nothing_written(root: Path, tmp_path: Path) -> None:
    prog(root, "start")
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (DEFAULT_MAX_OUTPUT_BYTES + 1))
    before = tree(root)
    res = cli(
        root,
        "progress",
        "--ticket-id",
        T,
        "--run-id",
        R,
        "--phase",
        "implement",
        "--event",
        "step",
        "--output-file",
        str(big),
    )
    data = fails(res, 1, "too_large")
    assert "nothing was written" in data["error"]
    assert tree(root) == before


@pytest.mark.parametrize(
    ("args", "rc", "code"),
    [
        (["--run-id", R, "--phase", "implement", "--event", "start"], 2, "usage"),  # no ticket
        (["--ticket-id", T, "--run-id", R, "--phase", "implement"], 2, "usage"),  # no event
        (["--ticket-id", T, "--run-id", R, "--phase", "implement", "--event", "begin"], 2, "usage"),
        (
            [
                "--ticket-id",
                T,
                "--run-id",
                R,
                "--phase",
                "implement",
                "--event",
                "step",
                "--step",
                "-1",
            ],
            2,
            "usage",
        ),
        (
            ["--ticket-id", T, "--run-id", R, "--phase", "implement", "--event", "step"],
            1,
            "not_found",
        ),
        (
            ["--ticket-id", T, "--run-id", R, "--phase", "nope", "--event", "start"],
            2,
            "unknown_phase",
        ),
        (
            ["--ticket-id", "../x", "--run-id", R, "--phase", "implement", "--event", "start"],
            2,
            "invalid_id",
        ),
        (
            [
                "--ticket-id",
                T,
                "--run-id",
                R,
                "--phase",
                "implement",
                "--event",
                "start",
                "--attempt",
                "0",
            ],
            2,
            "usage",
        ),
        (
            [
                "--ticket-id",
                T,
                "--run-id",
                R,
                "--phase",
                "implement",
                "--event",
                "start",
                "--output",
                "x.txt",
            ],
            2,
            "usage",
        ),
        (
            [
                "--ticket-id",
                T,
                "--run-id",
                R,
                "--phase",
                "implement",
                "--event",
                "start",
                "--output-file",
                "/nonexistent/x",
            ],
            2,
            "usage",
        ),
        (
            [
                "--ticket-id",
                T,
                "--run-id",
                R,
                "--phase",
                "implement",
                "--event",
                "start",
                "--output-file",
                "a",
                "--output",
                "-",
            ],
            2,
            "usage",
        ),
    ],
)
def test_progress_errors(root: Path, args: list[str], rc: int, code: str) -> None:
    fails(cli(root, "progress", *args), rc, code)
    assert tree(root) == {}


def test_progress_show_with_nothing_in_flight(root: Path) -> None:
    root.mkdir()
    fails(
        cli(root, "progress", "show", "--ticket-id", T, "--run-id", R, "--phase", "implement"),
        1,
        "not_found",
    )


def test_status_and_resume_of_an_attempt_in_progress(root: Path) -> None:
    prog(root, "start")
    prog(root, "step", "--step", "4", "--tokens", "77")
    st = ok(root, "status", "--ticket-id", T, "--run-id", R)
    ph = st["phases"][0]
    assert ph["state"] == "in_progress"
    assert ph["in_flight"]["last_step"] == 4
    assert ph["in_flight"]["tokens"] == 77
    assert ph["in_flight"]["elapsed_sec"] >= 0
    assert ph["in_flight"]["abandoned"] is False
    here = ok(root, "resume", "--ticket-id", T, "--run-id", R, "--skip-to", "implement")
    assert here["allowed"] is True
    assert here["in_progress"]["resume_after"] == 4
    res = cli(root, "resume", "--ticket-id", T, "--run-id", R, "--skip-to", "create_pr")
    assert res.rc == 1
    blocker = res.json["blockers"][0]
    assert blocker["phase"] == "implement"
    assert blocker["state"] == "in_progress"
    assert "resume it after step 4, the last step recorded done" in blocker["reason"]


def test_abandoned_when_the_recorded_process_is_gone(root: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        prog(root, "start", "--pid", str(child.pid))
        assert ok(root, "status", "--ticket-id", T, "--run-id", R)["phases"][0]["in_flight"]["abandoned"] is False
    finally:
        child.kill()
        child.wait()
    ph = ok(root, "status", "--ticket-id", T, "--run-id", R)["phases"][0]
    assert ph["state"] == "in_progress"
    assert ph["in_flight"]["abandoned"] is True
    assert ph["reason"].startswith("abandoned")
    assert str(child.pid) in ph["reason"]
    res = cli(root, "doctor")
    assert res.rc == 1
    assert [f["kind"] for f in res.json["findings"]] == ["abandoned"]


def test_stale_after_from_the_environment(root: Path) -> None:
    prog(root, "start")
    status = ["status", "--ticket-id", T, "--run-id", R]
    assert ok(root, *status)["phases"][0]["in_flight"]["abandoned"] is False  # default 1 h
    limited = ok(root, *status, env=env_for(root, PHASELOG_PROGRESS_STALE_AFTER="0s"))
    assert limited["phases"][0]["in_flight"]["abandoned"] is True
    assert "limit 0 s" in limited["phases"][0]["in_flight"]["abandoned_reason"]
    bad = cli(root, *status, env=env_for(root, PHASELOG_PROGRESS_STALE_AFTER="later"))
    data = fails(bad, 2, "usage")
    assert "PHASELOG_PROGRESS_STALE_AFTER" in data["error"]


def test_write_completes_the_attempt_in_flight(root: Path) -> None:
    prog(root, "start")
    prog(root, "step", "--step", "1")
    assert write(root, "implement", IMPLEMENT)["attempt_number"] == 1
    assert ok(root, "status", "--ticket-id", T, "--run-id", R)["phases"][0]["state"] == "completed"
    fails(
        cli(
            root,
            "progress",
            "--ticket-id",
            T,
            "--run-id",
            R,
            "--phase",
            "implement",
            "--event",
            "step",
            "--attempt",
            "1",
        ),
        1,
        "conflict",
    )


# -- approve / reject / prerequisites --------------------------------------------------------------
def test_approve_binds_to_the_checkpoint_hash(video: Path) -> None:
    st = ok(video, "status", "--ticket-id", V, "--run-id", R)
    assert st["phases"][1]["state"] == "awaiting_approval"
    assert st["next_phase"] == "proposal"
    cp = ok(video, "read", "--ticket-id", V, "--run-id", R, "--phase", "proposal")
    data = ok(
        video,
        "approve",
        "--ticket-id",
        V,
        "--run-id",
        R,
        "--phase",
        "proposal",
        "--by",
        "ana",
        "--comment",
        "good",
    )
    a = data["approval"]
    assert a["checkpoint_hash"] == cp["metadata"]["content_hash"]
    assert (a["decision"], a["by"], a["comment"], a["attempt_number"]) == (
        "approve",
        "ana",
        "good",
        1,
    )
    assert len(a["content_hash"]) == 64
    assert data["phase_state"] == "completed"
    assert data["warnings"] == []
    assert ok(video, "status", "--ticket-id", V, "--run-id", R)["next_phase"] == "script"


def test_reject_until_a_new_attempt_is_approved(video: Path) -> None:
    data = ok(
        video,
        "reject",
        "--ticket-id",
        V,
        "--run-id",
        R,
        "--phase",
        "proposal",
        "--by",
        "bo",
        "--comment",
        "too long",
    )
    assert data["phase_state"] == "rejected"
    assert data["approval"]["decision"] == "reject"
    again = cli(video, "approve", "--ticket-id", V, "--run-id", R, "--phase", "proposal", "--by", "ana")
    assert fails(again, 1, "gate")["rule"] == "rejected"
    blocked = cli(
        video,
        "write",
        "--ticket-id",
        V,
        "--run-id",
        R,
        "--phase",
        "script",
        "--payload",
        json.dumps(SCRIPT),
    )
    assert fails(blocked, 1, "prerequisite")["blockers"][0]["state"] == "rejected"
    write(video, "proposal", PROPOSAL, ticket=V)
    data = ok(video, "approve", "--ticket-id", V, "--run-id", R, "--phase", "proposal", "--by", "ana")
    assert data["approval"]["attempt_number"] == 2
    assert data["phase_state"] == "completed"


def test_approving_a_superseded_attempt_warns(video: Path) -> None:
    write(video, "proposal", PROPOSAL, ticket=V)
    data = ok(
        video,
        "approve",
        "--ticket-id",
        V,
        "--run-id",
        R,
        "--phase",
        "proposal",
        "--attempt",
        "1",
        "--by",
        "ana",
    )
    assert data["phase_state"] == "awaiting_approval"
    assert "superseded" in data["warnings"][0]


@pytest.mark.parametrize(
    ("args", "rc", "code"),
    [
        (["--phase", "research", "--by", "ana"], 1, "gate"),  # not gated
        (["--phase", "proposal"], 2, "usage"),  # no --by
        (["--phase", "proposal", "--by", ""], 2, "usage"),
        (["--phase", "proposal", "--by", "ana", "--attempt", "5"], 1, "not_found"),
        (["--phase", "proposal", "--by", "ana", "--attempt", "0"], 2, "usage"),
        (["--phase", "publish", "--by", "ana"], 1, "not_found"),  # nothing to judge
    ],
)
def test_approve_errors(video: Path, args: list[str], rc: int, code: str) -> None:
    before = tree(video)
    fails(cli(video, "approve", "--ticket-id", V, "--run-id", R, *args), rc, code)
    assert tree(video) == before


def test_prerequisite_refusal_lists_every_blocker(video: Path) -> None:
    before = tree(video)
    res = cli(
        video,
        "write",
        "--ticket-id",
        V,
        "--run-id",
        R,
        "--phase",
        "assets",
        "--payload",
        json.dumps({"assets": []}),
    )
    data = fails(res, 1, "prerequisite")
    assert [(b["phase"], b["state"]) for b in data["blockers"]] == [
        ("proposal", "awaiting_approval"),
        ("script", "pending"),
        ("scene_plan", "pending"),
    ]
    assert all(b["reason"] for b in data["blockers"])
    assert tree(video) == before
    failed = write(video, "assets", None, "--status", "failed", "--error", "no footage", ticket=V)
    assert failed["status"] == "failed"  # failed attempts may always be recorded


def test_hand_edited_predecessor_is_refused_and_verify_reports_it(video: Path) -> None:
    ok(video, "approve", "--ticket-id", V, "--run-id", R, "--phase", "proposal", "--by", "ana")
    seed = video / "checkpoints" / V / RUN / "phase_2_proposal_a1.yaml"
    seed.write_text(seed.read_text("utf-8").replace("concept: c", "concept: edited"), "utf-8")
    res = cli(
        video,
        "write",
        "--ticket-id",
        V,
        "--run-id",
        R,
        "--phase",
        "script",
        "--payload",
        json.dumps(SCRIPT),
    )
    assert fails(res, 1, "prerequisite")["blockers"][0]["phase"] == "proposal"
    ver = cli(video, "verify", "--ticket-id", V)
    assert ver.rc == 1
    paths = {Path(p["path"]).name for p in ver.json["problems"]}
    assert "phase_2_proposal_a1.yaml" in paths


# -- init / decisions ------------------------------------------------------------------------------
def test_init_is_idempotent_and_revisions_append(root: Path) -> None:
    first = ok(
        root,
        "init",
        "--ticket-id",
        V,
        "--title",
        "Launch",
        "--pipeline",
        "video-pipeline",
        "--meta",
        "owner=ana",
        "--meta",
        "team=growth",
    )
    assert first["changed"] is True
    m = first["marker"]
    assert (m["revision"], m["title"], m["pipeline"], m["meta"]) == (
        1,
        "Launch",
        "video-pipeline",
        {"owner": "ana", "team": "growth"},
    )
    before = tree(root)
    same = ok(root, "init", "--ticket-id", V, "--title", "Launch", "--pipeline", "video-pipeline")
    assert same["changed"] is False
    assert same["marker"]["content_hash"] == m["content_hash"]
    assert tree(root) == before
    rev = ok(root, "init", "--ticket-id", V, "--title", "Launch film")
    assert rev["changed"] is True
    assert rev["marker"]["revision"] == 2
    assert rev["marker"]["prev_hash"] == m["content_hash"]
    clash = cli(root, "init", "--ticket-id", V, "--title", "Launch film", "--pipeline", "ticket-pipeline")
    assert fails(clash, 1, "pipeline_mismatch")["recorded"] == "video-pipeline"
    # a run of the ticket defaults to its pipeline
    assert ok(root, "status", "--ticket-id", V, "--run-id", "any-run")["pipeline"] == "video-pipeline"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--title", "x", "--meta", "novalue"], "usage"),
        (["--title", "x", "--meta", "=v"], "usage"),
        (["--title", ""], "usage"),
        (["--meta", "a=b"], "usage"),  # no title
        (["--title", "x", "--pipeline", "nope"], "pipeline_error"),
    ],
)
def test_init_errors(root: Path, args: list[str], code: str) -> None:
    res = cli(root, "init", "--ticket-id", V, *args)
    data = res.json
    assert data["success"] is False
    assert data["error_code"] == code
    assert res.rc in (1, 2)
    assert not (root / "checkpoints" / V / ".markers").exists()


def test_decisions_from_write(root: Path) -> None:
    write(root, "implement", IMPLEMENT, "--decisions", json.dumps([DECISION]))
    write(
        root,
        "local_review",
        LOCAL_REVIEW,
        "--decisions",
        json.dumps([{**DECISION, "selected": "b"}]),
    )
    log = ok(root, "decisions", "--ticket-id", T)
    assert (log["version"], log["ticket"]) == ("1.0", T)
    assert [d["decision_id"] for d in log["decisions"]] == ["d1"]
    d = log["decisions"][0]
    assert d["selected"] == "a"
    assert d["options_considered"] == DECISION["options_considered"]
    assert d["source"]["phase"] == "implement"
    assert d["source"]["checkpoint_path"].endswith("phase_1_implement_a1.yaml")
    assert [c["decision_id"] for c in log["conflicts"]] == ["d1"]


def test_refused_write_does_not_change_decisions(root: Path) -> None:
    write(root, "implement", IMPLEMENT, "--decisions", json.dumps([DECISION]))
    log = ok(root, "decisions", "--ticket-id", T)
    bad = cli(
        root,
        "write",
        "--ticket-id",
        T,
        "--run-id",
        R,
        "--phase",
        "local_review",
        "--payload",
        json.dumps(LOCAL_REVIEW),
        "--decisions",
        json.dumps([{"decision_id": "d2"}]),
    )
    fails(bad, 1, "invalid")
    not_json = cli(
        root,
        "write",
        "--ticket-id",
        T,
        "--run-id",
        R,
        "--phase",
        "local_review",
        "--payload",
        json.dumps(LOCAL_REVIEW),
        "--decisions",
        "[{",
    )
    fails(not_json, 2, "usage")
    again = ok(root, "decisions", "--ticket-id", T, "--correlation-id", log["correlation_id"])
    assert again == log


# -- history / diff / fork -------------------------------------------------------------------------
def test_history_json(video: Path) -> None:
    ok(video, "approve", "--ticket-id", V, "--run-id", R, "--phase", "proposal", "--by", "ana")
    ok(video, "progress", "--ticket-id", V, "--run-id", R, "--phase", "script", "--event", "start")
    h = ok(video, "history", "--ticket-id", V)
    assert h["count"] == len(h["history"]) == 5
    assert [e["kind"] for e in h["history"]] == [
        "marker",
        "checkpoint",
        "checkpoint",
        "approval",
        "progress",
    ]
    assert set(h["history"][0]) >= {
        "at",
        "kind",
        "run_id",
        "phase",
        "attempt_number",
        "seq",
        "summary",
        "hash",
        "record",
    }
    only = ok(video, "history", "--ticket-id", V, "--run-id", R, "--phase", "proposal")
    assert [e["kind"] for e in only["history"]] == ["checkpoint", "approval"]
    fails(cli(video, "history", "--ticket-id", V, "--phase", "nope"), 2, "unknown_phase")


def test_diff_commands(root: Path) -> None:
    write(root, "implement", IMPLEMENT)
    write(root, "implement", {**IMPLEMENT, "commit_sha": "bbbbbbb"})
    one = ok(root, "diff", "--ticket-id", T, f"{R}:implement:1", f"{R}:implement:2")
    assert len(one["diffs"]) == 1
    fields = [c["field"] for c in one["diffs"][0]["changes"]]
    assert "phase_payload.commit_sha" in fields
    every = ok(root, "diff", "--ticket-id", T, "--run-id", R, "--phase", "implement")
    assert every["diffs"] == one["diffs"]
    text = cli(root, "diff", "--ticket-id", T, "--run-id", R, "--phase", "implement", "--format", "text")
    assert text.rc == 0
    assert f"--- {R}:implement:1" in text.out  # the run by the name it was written under (D92)
    assert one["diffs"][0]["a"] == f"{RUN}:implement:1"  # the JSON's reference stays its UUID
    assert "~ phase_payload.commit_sha: 'a1b2c3d' → 'bbbbbbb'" in text.out


@pytest.mark.parametrize(
    ("args", "rc", "code"),
    [
        ([f"{R}:implement:3abc", f"{R}:implement:1"], 2, "usage"),
        ([f"{R}:implement:1", f"{R}:implement:0"], 2, "usage"),
        ([f"{R}:implement:1"], 2, "usage"),  # A without B
        ([], 2, "usage"),  # nothing to compare
        ([f"{R}:implement:1", f"{R}:implement:1:1"], 2, "usage"),  # an attempt and an event
        ([f"{R}:implement:1", f"{R}:implement:9"], 1, "not_found"),
        ([f"{R}:nope:1", f"{R}:implement:1"], 2, "unknown_phase"),
        (
            [f"{R}:implement:1", f"{R}:implement:2", "--run-id", R, "--phase", "implement"],
            2,
            "usage",
        ),
    ],
)
def test_diff_errors(root: Path, args: list[str], rc: int, code: str) -> None:
    write(root, "implement", IMPLEMENT)
    write(root, "implement", IMPLEMENT)
    fails(cli(root, "diff", "--ticket-id", T, *args), rc, code)


def test_fork_command(video: Path) -> None:
    refused = cli(
        video,
        "fork",
        "--ticket-id",
        V,
        "--run-id",
        R,
        "--through",
        "proposal",
        "--new-run-id",
        "run-2",
    )
    data = fails(refused, 1, "prerequisite")
    assert data["blockers"] == [
        {"phase": "proposal", "state": "awaiting_approval", "reason": "attempt 1 awaits approval"}
    ]
    assert not (video / "checkpoints" / V / normalize_run_id("run-2")).exists()
    ok(video, "approve", "--ticket-id", V, "--run-id", R, "--phase", "proposal", "--by", "ana")
    data = ok(
        video,
        "fork",
        "--ticket-id",
        V,
        "--run-id",
        R,
        "--through",
        "proposal",
        "--new-run-id",
        "run-2",
    )
    assert data["run_id"] == normalize_run_id("run-2")
    assert data["forked_from"] == RUN
    assert [c["phase"] for c in data["checkpoints"]] == ["research", "proposal"]
    assert all((video / "checkpoints" / c["checkpoint_path"]).is_file() for c in data["checkpoints"])
    st = ok(video, "status", "--ticket-id", V, "--run-id", "run-2")
    assert st["next_phase"] == "script"
    assert st["completed_phases"] == ["research", "proposal"]
    assert (
        ok(video, "read", "--ticket-id", V, "--run-id", "run-2", "--phase", "proposal")["metadata"]["forked_from"][
            "run_id"
        ]
        == RUN
    )
    ok(video, "verify", "--ticket-id", V)
    fails(
        cli(
            video,
            "fork",
            "--ticket-id",
            V,
            "--run-id",
            R,
            "--through",
            "proposal",
            "--new-run-id",
            "run-2",
        ),
        1,
        "invalid",
    )


# -- doctor ----------------------------------------------------------------------------------------
def test_doctor_exit_codes_and_quarantine(root: Path) -> None:
    write(root, "implement", IMPLEMENT)
    write(root, "local_review", LOCAL_REVIEW)
    assert ok(root, "doctor")["healthy"] is True
    seed = root / "checkpoints" / T / RUN / "phase_2_local_review_a1.yaml"
    seed.write_bytes(b"{{ damaged")
    before = tree(root)
    res = cli(root, "doctor", "--ticket-id", T)
    assert res.rc == 1
    assert [(f["kind"], f["path"]) for f in res.json["findings"]] == [("damaged", f"{T}/{RUN}/{seed.name}")]
    assert tree(root) == before
    q = cli(root, "doctor", "--quarantine")
    assert q.rc == 0, q.out
    moved = q.json["moved"]
    assert {Path(m["from"]).name for m in moved} == {seed.name, ".meta_2_local_review_a1.json"}
    assert all((root / m["to"]).is_file() and (root / m["note"]).is_file() for m in moved)
    assert ok(root, "doctor")["healthy"] is True
    fails(cli(root, "doctor", "--ticket-id", "../etc"), 2, "invalid_id")


# -- every command: tables, help -------------------------------------------------------------------
@pytest.fixture
def busy(video: Path) -> Path:
    """A store where every audit command has something to show."""
    led = library(video)
    led.approve(V, R, "proposal", by="ana")
    led.write(V, R, "script", SCRIPT, decisions=[DECISION])
    led.write(V, R, "script", SCRIPT)
    led.progress(V, R, "scene_plan", "start")
    led.progress(V, R, "scene_plan", "step", step=1)
    return video


TABLES = {
    "progress": (
        ["progress", "--ticket-id", V, "--run-id", R, "--phase", "scene_plan", "--event", "step"],
        0,
    ),
    "progress-show": (
        ["progress", "show", "--ticket-id", V, "--run-id", R, "--phase", "scene_plan", "--all"],
        0,
    ),
    "approve": (
        ["approve", "--ticket-id", V, "--run-id", R, "--phase", "script", "--by", "ana"],
        0,
    ),
    "reject": (["reject", "--ticket-id", V, "--run-id", R, "--phase", "script", "--by", "bo"], 0),
    "init": (["init", "--ticket-id", V, "--title", "Launch video"], 0),
    "decisions": (["decisions", "--ticket-id", V], 0),
    "history": (["history", "--ticket-id", V], 0),
    "diff": (["diff", "--ticket-id", V, "--run-id", R, "--phase", "script"], 0),
    "fork": (
        ["fork", "--ticket-id", V, "--run-id", R, "--through", "proposal", "--new-run-id", "run-3"],
        0,
    ),
    "doctor": (["doctor"], 0),
    "status": (["status", "--ticket-id", V, "--run-id", R], 0),
    "resume": (["resume", "--ticket-id", V, "--run-id", R, "--skip-to", "assets"], 1),
    "verify": (["verify", "--ticket-id", V], 0),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_format_table(busy: Path, name: str) -> None:
    args, rc = TABLES[name]
    res = cli(busy, *args, "--format", "table")
    assert res.rc == rc, res.out + res.err
    assert res.out.strip()
    with pytest.raises(ValueError):
        json.loads(res.out)  # a table for people, not JSON


AUDIT_COMMANDS = [
    "progress",
    "approve",
    "reject",
    "init",
    "decisions",
    "history",
    "diff",
    "fork",
    "doctor",
]


@pytest.mark.parametrize("name", AUDIT_COMMANDS)
def test_help_has_an_example(root: Path, name: str) -> None:
    res = cli(root, name, "--help")
    assert res.rc == 0
    assert "Example" in res.out
    assert f"phaselog {name}" in res.out
