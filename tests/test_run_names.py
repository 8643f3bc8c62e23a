"""A run is shown by the name it was given, on every surface (issue 19, "Run names vanish").

`fork --new-run-id r2` and `submit --run-id w49` dropped the name (the copies and the worker's
checkpoints were written by UUID), and `run`, `history`, `diff`, `queue list`, the worker's lines,
the dashboard's approvals page, titles and breadcrumbs showed the UUID even when the name was
known. One decision (`phaselog.model.ids.run_name_of` / `run_label`) now names a run everywhere; JSON
keeps `run_id` (the UUID) and adds `run_name`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.model.ids import normalize_run_id
from queue_support import base_env, cli_json, pipelines_dir, start_worker
from queue_support import cli as queue_cli

R1, R2 = normalize_run_id("r1"), normalize_run_id("r2")
JOB = """\
name: job
version: "1"
order: strict
phases:
  - name: a
    run: "echo '{\\"x\\": 1}'"
  - name: b
    run: "echo '{\\"y\\": 2}'"
"""


def test_one_function_decides_a_runs_name_and_how_it_is_shown() -> None:
    from phaselog.model.ids import run_label, run_name_of, run_title

    assert run_name_of(R1, None, "r1") == "r1"
    assert run_name_of(R1, "r2", "r1") == "r1"  # a name that is another run's never names this one
    assert run_name_of(R1, R1, None) is None  # a UUID is not a name
    assert run_name_of(R1) is None
    assert (run_label(R1, "r1"), run_label(R1), run_label(R1, short=True)) == ("r1", R1, f"{R1[:8]}…")
    assert (run_title(R1, "r1"), run_title(R1)) == (f"r1 ({R1[:8]}…)", R1)


def cli(root: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args, "--store", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PHASELOG_HOME": "/nonexistent-phaselog-home", "COLUMNS": "100"},
        cwd=cwd,
        check=False,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout) if proc.stdout.lstrip().startswith("{") else proc.stdout


def test_fork_keeps_the_new_runs_name_and_every_cli_view_shows_names(tmp_path: Path) -> None:
    root, job = tmp_path / "store", tmp_path / "job.yaml"
    job.write_text(JOB)
    ran = ok(cli(root, "run", "--pipeline-file", str(job), "--ticket-id", "T", "--run-id", "r1", cwd=tmp_path))
    assert (ran["run_id"], ran["run_name"]) == (R1, "r1")
    table = cli(root, "run", "--pipeline-file", str(job), "--ticket-id", "T", "--run-id", R1, "--format", "table")
    assert f"run r1 ({R1[:8]}…) (job): done" in ok(table)  # resumed by UUID: still named

    forked = ok(cli(root, "fork", "--ticket-id", "T", "--run-id", "r1", "--through", "a", "--new-run-id", "r2"))
    assert (forked["run_id"], forked["run_name"], forked["forked_from"]) == (R2, "r2", R1)
    assert f"new run r3 ({normalize_run_id('r3')[:8]}…)" in ok(
        cli(root, "fork", "--ticket-id", "T", "--run-id", "r1", "--through", "a", "--new-run-id", "r3", "--format",
            "table")
    )  # fmt: skip

    runs = ok(cli(root, "runs", "--ticket-id", "T"))
    named = {(r["run_id"], r["run_name"]) for r in runs["runs"]}
    assert named == {(R1, "r1"), (R2, "r2"), (normalize_run_id("r3"), "r3")}
    listed = ok(cli(root, "runs", "--ticket-id", "T", "--format", "table"))
    assert "r2" in listed
    assert R2 not in listed
    assert R2[:8] not in listed
    assert ok(cli(root, "status", "--ticket-id", "T", "--run-id", R2))["run_name"] == "r2"  # asked by UUID

    history = ok(cli(root, "history", "--ticket-id", "T"))["history"]
    assert {(e["run_id"], e["run_name"]) for e in history} >= {(R1, "r1"), (R2, "r2")}
    shown = ok(cli(root, "history", "--ticket-id", "T", "--format", "table"))
    assert " r2 " in shown
    assert " r1 " in shown
    assert R1[:8] not in shown
    assert R2[:8] not in shown

    diff = ok(cli(root, "diff", "--ticket-id", "T", "r1:a:1", "r2:a:1"))["diffs"][0]
    assert (diff["a"], diff["b"]) == (f"{R1}:a:1", f"{R2}:a:1")  # refs stay UUIDs: scripts pass them back
    assert (diff["a_run_name"], diff["b_run_name"]) == ("r1", "r2")
    text = ok(cli(root, "diff", "--ticket-id", "T", f"{R1}:a:1", f"{R2}:a:1", "--format", "text"))
    assert text.startswith("--- r1:a:1\n+++ r2:a:1\n"), text

    explained = ok(cli(root, "explain", "--pipeline-file", str(job), "--ticket-id", "T", "--run-id", R2))
    assert explained["run_name"] == "r2"
    assert f"run r2 ({R2[:8]}…) (job) next: b" in ok(
        cli(root, "explain", "--pipeline-file", str(job), "--ticket-id", "T", "--run-id", R2, "--format", "table")
    )


# -- the queue and the worker (real PostgreSQL, a real worker process) -------------------------------
def test_submit_keeps_the_name_through_the_queue_the_worker_and_the_listings(
    pg_schema_url: str, tmp_path: Path
) -> None:
    url = pg_schema_url
    cli_json("store", "migrate", "--store", url)
    pipelines, work = pipelines_dir(tmp_path), tmp_path / "work"
    work.mkdir()
    w49 = normalize_run_id("w49")
    submitted = cli_json("submit", "--pipeline", "three", "--ticket-id", "T-49", "--run-id", "w49", "--store", url)
    assert (submitted["run_id"], submitted["run_name"]) == (w49, "w49")
    listed = cli_json("queue", "list", "--store", url)
    assert [(r["run_id"], r["run_name"]) for r in listed["runs"]] == [(w49, "w49")]
    table = queue_cli("queue", "list", "--store", url, "--format", "table", env=base_env({"COLUMNS": "120"}))
    assert table.returncode == 0, table.stderr
    assert "w49" in table.stdout
    assert w49[:8] not in table.stdout

    log = tmp_path / "worker.log"
    proc = start_worker(url, pipelines, work, "--burst", log=log)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, log.read_text())
    lines = [line for line in log.read_text().splitlines() if "T-49" in line]
    assert any("claimed T-49/w49 (three)" in line for line in lines), lines
    assert any(line.endswith("T-49/w49: done") for line in lines), lines
    assert not any(w49 in line or w49[:8] in line for line in lines), lines  # no UUID in its progress lines

    with phaselog.Ledger(phaselog.open_store(url)) as ledger:  # the worker wrote by the name: it stays
        assert {a.phase for a in ledger.store.attempts("T-49", w49)} == {"one", "two", "three"}
        assert all(ledger.read("T-49", w49, p).record.run_name == "w49" for p in ("one", "two", "three"))
    assert [(r["run_id"], r["run_name"]) for r in cli_json("runs", "--ticket-id", "T-49", "--store", url)["runs"]] == [
        (w49, "w49")
    ]
    tickets = cli_json("tickets", "--store", url)["tickets"]
    assert [(t["latest_run"], t["latest_run_name"]) for t in tickets] == [(w49, "w49")]
    shown = queue_cli("tickets", "--store", url, "--format", "table", env=base_env({"COLUMNS": "120"}))
    assert "w49" in shown.stdout, shown.stdout + shown.stderr
    assert w49[:8] not in shown.stdout
    assert cli_json("queue", "show", "--ticket-id", "T-49", "--run-id", w49, "--store", url)["run_name"] == "w49"


def test_a_store_of_schema_5_migrates_and_keeps_submitted_names(pg_schema_url: str) -> None:
    """Migration 7 adds the queue row's run_name to a store created before it (and 6 its quarantine)."""
    from phaselog.runner import queue
    from phaselog.stores import open_store
    from phaselog.stores.sql import schema as sql_schema

    with open_store(pg_schema_url, create=True) as store:
        conn: Any = store.dialect.connect()  # type: ignore[attr-defined]
        try:
            store.dialect.create_schema(conn)  # type: ignore[attr-defined]
            for version in range(1, 6):
                for statement in sql_schema.MIGRATIONS[version]:
                    conn.execute(statement)
            conn.execute("CREATE TABLE phaselog_schema (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
            conn.execute("INSERT INTO phaselog_schema (id, version) VALUES (1, 5)")
            conn.commit()
        finally:
            conn.close()
    before = queue_cli("queue", "list", "--store", pg_schema_url)
    assert before.returncode != 0, before.stdout
    assert json.loads(before.stdout)["error_code"] == "migration_needed"
    assert cli_json("store", "migrate", "--store", pg_schema_url)
    with open_store(pg_schema_url) as store:
        assert queue.submit(store, ticket_id="T-1", pipeline="job", run_id="nightly-3")["run_name"] == "nightly-3"
        assert queue.submit(store, ticket_id="T-2", pipeline="job")["run_name"] is None


# -- the dashboard, in a real browser --------------------------------------------------------------
@pytest.fixture
def named_store(tmp_path: Path) -> Path:
    """VID-1: run r1 waits for approval of its proposal (after progress events); r2 is forked from it."""
    root = tmp_path / "store"
    ledger = phaselog.Ledger(phaselog.open_store(str(root)))
    try:
        ledger.init_ticket("VID-1", title="Launch", pipeline="video-pipeline")
        ledger.progress("VID-1", "r1", "research", "start")
        ledger.write("VID-1", "r1", "research", {"summary": "s", "sources": ["https://example.com/a"]})
        ledger.write("VID-1", "r1", "proposal", {"title": "Launch", "concept": "short"})
        ledger.fork("VID-1", "r1", through="research", new_run_id="r2")
    finally:
        ledger.close()
    return root


@pytest.fixture
def named_server(named_store: Path) -> Iterator[Any]:
    from ui_data import Server

    srv = Server(str(named_store))
    yield srv
    srv.stop()


def test_the_dashboard_shows_runs_by_name_with_the_uuid_on_hover(named_server: Any) -> None:
    from test_ui_browser import ARGS, CHROMIUM, require_chromium

    require_chromium()
    from playwright.sync_api import sync_playwright

    base = named_server.base
    token = named_server.url.partition("?")[2]
    q = f"?{token}" if token else ""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(named_server.url)
            latest = page.locator("table#tickets tr[data-ticket='VID-1'] td.latest-run a")
            assert (latest.inner_text(), latest.get_attribute("title")) == ("r1", R1)  # r2 copies r1's times

            page.goto(f"{base}/tickets/VID-1/runs/{R1}{q}")
            assert page.title().startswith("VID-1 · run r1"), page.title()
            head = page.locator("h1 span.mono")
            assert (head.inner_text(), head.get_attribute("title")) == ("r1", R1)

            for path in ("/phases/research/attempts/1", "/phases/research/attempts/1/events", "/explain"):
                page.goto(f"{base}/tickets/VID-1/runs/{R2 if 'events' not in path else R1}{path}{q}")
                crumb = page.locator("p.crumbs a").nth(2)
                name, uuid = ("r1", R1) if "events" in path else ("r2", R2)
                assert (crumb.inner_text(), crumb.get_attribute("title")) == (f"run {name}", uuid), path

            page.goto(f"{base}/approvals{q}")
            cell = page.locator("table#queue tr[data-ticket='VID-1'] td").nth(1).locator("a")
            assert (cell.inner_text(), cell.get_attribute("title")) == ("r1", R1)
            assert R1[:8] not in page.inner_text("table#queue")

            page.goto(f"{base}/tickets/VID-1/runs/{R1}/overview.json{q}")
            assert json.loads(page.inner_text("body"))["status"]["run_name"] == "r1"
            page.goto(f"{base}/tickets/VID-1/runs/{R1}/phases/research/attempts/1/events.json{q}")
            assert json.loads(page.inner_text("body"))["run_name"] == "r1"
        finally:
            browser.close()


def test_the_dashboards_pages_name_runs_over_real_http(named_server: Any) -> None:
    """The same pages as the browser test, over real HTTP (it runs where Chromium is missing)."""
    import re

    from ui_data import Http

    http = Http(named_server.base)
    token = named_server.url.partition("?")[2]
    q = f"?{token}" if token else ""

    def get(path: str) -> str:
        status, _, body = http.request("GET", path + q)
        assert status == 200, (path, status, body[:300])
        return body

    tickets = get("/tickets")
    assert re.search(rf'<td class="latest-run"><a [^>]*title="{R1}">r1</a>', tickets), tickets  # r2 copies r1's times
    run = get(f"/tickets/VID-1/runs/{R1}")
    assert "<title>VID-1 · run r1" in run
    assert f'<span class="mono" title="{R1}">r1</span>' in run
    crumb = '<a href="/tickets/VID-1/runs/{uuid}" title="{uuid}">run {name}</a>'
    assert crumb.format(uuid=R2, name="r2") in get(f"/tickets/VID-1/runs/{R2}/phases/research/attempts/1")
    assert crumb.format(uuid=R2, name="r2") in get(f"/tickets/VID-1/runs/{R2}/explain")
    assert crumb.format(uuid=R1, name="r1") in get(f"/tickets/VID-1/runs/{R1}/phases/research/attempts/1/events")
    approvals = get("/approvals")
    assert re.search(rf'<a href="/tickets/VID-1/runs/{R1}" class="mono" title="{R1}">r1</a>', approvals), approvals
    assert f">{R1[:8]}<" not in approvals
    assert json.loads(get(f"/tickets/VID-1/runs/{R1}/overview.json"))["status"]["run_name"] == "r1"
    assert json.loads(get(f"/tickets/VID-1/runs/{R1}/phases/research/attempts/1/events.json"))["run_name"] == "r1"
