"""What a run says while it runs: `pipe.run` prints the lines `phaselog run` prints (one renderer,
runner/console.py) on stderr unless quiet, and `ctx.logger` writes to the attempt's log and the console."""

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

BIN = Path(sys.executable).parent / "phaselog"


def flaky_pipeline(seen: list[int]) -> Any:
    pipe = phaselog.pipeline("noisy-job", phases=["fetch", {"name": "review", "requires_approval": True}])

    @pipe.phase("fetch", retries=1, backoff="none")
    def fetch(ctx: Any) -> Any:
        seen.append(ctx.attempt)
        ctx.logger.info("fetching, attempt %s", ctx.attempt)
        if ctx.attempt == 1:
            ctx.logger.warning("the source is flaky")
            raise RuntimeError("source went away")
        return {"rows": 3}

    @pipe.phase("review")
    def review(ctx: Any) -> Any:
        return {"ok": True}

    return pipe


def runner_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("phaselog run: ")]


def test_pipe_run_prints_started_failed_retrying_completed_and_waiting_on_stderr(
    ledger: Ledger, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[int] = []
    result = flaky_pipeline(seen).run("LOUD-1", "r1", store=ledger, workdir=tmp_path)
    assert result.waiting == "review"
    out, err = capsys.readouterr()
    assert out == ""
    lines = runner_lines(err)
    assert lines == [
        "phaselog run: run fetch: no checkpoint yet",
        "phaselog run: log fetch attempt 1: fetching, attempt 1",
        "phaselog run: log fetch attempt 1: WARNING: the source is flaky",
        "phaselog run: failed fetch attempt 1: exception: RuntimeError: source went away",
        "phaselog run: retry fetch in 0.0 s (attempt 2)",
        "phaselog run: log fetch attempt 2: fetching, attempt 2",
        "phaselog run: done fetch: attempt 2",
        "phaselog run: run review: no checkpoint yet",
        "phaselog run: wait review: attempt 1 awaits approval",
    ], err


def test_quiet_prints_nothing_and_echo_gets_the_lines_instead(
    ledger: Ledger, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flaky_pipeline([]).run("LOUD-2", "r1", store=ledger, workdir=tmp_path, quiet=True)
    assert capsys.readouterr() == ("", "")
    got: list[str] = []
    flaky_pipeline([]).run("LOUD-2", "r2", store=ledger, workdir=tmp_path, echo=got.append, quiet=True)
    assert capsys.readouterr() == ("", "")
    assert "failed fetch attempt 1: exception: RuntimeError: source went away" in got
    assert "log fetch attempt 2: fetching, attempt 2" in got


def test_ctx_logger_writes_to_the_attempts_log_where_shell_output_goes(
    ledger: Ledger, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipe = flaky_pipeline([])
    pipe.run("LOUD-3", "r1", store=ledger, workdir=tmp_path, quiet=True)
    run_id = phaselog.model.ids.normalize_run_id("r1")
    logs = tmp_path / "store" / "logs" / "LOUD-3" / run_id  # the files store's root is tmp_path/store
    first = (logs / "1_fetch_a1.log").read_text()
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO fetching, attempt 1$", first, re.M), first
    assert "WARNING the source is flaky" in first
    assert "attempt 2" not in first
    assert "INFO fetching, attempt 2" in (logs / "1_fetch_a2.log").read_text()
    assert not (logs / "2_review_a1.log").exists()  # a phase that logs nothing leaves no log
    assert oct((logs / "1_fetch_a1.log").stat().st_mode & 0o777) == "0o600"
    failed = ledger.read("LOUD-3", "r1", "fetch", 1, pipeline=pipe.pipeline).record.phase_payload
    assert failed["failure"]["log"] == str(logs / "1_fetch_a1.log")  # as a failed shell attempt names its log
    assert capsys.readouterr() == ("", "")


def test_phaselog_run_and_pipe_run_print_the_same_lines(
    ledger: Ledger, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "job.json"
    phases = [
        {
            "name": "fetch",
            "run": "test -e tried-$PHASELOG_RUN_ID || { touch tried-$PHASELOG_RUN_ID; exit 4; }",
            "retries": 1,
            "backoff": "none",
        },
        {"name": "review", "requires_approval": True, "run": "echo reviewed"},
    ]
    manifest.write_text(json.dumps({"name": "shell-job", "version": "1", "phases": phases}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env["PHASELOG_HOME"] = str(tmp_path / "store")
    done = subprocess.run(
        [str(BIN), "run", "--pipeline-file", str(manifest), "--ticket-id", "SAME-1", "--run-id", "cli"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    phaselog.pipeline(manifest).run("SAME-1", "api", store=ledger, workdir=tmp_path)
    from_api = runner_lines(capsys.readouterr().err)
    from_cli = runner_lines(done.stderr)
    assert "phaselog run: failed fetch attempt 1: exit_code: the command exited with 4" in from_cli
    assert "phaselog run: retry fetch in 0.0 s (attempt 2)" in from_cli
    assert from_api == from_cli
    assert "reviewed" in done.stderr  # a shell phase's output, as it comes
