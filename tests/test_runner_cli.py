"""`phaselog run`, `explain` and `step` as a user runs them: real processes, real exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

BIN = Path(sys.executable).parent / "phaselog"


def cli(*args: str, cwd: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    out["PHASELOG_HOME"] = str(tmp_path / "store")
    out["PATH"] = f"{BIN.parent}{os.pathsep}{out.get('PATH', '')}"
    return out


def write_manifest(tmp_path: Path, phases: list[dict[str, Any]]) -> Path:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"name": "data-job", "version": "1", "phases": phases}))
    return path


def test_run_waits_at_a_gate_explain_says_why_and_the_next_run_finishes(tmp_path: Path, env: dict[str, str]) -> None:
    job = write_manifest(
        tmp_path,
        [
            {"name": "fetch", "run": "echo fetched >> side-effects.log; echo '{\"rows\": 3}'"},
            {
                "name": "report",
                "run": "phaselog step 1 --output-file side-effects.log && echo report >> side-effects.log",
            },
            {"name": "publish", "requires_approval": True, "run": "echo publish >> side-effects.log"},
        ],
    )
    base = ("--ticket-id", "T-1", "--run-id", "nightly", "--pipeline-file", str(job))
    first = cli("run", *base, cwd=tmp_path, env=env)
    assert first.returncode == 3, first.stderr
    out = json.loads(first.stdout)
    assert out["waiting"] == "publish"
    assert out["states"]["report"] == "completed"
    assert "phaselog step: step 1 of report attempt 1 recorded" in first.stderr
    explained = cli("explain", *base, cwd=tmp_path, env=env)
    assert explained.returncode == 0
    plan = {p["phase"]: p for p in json.loads(explained.stdout)["phases"]}
    assert plan["fetch"]["action"] == "skip"
    assert plan["publish"]["action"] == "wait"
    assert "phaselog approve" in plan["publish"]["reason"]
    approved = cli(
        "approve", *base[:4], "--phase", "publish", "--by", "ana", "--pipeline-file", str(job), cwd=tmp_path, env=env
    )
    assert approved.returncode == 0, approved.stdout
    second = cli("run", *base, "--format", "table", cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    assert "(data-job): done" in second.stdout
    assert "publish │ skipped" in second.stdout
    assert (tmp_path / "side-effects.log").read_text().splitlines() == ["fetched", "report", "publish"]
    table = cli("explain", *base, "--format", "table", cwd=tmp_path, env=env)
    assert "nothing to do" in table.stdout


def test_a_failing_phase_exits_1_with_the_result(tmp_path: Path, env: dict[str, str]) -> None:
    job = write_manifest(tmp_path, [{"name": "boom", "run": "echo 'no such table' >&2; exit 4"}])
    done = cli("run", "--ticket-id", "T-2", "--run-id", "r", "--pipeline-file", str(job), cwd=tmp_path, env=env)
    assert done.returncode == 1
    out = json.loads(done.stdout)
    assert out["failed"] == "boom"
    assert out["error_code"] == "phase_failed"
    assert "exited with 4; last output: no such table" in out["error"]
    status = cli("status", "--ticket-id", "T-2", "--run-id", "r", "--pipeline-file", str(job), cwd=tmp_path, env=env)
    assert json.loads(status.stdout)["phases"][0]["state"] == "failed"


def test_a_second_runner_exits_75_and_sigterm_records_an_interrupted_attempt(
    tmp_path: Path, env: dict[str, str]
) -> None:
    job = write_manifest(
        tmp_path,
        [{"name": "slow", "run": "echo started > started; sleep 30"}, {"name": "after", "run": "true"}],
    )
    args = ("run", "--ticket-id", "T-3", "--run-id", "r", "--pipeline-file", str(job))
    first = subprocess.Popen([str(BIN), *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "started").exists():
            assert time.monotonic() < deadline, "the phase never started"
            time.sleep(0.05)
        second = cli(*args, cwd=tmp_path, env=env)
        assert second.returncode == 75
        err = json.loads(second.stdout)
        assert err["error_code"] == "run_held"
        assert f"pid {first.pid}" in err["error"]
        first.send_signal(signal.SIGTERM)
        out, _ = first.communicate(timeout=30)
        assert first.returncode == 143
        assert json.loads(out)["interrupted"] == signal.SIGTERM
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    status = cli("status", "--ticket-id", "T-3", "--run-id", "r", "--pipeline-file", str(job), cwd=tmp_path, env=env)
    slow = json.loads(status.stdout)["phases"][0]
    assert slow["state"] == "failed"
    assert slow["reason"].startswith("interrupted: interrupted by SIGTERM")


def test_run_needs_a_pipeline_and_step_needs_a_phase(tmp_path: Path, env: dict[str, str]) -> None:
    done = cli("run", "--ticket-id", "T-4", cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert json.loads(done.stdout)["error_code"] == "usage"
    step = cli("step", "3", cwd=tmp_path, env=env)
    assert step.returncode == 2
    assert "inside a shell phase" in json.loads(step.stdout)["error"]
    bad = write_manifest(tmp_path, [{"name": "x", "run": "true", "retries": "many"}])
    refused = cli("run", "--ticket-id", "T-4", "--pipeline-file", str(bad), cwd=tmp_path, env=env)
    assert refused.returncode == 1
    err = json.loads(refused.stdout)
    assert err["error_code"] == "pipeline_error"
    assert err["field"] == "phases[0].retries"


def test_sigint_records_a_python_phase_as_interrupted_and_exits_130(tmp_path: Path, env: dict[str, str]) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "import sys, time, phaselog\n"
        "pipe = phaselog.pipeline('sleepy', phases=['nap', 'after'])\n"
        "@pipe.phase('nap')\n"
        "def nap(ctx):\n"
        "    print('napping', flush=True)\n"
        "    time.sleep(30)\n"
        "    return {}\n"
        "pipe.phase('after')(lambda ctx: {})\n"
        "try:\n"
        "    pipe.run('INT-1', 'r')\n"
        "except phaselog.RunInterrupted as exc:\n"
        "    print(exc.result.to_json()['interrupted'], flush=True)\n"
        "    sys.exit(exc.exit_code)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "napping"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert out.strip() == str(int(signal.SIGINT))
    import phaselog

    ledger = phaselog.open(env["PHASELOG_HOME"])
    try:
        pl = phaselog.pipeline("sleepy", phases=["nap", "after"]).pipeline
        rec = ledger.read("INT-1", "r", "nap", 1, pipeline=pl).record
        assert rec.status == "failed"
        assert rec.error == "interrupted: interrupted by SIGINT"
        assert rec.phase_payload["failure"]["signal"] == "SIGINT"  # type: ignore[index]
        assert ledger.status("INT-1", "r", pipeline=pl).phase("after").state == "pending"
    finally:
        ledger.close()
