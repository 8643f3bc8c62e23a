"""Prune beside writers, and prune killed mid-way, on every backend (issue 8's bars).

* **Writers and prunes concurrent**: 150 runs with old history; two writer processes append new
  attempts (and progress events) to random runs while two pruner processes prune the same ticket
  again and again (``--older-than``, then ``--keep-last``), repeated. A writer reports a record
  only after its write returned. Afterwards every acknowledged record is stored with its hash,
  or a prune reported removing exactly that record (``--keep-last`` only; never the newest
  attempt); no process failed; ``verify`` is clean and every run can resume.
* **kill -9 at random points** of every prune mode (``--keep-last``, ``--older-than`` with whole
  runs, ``--run-id`` of a 1,200-record run), plus the files store's named fault points; then
  ``doctor``: ``verify`` and resume pass.

Children are forked (each opens its own store from the URL) and report through a queue.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import signal
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW, REPO
from phaselog.ledger.doctor import doctor
from phaselog.ledger.retention import prune
from phaselog.model.ids import normalize_run_id
from phaselog.stores import open_store

pytestmark = [pytest.mark.all_stores, pytest.mark.slow]

T = "PRUNE-RACE"
RUNS = 150
CTX = mp.get_context("fork")
NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=400)
RESULT_TIMEOUT_S = 300


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "files":
        url = str(tmp_path / "store")
    elif backend == "sqlite":
        url = f"sqlite://{tmp_path}/prune.db"
    else:
        url = request.getfixturevalue("pg_schema_url")
    open_store(url).close()
    return url


def impl(tag: str) -> dict[str, Any]:
    return {**IMPLEMENT, "files_changed": [f"src/{tag}.py"]}


def run_name(i: int) -> str:
    return f"run-{i:04d}"


def populate(url: str, runs: int, *, attempts: int = 3, whole_old: int = 0) -> None:
    """``runs`` runs: implement a1..a<attempts> (every other one failed) and local_review, all
    old; the first ``whole_old`` runs stay entirely old, the others get a recent local_review."""
    led = phaselog.Ledger(open_store(url))
    try:
        for i in range(runs):
            rid = run_name(i)
            for a in range(1, attempts + 1):
                ts = OLD + timedelta(hours=a)
                if a % 2 == 0 and a != attempts:
                    led.write(
                        T,
                        rid,
                        "implement",
                        None,
                        status="failed",
                        error=f"try {a}",
                        timestamp=ts,
                    )
                else:
                    led.write(T, rid, "implement", impl(f"{i}-{a}"), timestamp=ts)
            led.write(T, rid, "local_review", LOCAL_REVIEW, timestamp=OLD + timedelta(days=1))
            if i >= whole_old:
                led.write(
                    T,
                    rid,
                    "local_review",
                    {**LOCAL_REVIEW, "iteration_count": 2},
                    timestamp=NOW,
                )
    finally:
        led.close()


# -- writers and pruners, concurrently --------------------------------------------------------------
def _writer(url: str, idx: int, writes: int, out: Any) -> None:
    rng = random.Random(idx)
    try:
        led = phaselog.Ledger(open_store(url))
        for n in range(writes):
            rid = run_name(rng.randrange(RUNS))
            if n % 5 == 0:
                led.progress(T, rid, "create_pr", "start")
            res = led.write(T, rid, "implement", impl(f"w{idx}-{n}"))
            rec = res.record
            out.put(
                (
                    "ack",
                    idx,
                    (rec.run_id, rec.phase, rec.attempt_number, rec.content_hash),
                )
            )
        led.close()
        out.put(("done", idx, None))
    except BaseException:
        out.put(("error", idx, traceback.format_exc()))


def _pruner(url: str, idx: int, mode: str, stop: Any, out: Any) -> None:
    try:
        led = phaselog.Ledger(open_store(url))
        rounds = 0
        while not stop.is_set() or rounds < 2:
            by_age = mode == "older"
            rep = prune(led, T, older_than=timedelta(days=30)) if by_age else prune(led, T, keep_last=2)
            gone = [
                (
                    normalize_run_id(r["path"].split("/")[1]),
                    r["phase"],
                    r["attempt_number"],
                    r["content_hash"],
                )
                for r in rep.removed
                if "attempt_number" in r
            ]
            out.put(("pruned", idx, gone))
            rounds += 1
        led.close()
        out.put(("done", -1 - idx, rounds))
    except BaseException:
        out.put(("error", -1 - idx, traceback.format_exc()))


def _race(url: str, mode: str, writes: int, round_no: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Two writers and two pruners at once; every acknowledged write and every reported removal."""
    out = CTX.Queue()
    stop = CTX.Event()
    writers = [CTX.Process(target=_writer, args=(url, 10 * round_no + i, writes, out)) for i in range(2)]
    pruners = [CTX.Process(target=_pruner, args=(url, i, mode, stop, out)) for i in range(2)]
    for p in [*pruners, *writers]:
        p.start()
    acks: list[tuple[Any, ...]] = []
    removed: list[tuple[Any, ...]] = []
    writers_done = pruners_done = 0
    try:
        while pruners_done < 2:
            try:
                kind, who, data = out.get(timeout=RESULT_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(f"no progress for {RESULT_TIMEOUT_S}s ({len(acks)} acks)")
            if kind == "error":
                pytest.fail(f"process {who} failed:\n{data}")
            if kind == "ack":
                acks.append(data)
            elif kind == "pruned":
                removed.extend(data)
            elif who >= 0:
                writers_done += 1
                if writers_done == 2:
                    stop.set()  # the pruners finish their round (at least two each) and stop
            else:
                pruners_done += 1
    finally:
        stop.set()
        for p in [*pruners, *writers]:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in [*pruners, *writers]] == [0] * 4
    return acks, removed


def _assert_sound(url: str) -> None:
    led = phaselog.Ledger(open_store(url))
    try:
        rep = led.verify(T)
        assert rep.ok, rep.problems[:10]
        for rid in led.store.runs(T):
            st = led.status(T, rid)
            states = {p.phase: p.state for p in st.phases}
            if states["implement"] == "completed":
                decision = led.can_skip_to(T, rid, "local_review")
                assert decision.allowed, decision.to_json()
            if states["implement"] == "completed" and states["local_review"] == "completed":
                decision = led.can_skip_to(T, rid, "create_pr")
                assert decision.allowed, decision.to_json()
    finally:
        led.close()


def test_prunes_beside_writers_lose_no_acknowledged_write(store_url: str) -> None:
    populate(store_url, RUNS, whole_old=RUNS // 2)  # half the runs are old as a whole
    for round_no, mode in enumerate(("older", "keep", "older", "keep")):  # each race twice
        acks, removed = _race(store_url, mode, 60, round_no)
        assert len(acks) == 120
        led = phaselog.Ledger(open_store(store_url))
        try:
            stored = {}
            for rid in led.store.runs(T):
                for s in led.store.iter_records(T, rid):
                    assert not isinstance(s, phaselog.Damaged), s
                    stored[(s.record.run_id, s.record.phase, s.record.attempt_number)] = s.record.content_hash
            removed_keys = {(r[0], r[1], r[2]): r[3] for r in removed}
            assert len(removed_keys) == len(removed), "two prunes reported removing the same record"
            lost = []
            for rid, phase, attempt, content_hash in acks:
                key = (rid, phase, attempt)
                if stored.get(key) == content_hash:
                    continue
                if mode == "keep" and removed_keys.get(key) == content_hash:
                    continue  # an older attempt, reported removed by a prune that decided on it
                lost.append(key)
            assert lost == [], f"{len(lost)} acknowledged write(s) lost: {lost[:5]}"
            # Never the newest attempt of a phase: it is still stored in every run.
            for rid in led.store.runs(T):
                refs = led.store.attempts(T, rid)
                for ph in {r.phase for r in refs}:
                    newest = max(r.attempt_number for r in refs if r.phase == ph)
                    assert (rid, ph, newest) in stored
        finally:
            led.close()
        _assert_sound(store_url)


# -- kill -9 at random points ------------------------------------------------------------------------
PRUNER = """
import json, sys
from datetime import timedelta
import phaselog
from phaselog.ledger.retention import prune
url, mode, arg, dry = sys.argv[1:5]
led = phaselog.Ledger(phaselog.open_store(url))
led.store.runs("PRUNE-RACE")
print("go", flush=True)
if mode == "keep":
    rep = prune(led, "PRUNE-RACE", keep_last=int(arg), dry_run=dry == "dry")
elif mode == "older":
    rep = prune(led, "PRUNE-RACE", older_than=timedelta(days=int(arg)), dry_run=dry == "dry")
else:
    rep = prune(led, "PRUNE-RACE", run_id=arg, dry_run=dry == "dry")
print(json.dumps(rep.to_json()["removed_count"]))
"""


def _pruner_proc(
    url: str, mode: str, arg: str, fault: str | None = None, *, dry: bool = False
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PHASELOG_FAULT"}
    if fault:
        env["PHASELOG_FAULT"] = fault
    return subprocess.Popen(
        [sys.executable, "-c", PRUNER, url, mode, arg, "dry" if dry else "wet"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _timed(url: str, mode: str, arg: str, *, dry: bool = False) -> float:
    """Run a prune to its end; how long the prune itself took (after the process started)."""
    proc = _pruner_proc(url, mode, arg, dry=dry)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "go"
    start = time.monotonic()
    _out, err = proc.communicate(timeout=RESULT_TIMEOUT_S)
    assert proc.returncode == 0, err
    return time.monotonic() - start


def _kill_at_random(url: str, mode: str, arg: str, rng: random.Random) -> bool:
    """Start a prune, SIGKILL it at a random moment of its work; True if it died before the end.

    The moment is drawn from how long a dry run of the same prune takes (reading and deciding).
    """
    span = _timed(url, mode, arg, dry=True)
    proc = _pruner_proc(url, mode, arg)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "go", proc.stderr.read() if proc.stderr else ""
    time.sleep(rng.uniform(0, span))
    proc.send_signal(signal.SIGKILL)
    _out, err = proc.communicate(timeout=RESULT_TIMEOUT_S)
    assert proc.returncode in (0, -signal.SIGKILL), err
    return proc.returncode == -signal.SIGKILL


def _doctor_then_sound(url: str) -> None:
    led = phaselog.Ledger(open_store(url))
    try:
        rep = doctor(led, T)
        assert not [f for f in rep.findings if f["kind"] in ("damaged", "broken_link")], rep.findings
    finally:
        led.close()
    _assert_sound(url)


def test_prune_killed_at_random_points_then_doctor_leaves_verify_and_resume_passing(
    store_url: str,
) -> None:
    rng = random.Random(8)
    populate(store_url, 60, attempts=7, whole_old=20)
    # A run of 1,200 records for --run-id (the case).
    big = "run-big"
    led = phaselog.Ledger(open_store(store_url))
    for a in range(1, 1201):
        led.write(T, big, "implement", impl(f"big-{a}"), timestamp=OLD)
    led.close()
    killed = 0
    for keep in ("6", "5", "4", "3", "2", "1"):
        killed += _kill_at_random(store_url, "keep", keep, rng)
        _doctor_then_sound(store_url)
    for _ in range(4):
        s = open_store(store_url)
        gone = normalize_run_id(big) not in s.runs(T)
        s.close()
        if gone:
            break
        killed += _kill_at_random(store_url, "run", big, rng)
        _doctor_then_sound(store_url)
    for _ in range(3):
        killed += _kill_at_random(store_url, "older", "30", rng)
        _doctor_then_sound(store_url)
    assert killed >= 5, f"only {killed} prunes were killed before finishing"
    # Finally, prunes run to the end on what the kills left.
    for mode, arg in (("keep", "1"), ("older", "30")):
        assert _timed(store_url, mode, arg) > 0
        _doctor_then_sound(store_url)


FAULTS = (
    "files.prune_after_note",
    "files.prune_after_record",
    "files.prune_after_move_aside",
)


@pytest.mark.parametrize("fault", FAULTS)
def test_prune_dying_at_each_fault_point_is_finished_by_doctor(tmp_path: Path, fault: str) -> None:
    # The files store's named steps (a SQL prune is one transaction: all or nothing).
    url = str(tmp_path / "store")
    populate(url, 3, attempts=5, whole_old=1)
    mode, arg = ("older", "30") if fault.endswith("move_aside") else ("keep", "1")
    proc = _pruner_proc(url, mode, arg, fault)
    _out, err = proc.communicate(timeout=RESULT_TIMEOUT_S)
    assert proc.returncode == 137, f"fault point {fault} was not reached: {err}"
    led = phaselog.Ledger(open_store(url))
    rep = doctor(led, T)
    led.close()
    assert rep.finished, rep.to_json()
    _assert_sound(url)
    root = tmp_path / "store" / "checkpoints" / T
    assert not [p for p in root.iterdir() if p.name.startswith(".removing-")]
    # Nothing is left to finish the second time, and a prune now has less to do.
    led = phaselog.Ledger(open_store(url))
    assert doctor(led, T).finished == []
    led.close()


def test_every_prune_fault_point_is_tested() -> None:
    import re

    from phaselog.stores.files import admin as files_admin

    found = re.findall(
        r"""_faults\.point\(\s*["']([^"']+)["']\s*\)""",
        Path(files_admin.__file__).read_text("utf-8"),
    )
    assert sorted(found) == sorted(FAULTS)
