"""The deliverer as a real process, SIGKILLed at random moments, and two racing on one store (issue 23).

Every event is delivered at least once, none out of order within a run, duplicates only of the
same event_id (events in flight at a kill), on files, SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

import phaselog
from notify_support import Receiver, receiver

PHASES = 20
RUNS = 10
PIPELINE = {"name": "long", "version": "1", "phases": [{"name": f"p{i}"} for i in range(1, PHASES + 1)]}
# At a kill, at most one event per run is in flight (a run's later events wait for its head), and one
# that reached the receiver before its cursor was saved comes again: at most RUNS duplicates a kill.
IN_FLIGHT = RUNS


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "files":
        return f"file://{tmp_path / 'store'}"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "hooks.yaml"
    hook = {"url": url, "backoff": "20ms", "max_backoff": "200ms", "max_attempts": 1000, "timeout": "5s"}
    path.write_text(
        yaml.safe_dump(
            {"name": "crash", "poll": "50ms", "rules": [{"events": ["checkpoint.written"], "webhook": hook}]}
        )
    )
    return path


def _start(cfg: Path, url: str, tmp_path: Path, n: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(phaselog.__file__).resolve().parent.parent)}
    with (tmp_path / f"deliverer-{n}.log").open("wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(  # our own CLI
            [sys.executable, "-m", "phaselog", "notify", "--config", str(cfg), "--store", url],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )


def _wait_for(rec: Receiver, want: set[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if want <= {g["body"]["event_id"] for g in rec.delivered()}:
            return
        time.sleep(0.05)


def _check(rec: Receiver, led: phaselog.Ledger) -> Counter[str]:
    expected = led.feed(types=["checkpoint.written"]).events
    assert len(expected) == PHASES * RUNS
    got = rec.delivered()
    ids = [g["body"]["event_id"] for g in got]
    assert set(ids) == {e.event_id for e in expected}, "every event delivered at least once"
    by_run: dict[str, list[int]] = {}
    for g in got:
        by_run.setdefault(g["body"]["run_id"], []).append(int(g["body"]["phase"][1:]))
    for run, phases in by_run.items():
        assert phases == sorted(phases), f"run {run}: delivered out of order: {phases}"
    return Counter(ids)


@pytest.mark.all_stores
def test_sigkilled_deliverer_delivers_every_event_at_least_once_in_order(store_url: str, tmp_path: Path) -> None:
    rnd = random.Random(23)
    led = phaselog.open(store_url)
    pl = phaselog.pipeline_from_dict(PIPELINE)
    writes = [(f"T-{r}", f"run{r}", f"p{p}") for p in range(1, PHASES + 1) for r in range(RUNS)]
    kills = 0
    with receiver(delay=0.03) as rec:  # slow answers: a kill finds events in flight
        cfg = _config(tmp_path, rec.url)
        proc = _start(cfg, store_url, tmp_path, 0)
        try:
            for i, (ticket, run, phase) in enumerate(writes):
                led.write(ticket, run, phase, {"i": i}, pipeline=pl)
                if rnd.random() < 0.04:  # about 8 kills over the 200 writes, at random moments
                    time.sleep(rnd.uniform(0.0, 0.4))
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    proc = _start(cfg, store_url, tmp_path, kills)
            _wait_for(rec, {e.event_id for e in led.feed(types=["checkpoint.written"]).events}, 40)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        counts = _check(rec, led)
    assert kills >= 3
    duplicated = {eid: n for eid, n in counts.items() if n > 1}
    # Only events in flight at a kill come twice: at most the pool's width per kill.
    assert sum(n - 1 for n in duplicated.values()) <= kills * IN_FLIGHT, duplicated
    led.close()


@pytest.mark.all_stores
def test_two_deliverers_racing_on_one_store_deliver_each_event_once(store_url: str, tmp_path: Path) -> None:
    led = phaselog.open(store_url)
    pl = phaselog.pipeline_from_dict(PIPELINE)
    with receiver() as rec:
        cfg = _config(tmp_path, rec.url)
        procs = [_start(cfg, store_url, tmp_path, n) for n in range(2)]
        try:
            for p in range(1, 6):
                for r in range(RUNS):
                    led.write(f"T-{r}", f"run{r}", f"p{p}", {}, pipeline=pl)
            want = {e.event_id for e in led.feed(types=["checkpoint.written"]).events}
            _wait_for(rec, want, 30)
            counts: Counter[Any] = Counter(g["body"]["event_id"] for g in rec.delivered())
            assert set(counts) == want
            assert max(counts.values()) == 1, "an event was delivered by both deliverers"
            # Kill whichever holds the lease: the other takes over and delivers what follows.
            holder = led.store.guard_storage("notify.crash").read_lock()  # type: ignore[attr-defined]  # GUARD_STORAGE
            [victim] = [p for p in procs if p.pid == holder.pid]
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            for r in range(RUNS):
                led.write(f"T-{r}", f"run{r}", "p6", {}, pipeline=pl)
            want = {e.event_id for e in led.feed(types=["checkpoint.written"]).events}
            _wait_for(rec, want, 30)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=30)
        counts = Counter(g["body"]["event_id"] for g in rec.delivered())
        assert set(counts) == want
        assert sum(n - 1 for n in counts.values()) <= IN_FLIGHT  # only what was in flight at the kill
    led.close()
