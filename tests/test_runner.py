"""The runner's Python API on every store: run, skip, retry, fail, gates, artifacts, fingerprints."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.runner import PipelineRunner

pytestmark = pytest.mark.all_stores


def make(calls: list[Any], **extract_opts: Any) -> PipelineRunner:
    pipe = phaselog.pipeline("data-job", phases=["extract", "transform", "load"])

    @pipe.phase("extract", **extract_opts)
    def extract(ctx: Any) -> Any:
        calls.append(("extract", ctx.attempt))
        (ctx.workdir / "rows.csv").write_text("a,b\n1,2\n")
        return {"rows": 1}, ["rows.csv"]

    @pipe.phase("transform")
    def transform(ctx: Any) -> Any:
        calls.append(("transform", ctx.attempt))
        return {"rows": ctx.payload("extract")["rows"] + 1}

    @pipe.phase("load")
    def load(ctx: Any) -> Any:
        calls.append(("load", ctx.attempt))
        return {"loaded": ctx.payload("transform")["rows"]}

    return pipe


def test_runs_each_phase_once_then_skips_everything(ledger: Ledger, tmp_path: Path) -> None:
    calls: list[Any] = []
    pipe = make(calls)
    result = pipe.run("CHURN-7", "nightly", store=ledger, workdir=tmp_path)
    assert calls == [("extract", 1), ("transform", 1), ("load", 1)]
    assert result.exit_code == 0
    assert result.done
    assert result.states == {"extract": "completed", "transform": "completed", "load": "completed"}
    assert ledger.read("CHURN-7", "nightly", "load", pipeline=pipe.pipeline).record.phase_payload == {
        "phase": "load",
        "loaded": 2,
    }
    again = pipe.run("CHURN-7", "nightly", store=ledger, workdir=tmp_path)
    assert calls == [("extract", 1), ("transform", 1), ("load", 1)]  # nothing ran again
    assert [p.outcome for p in again.phases] == ["skipped", "skipped", "skipped"]
    assert ledger.verify("CHURN-7").ok


def test_artifacts_are_hashed_at_write_and_a_change_reruns_from_there(ledger: Ledger, tmp_path: Path) -> None:
    calls: list[Any] = []
    pipe = make(calls)
    pipe.run("T-1", "r", store=ledger, workdir=tmp_path)
    rec = ledger.read("T-1", "r", "extract", pipeline=pipe.pipeline).record
    assert rec.artifact_paths == ("rows.csv",)
    assert rec.artifact_hashes == {"rows.csv": hashlib.sha256(b"a,b\n1,2\n").hexdigest()}
    (tmp_path / "rows.csv").write_text("tampered\n")
    plan = pipe.explain("T-1", "r", store=ledger, workdir=tmp_path)
    assert plan.plan("extract").action == "run"
    assert "changed" in plan.plan("extract").reason
    assert [p.action for p in plan.phases] == ["run", "run", "run"]
    calls.clear()
    pipe.run("T-1", "r", store=ledger, workdir=tmp_path)
    assert calls == [("extract", 2), ("transform", 2), ("load", 2)]
    (tmp_path / "rows.csv").unlink()
    assert "does not exist" in pipe.explain("T-1", "r", store=ledger, workdir=tmp_path).plan("extract").reason


def test_retries_record_every_attempt_then_succeed(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("flaky", phases=["fetch"])
    seen: list[int] = []

    @pipe.phase("fetch", retries=3, retry_delay=0)
    def fetch(ctx: Any) -> Any:
        seen.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError(f"try {ctx.attempt} refused")
        return {"ok": True}

    result = pipe.run("F-1", "r", store=ledger, workdir=tmp_path)
    assert seen == [1, 2, 3]
    assert result.outcome("fetch").attempts == (1, 2, 3)
    page = ledger.list("F-1", "r")
    assert [(s.record.attempt_number, s.record.status) for s in page.items] == [
        (1, "failed"),
        (2, "failed"),
        (3, "completed"),
    ]
    failure = page.items[0].record.phase_payload["failure"]  # type: ignore[index]
    assert failure["rule"] == "exception"
    assert failure["type"] == "ConnectionError"
    assert "try 1 refused" in failure["message"]
    assert "raise ConnectionError" in failure["traceback_tail"]
    assert page.items[0].record.error == "exception: ConnectionError: try 1 refused"


def test_a_phase_that_keeps_failing_raises_phase_failed_chained_to_its_exception(
    ledger: Ledger, tmp_path: Path
) -> None:
    calls: list[Any] = []
    pipe = phaselog.pipeline("broken", phases=["first", "second"])

    @pipe.phase("first", retries=1, retry_delay=0)
    def first(ctx: Any) -> Any:
        calls.append(ctx.attempt)
        raise KeyError("missing column")

    @pipe.phase("second")
    def second(ctx: Any) -> Any:
        calls.append("second")
        return {}

    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("B-1", "r", store=ledger, workdir=tmp_path)
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.context["attempts"] == [1, 2]
    result = info.value.result
    assert result.exit_code == 1
    assert result.failed == "first"
    assert result.outcome("second").outcome == "not_reached"
    assert calls == [1, 2]
    st = ledger.status("B-1", "r", pipeline=pipe.pipeline)
    assert st.phase("first").state == "failed"
    assert st.phase("first").latest_attempt == 2
    with pytest.raises(phaselog.PhaseFailed):
        pipe.run("B-1", "r", store=ledger, workdir=tmp_path)
    assert calls == [1, 2, 3, 4]  # the next run retries as new attempts


def test_timeouts_are_failed_attempts_with_rule_timeout(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("slow", phases=["sync_phase", "async_phase"])

    @pipe.phase("sync_phase", timeout=0.2)
    def sync_phase(ctx: Any) -> Any:
        if ctx.attempt == 1:
            time.sleep(5)
        return {}

    @pipe.phase("async_phase", timeout="200ms", retries=1, retry_delay=0)
    async def async_phase(ctx: Any) -> Any:
        if ctx.attempt == 2:
            await asyncio.sleep(5)
        return {"async": True}

    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("S-1", "r", store=ledger, workdir=tmp_path)
    assert info.value.context["rule"] == "timeout"
    cp = ledger.read("S-1", "r", "sync_phase", 1, pipeline=pipe.pipeline).record
    assert cp.status == "failed"
    assert cp.error is not None
    assert cp.error.startswith("timeout:")
    assert cp.phase_payload["failure"]["rule"] == "timeout"  # type: ignore[index]
    started = time.monotonic()
    result = pipe.run("S-1", "r", store=ledger, workdir=tmp_path)  # sync attempt 2 and async attempt 1 succeed
    assert time.monotonic() - started < 4
    assert result.done
    assert ledger.read("S-1", "r", "async_phase", pipeline=pipe.pipeline).record.phase_payload == {
        "phase": "async_phase",
        "async": True,
    }


def test_invalid_payload_is_a_failed_attempt_naming_the_rule(ledger: Ledger, tmp_path: Path) -> None:
    schema = {"type": "object", "required": ["rows"], "properties": {"rows": {"type": "integer"}}}
    pipe = phaselog.pipeline("typed", phases=[{"name": "count", "payload_schema": schema}])

    @pipe.phase("count")
    def count(ctx: Any) -> Any:
        return {"rows": "many"}

    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("V-1", "r", store=ledger, workdir=tmp_path)
    assert info.value.context["rule"] == "invalid"
    cp = ledger.read("V-1", "r", "count", 1, pipeline=pipe.pipeline).record
    assert cp.status == "failed"
    assert "phase_payload.rows" in (cp.error or "")


def test_code_fingerprint_reruns_a_phase_whose_code_changed(ledger: Ledger, tmp_path: Path) -> None:
    def build(body: int, fingerprint: str | None) -> tuple[PipelineRunner, list[int]]:
        pipe = phaselog.pipeline("fp", phases=["compute"])
        ran: list[int] = []
        namespace: dict[str, Any] = {"ran": ran}
        exec(f"def compute(ctx):\n    ran.append(ctx.attempt)\n    return {{'v': {body}}}\n", namespace)
        fn = namespace["compute"]
        pipe.phase("compute", fingerprint=fingerprint)(fn)
        return pipe, ran

    pipe, ran = build(1, "code")
    pipe.fingerprints = lambda: {"compute": "sha256:one"}  # type: ignore[method-assign]
    pipe.run("FP-1", "r", store=ledger, workdir=tmp_path)
    assert ran == [1]
    assert ledger.read("FP-1", "r", "compute", pipeline=pipe.pipeline).record.code_fingerprint == "sha256:one"
    pipe.run("FP-1", "r", store=ledger, workdir=tmp_path)
    assert ran == [1]  # unchanged code: skipped
    pipe2, ran2 = build(2, "code")
    pipe2.fingerprints = lambda: {"compute": "sha256:two"}  # type: ignore[method-assign]
    plan = pipe2.explain("FP-1", "r", store=ledger, workdir=tmp_path)
    assert plan.plan("compute").action == "run"
    assert "code changed" in plan.plan("compute").reason
    pipe2.run("FP-1", "r", store=ledger, workdir=tmp_path)
    assert ran2 == [2]


def test_real_source_fingerprints_differ_for_different_functions() -> None:
    from phaselog.runner.python_phase import code_fingerprint

    def one(ctx: Any) -> Any:
        return {"v": 1}

    def two(ctx: Any) -> Any:
        return {"v": 2}

    assert code_fingerprint(one) != code_fingerprint(two)
    assert code_fingerprint(one) == code_fingerprint(one)
    assert code_fingerprint(one).startswith("sha256:")


def test_gate_stops_waits_for_approval_and_a_rejection_redoes_the_phase(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("video", phases=["draft", {"name": "review", "requires_approval": True}, "publish"])
    seen: list[Any] = []

    @pipe.phase("draft")
    def draft(ctx: Any) -> Any:
        seen.append("draft")
        return {}

    @pipe.phase("review")
    def review(ctx: Any) -> Any:
        seen.append(("review", ctx.attempt, ctx.rejection))
        return {"cut": ctx.attempt}

    @pipe.phase("publish")
    def publish(ctx: Any) -> Any:
        seen.append("publish")
        return {}

    first = pipe.run("VID-1", "r", store=ledger, workdir=tmp_path)
    assert first.exit_code == 3
    assert first.waiting == "review"
    assert first.state("review") == "awaiting_approval"
    assert first.state("publish") == "pending"
    assert pipe.run("VID-1", "r", store=ledger, workdir=tmp_path).waiting == "review"  # still waiting, nothing ran
    assert seen == ["draft", ("review", 1, None)]
    ledger.reject("VID-1", "r", "review", by="ana", comment="too long", pipeline=pipe.pipeline)
    second = pipe.run("VID-1", "r", store=ledger, workdir=tmp_path)
    assert seen[-1] == ("review", 2, "too long")
    assert second.waiting == "review"
    ledger.approve("VID-1", "r", "review", by="ana", pipeline=pipe.pipeline)
    third = pipe.run("VID-1", "r", store=ledger, workdir=tmp_path)
    assert third.exit_code == 0
    assert seen[-1] == "publish"
    assert seen.count("draft") == 1


def test_resume_after_comes_from_the_abandoned_attempt(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("steps", phases=["work"])
    got: list[Any] = []

    @pipe.phase("work")
    def work(ctx: Any) -> Any:
        got.append((ctx.attempt, ctx.resume_after))
        ctx.step_done(4, output="done")
        return {}

    pl = pipe.pipeline
    dead = _dead_pid()
    ledger.progress("W-1", "r", "work", "start", pid=dead, pipeline=pl)
    ledger.progress("W-1", "r", "work", "step", step=3, pipeline=pl)
    plan = pipe.explain("W-1", "r", store=ledger, workdir=tmp_path).plan("work")
    assert plan.action == "run"
    assert plan.resume_from_step == 3
    assert plan.next_attempt == 2
    pipe.run("W-1", "r", store=ledger, workdir=tmp_path)
    assert got == [(2, 3)]
    events = ledger.progress_events("W-1", "r", "work", 2, pipeline=pl)
    assert [e.event for e in events] == ["start", "step"]
    assert events[-1].step == 4
    assert events[0].pid is not None


def test_a_run_follows_one_pipeline(ledger: Ledger, tmp_path: Path) -> None:
    calls: list[Any] = []
    make(calls).run("M-1", "r", store=ledger, workdir=tmp_path)
    other = phaselog.pipeline("other-job", phases=["x"])
    other.phase("x")(lambda ctx: {})
    with pytest.raises(phaselog.PipelineMismatch):
        other.run("M-1", "r", store=ledger, workdir=tmp_path)


def test_a_phase_without_code_is_refused_before_anything_runs(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("half", phases=["a", "b"])
    pipe.phase("a")(lambda ctx: {})
    with pytest.raises(phaselog.UsageError, match="phase b of pipeline half has nothing to run"):
        pipe.run("H-1", "r", store=ledger, workdir=tmp_path)
    assert ledger.list("H-1").items == []


def test_bad_return_values_fail_the_attempt(ledger: Ledger, tmp_path: Path) -> None:
    pipe = phaselog.pipeline("bad", phases=["a"])
    pipe.phase("a")(lambda ctx: ["not", "a", "mapping"])
    with pytest.raises(phaselog.PhaseFailed) as info:
        pipe.run("X-1", "r", store=ledger, workdir=tmp_path)
    assert info.value.context["rule"] == "bad_result"


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_runner_checks_prerequisites_when_it_plans_not_at_every_write(ledger: Ledger) -> None:
    # A strict pipeline refuses a later phase before the earlier ones, unless the caller says it
    # checked them itself (the runner does, under its lease, when it plans with explain).
    pipe = phaselog.pipeline("strict-job", phases=["a", "b"])
    with pytest.raises(phaselog.model.errors.Prerequisite):
        ledger.write("P-1", "r", "b", {}, pipeline=pipe.pipeline)
    written = ledger.write("P-1", "r", "b", {}, pipeline=pipe.pipeline, check_prerequisites=False)
    assert written.record.phase == "b"


def test_backoff_grows_as_configured() -> None:
    from phaselog.model.execution import Execution
    from phaselog.runner.engine import backoff_delay

    def around(ex: Execution, retry: int, expected: float) -> None:
        for _ in range(20):
            assert expected * 0.9 <= backoff_delay(ex, retry) <= expected * 1.1

    around(Execution(backoff="exponential", retry_delay=2.0), 1, 2.0)
    around(Execution(backoff="exponential", retry_delay=2.0), 3, 8.0)
    around(Execution(backoff="linear", retry_delay=2.0), 3, 6.0)
    around(Execution(backoff="fixed", retry_delay=2.0), 5, 2.0)
    around(Execution(backoff="exponential", retry_delay=100.0), 10, 300.0)  # capped at 5 min
    assert backoff_delay(Execution(backoff="none", retry_delay=2.0), 4) == 0.0
    assert backoff_delay(Execution(backoff="exponential", retry_delay=0.0), 4) == 0.0
