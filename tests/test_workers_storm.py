"""The issue's bars for workers: 4 worker processes drain 100 runs exactly once; a kill storm.

Real worker processes on a real PostgreSQL, SIGKILLed at random. After each drain every run is
``done`` (or ``dead`` with a reason), each phase's counted execution completed exactly once,
nothing ran again after it, and ``verify`` passes for every run.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from queue_support import (
    base_env,
    check_exactly_once,
    cli_json,
    effects,
    pipelines_dir,
    queue_states,
    start_worker,
    stop,
    wait_for,
)

pytestmark = pytest.mark.slow

RUNS = 100
WORKERS = 4


def submit_many(url: str, pipeline: str, n: int) -> dict[str, str]:
    """Submit ``n`` runs in one process (the CLI's start-up times 100 would dominate the test)."""
    from phaselog.runner import queue
    from phaselog.stores import open_store

    runs: dict[str, str] = {}
    store = open_store(url)
    try:
        for i in range(n):
            view = queue.submit(store, ticket_id=f"Q-{i % 10}", pipeline=pipeline, run_id=f"storm-{i}")
            runs[view["run_id"]] = view["ticket_id"]
    finally:
        store.close()
    return runs


def registered(url: str) -> set[int]:
    """Pids of the workers whose heartbeat rows exist."""
    from phaselog.runner import queue
    from phaselog.stores import open_store

    with open_store(url) as store:
        return {w["pid"] for w in queue.list_view(store, limit=1)["workers"]}


def test_four_workers_drain_100_runs_exactly_once(pg_schema_url: str, tmp_path: Path) -> None:
    url = pg_schema_url
    cli_json("store", "migrate", "--store", url)
    pipelines = pipelines_dir(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    runs = submit_many(url, "three", RUNS)
    procs = [start_worker(url, pipelines, work, "--poll", "0.2", "--quiet") for _ in range(WORKERS)]
    try:
        wait_for(lambda: set(queue_states(url).values()) == {"done"}, 180, "every run done", every=0.5)
    finally:
        codes = [stop(p) for p in procs]
    assert codes == [0] * WORKERS
    check_exactly_once(url, work, runs, pipelines / "three.yaml")
    listed = cli_json("queue", "list", "--store", url)
    assert {r["state"] for r in listed["runs"]} == {"done"}
    assert all(r["claims"] == 1 and r["recoveries"] == 0 for r in listed["runs"])
    # Several workers took part (SKIP LOCKED let them work side by side).
    pids = {e[3].split("-")[0] for e in effects(work)}
    assert len(pids) >= 2


def test_kill_storm_loses_nothing_and_reruns_no_completed_phase(pg_schema_url: str, tmp_path: Path) -> None:
    url = pg_schema_url
    cli_json("store", "migrate", "--store", url)
    pipelines = pipelines_dir(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    runs = submit_many(url, "pythree", RUNS)
    assert len(runs) == RUNS
    env = base_env({"QPHASE_SLEEP": "0.04"})  # phases of 0-80 ms: kills land inside phases
    log = tmp_path / "workers.log"
    procs = [start_worker(url, pipelines, work, "--poll", "0.2", env=env, log=log) for _ in range(WORKERS)]
    rng = random.Random(12)
    kills = 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            states = set(queue_states(url).values())
            if states <= {"done", "dead"}:
                break
            time.sleep(rng.uniform(0.3, 0.9))
            i = rng.randrange(WORKERS)
            procs[i].send_signal(signal.SIGKILL)
            procs[i].wait(30)
            if procs[i].stdout is not None:
                procs[i].stdout.close()
            kills += 1
            procs[i] = start_worker(url, pipelines, work, "--poll", "0.2", env=env, log=log)
        else:
            raise AssertionError(f"the queue did not drain: {queue_states(url)}")
        # A worker restarted a moment ago may still be importing (SIGTERM would kill it outright).
        wait_for(lambda: {p.pid for p in procs} <= registered(url), 60, "the restarted workers to register")
    finally:
        codes = [stop(p) for p in procs]
    assert codes == [0] * WORKERS
    assert kills >= 3
    listed = cli_json("queue", "list", "--store", url)["runs"]
    assert len(listed) == RUNS  # nothing lost
    dead = [r for r in listed if r["state"] == "dead"]
    assert all(r["reason"] for r in dead), dead
    done = {r["run_id"]: r["ticket_id"] for r in listed if r["state"] == "done"}
    assert len(done) + len(dead) == RUNS
    check_exactly_once(url, work, done, pipelines / "pythree.yaml")
    # Some kills landed on running runs and were recovered.
    assert sum(r["recoveries"] for r in listed) >= 1, log.read_text()[-3000:]
