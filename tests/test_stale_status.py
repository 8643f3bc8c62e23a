"""A phase whose artifacts changed on disk: `status` and `explain` give one answer (issue 19, D89, D90).

Real shell phases run by `phaselog run` in a real folder, on the files store and SQLite; the
artifact is then changed, removed or put back, and `status` (JSON and table) and `explain` are
asked in real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.stores import Store

BIN = Path(sys.executable).parent / "phaselog"

MANIFEST = {
    "name": "data-job",
    "version": "1",
    "phases": [
        {"name": "fetch", "run": "echo a,b > rows.txt", "artifacts": ["rows.txt"]},
        {"name": "transform", "run": "echo '{\"n\": 1}'"},
        {"name": "report", "run": "echo done > report.txt", "artifacts": ["report.txt"]},
    ],
}


def cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(params=["files", "sqlite"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, dict[str, str], tuple[str, ...]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env["PATH"] = f"{BIN.parent}{os.pathsep}{env.get('PATH', '')}"
    url = f"file://{tmp_path}/store" if request.param == "files" else f"sqlite://{tmp_path}/ledger.db"
    work = tmp_path / "work"
    work.mkdir()
    job = tmp_path / "job.json"
    job.write_text(json.dumps(MANIFEST))
    base = ("--ticket-id", "T-1", "--run-id", "nightly", "--pipeline-file", str(job), "--store", url)
    ran = cli("run", *base, cwd=work, env=env)
    assert ran.returncode == 0, ran.stderr
    return work, env, base


def _status(work: Path, env: dict[str, str], base: tuple[str, ...], *extra: str, cwd: Path | None = None) -> Any:
    done = cli("status", *base, *extra, cwd=cwd or work, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _explain(work: Path, env: dict[str, str], base: tuple[str, ...]) -> Any:
    done = cli("explain", *base, cwd=work, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_changed_artifact_makes_status_stale_with_the_reason_explain_gives(
    setup: tuple[Path, dict[str, str], tuple[str, ...]],
) -> None:
    work, env, base = setup
    before = _status(work, env, base)
    assert before["done"]
    assert before["next_phase"] is None
    assert _explain(work, env, base)["done"]

    (work / "rows.txt").write_text("edited by hand\n")
    st = _status(work, env, base)
    fetch = st["phases"][0]
    assert fetch["state"] == "stale"
    assert "'rows.txt' changed since it was recorded" in fetch["reason"]
    assert fetch["reason"].startswith("attempt 1's artifacts are not what it recorded")
    assert (st["next_phase"], st["done"], st["summary"]) == ("fetch", False, "pending")
    assert "fetch" not in st["completed_phases"]

    plan = _explain(work, env, base)
    assert plan["next_phase"] == st["next_phase"]  # one decision: the state the plan is made from
    assert plan["phases"][0]["state"] == "stale"
    assert plan["phases"][0]["reason"] == f"stale: {fetch['reason']}"
    assert plan["to_run"] == ["fetch", "transform", "report"]

    table = cli("status", *base, "--format", "table", cwd=work, env=env)
    assert table.returncode == 0
    assert "next: fetch" in table.stdout
    assert "— done" not in table.stdout
    assert "stale" in table.stdout
    assert "rows.txt" in table.stdout


def test_a_removed_artifact_is_stale_and_putting_it_back_makes_the_run_done_again(
    setup: tuple[Path, dict[str, str], tuple[str, ...]],
) -> None:
    work, env, base = setup
    (work / "report.txt").unlink()
    st = _status(work, env, base)
    report = st["phases"][2]
    assert report["state"] == "stale"
    assert f"'report.txt' does not exist under {work.resolve()}" in report["reason"]
    assert st["next_phase"] == "report"
    assert _explain(work, env, base)["to_run"] == ["report"]
    (work / "report.txt").write_text("done\n")  # the same bytes: the state is derived, never stored
    assert _status(work, env, base)["done"]


def test_status_checks_the_folder_workdir_names(setup: tuple[Path, dict[str, str], tuple[str, ...]]) -> None:
    work, env, base = setup
    elsewhere = work.parent / "elsewhere"
    elsewhere.mkdir()
    assert _status(work, env, base, "--workdir", str(work), cwd=elsewhere)["done"]
    away = _status(work, env, base, cwd=elsewhere)  # default: the current folder, as `run` and `explain`
    assert away["phases"][0]["state"] == "stale"
    assert str(elsewhere.resolve()) in away["phases"][0]["reason"]
    bad = cli("status", *base, "--workdir", str(work / "nope"), cwd=work, env=env)
    assert bad.returncode == 2
    err = json.loads(bad.stdout)
    assert err["success"] is False
    assert "workdir" in err["error"]
    assert "not a folder" in err["error"]
    assert "Traceback" not in bad.stderr


def _runner() -> Any:
    pipe = phaselog.pipeline("py-job", phases=["extract", "load"])

    @pipe.phase("extract")
    def extract(ctx: Any) -> Any:
        (ctx.workdir / "rows.csv").write_text("a,b\n1,2\n")
        return {"rows": 1}, ["rows.csv"]

    @pipe.phase("load")
    def load(ctx: Any) -> Any:
        return {"loaded": 1}

    return pipe


@pytest.mark.all_stores
def test_status_with_an_artifacts_root_is_still_one_snapshot(store: Store, tmp_path: Path) -> None:
    from test_store_calls import Counting

    pipe = _runner()
    pipe.run("P-1", "r", store=Ledger(store), workdir=tmp_path)
    (tmp_path / "rows.csv").write_text("other\n")
    counting = Counting(store)
    led = Ledger(counting)  # type: ignore[arg-type]
    st = led.status("P-1", "r", pipeline=pipe.pipeline, artifacts_root=tmp_path)
    assert dict(counting.calls) == {"snapshot": 1}
    assert st.phase("extract").state == "stale"
    assert st.next_phase == "extract"
    # without a folder, artifacts are not looked at (a library caller chooses)
    assert led.status("P-1", "r", pipeline=pipe.pipeline).done
    # the runner planned from the same decision: it redoes extract, and the run is done again
    again = pipe.run("P-1", "r", store=led, workdir=tmp_path)
    assert again.outcome("extract").attempts == (2,)
    assert led.status("P-1", "r", pipeline=pipe.pipeline, artifacts_root=tmp_path).done


def test_a_remembered_digest_never_hides_a_change(ledger: Ledger, tmp_path: Path) -> None:
    """A settled file's digest is remembered by its stat signature (D90); an edit of the same size
    with the mtime put back still changes the ctime, so the change is seen."""
    pipe = _runner()
    pipe.run("M-1", "r", store=ledger, workdir=tmp_path)
    rows = tmp_path / "rows.csv"
    old = time.time() - 60
    os.utime(rows, (old, old))
    assert ledger.status("M-1", "r", pipeline=pipe.pipeline, artifacts_root=tmp_path).done
    assert ledger.status("M-1", "r", pipeline=pipe.pipeline, artifacts_root=tmp_path).done  # remembered
    time.sleep(0.05)  # a ctime tick apart (the test does not time anything; it only orders two writes)
    rows.write_text("a,b\n9,9\n")  # same size
    os.utime(rows, (old, old))
    st = ledger.status("M-1", "r", pipeline=pipe.pipeline, artifacts_root=tmp_path)
    assert st.phase("extract").state == "stale"
    assert "'rows.csv' changed" in str(st.phase("extract").reason)


def test_the_dashboard_shows_the_state_status_shows(setup: tuple[Path, dict[str, str], tuple[str, ...]]) -> None:
    from ui_data import Http, Server

    work, env, base = setup
    (work / "rows.txt").write_text("edited by hand\n")
    st = _status(work, env, base)
    url = base[base.index("--store") + 1]
    srv = Server(url, "--artifacts-root", str(work))
    try:
        code, _, body = Http(srv.base).request("GET", f"/tickets/T-1/runs/{st['run_id']}/overview.json")
    finally:
        srv.stop()
    assert code == 200, body
    shown = json.loads(body)["status"]
    assert shown["next_phase"] == st["next_phase"] == "fetch"
    assert shown["phases"][0]["state"] == "stale"
    assert shown["phases"][0]["reason"] == st["phases"][0]["reason"]
