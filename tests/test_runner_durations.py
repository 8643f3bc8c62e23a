"""An attempt's start is when its work started, on every path: a Python phase, a shell phase
(with and without `phaselog step`), a failed attempt, and a start event written after the fact.
Durations are read back through the timeline the dashboard and CLI show."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.model.errors import UsageError
from phaselog.model.ids import normalize_run_id
from phaselog.views.timeline import run_timeline


@pytest.fixture(params=["files", "sqlite"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    """A ledger on the files store and on SQLite."""
    url = str(tmp_path / "store") if request.param == "files" else f"sqlite:///{tmp_path / 'ledger.db'}"
    lg = Ledger(phaselog.open_store(url, create=True))
    yield lg
    lg.close()


REPO = Path(__file__).resolve().parent.parent
R = normalize_run_id("r")


def _spans(ledger: Ledger, ticket: str, run: str) -> dict[tuple[str, int], Any]:
    return {(s.phase, s.attempt): s for s in run_timeline(ledger, ticket, run)}


def test_a_python_phase_records_the_time_it_ran(ledger: Ledger, tmp_path: Path) -> None:
    import time

    pipe = phaselog.pipeline("timed", phases=["slow", "quick"])
    pipe.phase("slow")(lambda ctx: time.sleep(1.5))
    pipe.phase("quick")(lambda ctx: time.sleep(0.5))
    pipe.run("D-1", "r", store=ledger, workdir=tmp_path)
    spans = _spans(ledger, "D-1", "r")
    assert 1.5 <= spans[("slow", 1)].duration_sec < 10
    # A phase shorter than the start event's delay has no start event, yet a known duration.
    assert ledger.event_index("D-1", R).get((2, 1)) is None
    assert spans[("quick", 1)].duration_sec is not None
    assert 0.5 <= spans[("quick", 1)].duration_sec < 10
    # The start event of the long phase is stamped with when its work began, as is its checkpoint.
    (start,) = [e for e in ledger.event_index("D-1", R)[(1, 1)] if e.event == "start"]
    cp = ledger.read("D-1", "r", "slow", 1, pipeline=pipe.pipeline).record
    assert cp.started_at == start.timestamp
    assert (cp.timestamp_utc - start.timestamp).total_seconds() >= 1.5


def test_a_failed_attempt_has_its_duration_too(ledger: Ledger, tmp_path: Path) -> None:
    import time

    pipe = phaselog.pipeline("timed-fail", phases=["p"])

    @pipe.phase("p")
    def p(ctx: Any) -> Any:
        time.sleep(0.5)
        raise RuntimeError("no")

    with pytest.raises(phaselog.PhaseFailed):
        pipe.run("D-2", "r", store=ledger, workdir=tmp_path)
    span = _spans(ledger, "D-2", "r")[("p", 1)]
    assert span.state == "failed"
    assert 0.5 <= span.duration_sec < 10


def test_a_shell_phase_records_the_time_it_ran(ledger: Ledger, tmp_path: Path) -> None:
    step = f"{sys.executable} -m phaselog step 1"
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "name: timed-shell\nversion: '1'\nphases:\n"
        "  - name: long\n    run: sleep 1.5\n"
        "  - name: short\n    run: sleep 0.5\n"
        f"  - name: stepped\n    run: sleep 1.2 && {step} && sleep 0.3\n"
    )
    os.environ["PYTHONPATH"] = str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    pipe = phaselog.pipeline(str(manifest))
    pipe.run("D-3", "r", store=ledger, workdir=tmp_path, start_event_after=5.0)
    spans = _spans(ledger, "D-3", "r")
    assert 1.5 <= spans[("long", 1)].duration_sec < 10
    assert 0.5 <= spans[("short", 1)].duration_sec < 10
    # `phaselog step` wrote the start event (before the heartbeat would have): stamped with the
    # attempt's start, which the runner handed it, not with the time of the step.
    events = ledger.event_index("D-3", R)[(3, 1)]
    start = next(e for e in events if e.event == "start")
    cp = ledger.read("D-3", "r", "stepped", 1, pipeline=pipe.pipeline).record
    assert start.timestamp == cp.started_at
    assert 1.5 <= spans[("stepped", 1)].duration_sec < 10
    assert next(e for e in events if e.event == "step").elapsed_sec >= 1.2


def test_a_start_event_can_be_stamped_with_an_earlier_start(ledger: Ledger) -> None:
    began = datetime.now(UTC) - timedelta(seconds=2)
    ev = ledger.progress("D-4", "r", "implement", "start", started_at=began)
    assert ev.timestamp == began
    step = ledger.progress("D-4", "r", "implement", "step", step=1)
    assert step.elapsed_sec is not None
    assert step.elapsed_sec >= 2
    with pytest.raises(UsageError) as info:
        ledger.progress("D-4", "r", "implement", "step", step=2, started_at=began)
    assert info.value.context["field"] == "started_at"
    with pytest.raises(UsageError) as info:
        ledger.progress("D-5", "r", "implement", "start", started_at=datetime.now(UTC) + timedelta(hours=1))
    assert info.value.context["rule"] == "not_future"


def test_a_checkpoint_cannot_start_after_it_ends(ledger: Ledger) -> None:
    pl = phaselog.pipeline("plain", phases=["implement"]).pipeline
    now = datetime.now(UTC)
    with pytest.raises(UsageError) as info:
        ledger.write("D-6", "r", "implement", {}, timestamp=now, started_at=now + timedelta(seconds=1), pipeline=pl)
    assert info.value.context["field"] == "started_at"
    done = ledger.write("D-6", "r", "implement", {}, timestamp=now, started_at=now - timedelta(seconds=3), pipeline=pl)
    again = ledger.read("D-6", "r", "implement", 1, pipeline=pl).record
    assert again.started_at == now - timedelta(seconds=3)
    assert again.content_hash == done.stored.record.content_hash
    (span,) = run_timeline(ledger, "D-6", "r")
    assert span.duration_sec == 3.0


def test_the_cli_records_an_attempt_that_started_earlier(tmp_path: Path) -> None:
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env.update(PHASELOG_HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO / "src"))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "phaselog", *args], env=env, capture_output=True, text=True, check=False
        )

    began = (datetime.now(UTC) - timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ids = ["--ticket-id", "C-1", "--run-id", "r", "--phase", "local_review"]
    started = cli("progress", *ids, "--event", "start", "--started-at", began)
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["event"]["timestamp"] == began
    bad = cli("progress", *ids, "--event", "start", "--started-at", "yesterday")
    assert bad.returncode != 0
    assert "Traceback" not in bad.stderr
    assert "--started-at" in bad.stderr + bad.stdout
    wrote = cli(
        "write",
        *ids[:4],
        "--phase",
        "implement",
        "--started-at",
        began,
        "--payload",
        '{"branch_name": "b", "commit_sha": "abc1234", "files_changed": []}',
    )
    assert wrote.returncode == 0, wrote.stderr
    home = phaselog.Ledger(phaselog.open_store(str(tmp_path / "home")))
    try:
        spans = _spans(home, "C-1", "r")
    finally:
        home.close()
    assert spans[("implement", 1)].duration_sec >= 5
