"""The write path carries the run's state: what a write costs, and that stale state is re-read.

* On SQLite a write into a run nobody else moved is at most one read (the change stamp) and one
  write transaction, counted with sqlite3's trace callback on the real connection.
* A writer whose carried state went stale — another *process* wrote to the run meanwhile —
  re-reads and decides on what is stored: the attempt number, ``prev_hash`` and the basis.
* Writer processes racing on one run, each keeping its ledger (and its carried state) across
  rounds: gap-free attempts, one winner per attempt, the prev_hash chain and every basis intact.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import subprocess
import sys
import textwrap
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW, REPO
from phaselog.stores import open_store
from phaselog.stores.base import premise_snapshot

T = "CARRY-1"
CTX = mp.get_context("fork")


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh store of ``backend``, created here, with no connection left open."""
    if backend == "files":
        url = str(tmp_path / "store")
    elif backend == "sqlite":
        url = f"sqlite://{tmp_path}/carry.db"
    else:
        url = request.getfixturevalue("pg_schema_url")
    open_store(url, migrate=True).close()
    return url


def test_sqlite_write_into_an_unmoved_run_is_one_read_and_one_write_transaction(tmp_path: Path) -> None:
    led = phaselog.open(f"sqlite://{tmp_path}/count.db")
    run = led.run(T, str(uuid.uuid4()))
    run.write("implement", IMPLEMENT)
    run.write("implement", IMPLEMENT)  # the run is read once, then carried
    seen: list[str] = []
    led.store.session.conn.raw.set_trace_callback(seen.append)  # type: ignore[attr-defined]
    try:
        res = run.write("implement", IMPLEMENT)
        run.write("local_review", LOCAL_REVIEW)
    finally:
        led.store.session.conn.raw.set_trace_callback(None)  # type: ignore[attr-defined]
    assert res.record.attempt_number == 3
    first = seen[: seen.index("COMMIT") + 1]
    begin = first.index("BEGIN IMMEDIATE")
    reads_before = first[:begin]
    assert len(reads_before) <= 1, reads_before  # the change stamp only: no snapshot re-read
    assert all(s.lstrip().upper().startswith(("SELECT", "PRAGMA")) for s in reads_before)
    assert first.count("BEGIN IMMEDIATE") == 1
    # stamp; BEGIN, stamp, INSERT, COMMIT: the stamp unchanged under the write lock says what the
    # phase's latest is, so it is not read again (D179)
    assert len(first) <= 5, first
    inside = first[begin + 1 : -1]
    assert [s.split()[0].upper() for s in inside] == ["PRAGMA", "INSERT"], inside
    assert seen.count("BEGIN IMMEDIATE") == 2  # the next phase likewise
    assert seen.count("COMMIT") == 2
    led.close()


class RoundTrips:
    """A real psycopg connection, counting what crosses the network: each statement sent alone,
    each pipeline (its statements travel together), each commit and rollback."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.sent: list[str] = []
        self._piped = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, query: Any, *args: Any, **kw: Any) -> Any:
        if not self._piped:
            self.sent.append(" ".join(str(query).split())[:60])
        return self._conn.execute(query, *args, **kw)

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[Any]:
        self.sent.append("pipeline")
        self._piped = True
        try:
            with self._conn.pipeline() as p:
                yield p
        finally:
            self._piped = False

    def commit(self) -> None:
        self.sent.append("COMMIT")
        self._conn.commit()

    def rollback(self) -> None:
        self.sent.append("ROLLBACK")
        self._conn.rollback()


def test_postgres_write_into_an_unmoved_run_is_one_round_trip(pg_schema_url: str) -> None:
    led = phaselog.open(pg_schema_url)
    run = led.run(T, str(uuid.uuid4()))
    run.write("implement", IMPLEMENT)  # creates the store and the run
    run.write("implement", IMPLEMENT)  # read once, then carried
    session = led.store.session  # type: ignore[attr-defined]
    counting = RoundTrips(session.conn)
    session.conn = counting
    res = run.write("implement", IMPLEMENT)
    assert len(counting.sent) == 1, counting.sent  # the INSERT, which checks the run's premise itself
    assert counting.sent[0].startswith("INSERT INTO phaselog_checkpoints")
    counting.sent.clear()
    review = run.write("local_review", LOCAL_REVIEW)  # the next phase of the run likewise
    assert len(counting.sent) == 1
    assert res.record.attempt_number == 3
    assert review.record.basis["implement"].hash == res.record.content_hash
    led.close()


def test_postgres_fenced_write_into_an_unmoved_run_is_one_round_trip(pg_schema_url: str) -> None:
    from phaselog.runner import lease as leasing

    led = phaselog.open(pg_schema_url)
    run_id = str(uuid.uuid4())
    run = led.run(T, run_id)
    run.write("implement", IMPLEMENT)  # creates the store and the run
    held = leasing.acquire(led.store, T, run_id)
    run.write("implement", IMPLEMENT, fence=held.fence)
    session = led.store.session  # type: ignore[attr-defined]
    counting = RoundTrips(session.conn)
    session.conn = counting
    res = run.write("implement", IMPLEMENT, fence=held.fence)
    assert len(counting.sent) == 1, counting.sent  # the INSERT checks the lease row too
    assert res.record.attempt_number == 3
    held.release()
    with pytest.raises(phaselog.Fenced):  # released: the same statement refuses, the transaction says why
        run.write("implement", IMPLEMENT, fence=held.fence)
    assert [s.record.attempt_number for s in led.list(T, run_id).items] == [1, 2, 3]
    led.close()


@pytest.mark.all_stores
def test_the_carried_snapshot_is_the_one_a_fresh_read_gives(store_url: str) -> None:
    led = phaselog.open(store_url)
    run_id, video_id = str(uuid.uuid4()), str(uuid.uuid4())
    run, video = led.run(T, run_id), led.run(T, video_id, pipeline="video-pipeline")
    fresh = open_store(store_url)
    proposal = {"title": "t", "concept": "c"}
    research = {"summary": "s", "sources": ["https://x.test/a"]}
    # (run, is it a write, the step)
    steps: list[tuple[str, bool, Any]] = [
        (run_id, True, lambda: run.write("implement", None, status="failed", error="flaky")),
        (run_id, True, lambda: run.write("implement", IMPLEMENT)),
        (run_id, True, lambda: run.write("implement", None, status="failed", error="flaky again")),
        (run_id, False, lambda: led.progress(T, run_id, "local_review", "start")),
        (run_id, True, lambda: run.write("local_review", LOCAL_REVIEW)),
        (run_id, True, lambda: run.write("implement", IMPLEMENT)),
        (video_id, True, lambda: video.write("research", research)),
        (video_id, True, lambda: video.write("proposal", proposal)),
        (video_id, False, lambda: led.approve(T, video_id, "proposal", by="ana")),
        (video_id, True, lambda: video.write("proposal", proposal)),
    ]
    for rid, writes, step in steps:
        step()
        # What the next write decides on. Unchecked (PostgreSQL), after an event or an approval it
        # is stale by design (the append's run stamp refuses it); after a write it is the run.
        carried, stale = premise_snapshot(led.store, T, rid)
        if writes or not stale:
            assert carried == fresh.snapshot(T, rid)
            assert [s.record for s in carried.stored()] == [s.record for s in fresh.snapshot(T, rid).stored()]
        assert led.store.snapshot(T, rid) == fresh.snapshot(T, rid)
    fresh.close()
    led.close()


_OTHER_WRITER = f"""
import sys, phaselog
url, ticket, run_id, phase = sys.argv[1:5]
led = phaselog.open(url)
payloads = {{"implement": {IMPLEMENT!r}, "local_review": {LOCAL_REVIEW!r}}}
res = led.write(ticket, run_id, phase, payloads[phase])
print(res.record.attempt_number, res.record.content_hash)
led.close()
"""


def _write_elsewhere(url: str, run_id: str, phase: str) -> tuple[int, str]:
    """Write one checkpoint from another process; its attempt number and hash."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_OTHER_WRITER), url, T, run_id, phase],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout.split()
    return int(out[0]), out[1]


@pytest.mark.all_stores
def test_a_write_whose_carried_state_went_stale_rereads_and_decides_on_what_is_stored(store_url: str) -> None:
    led = phaselog.open(store_url)
    run_id = str(uuid.uuid4())
    run = led.run(T, run_id)
    first = run.write("implement", IMPLEMENT)
    run.write("implement", IMPLEMENT)  # carried from here on (where the store carries)
    # Another process moves the run: a new attempt of this phase...
    number, their_hash = _write_elsewhere(store_url, run_id, "implement")
    assert number == 3
    mine = run.write("implement", IMPLEMENT)
    assert mine.record.attempt_number == 4
    assert mine.record.prev_hash == their_hash
    # ...and of an earlier phase while we write a later one: the basis names their newest record.
    number, their_hash = _write_elsewhere(store_url, run_id, "implement")
    assert number == 5
    review = run.write("local_review", LOCAL_REVIEW)
    assert review.record.basis["implement"].attempt == 5
    assert review.record.basis["implement"].hash == their_hash
    # A fresh ledger agrees with everything the carried one decided.
    other = phaselog.open(store_url)
    stored = [s.record for s in other.store.snapshot(T, run_id, history=True).stored()]
    assert [(r.phase, r.attempt_number) for r in stored] == [("implement", n) for n in range(1, 6)] + [
        ("local_review", 1)
    ]
    assert stored[0].content_hash == first.record.content_hash
    other.close()
    led.close()


def _traced(led: Any, step: Any) -> tuple[Any, list[str]]:
    """``step()``'s result and every statement it ran on ``led``'s SQLite connection."""
    seen: list[str] = []
    raw = led.store.session.conn.raw
    raw.set_trace_callback(seen.append)
    try:
        return step(), seen
    finally:
        raw.set_trace_callback(None)


def test_sqlite_another_process_writing_another_run_is_no_reason_to_read_this_one(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/two.db"
    open_store(url, migrate=True).close()
    led = phaselog.open(url)
    run_id = str(uuid.uuid4())
    run = led.run(T, run_id)
    first = run.write("implement", IMPLEMENT)
    run.write("implement", IMPLEMENT)  # carried from here on
    assert _write_elsewhere(url, str(uuid.uuid4()), "implement")[0] == 1  # the database moved, this run did not
    res, seen = _traced(led, lambda: run.write("local_review", LOCAL_REVIEW))
    assert not [s for s in seen if s.lstrip().upper().startswith("WITH")], seen  # no snapshot re-read (D180)
    begin = seen.index("BEGIN IMMEDIATE")
    assert len(seen[:begin]) <= 1, seen  # the stamp only
    assert seen.count("COMMIT") == 1
    assert seen.count("BEGIN IMMEDIATE") == 1
    # Decided as a fresh read decides: the basis names attempt 2, the carried state is the run's.
    assert res.record.basis["implement"].attempt == 2
    fresh = open_store(url)
    assert premise_snapshot(led.store, T, run_id)[0] == fresh.snapshot(T, run_id)
    assert next(r.record.content_hash for r in fresh.snapshot(T, run_id, history=True).stored()) == (
        first.record.content_hash
    )
    fresh.close()
    led.close()


def test_sqlite_the_run_check_a_snapshot_implies_holds_on_the_unmoved_run(tmp_path: Path) -> None:
    """The fingerprint a run check derives from its snapshot is the one SQL computes: a check that
    did not hold on an unmoved run would send every write of a moved database back to a fresh read."""
    url = f"sqlite://{tmp_path}/check.db"
    led = phaselog.open(url)
    run_id = str(uuid.uuid4())
    run, key = led.run(T, run_id, pipeline="video-pipeline"), (T, run_id)
    proposal = {"title": "t", "concept": "c"}
    research = {"summary": "s", "sources": ["https://x.test/a"]}
    carried = led.store.checkpoints.carried
    held = 0
    # (step, is it a write): after a write the carried check is the run's; an approval moves the
    # run past what was carried, so the check must not hold (the next write reads the run again).
    steps: list[tuple[Any, bool]] = [
        (lambda: run.write("research", None, status="failed", error="flaky"), True),
        (lambda: run.write("research", research), True),
        (lambda: run.write("proposal", proposal), True),
        (lambda: led.approve(T, run_id, "proposal", by="ana"), False),
        (lambda: run.write("proposal", proposal), True),
        (lambda: run.write("research", research), True),
    ]
    for step, writes in steps:
        step()
        premise_snapshot(led.store, T, run_id)  # what the next write decides on, with its check
        check = carried.check_for(key)
        if check is not None:
            held += writes
            assert check.holds(led.store.session.current, T, run_id) is writes, check.fingerprint
    assert held >= 4
    # ... and does not once the run moves: another connection's attempt of it.
    other = phaselog.open(url)
    other.write(T, run_id, "research", research, pipeline="video-pipeline")
    other.close()
    check = carried.check_for(key)
    assert check is not None
    assert not check.holds(led.store.session.current, T, run_id)
    led.close()


def test_sqlite_a_held_row_edited_in_place_while_the_database_moved_is_seen(tmp_path: Path) -> None:
    """Bytes of the record a write links to, edited from outside (same length, same hash column),
    after another process wrote elsewhere: the run check compares the row itself, so the write
    reads the run again and refuses to link to the damaged attempt."""
    import sqlite3

    url = f"sqlite://{tmp_path}/edit.db"
    open_store(url, migrate=True).close()
    led = phaselog.open(url)
    run_id = str(uuid.uuid4())
    run = led.run(T, run_id)
    run.write("implement", IMPLEMENT)
    run.write("implement", IMPLEMENT)  # carried; attempt 2 is what the next implement links to
    _write_elsewhere(url, str(uuid.uuid4()), "implement")
    with contextlib.closing(sqlite3.connect(tmp_path / "edit.db")) as raw, raw:
        (body,) = raw.execute(
            "SELECT body FROM phaselog_checkpoints WHERE run_id = ? AND attempt = 2", (run_id,)
        ).fetchone()
        edited = body.replace("feat/", "feat-", 1)
        assert edited != body
        assert len(edited) == len(body)
        raw.execute("UPDATE phaselog_checkpoints SET body = ? WHERE run_id = ? AND attempt = 2", (edited, run_id))
    with pytest.raises(phaselog.PhaselogError) as refused:
        run.write("implement", IMPLEMENT)
    assert "attempt 2" in str(refused.value)
    assert open_store(url).attempts(T, run_id)[-1].attempt_number == 2  # nothing linked to it
    led.close()


WRITERS = 6
ROUNDS = 8


def _racer(url: str, idx: int, run_id: str, barrier: Any, out: Any) -> None:
    try:
        led = phaselog.open(url)  # its own store, opened after the fork; kept for every round
        run = led.run(T, run_id)
        for round_no in range(ROUNDS):
            barrier.wait(120)
            phase, body = ("implement", IMPLEMENT) if (idx + round_no) % 3 else ("local_review", LOCAL_REVIEW)
            res = run.write(phase, body)
            out.put(("ok", idx, round_no, res.record.phase, res.record.attempt_number, res.record.content_hash))
        led.close()
    except BaseException:
        out.put(("error", idx, -1, traceback.format_exc(), 0, ""))


@pytest.mark.all_stores
@pytest.mark.slow
def test_racing_writer_processes_keep_attempts_gap_free_and_every_link_intact(store_url: str) -> None:
    run_id = str(uuid.uuid4())
    barrier = CTX.Barrier(WRITERS)
    out = CTX.Queue()
    procs = [CTX.Process(target=_racer, args=(store_url, i, run_id, barrier, out), daemon=True) for i in range(WRITERS)]
    for p in procs:
        p.start()
    results = []
    try:
        while len(results) < WRITERS * ROUNDS:
            try:
                item = out.get(timeout=240)
            except queue.Empty:
                pytest.fail(f"only {len(results)} outcomes arrived")
            if item[0] == "error":
                pytest.fail(f"writer {item[1]} failed:\n{item[3]}")
            results.append(item)
    finally:
        barrier.abort()
        deadline = time.monotonic() + 30
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
    led = phaselog.open(store_url)
    snap = led.store.snapshot(T, run_id, history=True)
    records = {(s.record.phase, s.record.attempt_number): s.record for s in snap.stored()}
    assert not snap.damaged()
    told = Counter((phase, number) for _, _, _, phase, number, _ in results)
    assert all(n == 1 for n in told.values()), "one winner per attempt"
    for phase in ("implement", "local_review"):
        numbers = sorted(n for p, n in records if p == phase)
        assert numbers == list(range(1, len(numbers) + 1)), f"{phase}: attempts not gap-free"
        assert numbers == sorted(n for p, n in told if p == phase)
        for n in numbers:
            rec = records[(phase, n)]
            assert rec.prev_hash == (records[(phase, n - 1)].content_hash if n > 1 else None), (phase, n)
    for (phase, _n), rec in records.items():
        for name, entry in rec.basis.items():
            assert records[(name, entry.attempt)].content_hash == entry.hash, (phase, name)
    for _, _, _, phase, number, content_hash in results:
        assert records[(phase, number)].content_hash == content_hash  # each writer's own record is stored
    led.close()
