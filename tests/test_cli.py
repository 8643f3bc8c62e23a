"""The phaselog command line, run the way users and agents run it.

Exit codes, error objects and "never a traceback" are checked on the real installed CLI in
subprocesses (``python -m phaselog`` with ``PHASELOG_HOME`` under tmp_path, ``HOME`` too, so
``~/.phaselog`` is never touched). In-process calls of ``phaselog.cli.main`` are used only where
many calls are needed (pagination walks). Setup that is not itself under test goes through the
library or plain files.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from helpers import Result, cli_env, command_paths, tree
from helpers import run_cli as run
from phaselog.cli import main
from phaselog.ledger.facade import Ledger
from phaselog.model.ids import normalize_run_id

TICKET = "PROJ-1234"
RUN = "a1b2c3d4-e5f6-7890-abcd-ef1234567890"
RUN_DIR = f"{TICKET}/{RUN}"
SHORT_RUN = "a1b2c3d4"
SHORT_RUN_UUID = "4fa2159f-9c61-5f8b-9ae5-28692b46cbd7"  # what the seed tool makes of it
PHASES = ["implement", "local_review", "create_pr", "pr_release_ready", "ready_for_merge"]
SEED_FIELDS = [
    "schema_version",
    "run_id",
    "ticket_id",
    "phase",
    "timestamp_utc",
    "repo_commit_map",
    "artifact_paths",
    "attempt_number",
    "phase_payload",
]
COMMANDS = ["write", "read", "validate", "list", "status", "resume", "verify", "pipelines"]
PAYLOADS: dict[str, dict[str, Any]] = {
    "implement": {
        "branch_name": "feat/PROJ-1234",
        "commit_sha": "a1b2c3d",
        "files_changed": ["src/foo.py"],
    },
    "local_review": {"iteration_count": 1, "issue_fingerprints": [], "last_clean_sha": "a1b2c3d"},
    "create_pr": {"pr_url": "https://github.com/o/r/pull/1", "pr_number": 1, "head_sha": "a1b2c3d"},
    "pr_release_ready": {"last_review_sha": "a1b2c3d", "issue_fingerprints": []},
    "ready_for_merge": {"label_applied_at": "2026-02-09T18:01:58Z"},
}
FIXTURE_FILE = (
    Path(__file__).parent
    / "fixtures"
    / "seed-tool-files"
    / "checkpoints"
    / "OMN-2143"
    / SHORT_RUN_UUID
    / "phase_1_implement_a1.yaml"
)

# Seed 000's "CLI Usage" section, verbatim (only the script path is ours, and {ticket_id} is
# filled in below).
SEED_PREFIX = "python ${CLAUDE_PLUGIN_ROOT}/hooks/lib/checkpoint_manager.py"
SEED_WRITE = """\
python ${CLAUDE_PLUGIN_ROOT}/hooks/lib/checkpoint_manager.py write \\
  --ticket-id {ticket_id} \\
  --run-id a1b2c3d4-e5f6-7890-abcd-ef1234567890 \\
  --phase implement \\
  --attempt 1 \\
  --repo-commit-map '{"omniclaude": "a1b2c3d"}' \\
  --artifact-paths '["src/foo.py", "tests/test_foo.py"]' \\
  --payload '{"branch_name": "feat/{ticket_id}", "commit_sha": "a1b2c3d", "files_changed": ["src/foo.py"]}'
"""
SEED_READ = """\
python ${CLAUDE_PLUGIN_ROOT}/hooks/lib/checkpoint_manager.py read \\
  --ticket-id {ticket_id} \\
  --run-id a1b2c3d4-e5f6-7890-abcd-ef1234567890 \\
  --phase implement
"""
SEED_VALIDATE = """\
python ${CLAUDE_PLUGIN_ROOT}/hooks/lib/checkpoint_manager.py validate \\
  --ticket-id {ticket_id} \\
  --run-id a1b2c3d4-e5f6-7890-abcd-ef1234567890 \\
  --phase implement
"""
SEED_LIST_TICKET = """\
python ${CLAUDE_PLUGIN_ROOT}/hooks/lib/checkpoint_manager.py list \\
  --ticket-id {ticket_id}
"""
SEED_LIST_RUN = """\
python ${CLAUDE_PLUGIN_ROOT}/hooks/lib/checkpoint_manager.py list \\
  --ticket-id {ticket_id} \\
  --run-id a1b2c3d4-e5f6-7890-abcd-ef1234567890
"""


def seed_args(example: str, ticket: str = TICKET) -> list[str]:
    """The arguments of a seed 000 example command, as phaselog takes them."""
    text = example.replace("{ticket_id}", ticket).replace("\\\n", " ")
    assert text.startswith(SEED_PREFIX)
    return shlex.split(text[len(SEED_PREFIX) :])


# -- running the CLI -------------------------------------------------------------------------------
def call(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """Run ``phaselog.cli.main`` in process (PHASELOG_HOME comes from monkeypatch)."""
    try:
        main(list(args))
        rc = 0
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    cap = capsys.readouterr()
    assert "Traceback" not in cap.out
    return Result(rc, cap.out, cap.err)


def write(root: Path, phase: str, *extra: str, run_id: str = RUN, ticket: str = TICKET) -> dict[str, Any]:
    """A write that must succeed; returns its JSON."""
    payload = json.dumps(PAYLOADS[phase]) if phase in PAYLOADS else None
    args = ["write", "--ticket-id", ticket, "--run-id", run_id, "--phase", phase, *extra]
    if payload is not None and "--payload" not in extra and "--status" not in extra:
        args += ["--payload", payload]
    res = run(root, *args)
    assert res.rc == 0, res.out + res.err
    return res.json


def assert_error(res: Result, rc: int, code: str) -> dict[str, Any]:
    """The failure contract: one JSON object on stdout (success, error, error_code), exit rc."""
    data = res.json
    assert isinstance(data, dict), data
    assert data.get("success") is False, data
    assert isinstance(data.get("error"), str), data
    assert data["error"].strip(), data
    assert data.get("error_code") == code, data
    assert res.rc == rc, (res.rc, data)
    return data


@pytest.fixture
def seeded(root: Path) -> Path:
    """A root holding seed 000's example checkpoint, written by the seed's example command."""
    res = run(root, *seed_args(SEED_WRITE))
    assert res.rc == 0, res.out
    return root


# -- seed 000 examples, verbatim -------------------------------------------------------------------
def test_seed_write_example(root: Path) -> None:
    res = run(root, *seed_args(SEED_WRITE))
    assert res.rc == 0, res.out
    data = res.json
    assert {"success", "checkpoint_path", "correlation_id"} <= data.keys()
    assert data["success"] is True
    assert data["checkpoint_path"] == f"{RUN_DIR}/phase_1_implement_a1.yaml"
    assert (root / "checkpoints" / data["checkpoint_path"]).is_file()
    uuid.UUID(data["correlation_id"])


def test_seed_read_example(seeded: Path) -> None:
    res = run(seeded, *seed_args(SEED_READ))
    assert res.rc == 0
    data = res.json
    assert data["success"] is True
    uuid.UUID(data["correlation_id"])
    cp = data["checkpoint"]
    assert list(cp) == SEED_FIELDS
    assert cp["schema_version"] == "1.0.0"
    assert (cp["ticket_id"], cp["run_id"], cp["phase"], cp["attempt_number"]) == (
        TICKET,
        RUN,
        "implement",
        1,
    )
    assert cp["repo_commit_map"] == {"omniclaude": "a1b2c3d"}
    assert cp["artifact_paths"] == ["src/foo.py", "tests/test_foo.py"]
    assert cp["phase_payload"] == {"phase": "implement", **PAYLOADS["implement"]}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", cp["timestamp_utc"])


def test_seed_validate_example(seeded: Path) -> None:
    res = run(seeded, *seed_args(SEED_VALIDATE))
    assert res.rc == 0
    data = res.json
    assert {
        "is_valid",
        "success",
        "errors",
        "warnings",
        "correlation_id",
        "checkpoint",
    } <= data.keys()
    assert data["is_valid"] is True
    assert data["success"] is True
    assert data["errors"] == []
    assert data["warnings"] == []
    assert data["checkpoint"]["phase"] == "implement"


def test_seed_list_examples(seeded: Path, ledger: Ledger) -> None:
    ledger.write(TICKET, "other-run", "implement", PAYLOADS["implement"])
    everything = run(seeded, *seed_args(SEED_LIST_TICKET))
    one_run = run(seeded, *seed_args(SEED_LIST_RUN))
    for res, count in ((everything, 2), (one_run, 1)):
        assert res.rc == 0
        data = res.json
        assert {"success", "count", "checkpoints", "correlation_id"} <= data.keys()
        assert data["success"] is True
        assert data["count"] == count == len(data["checkpoints"])
        assert all(list(cp) == SEED_FIELDS for cp in data["checkpoints"])
    assert [cp["run_id"] for cp in one_run.json["checkpoints"]] == [RUN]
    assert {cp["run_id"] for cp in everything.json["checkpoints"]} == {
        RUN,
        normalize_run_id("other-run"),
    }


def test_correlation_id_is_echoed(seeded: Path) -> None:
    res = run(seeded, *seed_args(SEED_READ), "--correlation-id", "job-42")
    assert res.json["correlation_id"] == "job-42"
    err = run(seeded, *seed_args(SEED_WRITE), "--correlation-id", "job-43")
    assert assert_error(err, 1, "already_exists")["correlation_id"] == "job-43"


def test_short_run_id_maps_like_the_seed_tool(root: Path) -> None:
    data = write(root, "implement", run_id=SHORT_RUN)
    assert data["checkpoint_path"] == f"{TICKET}/{SHORT_RUN_UUID}/phase_1_implement_a1.yaml"
    res = run(root, "read", "--ticket-id", TICKET, "--run-id", SHORT_RUN_UUID.upper(), "--phase", "1")
    assert res.rc == 0
    assert res.json["checkpoint"]["run_id"] == SHORT_RUN_UUID


def test_reads_the_seed_tools_own_files(seed_root: Path) -> None:
    res = run(seed_root, "list", "--ticket-id", "OMN-2143")
    assert res.rc == 0
    got = [(c["phase"], c["attempt_number"]) for c in res.json["checkpoints"]]
    assert got == [
        ("implement", 1),
        ("implement", 2),
        ("local_review", 1),
        ("create_pr", 1),
        ("ready_for_merge", 1),
    ]
    read = run(seed_root, "read", "--ticket-id", "OMN-2143", "--run-id", SHORT_RUN, "--phase", "implement")
    assert read.rc == 0
    assert read.json["checkpoint"]["attempt_number"] == 2


# -- every failure: JSON object, exact error_code, exit code ---------------------------------------
def test_already_exists_exit_1_and_original_untouched(seeded: Path) -> None:
    path = seeded / "checkpoints" / RUN_DIR / "phase_1_implement_a1.yaml"
    before = path.read_bytes()
    args = seed_args(SEED_WRITE)
    args[args.index("--payload") + 1] = json.dumps({**PAYLOADS["implement"], "branch_name": "other"})
    data = assert_error(run(seeded, *args), 1, "already_exists")
    assert data["next_attempt"] == 2
    assert path.read_bytes() == before


def test_unknown_phase_exit_2_lists_valid_phases(root: Path) -> None:
    res = run(
        root,
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "deploy",
        "--payload",
        "{}",
    )
    data = assert_error(res, 2, "unknown_phase")
    assert data["valid_phases"] == PHASES
    assert "deploy" in data["error"]
    assert all(p in data["error"] for p in PHASES)
    root.mkdir()  # an existing, empty store: a read of a store that does not exist fails before the phase is looked at
    for cmd in (["read"], ["validate"], ["resume", "--skip-to"]):
        args = [*cmd, "deploy"] if cmd[0] == "resume" else [*cmd, "--phase", "deploy"]
        res = run(root, args[0], "--ticket-id", TICKET, "--run-id", RUN, *args[1:])
        assert assert_error(res, 2, "unknown_phase")["valid_phases"] == PHASES


def test_unknown_ordinal_exit_2(root: Path) -> None:
    root.mkdir()
    for bad in ("0", "6", "-1"):
        res = run(root, "read", "--ticket-id", TICKET, "--run-id", RUN, "--phase", bad)
        assert_error(res, 2, "unknown_phase")


def test_invalid_payload_exit_1_lists_field_and_rule(root: Path) -> None:
    payload = {
        "branch_name": "x",
        "commit_sha": "NOT-A-SHA",
        "files_changed": ["/etc/passwd"],
        "extra": 1,
    }
    res = run(
        root,
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "implement",
        "--payload",
        json.dumps(payload),
    )
    data = assert_error(res, 1, "invalid")
    fields = {e["field"]: e["rule"] for e in data["errors"]}
    assert "phase_payload.commit_sha" in fields
    assert "git-sha" in fields["phase_payload.commit_sha"]
    assert "phase_payload.files_changed.0" in fields
    assert any("additionalProperties" in r for r in fields.values())
    assert all(e["message"] for e in data["errors"])
    assert "phase_payload.commit_sha" in data["error"]
    assert "git-sha" in data["error"]
    assert tree(root) == {}


def test_missing_payload_field_is_named(root: Path) -> None:
    res = run(
        root,
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "create_pr",
        "--payload",
        json.dumps({"pr_url": "https://x.test/pull/1", "head_sha": "a1b2c3d"}),
    )
    data = assert_error(res, 1, "invalid")
    assert "pr_number" in data["error"]
    assert any(e["rule"].endswith("required") for e in data["errors"])


@pytest.mark.parametrize("option", ["--payload", "--repo-commit-map", "--artifact-paths"])
def test_bad_json_exit_2_names_the_option(root: Path, option: str) -> None:
    args = ["write", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "implement"]
    if option != "--payload":
        args += ["--payload", json.dumps(PAYLOADS["implement"])]
    data = assert_error(run(root, *args, option, "{not json"), 2, "usage")
    assert option in data["error"]
    assert data["field"] == option
    assert data["rule"] == "json"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--payload", "[1, 2]"),
        ("--repo-commit-map", '["a1b2c3d"]'),
        ("--repo-commit-map", '{"app": 7}'),
        ("--artifact-paths", '{"a": "b"}'),
        ("--artifact-paths", '["ok.txt", null]'),
    ],
)
def test_json_of_the_wrong_shape_exit_2(root: Path, option: str, value: str) -> None:
    args = ["write", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "implement", option, value]
    if option != "--payload":
        args += ["--payload", json.dumps(PAYLOADS["implement"])]
    data = assert_error(run(root, *args), 2, "usage")
    assert option in data["error"]
    assert data["rule"] == "type"


def test_missing_option_exit_2(root: Path) -> None:
    data = assert_error(run(root, "write", "--ticket-id", TICKET, "--phase", "implement"), 2, "usage")
    assert "--run-id" in data["error"]
    assert data["field"] == "run_id"
    assert data["rule"] == "required"


def test_unknown_command_and_option_exit_2(root: Path) -> None:
    data = assert_error(run(root, "frobnicate"), 2, "usage")
    assert "frobnicate" in data["error"]
    data = assert_error(run(root, "list", "--ticket-id", TICKET, "--bogus"), 2, "usage")
    assert "--bogus" in data["error"]


@pytest.mark.parametrize(
    ("ticket", "rule"),
    [
        ("../etc", "leading_char"),
        ("PROJ 1", "charset"),
        ("a/b", "charset"),
        ("x" * 65, "max_length"),
        ("A..B", "traversal"),
        ("", "non_empty"),
    ],
)
def test_invalid_ticket_id_exit_2(root: Path, ticket: str, rule: str) -> None:
    for args in (
        ["write", "--run-id", RUN, "--phase", "1", "--payload", "{}"],
        ["list"],
        ["verify"],
    ):
        data = assert_error(run(root, args[0], "--ticket-id", ticket, *args[1:]), 2, "invalid_id")
        assert data["field"] == "ticket_id"
        assert data["rule"] == rule
    assert tree(root) == {}


def test_invalid_run_id_exit_2(root: Path) -> None:
    data = assert_error(
        run(root, "read", "--ticket-id", TICKET, "--run-id", "a\x01b", "--phase", "1"),
        2,
        "invalid_id",
    )
    assert data["field"] == "run_id"


def test_not_found_exit_1(seeded: Path) -> None:
    base = ["--ticket-id", TICKET, "--run-id", RUN]
    data = assert_error(run(seeded, "read", *base, "--phase", "create_pr"), 1, "not_found")
    assert "create_pr" in data["error"]
    assert_error(run(seeded, "read", *base, "--phase", "implement", "--attempt", "99"), 1, "not_found")
    assert_error(run(seeded, "validate", *base, "--phase", "local_review"), 1, "not_found")
    assert_error(
        run(seeded, "read", "--ticket-id", "NOPE-1", "--run-id", RUN, "--phase", "1"),
        1,
        "not_found",
    )


def test_corrupt_file_exit_1(seeded: Path) -> None:
    write(seeded, "implement")  # attempt 2
    rel = f"{RUN_DIR}/phase_1_implement_a2.yaml"
    (seeded / "checkpoints" / rel).write_bytes(b"schema_version: [1.0\n\x00\xff garbled")
    base = ["--ticket-id", TICKET, "--run-id", RUN, "--phase", "implement"]
    data = assert_error(run(seeded, "read", *base), 1, "corrupt")
    assert data["path"] == rel
    assert data["newest_intact_attempt"] == 1
    assert_error(run(seeded, "read", *base, "--attempt", "2"), 1, "corrupt")
    assert_error(run(seeded, "validate", *base), 1, "corrupt")
    assert run(seeded, "read", *base, "--attempt", "1").rc == 0
    listing = run(seeded, "list", "--ticket-id", TICKET)
    assert listing.rc == 0
    assert listing.json["count"] == 1
    assert [w["path"] for w in listing.json["warnings"]] == [rel]
    verify = run(seeded, "verify", "--ticket-id", TICKET)
    assert verify.rc == 1
    assert verify.json["ok"] is False
    assert any(p["path"] == rel and p["damaged"] and p["rule"] == "yaml_syntax" for p in verify.json["problems"])


@pytest.mark.parametrize(
    ("extra", "rc", "code", "field"),
    [
        (["--timestamp", "yesterday"], 2, "usage", "timestamp"),
        (["--timestamp", "2026-01-02T03:04:05"], 2, "usage", "timestamp"),  # no timezone
        (["--attempt", "0"], 2, "usage", "attempt"),
        (["--attempt", "one"], 2, "usage", "attempt"),
        (["--status", "failed"], 2, "usage", "error"),  # without --error
        (["--error", "why"], 2, "usage", "error"),  # without --status failed
        (["--status", "done"], 2, "usage", "status"),
        (["--payload", "@does-not-exist.json"], 2, "usage", "--payload"),
        (["--artifact-paths", '["../outside.txt"]'], 1, "invalid", None),
        (["--artifact-paths", '["/abs/path.txt"]'], 1, "invalid", None),
        (["--repo-commit-map", '{"app": "XYZ"}'], 1, "invalid", None),
        (["--pipeline", "no-such-pipeline"], 1, "pipeline_error", None),
        (["--pipeline", "video-pipeline", "--pipeline-file", "x.yaml"], 2, "usage", "pipeline"),
        (["--store", "file:///nowhere"], 2, "usage", "store"),  # with --root below: not both
    ],
)
def test_write_refusals(root: Path, extra: list[str], rc: int, code: str, field: str | None) -> None:
    args = ["write", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "implement"]
    if "--payload" not in extra:
        args += ["--payload", json.dumps(PAYLOADS["implement"])]
    if "--store" in extra:
        args += ["--root", str(root)]
    data = assert_error(run(root, *args, *extra), rc, code)
    if field is not None:
        assert data["field"] == field
    if code == "invalid":
        assert data["errors"]
        assert all({"field", "rule", "message"} <= e.keys() for e in data["errors"])
        assert data["errors"][0]["field"] in data["error"]
    assert tree(root) == {}


def test_list_usage_errors_exit_2(root: Path) -> None:
    base = ["list", "--ticket-id", TICKET]
    assert assert_error(run(root, *base, "--limit", "0"), 2, "usage")["field"] == "limit"
    assert assert_error(run(root, *base, "--limit", "many"), 2, "usage")["field"] == "limit"
    assert assert_error(run(root, *base, "--after", "not-a-cursor"), 2, "usage")["field"] == "after"


def test_input_that_is_not_utf8_is_a_usage_error(root: Path, tmp_path: Path) -> None:
    base = ["write", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "implement"]
    bad = tmp_path / "payload.bin"
    bad.write_bytes(b"\xff\xfe{}")
    assert assert_error(run(root, *base, "--payload", f"@{bad}"), 2, "usage")["rule"] == "utf-8"
    assert assert_error(run(root, *base, "--payload", "-", stdin=b"\xff{}"), 2, "usage")["rule"] == "utf-8"
    surrogate = '{"branch_name": "\\ud800", "commit_sha": "a1b2c3d", "files_changed": []}'
    assert assert_error(run(root, *base, "--payload", surrogate), 2, "usage")["field"] == "--payload"
    failed = [
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "implement",
        "--status",
        "failed",
    ]
    assert_error(run(root, *failed, "--error", b"bad \xff byte"), 2, "usage")
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    assert assert_error(run(root, *base, "--payload", "-", stdin=deep), 2, "usage")["field"] == "--payload"
    assert not [p for p in tree(root) if "phase_" in p or ".failed_" in p or ".meta_" in p]


NASTY: list[list[str | bytes]] = [
    [],
    ["--version"],
    ["write"],
    ["write", "--ticket-id"],
    ["list", "--ticket-id", TICKET, "--limit", "-5"],
    ["list", "--ticket-id", TICKET, "--after", "x:1:1"],
    ["list", "--ticket-id", TICKET, "--format", "xml"],
    ["read", "--ticket-id", TICKET, "--run-id", "", "--phase", "1"],
    ["read", "--ticket-id", TICKET, "--run-id", RUN, "--phase", ""],
    [
        "read",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "1",
        "--attempt",
        "99999999999999999999",
    ],
    ["status", "--ticket-id", TICKET, "--run-id", "x" * 5000],
    ["resume", "--ticket-id", TICKET, "--run-id", RUN],
    ["verify", "--ticket-id", b"\xff\xfe"],
    ["pipelines", "../../etc/passwd"],
    ["pipelines", "nope", "--format", "table"],
    [
        "validate",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "1",
        "--artifacts-root",
        "/nonexistent",
    ],
    [
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "1",
        "--pipeline-file",
        "/dev/null",
    ],
    ["write", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "1", "--payload", "NaN"],
    [
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "1",
        "--timestamp",
        "2026-13-45T99:99:99Z",
    ],
]


@pytest.mark.parametrize("args", NASTY, ids=lambda a: " ".join(map(str, a))[:60] or "<no args>")
def test_never_a_traceback(root: Path, args: list[str | bytes]) -> None:
    res = run(root, *args)  # run() asserts: no "Traceback", stdout is UTF-8
    if res.rc != 0 and "table" in args:  # an error for people: lines on stderr, nothing on stdout
        assert res.out == ""
        assert res.err.startswith("error: ")
        assert res.rc in (1, 2)
    elif res.rc != 0:
        assert_error(res, res.rc, res.json["error_code"])
        assert res.rc in (1, 2)
    assert "internal error" not in res.out + res.err


def test_errors_under_format_table_are_for_people(seeded: Path) -> None:
    args = ["read", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "create_pr"]
    res = run(seeded, *args, "--format", "table")
    assert res.rc == 1
    assert res.out == ""
    assert res.err.startswith("error: ")
    assert "error_code: not_found" in res.err
    assert_error(run(seeded, *args), 1, "not_found")  # JSON stays the default


# -- refused writes leave nothing behind -----------------------------------------------------------
REFUSED: dict[str, list[str]] = {
    "already_exists": [
        "--phase",
        "implement",
        "--attempt",
        "1",
        "--payload",
        json.dumps(PAYLOADS["implement"]),
    ],
    "unknown_phase": ["--phase", "deploy", "--payload", "{}"],
    "invalid_payload": [
        "--phase",
        "implement",
        "--payload",
        '{"branch_name": "", "commit_sha": "z", "files_changed": []}',
    ],
    "bad_json": ["--phase", "implement", "--payload", "{"],
    "bad_artifact": [
        "--phase",
        "implement",
        "--payload",
        json.dumps(PAYLOADS["implement"]),
        "--artifact-paths",
        '["a/../../b"]',
    ],
    "pipeline_mismatch": ["--phase", "research", "--pipeline", "video-pipeline", "--payload", "{}"],
    "bad_timestamp": [
        "--phase",
        "local_review",
        "--payload",
        json.dumps(PAYLOADS["local_review"]),
        "--timestamp",
        "soon",
    ],
    "failed_without_error": ["--phase", "local_review", "--status", "failed"],
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_write_leaves_no_file(seeded: Path, case: str) -> None:
    before = tree(seeded)
    assert len(before) >= 2  # the seed example's checkpoint and its metadata
    res = run(seeded, "write", "--ticket-id", TICKET, "--run-id", RUN, *REFUSED[case])
    assert res.rc in (1, 2)
    assert res.json["success"] is False
    assert tree(seeded) == before
    assert not list(seeded.rglob(".tmp-*"))


# -- --best-effort ---------------------------------------------------------------------------------
def test_best_effort_turns_a_failed_write_into_a_warning(seeded: Path) -> None:
    before = tree(seeded)
    for args in (REFUSED["already_exists"], REFUSED["unknown_phase"], REFUSED["invalid_payload"]):
        res = run(seeded, "write", "--ticket-id", TICKET, "--run-id", RUN, *args, "--best-effort")
        assert res.rc == 0
        assert "warning" in res.err.lower()
        assert res.json["success"] is False
        assert res.json["best_effort"] is True
        assert res.json["error_code"] in ("already_exists", "unknown_phase", "invalid")
    assert tree(seeded) == before
    ok = run(
        seeded,
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "local_review",
        "--payload",
        json.dumps(PAYLOADS["local_review"]),
        "--best-effort",
    )
    assert ok.rc == 0
    assert ok.json["success"] is True
    assert ok.err == ""


def test_without_best_effort_a_failed_write_exits_nonzero(seeded: Path) -> None:
    res = run(seeded, "write", "--ticket-id", TICKET, "--run-id", RUN, *REFUSED["already_exists"])
    assert res.rc == 1
    assert res.err == ""


# -- --format table and --help, every command ------------------------------------------------------
def _table_commands() -> list[tuple[str, list[str], int]]:
    base = ["--ticket-id", TICKET, "--run-id", RUN]
    return [
        (
            "write",
            [
                "write",
                *base,
                "--phase",
                "local_review",
                "--payload",
                json.dumps(PAYLOADS["local_review"]),
            ],
            0,
        ),
        ("read", ["read", *base, "--phase", "implement"], 0),
        ("validate", ["validate", *base, "--phase", "implement"], 0),
        (
            "validate-invalid",
            ["validate", *base, "--phase", "implement", "--artifacts-root", "."],
            1,
        ),
        ("list", ["list", "--ticket-id", TICKET], 0),
        ("status", ["status", *base], 0),
        ("resume", ["resume", *base, "--skip-to", "create_pr"], 1),
        ("resume-allowed", ["resume", *base, "--skip-to", "local_review"], 0),
        ("verify", ["verify", "--ticket-id", TICKET], 0),
        ("pipelines", ["pipelines"], 0),
        ("pipelines-one", ["pipelines", "video-pipeline"], 0),
    ]


@pytest.mark.parametrize(("name", "args", "rc"), _table_commands(), ids=[c[0] for c in _table_commands()])
def test_format_table(seeded: Path, name: str, args: list[str], rc: int) -> None:
    res = run(seeded, *args, "--format", "table")
    assert res.rc == rc, res.out
    assert res.out.strip()
    assert not res.out.lstrip().startswith("{"), res.out  # a table, not JSON
    expected = {
        "write": "completed",
        "read": "feat/PROJ-1234",
        "validate": "valid",
        "validate-invalid": "artifact",
        "list": "implement",
        "status": "pr_release_ready",
        "resume": "local_review",
        "resume-allowed": "allowed",
        "verify": "ok",
        "pipelines": "video-pipeline",
        "pipelines-one": "scene_plan",
    }[name]
    assert expected in res.out


def _audit_table_commands(root: Path) -> list[tuple[str, list[str], int]]:
    """The audit-trail commands under --format table, on a video run with a gated phase."""
    v = ["--ticket-id", "VID-7", "--run-id", "v1"]
    assert (
        run(
            root,
            "init",
            "--ticket-id",
            "VID-7",
            "--title",
            "Launch",
            "--pipeline",
            "video-pipeline",
        ).rc
        == 0
    )
    research = json.dumps({"summary": "s", "sources": ["https://example.org/a"]})
    assert (
        run(
            root,
            "write",
            *v,
            "--phase",
            "research",
            "--pipeline",
            "video-pipeline",
            "--payload",
            research,
        ).rc
        == 0
    )
    proposal = json.dumps({"title": "Cats", "concept": "purring"})
    return [
        ("progress", ["progress", *v, "--phase", "proposal", "--event", "start"], 0),
        ("progress show", ["progress", "show", *v, "--phase", "proposal", "--all"], 0),
        ("write-proposal", ["write", *v, "--phase", "proposal", "--payload", proposal], 0),
        ("approve", ["approve", *v, "--phase", "proposal", "--by", "ana"], 0),
        ("write-proposal-2", ["write", *v, "--phase", "proposal", "--payload", proposal], 0),
        (
            "reject",
            ["reject", *v, "--phase", "proposal", "--by", "bob", "--comment", "too long"],
            0,
        ),
        ("init", ["init", "--ticket-id", "VID-7", "--title", "Launch v2"], 0),
        ("decisions", ["decisions", "--ticket-id", "VID-7"], 0),
        ("history", ["history", "--ticket-id", "VID-7"], 0),
        ("fork", ["fork", *v, "--through", "research", "--new-run-id", "v2"], 0),
        ("doctor", ["doctor"], 0),
    ]


def test_format_table_audit_commands(root: Path) -> None:
    for name, args, rc in _audit_table_commands(root):
        res = run(root, *args, "--format", "table")
        assert res.rc == rc, (name, res.out)
        assert res.out.strip(), name
        assert not res.out.lstrip().startswith("{"), (name, res.out)


def test_format_table_diff(seeded: Path) -> None:
    write(seeded, "implement")
    res = run(
        seeded,
        "diff",
        "--ticket-id",
        TICKET,
        f"{RUN}:implement:1",
        f"{RUN}:implement:2",
        "--format",
        "table",
    )
    assert res.rc == 0
    assert not res.out.lstrip().startswith("{")


def test_format_table_guard(root: Path) -> None:
    """guard status / history print tables; guard run passes COMMAND's own output through."""
    assert run(root, "guard", "run", "--name", "nightly", "--", sys.executable, "-c", "pass").rc == 0
    for sub, expected in (("status", "pass_count"), ("history", "success")):
        res = run(root, "guard", sub, "--name", "nightly", "--format", "table")
        assert res.rc == 0, res.out
        assert not res.out.lstrip().startswith("{")
        assert expected in res.out


def test_format_table_guard_reset(root: Path) -> None:
    res = run(root, "guard", "reset", "--name", "nightly", "--by", "ana", "--format", "table")
    assert res.rc == 0
    assert not res.out.lstrip().startswith("{")


def test_every_command_is_covered() -> None:
    """The seed's and the issue's commands exist, first and in this order; every command has a
    --format table check (a new command must get one here)."""
    paths = command_paths()
    assert paths[: len(COMMANDS)] == COMMANDS
    table_checked = {c[1][0] for c in _table_commands()} | {
        "progress",
        "progress show",
        "approve",
        "reject",
        "init",
        "decisions",
        "history",
        "fork",
        "doctor",
        "diff",
        "guard status",
        "guard history",
        "guard reset",
        "import",
        "prune",
        "store migrate",
        "run",  # tests/test_runner_cli.py
        "explain",  # tests/test_runner_cli.py
        "submit",  # tests/test_queue.py (PostgreSQL)
        "queue list",
        "queue show",
        "queue cancel",
        "queue retry",
        "tickets",  # tests/test_listing_cli.py
        "runs",  # tests/test_listing_cli.py
        "approvals",  # tests/test_cli_tables.py
        "notify status",  # tests/test_notify.py
        "keys init",  # tests/test_proofs.py
        "anchor",  # tests/test_proofs.py
        "prove",  # tests/test_proofs.py
    }
    # Bare groups; a wrapper whose stdout is COMMAND's; streams of JSON Lines / a JSON summary;
    # `step` runs inside a shell phase and keeps stdout free for the phase's payload; `ui` is a server;
    # `worker` is a long-running process (progress on stderr, a JSON summary when it stops); `events` is
    # JSON Lines (a cursor line after each batch); `mcp` is a server on stdio; `skill` prints SKILL.md;
    # `notify` is a long-running deliverer (a JSON summary when it stops); `logs` prints an attempt's
    # output as it was (or one JSON object with --json; tests/test_run_logs.py).
    no_table = {
        "logs",
        "guard",
        "guard run",
        "store",
        "export",
        "copy",
        "step",
        "ui",
        "queue",
        "worker",
        "events",
        "mcp",
        "skill",
        "notify",
        "keys",
    }
    assert set(paths) - no_table <= table_checked


@pytest.mark.parametrize("command", command_paths())
def test_help(root: Path, command: str) -> None:
    for flag in ("--help", "-h"):
        res = run(root, *command.split(), flag)
        assert res.rc == 0
        assert f"Usage: phaselog {command}" in res.out
        assert "Example" in res.out
        assert f"phaselog {command}" in res.out.split("Example", 1)[1]
    assert not root.exists()  # --help touches nothing


def test_top_level_help_lists_every_command(root: Path) -> None:
    res = run(root, "--help")
    assert res.rc == 0
    listed = res.out.split("Options:", 1)[1]
    labels = re.findall(r"^  ([a-z]+(?: [a-z]+)?)  ", listed, re.M)
    bare_groups = {"guard", "store", "queue", "keys"}  # listed by their subcommands
    assert sorted(labels) == sorted(p for p in command_paths() if p not in bare_groups)


# -- status / resume / verify ----------------------------------------------------------------------
def test_status_keys_and_states(seeded: Path) -> None:
    base = ["--ticket-id", TICKET, "--run-id", RUN]
    write(seeded, "local_review", "--status", "failed", "--error", "linter crashed")
    res = run(seeded, "status", *base)
    assert res.rc == 0
    data = res.json
    assert data["success"] is True
    assert data["next_phase"] == "local_review"
    assert data["completed_phases"] == ["implement"]
    assert [p["phase"] for p in data["phases"]] == PHASES
    assert [p["state"] for p in data["phases"]] == [
        "completed",
        "failed",
        "pending",
        "pending",
        "pending",
    ]
    write(seeded, "local_review")
    write(seeded, "implement")  # a newer implement: the local review is now stale
    data = run(seeded, "status", *base).json
    assert [p["state"] for p in data["phases"]][:3] == ["completed", "stale", "pending"]
    assert data["next_phase"] == "local_review"


def test_resume_allowed_and_blocked(seeded: Path) -> None:
    base = ["--ticket-id", TICKET, "--run-id", RUN]
    ok = run(seeded, "resume", *base, "--skip-to", "local_review")
    assert ok.rc == 0
    assert ok.json["allowed"] is True
    assert ok.json["blockers"] == []
    assert ok.json["next_phase"] == "local_review"
    assert ok.json["completed_phases"] == ["implement"]
    blocked = run(seeded, "resume", *base, "--skip-to", "4")
    assert blocked.rc == 1
    data = blocked.json
    assert data["allowed"] is False
    assert data["skip_to"] == "pr_release_ready"
    assert [(b["phase"], b["state"]) for b in data["blockers"]] == [
        ("local_review", "pending"),
        ("create_pr", "pending"),
    ]
    assert all(b["reason"] for b in data["blockers"])
    write(seeded, "local_review", "--status", "failed", "--error", "reviewer timed out")
    failed = run(seeded, "resume", *base, "--skip-to", "create_pr").json
    assert failed["blockers"][0]["state"] == "failed"
    assert "reviewer timed out" in failed["blockers"][0]["reason"]


def test_resume_checks_artifacts(seeded: Path, tmp_path: Path) -> None:
    base = ["--ticket-id", TICKET, "--run-id", RUN, "--skip-to", "local_review"]
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "tests").mkdir()
    (work / "src" / "foo.py").write_text("")
    missing = run(seeded, "resume", *base, "--artifacts-root", str(work))
    assert missing.rc == 1
    assert missing.json["blockers"][0]["state"] == "invalid"
    assert "tests/test_foo.py" in missing.json["blockers"][0]["reason"]
    (work / "tests" / "test_foo.py").write_text("")
    assert run(seeded, "resume", *base, "--artifacts-root", str(work)).rc == 0
    valid = run(
        seeded,
        "validate",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "1",
        "--artifacts-root",
        str(work),
    )
    assert valid.rc == 0
    assert valid.json["is_valid"] is True


def test_resume_blocked_by_stale_phase(seeded: Path) -> None:
    write(seeded, "local_review")
    write(seeded, "implement")
    data = run(seeded, "resume", "--ticket-id", TICKET, "--run-id", RUN, "--skip-to", "create_pr")
    assert data.rc == 1
    assert [(b["phase"], b["state"]) for b in data.json["blockers"]] == [("local_review", "stale")]


def test_verify_ok_then_tampered(seeded: Path) -> None:
    write(seeded, "local_review")
    ok = run(seeded, "verify", "--ticket-id", TICKET)
    assert ok.rc == 0
    assert ok.json["ok"] is True
    assert ok.json["problems"] == []
    assert ok.json["checked"] == 2
    path = seeded / "checkpoints" / RUN_DIR / "phase_1_implement_a1.yaml"
    path.write_text(path.read_text().replace("feat/PROJ-1234", "feat/evil"))
    bad = run(seeded, "verify", "--ticket-id", TICKET, "--run-id", RUN)
    assert bad.rc == 1
    assert bad.json["ok"] is False
    problems = bad.json["problems"]
    assert {"path", "rule", "message"} <= problems[0].keys()
    assert any(p["rule"] == "content_hash" and p["path"].endswith("phase_1_implement_a1.yaml") for p in problems)
    assert any(p["rule"] == "basis" for p in problems)  # local_review was built on it
    invalid = run(seeded, "validate", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "implement")
    # An edited record is damaged from outside: never used, reported as corrupt with the rule.
    assert invalid.rc == 1
    assert invalid.json["success"] is False
    assert invalid.json["error_code"] == "corrupt"
    assert invalid.json["rule"] == "content_hash"
    assert "changed after it was written" in invalid.json["error"]


# -- list: order and pagination --------------------------------------------------------------------
def _key(rec: dict[str, Any]) -> tuple[str, int, int]:
    return (rec["run_id"], PHASES.index(rec["phase"]) + 1, rec["attempt_number"])


def _page_keys(data: dict[str, Any]) -> list[tuple[str, int, int]]:
    recs = data["checkpoints"] + data["failed_attempts"] + data["warnings"]
    return sorted(_key(r) for r in recs)


@pytest.fixture
def busy(root: Path, ledger: Ledger) -> list[tuple[str, int, int]]:
    """Three runs with retries (12 attempts of one phase: a10 must sort after a9), failed
    attempts and one damaged file; returns every key in the order list must give."""
    keys: list[tuple[str, int, int]] = []
    for run_id in ("run-b", "run-a", "run-c"):
        n = 12 if run_id == "run-a" else 2
        for _ in range(n):
            r = ledger.write(TICKET, run_id, "implement", PAYLOADS["implement"]).record
            keys.append((r.run_id, 1, r.attempt_number))
        r = ledger.run(TICKET, run_id).fail("local_review", "flaky").record
        keys.append((r.run_id, 2, r.attempt_number))
        r = ledger.write(TICKET, run_id, "local_review", PAYLOADS["local_review"]).record
        keys.append((r.run_id, 2, r.attempt_number))
    damaged = normalize_run_id("run-c")
    (root / "checkpoints" / TICKET / damaged / "phase_1_implement_a2.yaml").write_bytes(b"\x00garbled")
    return sorted(keys)


def test_list_is_ordered_and_complete(root: Path, busy: list[tuple[str, int, int]]) -> None:
    data = run(root, "list", "--ticket-id", TICKET).json
    assert data["next_after"] is None
    completed = [_key(c) for c in data["checkpoints"]]
    assert completed == sorted(completed)
    assert data["count"] == len(completed) == len(busy) - 3 - 1  # 3 failed, 1 damaged
    run_a = normalize_run_id("run-a")
    implement_a = [
        c["attempt_number"] for c in data["checkpoints"] if c["run_id"] == run_a and c["phase"] == "implement"
    ]
    assert implement_a == list(range(1, 13))  # numeric: a10 after a9, not after a1
    assert len(data["failed_attempts"]) == 3
    assert all(f["status"] == "failed" and f["error"] == "flaky" for f in data["failed_attempts"])
    assert len(data["warnings"]) == 1
    assert _page_keys(data) == busy


@pytest.mark.parametrize("limit", [1, 2, 5, 7, 50])
def test_pagination_walks_every_record_once(
    root: Path,
    busy: list[tuple[str, int, int]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    limit: int,
) -> None:
    monkeypatch.setenv("PHASELOG_HOME", str(root))
    seen: list[tuple[str, int, int]] = []
    after: str | None = None
    for _ in range(len(busy) + 2):
        args = ["list", "--ticket-id", TICKET, "--limit", str(limit)]
        res = call(capsys, *args, *(["--after", after] if after else []))
        assert res.rc == 0, res.out
        data = res.json
        page = _page_keys(data)
        assert 0 < len(page) <= limit
        assert not seen or page[0] > seen[-1]
        seen += page
        after = data["next_after"]
        if after is None:
            break
    assert seen == busy


def test_pagination_in_a_subprocess(root: Path, busy: list[tuple[str, int, int]]) -> None:
    first = run(root, "list", "--ticket-id", TICKET, "--limit", "3").json
    assert first["next_after"]
    second = run(root, "list", "--ticket-id", TICKET, "--limit", "100", "--after", first["next_after"]).json
    assert second["next_after"] is None
    assert _page_keys(first) + _page_keys(second) == busy


def test_list_run_scoped_pagination(root: Path, busy: list[tuple[str, int, int]]) -> None:
    run_a = normalize_run_id("run-a")
    first = run(root, "list", "--ticket-id", TICKET, "--run-id", "run-a", "--limit", "10").json
    rest = run(root, "list", "--ticket-id", TICKET, "--run-id", "run-a", "--after", first["next_after"]).json
    assert _page_keys(first) + _page_keys(rest) == [k for k in busy if k[0] == run_a]


def test_list_has_no_silent_cap(root: Path) -> None:
    """1,100 seed-format files (as the seed tool writes them): all listed, numerically ordered."""
    template = FIXTURE_FILE.read_text().replace("ticket_id: OMN-2143", f"ticket_id: {TICKET}")
    run_dir = root / "checkpoints" / TICKET / SHORT_RUN_UUID
    run_dir.mkdir(parents=True)
    total = 1100
    for n in range(1, total + 1):
        text = template.replace("attempt_number: 1\n", f"attempt_number: {n}\n")
        (run_dir / f"phase_1_implement_a{n}.yaml").write_text(text)
    data = run(root, "list", "--ticket-id", TICKET).json
    assert data["count"] == total
    assert data["warnings"] == []
    assert data["next_after"] is None
    assert [c["attempt_number"] for c in data["checkpoints"]] == list(range(1, total + 1))
    page = run(root, "list", "--ticket-id", TICKET, "--limit", "1000").json
    assert page["count"] == 1000
    assert page["next_after"]
    tail = run(root, "list", "--ticket-id", TICKET, "--after", page["next_after"]).json
    assert [c["attempt_number"] for c in tail["checkpoints"]] == list(range(1001, total + 1))


# -- pipelines -------------------------------------------------------------------------------------
CUSTOM = """\
name: data-job
version: "2"
description: Fetch and build.
phases:
  - name: fetch
    description: Download the inputs.
    payload_schema:
      type: object
      additionalProperties: false
      required: [phase, rows]
      properties:
        phase: {const: fetch}
        rows: {type: integer, minimum: 0}
  - name: build
    description: Build the outputs.
"""


def test_pipelines_lists_and_shows(root: Path) -> None:
    listing = run(root, "pipelines")
    assert listing.rc == 0
    names = [p["name"] for p in listing.json["pipelines"]]
    assert {"ticket-pipeline", "video-pipeline"} <= set(names)
    ticket = next(p for p in listing.json["pipelines"] if p["name"] == "ticket-pipeline")
    assert [ph["name"] for ph in ticket["phases"]] == PHASES
    one = run(root, "pipelines", "video-pipeline").json["pipeline"]
    assert one["phases"][0]["name"] == "research"
    assert one["phases"][0]["payload_schema"]["required"] == ["phase", "summary", "sources"]
    assert [ph["requires_approval"] for ph in one["phases"]].count(True) == 5
    assert_error(run(root, "pipelines", "no-such"), 1, "pipeline_error")


def test_video_pipeline_run(root: Path) -> None:
    research = json.dumps({"summary": "why cats purr", "sources": ["https://example.org/purr"]})
    data = write(root, "research", "--pipeline", "video-pipeline", "--payload", research, run_id="vid-1")
    assert data["checkpoint_path"].endswith("/phase_1_research_a1.yaml")
    # the run remembers its pipeline: no --pipeline needed afterwards
    status = run(root, "status", "--ticket-id", TICKET, "--run-id", "vid-1").json
    assert status["pipeline"] == "video-pipeline"
    assert status["next_phase"] == "proposal"
    read = run(root, "read", "--ticket-id", TICKET, "--run-id", "vid-1", "--phase", "research").json
    assert read["metadata"]["pipeline"]["name"] == "video-pipeline"
    bad = run(
        root,
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        "vid-1",
        "--phase",
        "implement",
        "--payload",
        "{}",
    )
    data = assert_error(bad, 2, "unknown_phase")
    assert "research" in data["valid_phases"]
    assert "implement" not in data["valid_phases"]


def test_a_different_pipeline_is_refused(seeded: Path, tmp_path: Path) -> None:
    before = tree(seeded)
    base = ["write", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "1", "--payload", "{}"]
    data = assert_error(run(seeded, *base, "--pipeline", "video-pipeline"), 1, "pipeline_mismatch")
    assert data["recorded"] == "ticket-pipeline"
    assert data["requested"] == "video-pipeline"
    manifest = tmp_path / "data-job.yaml"
    manifest.write_text(CUSTOM)
    assert_error(run(seeded, *base, "--pipeline-file", str(manifest)), 1, "pipeline_mismatch")
    assert_error(
        run(seeded, "status", "--ticket-id", TICKET, "--run-id", RUN, "--pipeline", "video-pipeline"),
        1,
        "pipeline_mismatch",
    )
    assert tree(seeded) == before
    same = run(seeded, "status", "--ticket-id", TICKET, "--run-id", RUN, "--pipeline", "ticket-pipeline")
    assert same.rc == 0


def test_custom_pipeline_file(root: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "data-job.yaml"
    manifest.write_text(CUSTOM)
    pf = ["--pipeline-file", str(manifest)]
    base = ["--ticket-id", "JOB-1", "--run-id", "night"]
    ok = run(root, "write", *base, "--phase", "fetch", "--payload", '{"rows": 3}', *pf)
    assert ok.rc == 0
    assert ok.json["checkpoint_path"].endswith("/phase_1_fetch_a1.yaml")
    bad = assert_error(
        run(root, "write", *base, "--phase", "fetch", "--payload", '{"rows": -1}', *pf),
        1,
        "invalid",
    )
    assert bad["errors"][0]["field"] == "phase_payload.rows"
    unknown = assert_error(run(root, "write", *base, "--phase", "deploy", *pf), 2, "unknown_phase")
    assert unknown["valid_phases"] == ["fetch", "build"]
    status = run(root, "status", *base, *pf).json
    assert status["pipeline"] == "data-job"
    assert status["next_phase"] == "build"
    assert run(root, "resume", *base, "--skip-to", "build", *pf).rc == 0
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    assert_error(
        run(root, "write", *base, "--phase", "1", *(["--pipeline-file", str(broken)])),
        1,
        "pipeline_error",
    )


def test_pipeline_found_in_root(root: Path) -> None:
    (root / "pipelines").mkdir(parents=True)
    (root / "pipelines" / "data-job.yaml").write_text(CUSTOM)
    assert "data-job" in [p["name"] for p in run(root, "pipelines").json["pipelines"]]
    shown = run(root, "pipelines", "data-job").json["pipeline"]
    assert [p["name"] for p in shown["phases"]] == ["fetch", "build"]
    res = run(
        root,
        "write",
        "--ticket-id",
        "JOB-1",
        "--run-id",
        "r",
        "--phase",
        "fetch",
        "--payload",
        '{"rows": 1}',
        "--pipeline",
        "data-job",
    )
    assert res.rc == 0


# -- payload sources, failed attempts, timestamps, phases by ordinal, roots ------------------------
def test_payload_from_file_and_stdin(root: Path, tmp_path: Path) -> None:
    f = tmp_path / "implement.json"
    f.write_text(json.dumps({**PAYLOADS["implement"], "branch_name": "from-file"}))
    base = ["write", "--ticket-id", TICKET, "--run-id", RUN]
    assert run(root, *base, "--phase", "implement", "--payload", f"@{f}").rc == 0
    stdin = json.dumps({**PAYLOADS["local_review"], "iteration_count": 4})
    assert run(root, *base, "--phase", "local_review", "--payload", "-", stdin=stdin).rc == 0
    got = run(root, "list", "--ticket-id", TICKET).json["checkpoints"]
    assert got[0]["phase_payload"]["branch_name"] == "from-file"
    assert got[1]["phase_payload"]["iteration_count"] == 4
    empty = run(root, *base, "--phase", "create_pr", "--payload", "-", stdin="")
    assert assert_error(empty, 2, "usage")["field"] == "--payload"


def test_failed_attempt_then_retry(seeded: Path) -> None:
    base = ["--ticket-id", TICKET, "--run-id", RUN]
    failed = write(seeded, "local_review", "--status", "failed", "--error", "tests red: 3 failures")
    assert failed["attempt_number"] == 1
    assert failed["status"] == "failed"
    data = run(seeded, "list", *base).json
    assert data["count"] == 1
    assert [(f["phase"], f["attempt_number"], f["error"]) for f in data["failed_attempts"]] == [
        ("local_review", 1, "tests red: 3 failures")
    ]
    nf = assert_error(run(seeded, "read", *base, "--phase", "local_review"), 1, "not_found")
    assert "failed" in nf["error"]
    retry = write(seeded, "local_review")
    assert retry["attempt_number"] == 2
    assert retry["status"] == "completed"
    assert run(seeded, "read", *base, "--phase", "2").json["checkpoint"]["attempt_number"] == 2
    one = run(seeded, "read", *base, "--phase", "local_review", "--attempt", "1").json
    assert one["metadata"]["status"] == "failed"
    assert one["metadata"]["error"] == "tests red: 3 failures"


def test_explicit_timestamp(root: Path) -> None:
    write(root, "implement", "--timestamp", "2026-02-09T15:04:27Z")
    write(root, "local_review", "--timestamp", "2026-02-09T17:30:00.250000+02:00")
    cps = run(root, "list", "--ticket-id", TICKET).json["checkpoints"]
    assert [c["timestamp_utc"] for c in cps] == [
        "2026-02-09T15:04:27Z",
        "2026-02-09T15:30:00.250000Z",
    ]


def test_phase_by_ordinal(root: Path) -> None:
    data = write(root, "1", "--payload", json.dumps(PAYLOADS["implement"]))
    assert data["phase"] == "implement"
    res = run(root, "validate", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "1")
    assert res.rc == 0
    assert res.json["checkpoint"]["phase"] == "implement"


def test_explicit_attempt_numbers(seeded: Path) -> None:
    data = write(seeded, "implement", "--attempt", "5")
    assert data["attempt_number"] == 5
    assert write(seeded, "implement")["attempt_number"] == 6
    low = run(
        seeded,
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "implement",
        "--attempt",
        "3",
        "--payload",
        json.dumps(PAYLOADS["implement"]),
    )
    assert_error(low, 1, "not_monotonic")


def test_root_resolution(tmp_path: Path) -> None:
    env_root, flag_root = tmp_path / "env-home", tmp_path / "flag-root"
    user_home = tmp_path / "user"
    env = cli_env(env_root)
    env["HOME"] = str(user_home)
    args = [
        "write",
        "--ticket-id",
        TICKET,
        "--run-id",
        RUN,
        "--phase",
        "implement",
        "--payload",
        json.dumps(PAYLOADS["implement"]),
    ]
    assert run(env_root, *args, env=env).rc == 0
    assert run(env_root, *args, "--root", str(flag_root), env=env).rc == 0
    del env["PHASELOG_HOME"]
    assert run(env_root, *args, env=env).rc == 0
    rel = Path("checkpoints") / RUN_DIR / "phase_1_implement_a1.yaml"
    for where in (env_root, flag_root, user_home / ".phaselog"):
        assert (where / rel).is_file(), where
        assert len([p for p in tree(where) if p.endswith(".yaml")]) == 1


def test_output_is_utf8_json_with_non_ascii(root: Path) -> None:
    payload = {**PAYLOADS["implement"], "branch_name": "feat/crème-brûlée-☕"}
    write(root, "implement", "--payload", json.dumps(payload))
    res = run(root, "read", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "implement")
    assert res.json["checkpoint"]["phase_payload"]["branch_name"] == "feat/crème-brûlée-☕"
    ascii_env = cli_env(root, PYTHONIOENCODING="ascii")
    res = run(root, "read", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "implement", env=ascii_env)
    assert res.rc == 0
    assert res.json["checkpoint"]["phase_payload"]["branch_name"] == "feat/crème-brûlée-☕"


def test_format_table_store_commands(seeded: Path, tmp_path: Path) -> None:
    """import, prune and store migrate print tables; export streams JSON Lines."""
    exported = run(seeded, "export", "--ticket-id", TICKET)
    assert exported.rc == 0
    lines = [json.loads(x) for x in exported.out.splitlines()]
    assert lines
    assert all("content_hash" in x for x in lines)
    dump = tmp_path / "dump.jsonl"
    dump.write_text(exported.out)
    target = tmp_path / "other"
    res = run(target, "import", "--input", str(dump), "--format", "table")
    assert res.rc == 0, res.out
    assert f"added {sum(x['type'] != 'pipeline' for x in lines)}" in res.out
    res = run(target, "prune", "--ticket-id", TICKET, "--keep-last", "1", "--dry-run", "--format", "table")
    assert res.rc == 0, res.out
    assert "would remove" in res.out
    res = run(target, "store", "migrate", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--format", "table")
    assert res.rc == 0, res.out
    assert "schema_version" in res.out
