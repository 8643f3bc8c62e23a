"""Shell phases: the command's environment, payload, logs, exit codes, timeouts, artifacts, steps."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.ledger.facade import Ledger

pytestmark = pytest.mark.all_stores

STEP = f"{sys.executable} -c 'from phaselog.runner.step import step_from_env as s; s(2, output=\"half\")'"


def manifest(tmp_path: Path, phases: list[dict[str, Any]], name: str = "data-job") -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"name": name, "version": "1", "phases": phases}))
    return path


def test_environment_payload_file_inputs_and_log(ledger: Ledger, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    phases = [
        {"name": "fetch", "run": 'echo noise; echo \'{"rows": 3}\'; echo "to stderr" >&2'},
        {
            "name": "report",
            "env": {"GREETING": "hello"},
            "run": (
                'env | grep ^PHASELOG_ | sort > env.txt; cp "$PHASELOG_INPUTS" inputs.json; '
                'printf \'{"greeting": "%s", "attempt": %s}\' "$GREETING" "$PHASELOG_ATTEMPT" > "$PHASELOG_PAYLOAD"; '
                f"{STEP}; echo done > report.txt"
            ),
            "artifacts": ["report.txt", "*.json"],
        },
    ]
    pipe = phaselog.pipeline(manifest(tmp_path, phases))
    result = pipe.run("SH-1", "r", store=ledger, workdir=work)
    assert result.done, result.to_json()
    fetch = ledger.read("SH-1", "r", "fetch", pipeline=pipe.pipeline).record
    assert fetch.phase_payload == {"phase": "fetch", "rows": 3}  # the last JSON line of stdout
    report = ledger.read("SH-1", "r", "report", pipeline=pipe.pipeline).record
    assert report.phase_payload == {"phase": "report", "greeting": "hello", "attempt": 1}
    assert report.artifact_paths == ("report.txt", "inputs.json")
    assert set(report.artifact_hashes or {}) == {"report.txt", "inputs.json"}
    env = dict(line.split("=", 1) for line in (work / "env.txt").read_text().splitlines())
    assert env["PHASELOG_TICKET_ID"] == "SH-1"
    assert env["PHASELOG_RUN_ID"] == result.run_id
    assert env["PHASELOG_PHASE"] == "report"
    assert env["PHASELOG_ATTEMPT"] == "1"
    assert env["PHASELOG_RESUME_FROM_STEP"] == ""
    assert json.loads((work / "inputs.json").read_text()) == {"fetch": {"phase": "fetch", "rows": 3}}
    events = ledger.progress_events("SH-1", "r", "report", 1, pipeline=pipe.pipeline)
    assert [(e.event, e.step, e.output) for e in events] == [("start", None, None), ("step", 2, "half")]
    logs = sorted((p.name, p.read_text()) for p in (tmp_path).rglob("*_fetch_a1.log"))
    assert logs
    assert "noise" in logs[0][1]
    assert "to stderr" in logs[0][1]


def test_a_failing_command_records_its_exit_code_and_log_tail(ledger: Ledger, tmp_path: Path) -> None:
    phases = [{"name": "load", "run": "echo 'loading…'; echo 'disk full' >&2; exit 7", "retries": 1, "retry_delay": 0}]
    pipe = phaselog.pipeline(manifest(tmp_path, phases))
    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("SH-2", "r", store=ledger, workdir=tmp_path)
    assert info.value.context["rule"] == "exit_code"
    assert info.value.__cause__ is None
    records = ledger.list("SH-2", "r").items
    assert [(s.record.attempt_number, s.record.status) for s in records] == [(1, "failed"), (2, "failed")]
    failure = records[0].record.phase_payload["failure"]  # type: ignore[index]
    assert failure["exit_code"] == 7
    assert "disk full" in failure["log_tail"]
    assert Path(failure["log"]).read_text().count("loading") == 1
    assert records[0].record.error == "exit_code: the command exited with 7; last output: disk full"


def test_a_timeout_kills_the_whole_command(ledger: Ledger, tmp_path: Path) -> None:
    marker = tmp_path / "survivor"
    phases = [{"name": "slow", "run": f"(sleep 3; touch {marker}) & sleep 30", "timeout": "500ms"}]
    pipe = phaselog.pipeline(manifest(tmp_path, phases))
    started = time.monotonic()
    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("SH-3", "r", store=ledger, workdir=tmp_path)
    assert time.monotonic() - started < 10
    assert info.value.context["rule"] == "timeout"
    rec = ledger.read("SH-3", "r", "slow", 1, pipeline=pipe.pipeline).record
    assert rec.error is not None
    assert rec.error.startswith("timeout:")
    time.sleep(3.5)
    assert not marker.exists()  # the background child died with its process group


def test_an_artifact_glob_that_matches_nothing_fails_the_attempt(ledger: Ledger, tmp_path: Path) -> None:
    phases = [{"name": "build", "run": "true", "artifacts": ["dist/*.whl"]}]
    pipe = phaselog.pipeline(manifest(tmp_path, phases))
    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("SH-4", "r", store=ledger, workdir=tmp_path)
    assert info.value.context["rule"] == "artifact_missing"


def test_step_outside_a_phase_is_a_usage_error(store: Any) -> None:
    from phaselog.runner.step import step_from_env

    with pytest.raises(phaselog.UsageError, match="inside a shell phase"):
        step_from_env(1, env={}, store=store)


def test_a_step_from_a_fenced_command_is_refused(ledger: Ledger, tmp_path: Path) -> None:
    from phaselog.runner.step import step_from_env

    phases = [{"name": "one", "run": "true"}]
    pipe = phaselog.pipeline(manifest(tmp_path, phases))
    pipe.run("SH-5", "r", store=ledger, workdir=tmp_path)
    env = {
        "PHASELOG_TICKET_ID": "SH-5",
        "PHASELOG_RUN_ID": phaselog.normalize_run_id("r"),
        "PHASELOG_PHASE": "one",
        "PHASELOG_ATTEMPT": "2",
        "PHASELOG_PIPELINE_FILE": str(manifest(tmp_path, phases)),
        "PHASELOG_LEASE_TOKEN": "1",  # the runner released it: no longer held
    }
    with pytest.raises(phaselog.Fenced):
        step_from_env(1, env=env, store=ledger.store)
    assert os.environ.get("PHASELOG_TICKET_ID") is None
