"""Issue 9's CLI items: what a new user hit. Each test failed before its fix.

Every call is ``python -m phaselog`` in a subprocess with ``PHASELOG_HOME`` under tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest

import phaselog
from conftest import IMPLEMENT, REPO
from helpers import Result, run_cli
from helpers import cli_env as env_for
from phaselog.cli import cli
from phaselog.model.errors import PipelineMismatch, UnknownPhase
from phaselog.model.ids import normalize_run_id

T = "USE-1"
V = "VID-9"
HASH12 = re.compile(r"\b[0-9a-f]{12}\b")

GATED = """\
name: gated
version: "1"
order: strict
phases:
  - name: draft
    payload_schema:
      type: object
      additionalProperties: false
      required: [text]
      properties:
        text: {type: string}
  - name: review
    requires_approval: true
"""


def run(root: Path, *args: str, **extra: str) -> Result:
    return run_cli(root, *args, env=env_for(root, **extra))


def ok(root: Path, *args: str, **extra: str) -> Any:
    res = run(root, *args, **extra)
    assert res.rc == 0, (res.out, res.err)
    return res.json


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


def approvals_on_disk(root: Path) -> list[Path]:
    return sorted(root.glob("checkpoints/*/*/.approvals/*"))


# -- approve / reject with --pipeline-file ------------------------------------------------------------
def test_approve_takes_the_pipeline_file_and_records_one_approval(root: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "gated.yaml"
    manifest.write_text(GATED)
    pf = ["--pipeline-file", str(manifest)]
    base = ["--ticket-id", T, "--run-id", "r1"]
    ok(root, "write", *base, "--phase", "draft", "--payload", '{"text": "hi"}', *pf)
    ok(root, "write", *base, "--phase", "review", *pf)
    res = run(root, "approve", *base, "--phase", "review", "--by", "ana", *pf)
    assert res.rc == 0, res.out
    assert res.json["approval"]["decision"] == "approve"
    assert res.json["phase_state"] == "completed"
    assert len(approvals_on_disk(root)) == 1
    st = ok(root, "status", *base, *pf)
    assert st["done"] is True


def test_a_failed_approve_leaves_nothing_behind(root: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "gated.yaml"
    manifest.write_text(GATED)
    pf = ["--pipeline-file", str(manifest)]
    base = ["--ticket-id", T, "--run-id", "r1"]
    ok(root, "write", *base, "--phase", "draft", "--payload", '{"text": "hi"}', *pf)
    ok(root, "write", *base, "--phase", "review", *pf)
    # A pipeline that cannot be found (the store has only the run's own): nothing may be recorded.
    res = run(root, "approve", *base, "--phase", "review", "--by", "ana", "--pipeline", "no-such-pipeline")
    assert res.rc == 1
    assert res.json["error_code"] == "pipeline_error"
    assert approvals_on_disk(root) == []
    ok(root, "reject", *base, "--phase", "review", "--by", "ana", "--comment", "no", *pf)
    assert len(approvals_on_disk(root)) == 1


# -- payload schemas without a phase property ---------------------------------------------------------
def test_a_natural_schema_validates_the_users_payload(root: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "gated.yaml"
    manifest.write_text(GATED)  # draft: additionalProperties false, no `phase` property
    base = ["--ticket-id", T, "--run-id", "r1", "--pipeline-file", str(manifest)]
    written = ok(root, "write", *base, "--phase", "draft", "--payload", '{"text": "hi"}')
    assert written["warnings"] == []
    checked = run(root, "validate", *base, "--phase", "draft")
    assert checked.rc == 0, checked.out
    assert checked.json["is_valid"] is True
    assert checked.json["checkpoint"]["phase_payload"]["phase"] == "draft"  # the seed file still has it
    bad = run(root, "write", *base, "--phase", "draft", "--payload", '{"text": "hi", "extra": 1}')
    assert bad.rc == 1
    assert bad.json["error_code"] == "invalid"
    assert "extra" in bad.out


def test_library_validation_strips_only_the_injected_phase(tmp_path: Path) -> None:
    import yaml

    from phaselog.model.pipelines import pipeline_from_dict
    from phaselog.model.validation import user_payload

    pl = pipeline_from_dict(yaml.safe_load(GATED))
    led = phaselog.open(tmp_path / "lib")
    led.write(T, "r1", "draft", {"text": "x"}, pipeline=pl)
    assert led.validate(T, "r1", "draft", pipeline=pl)[1].is_valid
    # A schema that names `phase` keeps it (the built-ins pin it with const).
    assert user_payload({"properties": {"phase": {}}}, {"phase": "p", "a": 1}) == {"phase": "p", "a": 1}
    assert user_payload({"properties": {"a": {}}}, {"phase": "p", "a": 1}) == {"a": 1}


# -- status of a run with nothing recorded ------------------------------------------------------------
def test_status_of_an_unrecorded_run_says_so_and_lists_the_runs(root: Path) -> None:
    ok(root, "write", "--ticket-id", T, "--run-id", "real", "--phase", "implement", "--payload", json.dumps(IMPLEMENT))
    real = normalize_run_id("real")
    st = ok(root, "status", "--ticket-id", T, "--run-id", "typo")
    assert st["recorded"] is False
    assert st["known_runs"] == [real]
    assert "nothing is recorded" in st["message"]
    table = run(root, "status", "--ticket-id", T, "--run-id", "typo", "--format", "table")
    assert "nothing is recorded" in table.out
    assert real in table.out
    assert ok(root, "status", "--ticket-id", T, "--run-id", "real")["recorded"] is True


# -- help ---------------------------------------------------------------------------------------------
def _leaf_commands() -> list[str]:
    out = []
    for name, cmd in cli.commands.items():
        if isinstance(cmd, click.Group):
            if cmd.invoke_without_command:
                out.append(name)
            out += [f"{name} {sub}" for sub in cmd.commands]
        else:
            out.append(name)
    return out


def test_group_help_names_every_command_in_sections(root: Path) -> None:
    res = run(root, "--help", COLUMNS="80")
    assert res.rc == 0
    listed = {m.group(1) for m in re.finditer(r"^  (\S+(?: \S+)?)\s{2,}", res.out, re.MULTILINE)}
    missing = [c for c in _leaf_commands() if c not in listed]
    assert not missing, res.out
    for section in ("Record:", "Resume:", "Audit:", "Gates:", "Guard:", "Stores:"):
        assert f"\n{section}\n" in res.out
    assert all(len(line) <= 80 for line in res.out.splitlines())


@pytest.mark.parametrize("command", ["approve", "reject"])
def test_help_prints_no_literal_backslash_b(root: Path, command: str) -> None:
    res = run(root, command, "--help")
    assert res.rc == 0
    assert "\\b" not in res.out
    assert f"phaselog {command} --ticket-id T" in res.out
    reference = (REPO / "docs" / "cli-reference.md").read_text(encoding="utf-8")
    assert "\\b" not in reference


# -- tables -------------------------------------------------------------------------------------------
def _video_run(root: Path) -> None:
    base = ["--ticket-id", V, "--run-id", "v1", "--pipeline", "video-pipeline"]
    research = {"summary": "s", "sources": ["https://example.org/a"]}
    ok(root, "write", *base, "--phase", "research", "--payload", json.dumps(research))
    ok(root, "progress", *base, "--phase", "proposal", "--event", "start")
    ok(root, "progress", *base, "--phase", "proposal", "--event", "step", "--step", "1")
    ok(root, "write", *base, "--phase", "proposal", "--payload", '{"title": "t", "concept": "c"}')
    ok(root, "approve", *base, "--phase", "proposal", "--by", "ana")


@pytest.mark.parametrize("columns", ["80", "100", "160"])
def test_tables_fit_the_terminal_and_keep_every_column(root: Path, columns: str) -> None:
    _video_run(root)
    history = ok(root, "history", "--ticket-id", V)["history"]
    res = run(root, "history", "--ticket-id", V, "--format", "table", COLUMNS=columns)
    assert res.rc == 0
    lines = res.out.splitlines()
    assert all(len(line) <= int(columns) for line in lines), res.out
    shown = set(HASH12.findall(res.out))
    assert {e["hash"][:12] for e in history} <= shown, res.out
    st = run(root, "status", "--ticket-id", V, "--run-id", "v1", "--format", "table", COLUMNS=columns)
    assert all(len(line) <= int(columns) for line in st.out.splitlines()), st.out
    assert "awaiting_approval" not in st.out
    assert "completed" in st.out


def test_verify_table_does_not_repeat_the_path(root: Path) -> None:
    ok(root, "write", "--ticket-id", T, "--run-id", "r1", "--phase", "implement", "--payload", json.dumps(IMPLEMENT))
    (cp,) = root.glob("checkpoints/*/*/phase_1_implement_a1.yaml")
    cp.write_text(cp.read_text() + "# edited\n")
    res = run(root, "verify", "--ticket-id", T, "--format", "table", COLUMNS="80")
    assert res.rc == 1
    assert all(len(line) <= 80 for line in res.out.splitlines()), res.out
    # the path is shown once (in its own column), folded over at most three lines
    assert res.out.count(f"{T}/") == 1, res.out
    assert "file changed since" in res.out
    assert len([ln for ln in res.out.splitlines() if ln.startswith("│")]) <= 3, res.out


# -- errors for people --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["read", "--ticket-id", T, "--run-id", "r1", "--phase", "nope"], 2, "unknown phase 'nope'"),
        (["status", "--ticket-id", T], 2, "--run-id"),
        (["history", "--ticket-id", "bad id!"], 2, "ticket"),
    ],
)
def test_errors_under_format_table_are_for_people(root: Path, args: list[str], code: int, needle: str) -> None:
    ok(root, "write", "--ticket-id", T, "--run-id", "r1", "--phase", "implement", "--payload", json.dumps(IMPLEMENT))
    res = run(root, *args, "--format", "table")
    assert res.rc == code
    assert res.out == ""
    assert res.err.startswith("error: "), res.err
    assert needle in res.err
    assert not res.err.lstrip().startswith("{")
    as_json = run(root, *args)
    assert as_json.rc == code
    assert as_json.json["success"] is False


# -- small wording and counting defects ---------------------------------------------------------------
def test_history_says_step_once(root: Path) -> None:
    base = ["--ticket-id", T, "--run-id", "r1", "--phase", "implement"]
    ok(root, "progress", *base, "--event", "start")
    ok(root, "progress", *base, "--event", "step", "--step", "1")
    summaries = [e["summary"] for e in ok(root, "history", "--ticket-id", T)["history"]]
    assert "implement attempt 1 step 1" in summaries
    assert not any("step step" in s for s in summaries)


def test_status_counts_the_attempt_in_flight(root: Path) -> None:
    base = ["--ticket-id", T, "--run-id", "r1"]
    ok(root, "progress", *base, "--phase", "implement", "--event", "start")
    ph = ok(root, "status", *base)["phases"][0]
    assert ph["state"] == "in_progress"
    assert ph["latest_attempt"] == 1
    assert ph["attempts"] == 1


def test_pipeline_mismatch_in_python_names_no_cli_flag(tmp_path: Path) -> None:
    led = phaselog.open(tmp_path / "lib")
    led.write(T, "r1", "implement", IMPLEMENT)
    with pytest.raises(PipelineMismatch) as err:
        led.status(T, "r1", pipeline="video-pipeline")
    assert "omit --pipeline" not in err.value.message
    assert "'ticket-pipeline'" in err.value.message


def test_unknown_phase_on_the_default_pipeline_suggests_pipeline_and_init(root: Path, tmp_path: Path) -> None:
    res = run(root, "write", "--ticket-id", "ETL-1", "--run-id", "r1", "--phase", "extract")
    assert res.rc == 2
    assert res.json["error_code"] == "unknown_phase"
    assert "--pipeline" in res.json["error"]
    assert "phaselog init --ticket-id ETL-1" in res.json["error"]
    led = phaselog.open(tmp_path / "lib")
    with pytest.raises(UnknownPhase) as err:
        led.write("ETL-1", "r1", "extract", {})
    assert "pipeline=" in err.value.message
    # A named pipeline gets the plain message: nothing was guessed.
    named = run(root, "write", "--ticket-id", "ETL-1", "--run-id", "r1", "--phase", "x", "--pipeline", "video-pipeline")
    assert named.rc == 2
    assert "default" not in named.json["error"]


# -- progress --event start under a short-lived caller ------------------------------------------------
def test_progress_start_from_a_short_lived_shell_is_not_abandoned(root: Path) -> None:
    base = f"--ticket-id {T} --run-id r1 --phase implement"
    cmd = f"{sys.executable} -m phaselog progress {base} --event start; true"  # `; true`: sh stays the parent
    proc = subprocess.run(["sh", "-c", cmd], env=env_for(root), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    event = json.loads(proc.stdout)["event"]
    assert event["pid"] is None  # nobody vouched for a process
    ph = ok(root, "status", "--ticket-id", T, "--run-id", "r1")["phases"][0]
    assert ph["state"] == "in_progress"
    assert ph["in_flight"]["abandoned"] is False


def test_progress_start_records_the_pid_the_caller_vouches_for(root: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        base = ["--ticket-id", T, "--run-id", "r1", "--phase", "implement"]
        event = ok(root, "progress", *base, "--event", "start", "--pid", str(holder.pid))["event"]
        assert event["pid"] == holder.pid
        assert ok(root, "status", "--ticket-id", T, "--run-id", "r1")["phases"][0]["in_flight"]["abandoned"] is False
    finally:
        holder.kill()
        holder.wait()
    # vouched for and gone: abandoned on the strength of that pid
    ph = ok(root, "status", "--ticket-id", T, "--run-id", "r1")["phases"][0]
    assert ph["in_flight"]["abandoned"] is True
    assert str(holder.pid) in ph["reason"]
    help_text = run(root, "progress", "--help").out
    assert "--pid" in help_text
    assert "make" in help_text


# -- tooling ------------------------------------------------------------------------------------------
def test_dev_extras_carry_the_stubs_mypy_needs_and_ci_runs_lint_and_typecheck() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dev = " ".join(project["optional-dependencies"]["dev"])
    runtime = " ".join(project["dependencies"])
    for package, stubs in (("PyYAML", "types-PyYAML"), ("psutil", "types-psutil"), ("jsonschema", "types-jsonschema")):
        if package in runtime:
            assert stubs in dev, f"{stubs} missing from the dev extras"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make lint\b", ci, re.MULTILINE)
    assert re.search(r"^make typecheck\b", ci, re.MULTILINE)


def test_library_progress_start_records_this_process_by_default(tmp_path: Path) -> None:
    led = phaselog.open(tmp_path / "lib")
    assert led.progress(T, "r1", "implement", "start").pid == os.getpid()  # pid="self"
    assert led.progress(T, "r2", "implement", "start", pid=None).pid is None
    with pytest.raises(phaselog.UsageError):
        led.progress(T, "r3", "implement", "start", pid=0)
