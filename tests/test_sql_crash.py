"""The SQL stores under crashes, lost connections, migrations and guard takeovers.

* SQLite: writer processes are SIGKILLed at random moments while they write (at least 200
  kills); after each, ``PRAGMA integrity_check`` is ``ok``, every write a writer acknowledged
  (through a pipe, only after ``write()`` returned) is there with its hash, nothing is doubled
  and the chain verifies.
* PostgreSQL: writers under load while a killer loop terminates their backends
  (``pg_terminate_backend``); afterwards lost = duplicate = unresolved = 0 and ``verify`` is ok.
  A TCP proxy that cuts the connection right around ``COMMIT`` makes the "commit outcome
  unknown" case deterministic: the write resolves, by its idempotency key, to exactly one record.
* Migrations: concurrent first-time migrations are safe, a failing migration leaves nothing
  behind, and a database newer than the code is refused with what to do.
* SQLite really runs with WAL, synchronous=FULL, a busy timeout and BEGIN IMMEDIATE writes.
* Guard fencing: a holder whose lease was taken over can no longer write the loop state.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import random
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import traceback
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW, PG_URL, REPO, require_postgres
from phaselog import UnsupportedVersion
from phaselog.guard import Environment, Fenced, Guard
from phaselog.ledger.facade import Ledger
from phaselog.model.errors import MigrationNeeded
from phaselog.stores import open_store
from phaselog.stores.sql import schema as sql
from phaselog.stores.sql.sqlite import SqliteStore

pytestmark = pytest.mark.slow

T = "CRASH-SQL"
CTX = mp.get_context("fork")
SQLITE_KILLS = 200
# The totals every run reports (read by the lead's summary; printed with -s).
FIGURES: dict[str, Any] = {}


def pg_url(base: str, **params: str) -> str:
    """``base`` (a postgresql:// URL) with extra query parameters."""
    extra = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{base}{'&' if '?' in base else '?'}{extra}"


@pytest.fixture
def fresh_pg_schemas() -> Iterator[list[str]]:
    """Schema names the test creates itself; every one is dropped afterwards."""
    names: list[str] = []
    yield names
    if not names:
        return
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for s in names:
            conn.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')


def sql_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest, name: str = "db") -> str:
    if kind == "sqlite":
        return f"sqlite://{tmp_path}/{name}.db"
    return str(request.getfixturevalue("pg_schema_url"))


def raw(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One statement on the store's database through a connection of the test's own."""
    if url.startswith("sqlite://"):
        con = sqlite3.connect(url[len("sqlite://") :], isolation_level=None)
        try:
            cur = con.execute(statement, params)
            return list(cur.fetchall())
        finally:
            con.close()
    import psycopg

    from phaselog.stores.sql.postgres import split_url

    dsn, schema = split_url(url)
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute(f'SET search_path TO "{schema}"')
        cur = con.execute(statement.replace("?", "%s"), params)
        return list(cur.fetchall()) if cur.description else []


def token_of(rec: phaselog.Checkpoint) -> str:
    """The writer's token a test record carries (in its payload, or its error for a failure)."""
    if rec.completed:
        return str(rec.phase_payload["files_changed"][0])
    return str(rec.error)


_FORKED: list[int] = []


@pytest.fixture(autouse=True)
def _no_writer_outlives_its_test() -> Iterator[None]:
    """A failing test must not leave forked writers behind: kill and reap what is left."""
    yield
    while _FORKED:
        pid = _FORKED.pop()
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


# -- writers that report through a pipe ------------------------------------------------------------
def _emit(fd: int, **line: Any) -> None:
    os.write(fd, (json.dumps(line) + "\n").encode())  # < PIPE_BUF: atomic, whole or absent


def _write_loop(url: str, wid: int, runs: list[str], fd: int, limit: int | None) -> None:
    """Write checkpoints and progress events until killed (or ``limit`` writes); report each one
    as ``begin`` before the call and ``ack`` only after it returned, ``error`` if it raised."""
    ledger = Ledger(open_store(url))
    ledger.load_pipeline(None)
    rng = random.Random(wid)
    i = 0
    while limit is None or i < limit:
        i += 1
        run = runs[i % len(runs)]
        tok = f"w{wid}-{i}"
        what = "event" if i % 4 == 0 else ("failed" if i % 4 == 3 else "cp")
        _emit(fd, kind="begin", wid=wid, token=tok)
        try:
            if what == "event":
                try:
                    ev = ledger.progress(T, run, "local_review", "step", step=i)
                except phaselog.NotFound:
                    ev = ledger.progress(T, run, "local_review", "start")
                _emit(
                    fd,
                    kind="ack",
                    what="event",
                    wid=wid,
                    token=tok,
                    run=run,
                    attempt=ev.attempt_number,
                    seq=ev.seq,
                    hash=ev.content_hash,
                )
                continue
            if what == "failed":
                res = ledger.write(T, run, "implement", None, status="failed", error=tok)
            elif rng.random() < 0.2:
                res = ledger.write(
                    T,
                    run,
                    "local_review",
                    {**LOCAL_REVIEW, "last_clean_sha": "a1b2c3d"},
                    artifact_paths=[tok],
                )
            else:
                res = ledger.write(T, run, "implement", {**IMPLEMENT, "files_changed": [tok]})
            rec = res.record
            _emit(
                fd,
                kind="ack",
                what="cp",
                wid=wid,
                token=tok,
                run=run,
                phase=rec.phase,
                ordinal=rec.phase_ordinal,
                attempt=rec.attempt_number,
                hash=rec.content_hash,
            )
        except Exception as exc:
            _emit(fd, kind="error", wid=wid, token=tok, error=f"{type(exc).__name__}: {exc}"[:300])
    _emit(fd, kind="done", wid=wid)
    ledger.close()


def _fork_writer(url: str, wid: int, runs: list[str], fd_w: int, fd_r: int, *, limit: int | None = None) -> int:
    pid = os.fork()
    if pid:
        _FORKED.append(pid)
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(fd_r)
            _write_loop(url, wid, runs, fd_w, limit)
        except BaseException:
            with contextlib.suppress(Exception):
                _emit(fd_w, kind="crash", wid=wid, error=traceback.format_exc()[-2000:])
            code = 1
        os._exit(code)
    return pid


def _read_lines(fd: int, buf: bytearray, timeout: float | None) -> list[dict[str, Any]]:
    """Whole lines available on ``fd`` (waiting up to ``timeout`` for the first bytes)."""
    out: list[dict[str, Any]] = []
    ready, _, _ = select.select([fd], [], [], timeout)
    while ready:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf.extend(chunk)
        ready, _, _ = select.select([fd], [], [], 0)
    while b"\n" in buf:
        line, _, rest = bytes(buf).partition(b"\n")
        buf[:] = rest
        out.append(json.loads(line))
    return out


def _rows_by_token(ledger: Ledger) -> tuple[Counter[str], dict[str, tuple[str, int, int, str]]]:
    """Every checkpoint of the ticket by the token it carries: how often, and where."""
    seen: Counter[str] = Counter()
    where: dict[str, tuple[str, int, int, str]] = {}
    for rid in ledger.store.runs(T):
        for item in ledger.store.iter_records(T, rid):
            assert not isinstance(item, phaselog.Damaged), item
            rec = item.record
            tok = rec.artifact_paths[0] if rec.phase == "local_review" else token_of(rec)
            seen[tok] += 1
            where[tok] = (rid, rec.phase_ordinal, rec.attempt_number, rec.content_hash)
    return seen, where


def _check_acks(ledger: Ledger, acks: list[dict[str, Any]]) -> int:
    """Every acknowledged write is stored whole, with the hash its writer was told; returns
    how many are not (lost)."""
    lost = 0
    for a in acks:
        run = phaselog.normalize_run_id(a["run"])
        try:
            if a["what"] == "cp":
                got = ledger.store.get(T, run, a["ordinal"], a["phase"], a["attempt"]).record.content_hash
            else:
                got = ledger.progress_event(T, run, "local_review", a["attempt"], a["seq"]).content_hash
        except phaselog.NotFound:
            got = None
        lost += got != a["hash"]
    return lost


# -- SQLite: SIGKILL at random moments -------------------------------------------------------------
WRITERS_PER_CYCLE = 4


def warm_up(tmp_path: Path) -> None:
    """One write in this process first, so forked writers start warm (schemas compiled, modules
    imported) and reach their write loop at once."""
    ledger = Ledger(open_store(f"sqlite://{tmp_path}/warm-up.db"))
    ledger.write(T, "warm", "implement", IMPLEMENT)
    ledger.write(T, "warm", "local_review", LOCAL_REVIEW)
    ledger.progress(T, "warm", "create_pr", "start")
    ledger.close()


def test_sqlite_writers_sigkilled_mid_write_lose_nothing_acknowledged(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/crash.db"
    open_store(url, migrate=True).close()
    warm_up(tmp_path)
    rng = random.Random(os.environ.get("PHASELOG_CRASH_SEED", "sqlite-kill"))
    all_acks: list[dict[str, Any]] = []
    begun_not_acked: set[str] = set()
    kills = mid_write = cycles = 0
    while kills < SQLITE_KILLS:
        cycles += 1
        runs = [f"run-{cycles // 5}"]
        fd_r, fd_w = os.pipe()
        wids = [cycles * WRITERS_PER_CYCLE + i for i in range(WRITERS_PER_CYCLE)]
        pids = [_fork_writer(url, wid, runs, fd_w, fd_r) for wid in wids]
        os.close(fd_w)
        buf = bytearray()
        lines: list[dict[str, Any]] = []
        # Wait until every writer is in its write loop (each acknowledged a write) ...
        deadline_reads = 0
        while {ln["wid"] for ln in lines if ln["kind"] == "ack"} != set(wids):
            got = _read_lines(fd_r, buf, 30)
            crashed = [ln for ln in got if ln["kind"] in ("crash", "error")]
            assert not crashed, crashed
            deadline_reads += 1
            assert got or deadline_reads < 3, "writers did not start"
            lines.extend(got)
        # ... then let them run a random while, and kill them where they are.
        lines.extend(_read_lines(fd_r, buf, rng.uniform(0.0, 0.03)))
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            assert os.WIFSIGNALED(status)
            assert os.WTERMSIG(status) == signal.SIGKILL
            kills += 1
        while True:
            more = _read_lines(fd_r, buf, 5)
            if not more:
                break
            lines.extend(more)
        os.close(fd_r)
        assert not [ln for ln in lines if ln["kind"] in ("crash", "error")]
        acks = [ln for ln in lines if ln["kind"] == "ack"]
        last = {}
        for ln in lines:
            last[ln["wid"]] = ln["kind"]
        mid_write += sum(1 for k in last.values() if k == "begin")
        begun_not_acked |= {ln["token"] for ln in lines if ln["kind"] == "begin"} - {a["token"] for a in acks}
        # After every kill: the database is sound, nothing acknowledged is lost, the run verifies.
        store = SqliteStore(tmp_path / "crash.db")
        ledger = Ledger(store)
        try:
            assert store.integrity_check() == "ok"
            assert _check_acks(ledger, acks) == 0
            report = ledger.verify(T, runs[0])
            assert report.ok, report.problems
        finally:
            store.close()
        all_acks.extend(acks)

    store = SqliteStore(tmp_path / "crash.db")
    ledger = Ledger(store)
    try:
        assert store.integrity_check() == "ok"
        lost = _check_acks(ledger, all_acks)
        seen, _where = _rows_by_token(ledger)
        duplicates = sum(n - 1 for n in seen.values() if n > 1)
        per_key = raw(
            url,
            "SELECT COUNT(*) FROM (SELECT ticket_id, run_id, phase_ordinal, attempt, COUNT(*) AS n "
            "FROM phaselog_checkpoints GROUP BY ticket_id, run_id, phase_ordinal, attempt "
            "HAVING COUNT(*) > 1) AS d",
        )[0][0]
        acked_tokens = {a["token"] for a in all_acks if a["what"] == "cp"}
        report = ledger.verify(T)
    finally:
        store.close()
    FIGURES.update(
        sqlite_kills=kills,
        sqlite_kills_mid_write=mid_write,
        sqlite_acks=len(all_acks),
        sqlite_lost=lost,
        sqlite_duplicates=duplicates,
    )
    print(
        f"\nSQLite: {kills} SIGKILLs in {cycles} cycles ({mid_write} during a write), "
        f"{len(all_acks)} acknowledged writes, lost={lost}, duplicates={duplicates}"
    )
    assert kills >= SQLITE_KILLS
    assert mid_write >= SQLITE_KILLS // 4, "too few kills landed while a write was under way"
    assert (lost, duplicates, per_key) == (0, 0, 0)
    assert acked_tokens <= set(seen)
    # A write killed before it was acknowledged is either whole and present once, or absent.
    assert all(seen[t] <= 1 for t in begun_not_acked)
    assert report.ok, report.problems


# -- PostgreSQL: backends terminated under load ----------------------------------------------------
def test_postgres_writers_whose_backends_are_terminated_lose_and_double_nothing(
    pg_schema_url: str,
) -> None:
    app = f"phaselog-crash-{uuid.uuid4().hex[:8]}"
    url = pg_url(pg_schema_url, application_name=app)
    open_store(url, migrate=True).close()
    writers, per_writer = 4, 40
    runs_of = {w: [f"pg-run-{w % 2}"] for w in range(writers)}
    fd_r, fd_w = os.pipe()
    pids = [_fork_writer(url, w, runs_of[w], fd_w, fd_r, limit=per_writer) for w in range(writers)]
    os.close(fd_w)
    import psycopg

    rng = random.Random(os.environ.get("PHASELOG_CRASH_SEED", "pg-terminate"))
    terminated = 0
    lines: list[dict[str, Any]] = []
    buf = bytearray()
    alive = set(pids)
    with psycopg.connect(PG_URL, autocommit=True) as killer:
        while alive:
            lines.extend(_read_lines(fd_r, buf, rng.uniform(0.02, 0.15)))
            rows = killer.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                (app,),
            ).fetchall()
            terminated += sum(1 for (ok,) in rows if ok)
            for pid in list(alive):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    alive.discard(pid)
                    assert os.WIFEXITED(status), lines[-5:]
                    assert os.WEXITSTATUS(status) == 0, lines[-5:]
    while True:
        more = _read_lines(fd_r, buf, 2)
        if not more:
            break
        lines.extend(more)
    os.close(fd_r)
    assert not [ln for ln in lines if ln["kind"] == "crash"]
    assert Counter(ln["kind"] for ln in lines)["done"] == writers

    begun = {ln["token"] for ln in lines if ln["kind"] == "begin"}
    acks = [ln for ln in lines if ln["kind"] == "ack"]
    errors = {ln["token"]: ln["error"] for ln in lines if ln["kind"] == "error"}
    unresolved = begun - {a["token"] for a in acks} - set(errors)
    ledger = Ledger(open_store(pg_schema_url))
    try:
        lost = _check_acks(ledger, acks)
        seen, _where = _rows_by_token(ledger)
        duplicates = sum(n - 1 for n in seen.values() if n > 1)
        errored_but_stored = sorted(t for t in errors if seen[t])
        report = ledger.verify(T)
        events_ok = all(ledger.verify(T, r).ok for r in ("pg-run-0", "pg-run-1"))
    finally:
        ledger.close()
    FIGURES.update(
        pg_terminations=terminated,
        pg_acks=len(acks),
        pg_errors=len(errors),
        pg_lost=lost,
        pg_duplicates=duplicates,
        pg_unresolved=len(unresolved),
        pg_errored_but_stored=len(errored_but_stored),
    )
    print(
        f"\nPostgreSQL: {terminated} backends terminated, {len(acks)} acknowledged writes, "
        f"{len(errors)} reported errors ({len(errored_but_stored)} of them stored anyway), "
        f"lost={lost}, duplicates={duplicates}, unresolved={len(unresolved)}"
    )
    assert len(begun) == writers * per_writer
    assert terminated >= 20, "the killer hardly ever found a writer's backend"
    assert (lost, duplicates, len(unresolved)) == (0, 0, 0)
    assert len(acks) >= writers * per_writer // 2, f"too few writes got through: {errors}"
    assert report.ok, report.problems
    assert events_ok


# -- PostgreSQL: the commit outcome is unknown -----------------------------------------------------
class CommitCutter:
    """A TCP proxy in front of PostgreSQL that, once armed, cuts the connection at the next COMMIT:
    ``after``: the COMMIT reaches the server (it commits) and the reply is dropped;
    ``before``: the COMMIT never reaches the server (it rolls back).

    An append that is one autocommitted statement (stores/sql/checkpoints.py) commits when that
    statement completes: it is cut in the same two places (its command tag is ``INSERT``)."""

    COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"
    AT_ONCE = b"ON CONFLICT DO NOTHING RETURNING "  # the autocommitted append (RETURNING 1 or its row version)

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.mode: str | None = None
        self.cuts = 0
        self.refuse = 0  # how many of the next connections to close at once
        self.pending_refuse = 0  # becomes ``refuse`` when the cut happens
        self.lock = threading.Lock()
        self.socks: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)

    def arm(self, mode: str, *, refuse: int = 0) -> None:
        """Cut at the next COMMIT; then close the next ``refuse`` new connections at once."""
        with self.lock:
            self.mode = mode
            self.pending_refuse = refuse

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                refuse, self.refuse = self.refuse > 0, max(self.refuse - 1, 0)
            if refuse:  # the database is "restarting": this connection is closed at once
                client.close()
                continue
            server = socket.create_connection(self.target)
            with self.lock:
                self.socks += [client, server]
            state = {"commit_sent": False}
            for src, dst, up in ((client, server, True), (server, client, False)):
                t = threading.Thread(
                    target=self._pump,
                    args=(src, dst, state, (client, server)),
                    kwargs={"up": up},
                    daemon=True,
                )
                t.start()
                self.threads.append(t)

    def _cut(self, *socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.cuts += 1
        self.mode = None
        self.refuse, self.pending_refuse = self.pending_refuse, 0

    def _pump(
        self,
        src: socket.socket,
        dst: socket.socket,
        state: dict[str, bool],
        pair: tuple[socket.socket, socket.socket],
        *,
        up: bool,
    ) -> None:
        """Relay ``src`` to ``dst`` (``up``: client to server), cutting ``pair`` when armed."""
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            with self.lock:
                if up and self.mode and (self.COMMIT in data or self.AT_ONCE in data):
                    if self.mode == "before":
                        self._cut(*pair)
                        return
                    state["commit_sent"] = True
                elif not up and state["commit_sent"] and (b"COMMIT\x00" in data or b"INSERT 0 " in data):
                    state["commit_sent"] = False
                    self._cut(*pair)
                    return
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the accepting thread
        self.listener.close()
        with self.lock:
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        for t in self.threads:
            t.join(timeout=5)
        for s in self.socks:
            s.close()


def through_cutter(pg_schema_url: str) -> tuple[CommitCutter, Any]:
    """A CommitCutter in front of the test database, and a store that connects through it."""
    from urllib.parse import urlsplit

    parts = urlsplit(pg_schema_url)
    cutter = CommitCutter(parts.hostname or "127.0.0.1", parts.port or 5432)
    url = pg_url(
        pg_schema_url.replace(f"{parts.hostname}:{parts.port or 5432}", f"127.0.0.1:{cutter.port}"),
        sslmode="disable",
    )
    return cutter, open_store(url)


@pytest.mark.parametrize("refused", [0, 2], ids=["reconnects", "reconnect-refused-twice"])
@pytest.mark.parametrize("mode", ["after", "before"])
def test_postgres_write_whose_commit_outcome_is_unknown_resolves_to_exactly_one_record(
    pg_schema_url: str, mode: str, refused: int
) -> None:
    # ``refused``: the first reconnections fail too, as while the server restarts; the write must
    # back off and retry, not give up (and, for ``after``, not report an error for a stored record).
    cutter, store = through_cutter(pg_schema_url)
    ledger = Ledger(store)
    try:
        ledger.write(T, "r1", "implement", {**IMPLEMENT, "files_changed": ["first"]})
        cutter.arm(mode, refuse=refused)
        res = ledger.write(T, "r1", "implement", {**IMPLEMENT, "files_changed": ["unknown-outcome"]})
        assert cutter.cuts == 1, "the connection was not cut at COMMIT"
        assert cutter.refuse == 0  # every refusal was met by a retry
        assert res.record.attempt_number == 2
        cutter.arm(mode, refuse=refused)
        ev = ledger.progress(T, "r1", "local_review", "start")
        assert cutter.cuts == 2
        assert cutter.refuse == 0  # every refusal was met by a retry
        assert (ev.attempt_number, ev.seq) == (1, 1)
        cutter.arm(mode, refuse=refused)
        marker, changed = ledger.init_ticket("CUT-2", title="marker through a cut")
        assert cutter.cuts == 3
        assert cutter.refuse == 0  # every refusal was met by a retry
        assert (marker.revision, changed) == (1, True)
    finally:
        store.close()
        cutter.close()
    run = phaselog.normalize_run_id("r1")
    rows = raw(
        pg_schema_url,
        "SELECT attempt, content_hash FROM phaselog_checkpoints WHERE run_id = ? ORDER BY attempt",
        (run,),
    )
    assert [r[0] for r in rows] == [1, 2]  # exactly one record for the unknown outcome
    assert rows[1][1] == res.record.content_hash
    events = raw(pg_schema_url, "SELECT name FROM phaselog_entries WHERE kind = 'progress'")
    assert len(events) == 1
    markers = raw(pg_schema_url, "SELECT name FROM phaselog_entries WHERE kind = 'markers'")
    assert markers == [("rev_000001",)]
    check = Ledger(open_store(pg_schema_url))
    try:
        assert check.verify(T).ok
        assert check.read(T, "r1", "implement").record.content_hash == res.record.content_hash
    finally:
        check.close()


@pytest.mark.parametrize(("mode", "stored"), [("after", True), ("before", False)])
def test_a_commit_whose_outcome_stays_unknown_is_reported_as_such(pg_schema_url: str, mode: str, stored: bool) -> None:
    # The connection is cut at COMMIT and every reconnection is refused until the retries run out:
    # the writer cannot know whether the record is stored, and must say so (not a plain io_error).
    cutter, store = through_cutter(pg_schema_url)
    ledger = Ledger(store)
    try:
        ledger.write(T, "r1", "implement", {**IMPLEMENT, "files_changed": ["first"]})
        cutter.arm(mode, refuse=1000)
        with pytest.raises(phaselog.OutcomeUnknown) as info:
            ledger.write(T, "r1", "implement", {**IMPLEMENT, "files_changed": ["unknown-outcome"]})
        assert info.value.error_code == "outcome_unknown"
        assert "read it back" in info.value.message
    finally:
        store.close()
        cutter.close()
    run = phaselog.normalize_run_id("r1")
    rows = raw(pg_schema_url, "SELECT attempt FROM phaselog_checkpoints WHERE run_id = ? ORDER BY attempt", (run,))
    assert [r[0] for r in rows] == ([1, 2] if stored else [1])


def test_an_unreachable_postgres_is_reported_clearly_after_its_retries() -> None:
    pytest.importorskip("psycopg")
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    with pytest.raises(phaselog.StoreError) as info:
        open_store(f"postgresql://postgres@127.0.0.1:{port}/test?schema=nowhere")
    assert info.value.error_code == "io_error"
    assert f"cannot connect to PostgreSQL at postgresql://127.0.0.1:{port}/test?schema=nowhere" in info.value.message


# -- migrations ------------------------------------------------------------------------------------
def _migrate_child(url: str, barrier: Any, out: Any) -> None:
    try:
        barrier.wait(60)
        store = open_store(url, migrate=True)  # an explicit migration, as `phaselog store migrate` runs
        out.put(("ok", store.schema_version(), store.migrate()))
        store.close()
    except BaseException:
        out.put(("error", traceback.format_exc(), None))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_eight_concurrent_first_time_migrations_are_safe(
    kind: str, tmp_path: Path, fresh_pg_schemas: list[str]
) -> None:
    for round_no in range(4):
        if kind == "sqlite":
            url = f"sqlite://{tmp_path}/m{round_no}.db"
        else:
            schema = f"t_mig_{uuid.uuid4().hex[:12]}"
            fresh_pg_schemas.append(schema)
            url = pg_url(require_postgres(), schema=schema)  # the schema does not exist yet
        barrier, out = CTX.Barrier(8), CTX.Queue()
        procs = [CTX.Process(target=_migrate_child, args=(url, barrier, out), daemon=True) for _ in range(8)]
        for p in procs:
            p.start()
        try:
            results = [out.get(timeout=120) for _ in procs]
        finally:
            barrier.abort()  # harmless once everyone passed; frees the waiters if not
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
                    p.join()
        assert [r[0] for r in results] == ["ok"] * 8, [r[1] for r in results if r[0] != "ok"]
        assert {r[1] for r in results} == {sql.SCHEMA_VERSION}
        assert {tuple(r[2]) for r in results} == {(sql.SCHEMA_VERSION, sql.SCHEMA_VERSION)}
        assert raw(url, "SELECT id, version FROM phaselog_schema") == [(1, sql.SCHEMA_VERSION)]
        ledger = Ledger(open_store(url))
        try:
            ledger.write(T, "r1", "implement", IMPLEMENT)
            assert ledger.verify(T).ok
        finally:
            ledger.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_failing_migration_leaves_nothing_behind(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sql_url(kind, tmp_path, request)
    ledger = Ledger(open_store(url))
    written = ledger.write(T, "r1", "implement", IMPLEMENT).record
    ledger.close()
    # A version-2 migration whose second statement fails: the first must be rolled back with it.
    monkeypatch.setattr(sql, "SCHEMA_VERSION", sql.SCHEMA_VERSION + 1)
    monkeypatch.setitem(
        sql.MIGRATIONS,
        sql.SCHEMA_VERSION,
        ["CREATE TABLE phaselog_extra (x INTEGER)", "THIS IS NOT SQL"],
    )
    with pytest.raises(MigrationNeeded) as needed:
        open_store(url)  # migrations are explicit: opening checks the version and changes nothing
    assert "phaselog store migrate" in needed.value.message
    assert needed.value.context == {"found": sql.SCHEMA_VERSION - 1, "required": sql.SCHEMA_VERSION}
    with pytest.raises(Exception, match=r"(?i)syntax"):
        open_store(url, migrate=True)
    monkeypatch.undo()
    assert raw(url, "SELECT version FROM phaselog_schema") == [(sql.SCHEMA_VERSION,)]
    if kind == "sqlite":
        extra = raw(url, "SELECT name FROM sqlite_master WHERE name = 'phaselog_extra'")
    else:
        extra = raw(url, "SELECT tablename FROM pg_tables WHERE tablename = 'phaselog_extra'")
    assert extra == []
    again = Ledger(open_store(url))
    try:
        assert again.read(T, "r1", "implement").record.content_hash == written.content_hash
    finally:
        again.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_schema_newer_than_the_code_is_refused_with_what_to_do(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = sql_url(kind, tmp_path, request)
    open_store(url, migrate=True).close()
    raw(url, "UPDATE phaselog_schema SET version = ?", (sql.SCHEMA_VERSION + 1,))
    with pytest.raises(UnsupportedVersion) as info:
        open_store(url)
    assert "upgrade phaselog" in info.value.message
    assert info.value.context == {"found": sql.SCHEMA_VERSION + 1, "supported": sql.SCHEMA_VERSION}
    assert raw(url, "SELECT version FROM phaselog_schema") == [(sql.SCHEMA_VERSION + 1,)]  # untouched
    proc = subprocess.run(
        [sys.executable, "-m", "phaselog", "store", "migrate", "--store", url],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = json.loads(proc.stdout)
    assert err["error_code"] == "unsupported_version"
    assert "upgrade phaselog" in err["error"]


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "files"])
def test_store_migrate_cli(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = str(tmp_path / "files-store") if kind == "files" else sql_url(kind, tmp_path, request)
    outs = []
    for _ in range(2):  # the second run finds nothing to do
        proc = subprocess.run(
            [sys.executable, "-m", "phaselog", "store", "migrate", "--store", url],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs.append(json.loads(proc.stdout))
    if kind == "files":
        assert "no schema" in outs[0]["message"]
        return
    assert outs[0]["success"] is True
    assert outs[0]["schema_version"] == outs[0]["to_version"] == sql.SCHEMA_VERSION
    assert outs[1]["from_version"] == sql.SCHEMA_VERSION
    assert raw(url, "SELECT version FROM phaselog_schema") == [(sql.SCHEMA_VERSION,)]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_uniqueness_is_enforced_by_constraints_not_by_the_code(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = sql_url(kind, tmp_path, request)
    ledger = Ledger(open_store(url))
    ledger.write(T, "r1", "implement", IMPLEMENT)
    ledger.write(T, "r1", "implement", {**IMPLEMENT, "files_changed": ["b"]})
    ledger.progress(T, "r1", "local_review", "start")
    ledger.close()
    run = phaselog.normalize_run_id("r1")
    insert = (
        "INSERT INTO phaselog_checkpoints (ticket_id, run_id, phase_ordinal, phase, attempt, "
        "prev_attempt, status, content_hash, body) "
        "VALUES (?, ?, 1, 'implement', ?, ?, 'completed', 'x', '{}')"
    )
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        raw(url, insert, (T, run, 2, 1))  # the same attempt twice
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        raw(url, insert, (T, run, 3, 1))  # a second successor of attempt 1: a fork of the chain
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        raw(
            url,
            "INSERT INTO phaselog_entries (kind, ticket_id, run_id, name, body) "
            "SELECT kind, ticket_id, run_id, name, body FROM phaselog_entries",
            (),
        )
    assert raw(url, "SELECT COUNT(*) FROM phaselog_checkpoints") == [(2,)]
    assert raw(url, "SELECT COUNT(*) FROM phaselog_entries") == [(1,)]


# -- SQLite settings -------------------------------------------------------------------------------
def test_sqlite_runs_with_wal_full_sync_busy_timeout_and_immediate_writes(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", migrate=True)  # the test reads pragmas before any write
    try:
        conn = store.conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
        assert oct(os.stat(tmp_path / "s.db").st_mode & 0o777) == oct(0o600)
        statements: list[str] = []
        conn.raw.set_trace_callback(statements.append)
        ledger = Ledger(store)
        ledger.write(T, "r1", "implement", IMPLEMENT)
        ledger.progress(T, "r1", "local_review", "start")
        conn.raw.set_trace_callback(None)
    finally:
        store.close()
    for table in ("phaselog_checkpoints", "phaselog_entries"):
        at = next(i for i, s in enumerate(statements) if s.startswith(f"INSERT INTO {table}"))
        opened = [s for s in statements[:at] if s.startswith(("BEGIN", "COMMIT", "ROLLBACK"))]
        assert opened, table
        assert opened[-1] == "BEGIN IMMEDIATE", (table, opened[-3:])
        assert "COMMIT" in statements[at + 1 :]
    # The journal mode is the database's: another connection sees WAL too.
    assert raw(f"sqlite://{tmp_path}/s.db", "PRAGMA journal_mode") == [("wal",)]


# -- guard fencing ---------------------------------------------------------------------------------
TAKEOVER = textwrap.dedent("""
    import json, sys
    from datetime import UTC, datetime
    from phaselog.guard import Environment, Guard
    from phaselog.stores import open_store
    url, view = sys.argv[1], sys.argv[2]
    # 'dead': from here, the holder's process looks gone (and so does its job's group, which
    # this very process is in); 'remote': it is on another host.
    dead = Environment(start_time_of=lambda pid: None, group_of=lambda pgid, start: [])
    env = dead if view == "dead" else Environment()
    r = Guard(open_store(url), "fence", env=env).run(["true"])
    print(json.dumps(r.to_json()))
""")


@pytest.mark.parametrize("view", ["dead", "remote"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres", "files"])
def test_a_holder_whose_lease_was_taken_over_can_no_longer_write_state(
    kind: str, view: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = str(tmp_path / "files-store") if kind == "files" else sql_url(kind, tmp_path, request)
    store = open_store(url)
    try:
        if view == "remote":  # holder A runs on another host and started two hours ago
            env = Environment(host="far-away-host", clock=lambda: datetime.now(UTC) - timedelta(hours=2))
        else:
            env = Environment()
        a = Guard(store, "fence", env=env)
        out, script = tmp_path / "takeover.json", tmp_path / "takeover.py"
        script.write_text(TAKEOVER)
        # A's command is B: another process that takes A's lease over and runs a pass of its own.
        cmd = ["sh", "-c", f'"{sys.executable}" "{script}" "{url}" {view} > "{out}"']
        with pytest.raises(Fenced) as info:
            a.run(cmd)
        assert info.value.error_code == "fenced"
        b = json.loads(out.read_text())
        assert (b["action"], b["outcome"]) == ("ran", "success")
        assert b["took_over"] is not None
        assert b["took_over"]["holder"]["host"] == env.host
        # A's pass was not recorded; B's was; the lease is free (A could not release B's).
        g = Guard(store, "fence")
        st = g.status()
        assert st["state"]["pass_count"] == 1
        assert st["lock"] is None
        assert [h["kind"] for h in g.history()] == ["takeover", "pass"]
        assert g.run(["true"]).state.pass_count == 2  # type: ignore[union-attr]
    finally:
        store.close()


def test_sql_lease_tokens_rise_with_every_acquisition(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path}/g.db")
    try:
        g = Guard(store, "tokens")
        tokens = []
        for _ in range(3):
            g.run(["true"])
            tokens.append(
                raw(
                    f"sqlite://{tmp_path}/g.db",
                    "SELECT fencing_token, holder FROM phaselog_guard_lease WHERE name = 'tokens'",
                )[0]
            )
        assert tokens == [(1, None), (2, None), (3, None)]
    finally:
        store.close()
