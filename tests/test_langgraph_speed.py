"""What PhaselogSaver asks of the database: statements per put / get_tuple / list on SQLite
(counted on the real connection), round trips per put on PostgreSQL (libpq's own trace), and a
saver whose thread another process moved re-reading it and keeping one chain."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.integrations.langgraph import PhaselogSaver, ns_run_id
from phaselog.stores import Stored
from test_langgraph_saver import T, cfg, checkpoint, put_chain


@contextlib.contextmanager
def sqlite_statements(saver: PhaselogSaver) -> Iterator[list[str]]:
    """Every statement the saver's SQLite connection runs inside the block (sqlite3's trace hook)."""
    raw = saver.store.conn.raw  # type: ignore[attr-defined]  # the SQLite store's sqlite3.Connection
    seen: list[str] = []
    raw.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        raw.set_trace_callback(None)


def shape(statements: list[str]) -> tuple[int, int]:
    """(statements outside a transaction, write transactions) of a statement list."""
    reads = transactions = 0
    inside = False
    for text in statements:
        word = text.split(None, 1)[0].upper()
        if word == "BEGIN":
            inside, transactions = True, transactions + 1
        elif word in ("COMMIT", "ROLLBACK"):
            inside = False
        elif not inside:
            reads += 1
    return reads, transactions


def tables(statements: list[str]) -> list[str]:
    """The table each statement reads first (its first ``FROM``)."""
    return [s.split(" FROM ", 1)[1].split(None, 1)[0] for s in statements if " FROM " in s]


def put_next(saver: PhaselogSaver, parent: str | None, thread: str = T) -> str:
    cp = checkpoint({"n": 1})
    saver.put(cfg(thread, parent), cp, {"source": "loop", "step": 1}, {})
    return str(cp["id"])


def test_sqlite_put_get_tuple_and_list_run_the_fewest_statements(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with PhaselogSaver(url) as saver:
        ids = put_chain(saver, 5)
        saver.put_writes(cfg(T, ids[-1]), [("ch", "value")], "task-1")
        # A put into a thread that did not move: no read before its one write transaction
        # (the transaction's own read is the store's check of the newest attempt).
        with sqlite_statements(saver) as sql:
            ids.append(put_next(saver, ids[-1]))
        assert shape(sql) == (0, 1), sql
        assert len(sql) == 4, sql  # BEGIN IMMEDIATE, the newest attempt, the INSERT, COMMIT
        saver.put_writes(cfg(T, ids[-1]), [("ch", "next")], "task-2")
        # get_tuple, newest or by id: the checkpoint row, then its pending writes.
        for config in (cfg(), cfg(T, ids[-1]), cfg(T, ids[2])):
            with sqlite_statements(saver) as sql:
                got = saver.get_tuple(config)
            assert got is not None
            assert tables(sql) == ["phaselog_checkpoints", "phaselog_entries"], sql
        assert [w[1:] for w in got.pending_writes or []] == []
        with sqlite_statements(saver) as sql:
            newest = saver.get_tuple(cfg())
        assert newest is not None
        assert [w[1:] for w in newest.pending_writes or []] == [("ch", "next")]
        # A list of the thread: one listing of the checkpoints, one of their writes.
        with sqlite_statements(saver) as sql:
            assert [t.checkpoint["id"] for t in saver.list(cfg())] == sorted(ids, reverse=True)
        assert tables(sql) == ["phaselog_checkpoints", "phaselog_entries"], sql
    # A saver new to the thread: its first get_tuple is the same two statements; its first put
    # reads the newest checkpoint and the prune notes, then writes.
    with PhaselogSaver(url) as fresh:
        with sqlite_statements(fresh) as sql:
            assert fresh.get_tuple(cfg()) is not None
        assert tables(sql) == ["phaselog_checkpoints", "phaselog_entries"], sql
    with PhaselogSaver(url) as fresh:
        with sqlite_statements(fresh) as sql:
            ids.append(put_next(fresh, ids[-1]))
        assert shape(sql) == (2, 1), sql
        # ... and a fresh saver finds a checkpoint by id in one listing, not one read per checkpoint.
    with PhaselogSaver(url) as fresh:
        with sqlite_statements(fresh) as sql:
            assert fresh.get_tuple(cfg(T, ids[0])) is not None
        assert len(sql) <= 4, sql  # the attempts, their records, then the one checkpoint and its writes
    _one_chain(url, 7)


@contextlib.contextmanager
def pg_round_trips(saver: PhaselogSaver) -> Iterator[list[int]]:
    """How many round trips the saver's PostgreSQL connection makes inside the block (libpq's trace:
    one ``ReadyForQuery`` ends each exchange)."""
    import psycopg

    conn = saver.store.conn  # the SQL store's psycopg connection
    out: list[int] = []
    with tempfile.TemporaryFile() as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield out
        finally:
            conn.pgconn.untrace()
            trace.seek(0)
            lines = trace.read().decode("utf-8", "replace").splitlines()
            out.append(sum(1 for line in lines if "\tReadyForQuery" in line and line.split("\t")[0] == "B"))


def test_postgres_put_into_an_unmoved_thread_is_one_round_trip(pg_schema_url: str) -> None:
    with PhaselogSaver(pg_schema_url) as saver:
        ids = put_chain(saver, 3)
        with pg_round_trips(saver) as trips:
            ids.append(put_next(saver, ids[-1]))
        assert trips == [1]
        with pg_round_trips(saver) as trips:
            assert saver.get_tuple(cfg()) is not None
        assert trips == [2]  # the checkpoint, its pending writes
    _one_chain(pg_schema_url, 4)


_WRITER = """
import sys
from langgraph.checkpoint.base.id import uuid6
from phaselog.integrations.langgraph import PhaselogSaver
url, thread, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with PhaselogSaver(url) as saver:
    parent = None
    for i in range(n):
        cp = {"v": 4, "id": str(uuid6(clock_seq=-1)), "ts": "2026-01-01T00:00:00+00:00",
              "channel_values": {"i": i}, "channel_versions": {"i": 1}, "versions_seen": {}, "updated_channels": None}
        conf = {"thread_id": thread, "checkpoint_ns": ""}
        if parent:
            conf["checkpoint_id"] = parent
        saver.put({"configurable": conf}, cp, {"source": "loop", "step": i}, {})
        parent = cp["id"]
"""


def _store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "files":
        return str(tmp_path / "store")
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


def _writers(url: str, n: int, count: int) -> list[subprocess.Popen[Any]]:
    env = {**os.environ}
    return [
        subprocess.Popen([sys.executable, "-c", _WRITER, url, T, str(count)], env=env, stderr=subprocess.PIPE)
        for _ in range(n)
    ]


def _one_chain(url: str, expected: int) -> None:
    """Attempts 1..expected, each naming the one before by hash, and verify passing."""
    led = phaselog.open(url)
    try:
        records = [s.record for s in led.store.iter_records(T, ns_run_id("")) if isinstance(s, Stored)]
        assert [r.attempt_number for r in records] == list(range(1, expected + 1))
        for before, after in itertools.pairwise(records):
            assert after.prev_hash == before.content_hash
        assert led.verify(T).ok
    finally:
        led.close()


@pytest.mark.all_stores
def test_a_saver_whose_thread_another_process_moved_rereads_and_keeps_one_chain(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _store_url(backend, tmp_path, request)
    with PhaselogSaver(url) as saver:
        ids = put_chain(saver, 2)
        (proc,) = _writers(url, 1, 3)  # another process appends three checkpoints meanwhile
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        # This saver's carried state says attempt 2 is the newest: its put must find out, re-read
        # and append attempt 6 after attempt 5, never fork the chain or reuse a number.
        mine = put_next(saver, ids[-1])
        got = saver.get_tuple(cfg())
        assert got is not None
        assert got.checkpoint["id"] == mine
    _one_chain(url, 6)


@pytest.mark.all_stores
def test_concurrent_writer_processes_keep_one_gap_free_chain(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _store_url(backend, tmp_path, request)
    with PhaselogSaver(url) as saver:
        put_chain(saver, 1)  # the store exists before the race
    procs = _writers(url, 3, 6)
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err.decode()
    _one_chain(url, 1 + 3 * 6)
