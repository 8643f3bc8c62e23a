"""The README's runner example runs as written (extracted from README.md), and errors another
attempt cannot fix fail the phase at once instead of being retried."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.stores import open_store

REPO = Path(__file__).resolve().parent.parent


def readme_runner_example() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## The runner", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md: the runner section has no python example"
    return match.group(1)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env["PHASELOG_HOME"] = str(home)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_the_readme_runner_example_runs_as_written(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_runner_example() + '\nassert result.waiting == "publish", result.to_json()\n')
    home = tmp_path / "home"
    proc = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        cwd=tmp_path,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    ledger = Ledger(open_store(str(home)))
    try:
        records = [s.record for s in ledger.list("CHURN-7", "nightly-2026-11-30").items]
    finally:
        ledger.close()
    assert [(r.phase, r.attempt_number, r.status) for r in records] == [
        ("extract", 1, "completed"),
        ("transform", 1, "completed"),
        ("publish", 1, "completed"),
    ]
    assert records[0].artifact_paths == ("out/rows.parquet",)


def test_the_readme_example_without_its_artifact_fails_at_once_without_a_traceback(tmp_path: Path) -> None:
    code = readme_runner_example()
    code = "\n".join(line for line in code.splitlines() if 'rows.parquet").write' not in line)
    script = tmp_path / "example.py"
    script.write_text(
        code.replace("result = pipe.run(", "try:\n    result = pipe.run(", 1)
        + "\nexcept phaselog.PhaseFailed as exc:\n    print(exc.message)\n    raise SystemExit(1)\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        cwd=tmp_path,
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "phase extract failed after 1 attempt(s) (not retried: artifact_missing is permanent)" in proc.stdout
    assert "out/rows.parquet" in proc.stdout


def _pipe(retried: list[int], kind: str) -> Any:
    schema = {"type": "object", "required": ["rows"], "properties": {"rows": {"type": "integer"}}}
    pipe = phaselog.pipeline(f"perm-{kind}", phases=[{"name": "p", "payload_schema": schema}])

    @pipe.phase("p", retries=3, retry_delay="2s")
    def p(ctx: Any) -> Any:
        retried.append(ctx.attempt)
        if kind == "invalid":
            return {"rows": "many"}
        if kind == "artifact_missing":
            return {"rows": 1}, ["missing.txt"]
        if kind == "bad_result":
            return ["not", "a", "mapping"]
        raise ConnectionError("refused")

    return pipe


@pytest.mark.all_stores
@pytest.mark.parametrize("kind", ["invalid", "artifact_missing", "bad_result"])
def test_an_error_another_attempt_cannot_fix_is_not_retried(ledger: Ledger, tmp_path: Path, kind: str) -> None:
    tried: list[int] = []
    pipe = _pipe(tried, kind)
    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("P-1", "r", store=ledger, workdir=tmp_path)
    assert tried == [1]
    assert info.value.context["rule"] == kind
    assert info.value.context["retryable"] is False
    assert info.value.__cause__ is None
    records = [s.record for s in ledger.list("P-1", "r").items]
    assert [(r.attempt_number, r.status) for r in records] == [(1, "failed")]
    assert (records[0].error or "").startswith(f"{kind}: ")
    assert info.value.result.outcome("p").attempts == (1,)


@pytest.mark.all_stores
def test_an_exception_is_still_retried(ledger: Ledger, tmp_path: Path) -> None:
    tried: list[int] = []
    pipe = phaselog.pipeline("retried", phases=["p"])

    @pipe.phase("p", retries=2, retry_delay=0)
    def p(ctx: Any) -> Any:
        tried.append(ctx.attempt)
        raise ConnectionError("refused")

    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("P-2", "r", store=ledger, workdir=tmp_path)
    assert tried == [1, 2, 3]
    assert info.value.context["retryable"] is True


def test_the_cli_fails_a_missing_artifact_at_once_with_the_error_and_no_traceback(tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "name: perm-cli\nversion: '1'\nphases:\n"
        "  - name: extract\n    run: echo hi\n    retries: 3\n    retry_delay: 5s\n    artifacts: [rows.txt]\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "phaselog",
            "run",
            "--pipeline-file",
            str(manifest),
            "--ticket-id",
            "C-1",
            "--run-id",
            "r",
        ],
        check=False,
        cwd=tmp_path,
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    assert "artifact_missing" in out["error"]
    assert "not retried" in out["error"]
    extract = next(p for p in out["phases"] if p["phase"] == "extract")
    assert extract["attempts"] == [1]
