"""One writer wins, on every backend: 32 real processes racing, 20 rounds of each race.

Each child is forked once, opens its *own* store from the URL (no connection crosses a fork),
and then takes part in every round: a barrier releases all 32 at once for each write. Two races:

* 32 writers of one explicit attempt: exactly one succeeds, the other 31 get AlreadyExists and
  the stored record is the winner's;
* 32 writers asking for "the next attempt": 32 distinct, gap-free numbers 1..32, each stored
  record is the one its writer was told about, and the prev_hash chain verifies.

A child reports every outcome only after the call returned; the parent judges the whole round.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT
from phaselog import AlreadyExists
from phaselog.stores import open_store

pytestmark = [pytest.mark.all_stores, pytest.mark.slow]

T = "RACE-9"
WRITERS = 32
ROUNDS = 20
CTX = mp.get_context("fork")
BARRIER_TIMEOUT_S = 120
RESULT_TIMEOUT_S = 240


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The URL of a fresh store of ``backend``, migrated once here, with no connection left open."""
    if backend == "files":
        url = str(tmp_path / "store")
    elif backend == "sqlite":
        url = f"sqlite://{tmp_path}/race.db"
    else:
        url = request.getfixturevalue("pg_schema_url")
    open_store(url, migrate=True).close()  # create the schema before the race; the race is about writes
    return url


def payload(idx: int, round_no: int) -> dict[str, Any]:
    """A payload that names its writer and round, so every record's author is known."""
    return {**IMPLEMENT, "files_changed": [f"src/w{idx:02d}_r{round_no:02d}.py"]}


def _child(url: str, idx: int, jobs: list[tuple[str, int, str]], barrier: Any, out: Any) -> None:
    try:
        ledger = phaselog.Ledger(open_store(url))  # its own store, opened after the fork
        ledger.load_pipeline(None)
    except BaseException:
        out.put(("setup", -1, idx, "error", traceback.format_exc()))
        return
    for kind, round_no, run in jobs:
        try:
            barrier.wait(BARRIER_TIMEOUT_S)
        except BaseException as exc:  # a broken barrier: another child died
            out.put((kind, round_no, idx, "error", f"barrier: {exc!r}"))
            return
        try:
            res = ledger.write(
                T,
                run,
                "implement",
                payload(idx, round_no),
                attempt=1 if kind == "explicit" else None,
            )
            out.put((kind, round_no, idx, "ok", (res.record.attempt_number, res.record.content_hash)))
        except AlreadyExists as exc:
            out.put((kind, round_no, idx, "exists", exc.message))
        except BaseException:
            out.put((kind, round_no, idx, "error", traceback.format_exc()))
    ledger.close()


def reap(procs: list[Any]) -> None:
    """Join the children (30 s in all), then kill whatever is left: a failure must not hang."""
    deadline = time.monotonic() + 30
    for p in procs:
        p.join(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()


def run_races(url: str, jobs: list[tuple[str, int, str]]) -> list[tuple[Any, ...]]:
    """Fork WRITERS children that each take part in every job; return every reported outcome."""
    barrier = CTX.Barrier(WRITERS)
    out = CTX.Queue()
    procs = [CTX.Process(target=_child, args=(url, i, jobs, barrier, out), daemon=True) for i in range(WRITERS)]
    for p in procs:
        p.start()
    results: list[tuple[Any, ...]] = []
    try:
        while len(results) < WRITERS * len(jobs):
            try:
                item = out.get(timeout=RESULT_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(f"only {len(results)} of {WRITERS * len(jobs)} outcomes arrived")
            results.append(item)
            if item[3] == "error":
                pytest.fail(f"writer {item[2]} failed in {item[0]} round {item[1]}:\n{item[4]}")
    except BaseException:
        barrier.abort()  # release the children waiting for a round that will not come
        raise
    finally:
        reap(procs)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    return results


def test_32_writers_race_one_attempt_and_race_auto_attempts(store_url: str) -> None:
    runs = {(kind, r): f"{kind}-{r}" for kind in ("explicit", "auto") for r in range(ROUNDS)}
    jobs = [(kind, r, runs[(kind, r)]) for r in range(ROUNDS) for kind in ("explicit", "auto")]
    results = run_races(store_url, jobs)

    ledger = phaselog.Ledger(open_store(store_url))
    try:
        by_round: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
        for item in results:
            by_round.setdefault((item[0], item[1]), []).append(item)
        for r in range(ROUNDS):
            # Explicit attempt 1: exactly one winner; the stored record is the winner's.
            got = by_round[("explicit", r)]
            winners = [g for g in got if g[3] == "ok"]
            assert len(winners) == 1, f"round {r}: {len(winners)} winners"
            assert Counter(g[3] for g in got) == {"ok": 1, "exists": WRITERS - 1}
            ((_k, _r, idx, _s, (attempt, digest)),) = winners
            run = runs[("explicit", r)]
            stored = ledger.store.attempts(T, phaselog.normalize_run_id(run))
            assert [(a.phase_ordinal, a.attempt_number) for a in stored] == [(1, 1)]
            rec = ledger.read(T, run, "implement").record
            assert (attempt, rec.content_hash, digest) == (1, digest, rec.content_hash)
            assert rec.phase_payload["files_changed"] == [f"src/w{idx:02d}_r{r:02d}.py"]

            # Auto attempts: 32 distinct numbers 1..32, each stored as its writer was told.
            got = by_round[("auto", r)]
            assert all(g[3] == "ok" for g in got)
            numbers = sorted(g[4][0] for g in got)
            assert numbers == list(range(1, WRITERS + 1)), f"round {r}: {numbers}"
            run = runs[("auto", r)]
            for _k, _r, idx, _s, (attempt, digest) in got:
                rec = ledger.read(T, run, "implement", attempt).record
                assert rec.content_hash == digest
                assert rec.phase_payload["files_changed"] == [f"src/w{idx:02d}_r{r:02d}.py"]
            report = ledger.verify(T, run)
            assert report.ok, report.problems
            assert report.checked == WRITERS
        assert len(ledger.store.runs(T)) == 2 * ROUNDS
    finally:
        ledger.close()


# -- the guard: however many cron starts race, exactly one runs ------------------------------------
GUARD_RACERS = 16
GUARD_ROUNDS = 5


def _guard_child(url: str, idx: int, tmp: str, barrier: Any, out: Any) -> None:
    from phaselog.guard import Guard

    try:
        guard = Guard(open_store(url), "race")  # its own store, opened after the fork
    except BaseException:
        out.put((-1, idx, "error", traceback.format_exc()))
        return
    for round_no in range(GUARD_ROUNDS):
        # The command records that it ran, then holds the lock until the parent releases it.
        cmd = [
            "sh",
            "-c",
            f'echo {idx} >> "{tmp}/ran-{round_no}"; while [ ! -e "{tmp}/release-{round_no}" ]; do sleep 0.01; done',
        ]
        try:
            barrier.wait(BARRIER_TIMEOUT_S)
            result = guard.run(cmd)
            out.put((round_no, idx, result.action, result.message))
        except BaseException:
            out.put((round_no, idx, "error", traceback.format_exc()))
            return


def test_racing_guard_runs_exactly_one_runs(store_url: str, tmp_path: Path) -> None:
    barrier, out = CTX.Barrier(GUARD_RACERS), CTX.Queue()
    procs = [
        CTX.Process(target=_guard_child, args=(store_url, i, str(tmp_path), barrier, out), daemon=True)
        for i in range(GUARD_RACERS)
    ]
    for p in procs:
        p.start()
    # Messages of different children may arrive out of order (each has its own feeder thread):
    # keep them by round.
    stash: dict[int, list[tuple[Any, ...]]] = {r: [] for r in range(-1, GUARD_ROUNDS)}

    def take(round_no: int) -> tuple[Any, ...]:
        while not stash[round_no]:
            item = out.get(timeout=RESULT_TIMEOUT_S)
            assert item[2] != "error", item[3]
            stash[item[0]].append(item)
        return stash[round_no].pop(0)

    try:
        for round_no in range(GUARD_ROUNDS):
            # Everyone but the winner skips while the winner's command holds the lock ...
            got = [take(round_no) for _ in range(GUARD_RACERS - 1)]
            assert {g[2] for g in got} == {"skip"}, got
            assert all("previous invocation still running" in g[3] for g in got)
            # ... and the winner finishes once released.
            (tmp_path / f"release-{round_no}").touch()
            winner = take(round_no)
            assert (winner[0], winner[2]) == (round_no, "ran"), winner
            ran = (tmp_path / f"ran-{round_no}").read_text().split()
            assert ran == [str(winner[1])]
            assert {g[1] for g in got} | {winner[1]} == set(range(GUARD_RACERS))
    except BaseException:
        barrier.abort()
        for round_no in range(GUARD_ROUNDS):
            (tmp_path / f"release-{round_no}").touch()
        raise
    finally:
        reap(procs)
    assert [p.exitcode for p in procs] == [0] * GUARD_RACERS
    from phaselog.guard import Guard

    store = open_store(store_url)
    try:
        g = Guard(store, "race")
        st = g.status()
        assert (st["state"]["pass_count"], st["lock"]) == (GUARD_ROUNDS, None)
        assert [h["kind"] for h in g.history()] == ["pass"] * GUARD_ROUNDS
    finally:
        store.close()
