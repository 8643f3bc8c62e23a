"""`phaselog worker` as deployed: real worker processes on a real PostgreSQL, signals, gates, cancel.

The long drains (4 workers x 100 runs, the kill storm) are in test_workers_storm.py; the tests
marked slow here are the ones that wait for a grace period, a pool or a string of deaths.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from queue_support import (
    base_env,
    check_exactly_once,
    cli,
    cli_json,
    effects,
    pipelines_dir,
    queue_states,
    start_worker,
    stop,
    wait_for,
)


@pytest.fixture
def setup(pg_schema_url: str, tmp_path: Path) -> tuple[str, Path, Path]:
    """(store URL, pipelines folder, working folder), the store migrated."""
    cli_json("store", "migrate", "--store", pg_schema_url)
    work = tmp_path / "work"
    work.mkdir()
    return pg_schema_url, pipelines_dir(tmp_path), work


def submit(url: str, ticket: str, *args: str) -> dict[str, Any]:
    """``phaselog submit`` in this process (its CLI is tested in test_queue.py)."""
    from phaselog.runner import queue
    from phaselog.stores import open_store

    kw = {"pipeline" if args[0] == "--pipeline" else "pipeline_file": args[1]}
    with open_store(url) as store:
        return queue.submit(store, ticket_id=ticket, **kw)


def entry(url: str, ticket: str, run_id: str) -> dict[str, Any]:
    """``phaselog queue show`` in this process."""
    from phaselog.runner import queue
    from phaselog.stores import open_store

    with open_store(url) as store:
        return queue.show_view(store, ticket, run_id)


def burst(url: str, pipelines: Path, work: Path, *extra: str) -> dict[str, Any]:
    proc = start_worker(url, pipelines, work, "--burst", *extra)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    summary: dict[str, Any] = json.loads(out)
    return summary


def test_a_burst_worker_runs_python_and_shell_phases_exactly_once(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    runs = {}
    for i in range(4):
        runs[submit(url, f"T-{i}", "--pipeline", "three")["run_id"]] = f"T-{i}"
    by_file = submit(url, "T-9", "--pipeline-file", str(pipelines / "three.yaml"))
    runs[by_file["run_id"]] = "T-9"
    summary = burst(url, pipelines, work)
    assert summary["runs"] == 5
    assert summary["outcomes"] == {"done": 5}
    assert set(queue_states(url).values()) == {"done"}
    check_exactly_once(url, work, runs, pipelines / "three.yaml")
    listed = cli_json("queue", "list", "--store", url)
    assert {r["phase"] for r in listed["runs"]} == {"three"}
    assert listed["workers"] == []  # a worker that stopped removed its heartbeat row


def test_a_gate_frees_the_worker_and_approve_requeues_the_run(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    run_id = submit(url, "G-1", "--pipeline", "gated")["run_id"]
    other = submit(url, "G-2", "--pipeline", "three")["run_id"]
    summary = burst(url, pipelines, work)
    assert summary["outcomes"] == {"awaiting_approval": 1, "done": 1}
    waiting = entry(url, "G-1", run_id)
    assert waiting["state"] == "awaiting_approval"
    assert waiting["worker"] is None
    assert waiting["phase"] == "draft"
    assert entry(url, "G-2", other)["state"] == "done"
    approved = cli(
        "approve", "--ticket-id", "G-1", "--run-id", run_id, "--phase", "draft", "--by", "ana", "--store", url,
        "--pipeline-file", str(pipelines / "gated.yaml"),
    )  # fmt: skip
    assert approved.returncode == 0, approved.stdout
    assert entry(url, "G-1", run_id)["state"] == "queued"
    assert burst(url, pipelines, work)["outcomes"] == {"done": 1}
    assert entry(url, "G-1", run_id)["state"] == "done"
    drafts = [e for e in effects(work) if e[0] == run_id and e[1] == "draft" and e[2] == "done"]
    assert len(drafts) == 1  # the approved phase did not run again


def test_failures_and_missing_code_make_a_run_dead_with_the_reason(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    failing = submit(url, "F-1", "--pipeline", "failing")["run_id"]
    missing = submit(url, "F-2", "--pipeline", "nowhere")["run_id"]
    (pipelines / "badcall.yaml").write_text(
        json.dumps({"name": "badcall", "version": "1", "phases": [{"name": "one", "call": "nosuchmodule:fn"}]})
    )
    badcall = submit(url, "F-3", "--pipeline", "badcall")["run_id"]
    assert burst(url, pipelines, work)["outcomes"] == {"dead": 3}
    f1 = entry(url, "F-1", failing)
    assert f1["state"] == "dead"
    assert "phase one failed after 2 attempt(s)" in f1["reason"]
    assert f1["reason"].count("phase one failed") == 1, f1["reason"]  # said once, not "failed: phase one failed"
    assert "boom" in f1["reason"]
    assert "pipeline 'nowhere' not found" in entry(url, "F-2", missing)["reason"]
    assert "cannot import nosuchmodule" in entry(url, "F-3", badcall)["reason"]
    # retry after the fix: it runs.
    (pipelines / "nosuchmodule.py").write_text("def fn(ctx):\n    return {'ok': True}\n")
    assert cli_json("queue", "retry", "--ticket-id", "F-3", "--run-id", badcall, "--store", url)["state"] == "queued"
    assert burst(url, pipelines, work)["outcomes"] == {"done": 1}


def test_cancel_stops_a_running_run_between_phases(setup: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, pipelines, work = setup
    run_id = submit(url, "C-1", "--pipeline", "slowmid")["run_id"]
    proc = start_worker(url, pipelines, work, "--poll", "0.2", env=base_env({"QPHASE_SLOW": "2"}))
    try:
        wait_for(lambda: entry(url, "C-1", run_id)["phase"] == "two", 30, "phase two to start")
        asked = cli_json("queue", "cancel", "--ticket-id", "C-1", "--run-id", run_id, "--by", "ana", "--store", url)
        assert asked["stops"] == "between phases"
        assert asked["state"] == "running"
        done = wait_for(
            lambda: entry(url, "C-1", run_id)["state"] == "cancelled" and entry(url, "C-1", run_id), 30, "cancel"
        )
    finally:
        assert stop(proc) == 0
    assert "cancelled by ana" in done["reason"]
    assert "before three" in done["reason"]
    phases = [(p, w) for r, p, w, _ in effects(work) if r == run_id]
    assert ("two", "done") in phases  # the phase in progress finished
    assert not [p for p, _ in phases if p == "three"]  # the next one never started


def test_sigterm_finishes_the_phase_then_releases_the_run(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    run_id = submit(url, "S-1", "--pipeline", "slowmid")["run_id"]
    proc = start_worker(url, pipelines, work, env=base_env({"QPHASE_SLOW": "1.5"}))
    wait_for(lambda: entry(url, "S-1", run_id)["phase"] == "two", 30, "phase two to start")
    assert stop(proc, signal.SIGTERM) == 0
    released = entry(url, "S-1", run_id)
    assert released["state"] == "queued"
    assert released["recoveries"] == 0  # a clean release is not a recovery
    assert "released between phases (before three)" in released["reason"]
    assert burst(url, pipelines, work)["outcomes"] == {"done": 1}
    check_exactly_once(url, work, {run_id: "S-1"}, pipelines / "slowmid.yaml")


@pytest.mark.slow
def test_sigterm_past_the_grace_interrupts_the_phase(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    run_id = submit(url, "S-2", "--pipeline", "slowmid")["run_id"]
    proc = start_worker(url, pipelines, work, "--grace", "0.3s", env=base_env({"QPHASE_SLOW": "30"}))
    wait_for(lambda: entry(url, "S-2", run_id)["phase"] == "two", 30, "phase two to start")
    assert stop(proc, signal.SIGTERM) == 143
    released = entry(url, "S-2", run_id)
    assert released["state"] == "queued"
    assert "interrupted" in released["reason"]
    from phaselog.ledger.facade import Ledger
    from phaselog.stores import open_store

    with Ledger(open_store(url)) as ledger:
        two = [a for a in ledger.store.attempts("S-2", run_id) if a.phase == "two"]
        assert [(a.attempt_number, a.completed) for a in two] == [(1, False)]  # recorded as interrupted
    burst(url, pipelines, work, "--grace", "5s")  # QPHASE_SLOW unset: 1.5 s
    assert entry(url, "S-2", run_id)["state"] == "done"


@pytest.mark.slow
def test_notify_wakes_an_idle_worker_and_pool_of_two_drains(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    # Polling every 60 s: only NOTIFY can make the run finish within the wait below.
    proc = start_worker(url, pipelines, work, "--poll", "60s", "--concurrency", "2")
    try:
        wait_for(lambda: len(cli_json("queue", "list", "--store", url)["workers"]) == 2, 30, "two workers")
        run_id = submit(url, "N-1", "--pipeline", "pythree")["run_id"]
        wait_for(lambda: queue_states(url).get(run_id) == "done", 30, "the run, woken by NOTIFY")
    finally:
        assert stop(proc) == 0
    assert cli_json("queue", "list", "--store", url)["workers"] == []


def test_a_worker_whose_connections_are_terminated_reconnects_and_finishes(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    import psycopg

    from phaselog.stores.sql.postgres import split_url

    dsn, _ = split_url(url)
    admin = psycopg.connect(dsn, autocommit=True)

    def backends() -> int:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'phaselog-victim'"
        ).fetchone()
        return int(row[0]) if row else 0

    run_id = submit(url, "P-1", "--pipeline", "slowmid")["run_id"]
    named = f"{url}&application_name=phaselog-victim"
    env = base_env({"QPHASE_SLOW": "4"})
    proc = start_worker(named, pipelines, work, "--poll", "0.2", "--lease-ttl", "2s", env=env)
    try:
        wait_for(lambda: entry(url, "P-1", run_id)["phase"] == "two", 30, "phase two to start")
        # the worker's own connection, its run lease's heartbeat and its heartbeat row's
        wait_for(lambda: backends() >= 3, 30, "the worker's three connections")
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'phaselog-victim'"
        ).fetchone()
        assert killed is not None
        assert killed[0] >= 3
        wait_for(lambda: queue_states(url).get(run_id) == "done", 60, "the run to complete")
    finally:
        assert stop(proc) == 0
        admin.close()
    check_exactly_once(url, work, {run_id: "P-1"}, pipelines / "slowmid.yaml")


@pytest.mark.slow
def test_a_poison_run_goes_dead_after_max_recoveries(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    run_id = submit(url, "X-1", "--pipeline", "poison")["run_id"]
    fine = submit(url, "X-2", "--pipeline", "pythree")["run_id"]
    codes = []
    for _ in range(6):  # workers die on the poison run; each new one recovers it at once (same host)
        proc = start_worker(url, pipelines, work, "--burst", "--max-recoveries", "2")
        proc.communicate(timeout=120)
        codes.append(proc.returncode)
        if queue_states(url).get(run_id) == "dead":
            break
    assert codes[:3] == [-signal.SIGKILL] * 3
    dead = entry(url, "X-1", run_id)
    assert dead["state"] == "dead"
    assert dead["recoveries"] == 3
    assert "died 3 times" in dead["reason"]
    assert "its process is gone" in dead["reason"]
    assert queue_states(url)[fine] == "done"
    ones = [e for e in effects(work) if e[0] == run_id and e[1] == "one" and e[2] == "done"]
    assert len(ones) == 1  # phase one completed once, and was never run again by the recoveries


def test_worker_options_are_checked(setup: tuple[str, Path, Path]) -> None:
    url, _, work = setup
    for args, field in (
        (("--grace", "soon"), "grace"),
        (("--lease-ttl", "0.1s"), "lease_ttl"),
        (("--queue", "a b"), "queue"),
    ):
        done = cli("worker", "--store", url, *args)
        assert done.returncode == 2, done.stdout
        assert json.loads(done.stdout)["field"] == field
    bad = cli("worker", "--store", url, "--pipelines", str(work / "missing"))
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["error_code"] == "usage"


def test_a_pool_prints_one_json_document_with_every_workers_summary(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    for i in range(3):
        submit(url, f"P-{i}", "--pipeline", "pythree")
    proc = start_worker(url, pipelines, work, "--burst", "--concurrency", "2")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    summary = json.loads(out)  # one document (it was three: each child's and the pool's)
    assert summary["success"] is True
    assert (summary["concurrency"], summary["exit_code"], summary["runs"]) == (2, 0, 3)
    assert summary["outcomes"] == {"done": 3}
    assert len(summary["workers"]) == 2
    assert sum(w["runs"] for w in summary["workers"]) == 3
    assert all(w["worker"] and w["exit_code"] == 0 for w in summary["workers"]), summary


def test_a_sigkilled_worker_is_shown_gone_at_once(setup: tuple[str, Path, Path]) -> None:
    url, pipelines, work = setup
    proc = start_worker(url, pipelines, work, "--poll", "0.2", "--lease-ttl", "60s")
    try:
        wait_for(lambda: cli_json("queue", "list", "--store", url)["workers"], 30, "the worker to register")
    finally:
        assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
    listed = cli_json("queue", "list", "--store", url)
    (gone,) = listed["workers"]
    assert gone["pid"] == proc.pid
    assert gone["expired"] is False  # its heartbeat row is still fresh (60 s) …
    assert (gone["state"], gone["gone"]) == ("gone", True)  # … but its process is provably gone
    assert gone["gone_reason"] == f"process {proc.pid} on {gone['host']} is gone"
    table = cli("queue", "list", "--store", url, "--format", "table")
    assert "workers: 1 gone" in table.stdout, table.stdout
    assert "alive" not in table.stdout


ODD_ENDS_PY = """
import sys

def leave(ctx):
    sys.exit(4)

def ctrl_c(ctx):
    raise KeyboardInterrupt()
"""


def test_a_phase_s_sys_exit_or_keyboard_interrupt_is_a_recorded_failure_and_the_worker_lives_on(
    setup: tuple[str, Path, Path],
) -> None:
    url, pipelines, work = setup
    (pipelines / "oddends.py").write_text(ODD_ENDS_PY)
    deep = "python3 -c \"print('{\\\\\"a\\\\\":' * 200000 + '1' + '}' * 200000)\""
    cases = {
        "leave": ({"call": "oddends:leave"}, "SystemExit: the phase called sys.exit(4)"),
        "ctrlc": ({"call": "oddends:ctrl_c"}, "KeyboardInterrupt: raised by the phase itself"),
        "deep": ({"run": deep}, "nested deeper than 62 levels"),
    }
    runs = {}
    for name, (phase, _) in cases.items():
        (pipelines / f"{name}.yaml").write_text(json.dumps({"name": name, "version": "1", "phases": [
            {"name": "one", **phase}, {"name": "two", "call": "qphases:step"}]}))  # fmt: skip
        runs[name] = submit(url, f"X-{name}", "--pipeline", name)["run_id"]
    after = submit(url, "X-after", "--pipeline", "three")["run_id"]
    summary = burst(url, pipelines, work)  # one worker process: it must live through all of them
    assert summary["outcomes"] == {"dead": 3, "done": 1}, summary
    assert entry(url, "X-after", after)["state"] == "done"
    from phaselog.ledger.facade import Ledger
    from phaselog.stores import open_store

    with Ledger(open_store(url)) as ledger:
        for name, (_, said) in cases.items():
            dead = entry(url, f"X-{name}", runs[name])
            assert dead["state"] == "dead"
            assert said in dead["reason"], dead["reason"]
            assert "worker died" not in dead["reason"]
            got = ledger.store.attempts(f"X-{name}", runs[name])
            attempts = [(a.phase, a.attempt_number, a.completed) for a in got]
            assert attempts == [("one", 1, False)], (name, attempts)
