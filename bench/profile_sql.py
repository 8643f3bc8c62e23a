"""``python -m bench --profile-sql``: where the SQL stores' write, read, status and list time goes.

For each backend, on a data set built as for ``--only sql`` (the first ``--scale``, default 10k):

1. **Statements and driver time.** The store's connection is wrapped for the duration of the
   diagnostic: every statement is counted, and the time spent inside the driver (execute, fetch,
   COMMIT) is split from the Python around it. Medians per operation; for PostgreSQL a statement
   is a network round trip, and COMMIT waits for the server's WAL flush (SQLite's for its fsync).
2. **The statements** one operation sends, in order.
3. **cProfile** of write and status: top functions by own time (cProfile inflates Python-heavy
   code; use it for *what*, the first table for *how much*).
4. **Query plans** of phaselog's statements at this scale (EXPLAIN QUERY PLAN / EXPLAIN).

Nothing under src/ is changed: the wrapper replaces the store's connection object and is removed.
"""

from __future__ import annotations

import cProfile
import io
import itertools
import pstats
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import _data, _sqldata
from bench._sqldata import Target
from bench._timing import fmt_time
from phaselog.ledger.facade import Ledger

OPS = ("write", "read", "status", "list")
CALLS = {"write": 200, "read": 500, "status": 300, "list": 10}
QUICK_CALLS = {"write": 20, "read": 50, "status": 30, "list": 3}


class _Tally:
    """Statements and nanoseconds spent in the driver, since the last reset."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.driver_ns = 0
        self.commit_ns = 0

    def reset(self) -> None:
        self.statements = []
        self.driver_ns = self.commit_ns = 0


class _Cursor:
    def __init__(self, cur: Any, tally: _Tally) -> None:
        self._cur, self._tally = cur, tally

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    def fetchall(self) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return self._cur.fetchall()
        finally:
            self._tally.driver_ns += time.perf_counter_ns() - t0

    def fetchone(self) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return self._cur.fetchone()
        finally:
            self._tally.driver_ns += time.perf_counter_ns() - t0


class _Conn:
    """Wraps the store's connection: counts statements, times the driver."""

    def __init__(self, conn: Any, tally: _Tally) -> None:
        self._conn, self._tally = conn, tally

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        text = " ".join(sql.split())
        self._tally.statements.append(text)
        t0 = time.perf_counter_ns()
        try:
            cur = self._conn.execute(sql, params)
        finally:
            dt = time.perf_counter_ns() - t0
            self._tally.driver_ns += dt
            if text.upper().startswith("COMMIT"):
                self._tally.commit_ns += dt
        return _Cursor(cur, self._tally)

    def _end(self, name: str) -> None:
        self._tally.statements.append(f"{name.upper()}()")
        t0 = time.perf_counter_ns()
        try:
            getattr(self._conn, name)()
        finally:
            dt = time.perf_counter_ns() - t0
            self._tally.driver_ns += dt
            if name == "commit":
                self._tally.commit_ns += dt

    def commit(self) -> None:
        self._end("commit")

    def rollback(self) -> None:
        self._end("rollback")


def run(workdir: Path, *, quick: bool, scale: int, pg_url: str) -> None:
    """Build the data set once per backend, then print the four views for each."""
    calls = QUICK_CALLS if quick else CALLS
    label = _sqldata.scale_label(scale)
    targets: list[Target] = [
        _sqldata.SqliteTarget(workdir / f"profile-{label}.sqlite"),
        _sqldata.PostgresTarget(pg_url, _sqldata.pg_schema(f"profile_{label}")),
    ]
    try:
        built = _sqldata.build(targets, scale, workdir)
        for t in targets:
            print(f"\n== profile: {t.name} store at {scale:,} records (built in {built.describe()})")
            if t.skip_reason is not None:
                print(f"   skipped: {t.skip_reason}")
                continue
            _profile(t, built, calls)
    finally:
        for t in targets:
            t.drop()


def _operations(ledger: Ledger, built: _sqldata.Built) -> dict[str, Callable[[], object]]:
    layout = built.layout
    ticket, run = layout.target_ticket, layout.target_run
    runs = layout.write_runs()
    pending: list[tuple[str, str]] = []

    def prepare_write() -> None:
        # As in the benchmark: the next write's run is known to the Ledger (pipeline cached).
        pending.append(next(runs))
        ledger.recorded_pipeline(*pending[-1])

    def write() -> object:
        tk, rn = pending.pop()
        return ledger.write(tk, rn, "implement", _data.IMPLEMENT, **_data.write_kwargs())

    ops: dict[str, Callable[[], object]] = {
        "write": write,
        "read": lambda: ledger.read(ticket, run, "implement"),
        "status": lambda: ledger.status(ticket, run),
        "list": lambda: ledger.list(ticket),
    }
    ops["write"].prepare = prepare_write  # type: ignore[attr-defined]
    return ops


def _prepare(fn: Callable[[], object]) -> None:
    prep = getattr(fn, "prepare", None)
    if prep is not None:
        prep()


def _profile(t: Target, built: _sqldata.Built, calls: dict[str, int]) -> None:
    store = t.open_store()
    tally = _Tally()
    real = store.conn
    store.session.conn = _Conn(real, tally)  # a diagnostic wrapper, removed below
    ledger = Ledger(store)
    ops = _operations(ledger, built)
    traces: dict[str, list[str]] = {}
    try:
        # Warm: the Ledger's caches (a run's pipeline) and the driver's statement caches.
        for name in OPS:
            for _ in range(3):
                _prepare(ops[name])
                ops[name]()
        print("   1. one operation, medians: total; statements; time inside the driver (of it")
        print("      COMMIT); the rest is Python (phaselog + driver wrappers)")
        print(f"   {'operation':<10} {'total':>10} {'stmts':>6} {'driver':>10} {'COMMIT':>10} {'Python':>10} {'n':>5}")
        for name in OPS:
            totals, drivers, commits, counts = [], [], [], []
            for _ in range(calls[name]):
                _prepare(ops[name])
                tally.reset()
                t0 = time.perf_counter_ns()
                ops[name]()
                totals.append(time.perf_counter_ns() - t0)
                drivers.append(tally.driver_ns)
                commits.append(tally.commit_ns)
                counts.append(len(tally.statements))
            traces[name] = list(tally.statements)
            total, driver = statistics.median(totals), statistics.median(drivers)
            print(
                f"   {name:<10} {fmt_time(total):>10} {statistics.median(counts):>6.0f} "
                f"{fmt_time(driver):>10} {fmt_time(statistics.median(commits)):>10} "
                f"{fmt_time(max(0.0, total - driver)):>10} {calls[name]:>5}"
            )
        print("\n   2. statements of one operation, in order")
        for name in OPS:
            print(f"   {name}: {len(traces[name])}")
            for s in traces[name]:
                print(f"      {s[:110]}")
    finally:
        store.session.conn = real
    for name in ("write", "status"):
        _cprofile(name, ops[name], calls[name])
    _plans(t, store, built)
    store.close()


def _cprofile(name: str, fn: Callable[[], object], n: int, top: int = 14) -> None:
    prof = cProfile.Profile()
    for _ in range(n):
        _prepare(fn)
        prof.enable()
        fn()
        prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    print(f"\n   3. cProfile of {name} x {n}: top {top} by own time (ms per call of {name})")
    print(f"      {'own':>8} {'cum':>8} {'calls':>7}  function")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    for (path, line, func), (_cc, nc, tt, ct, _callers) in itertools.islice(rows, top):
        where = _short(path)
        print(f"      {tt / n * 1e3:8.3f} {ct / n * 1e3:8.3f} {nc / n:7.1f}  {func} ({where}:{line})")


def _short(path: str) -> str:
    for marker in ("/src/", "/site-packages/", "/lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


PLANNED = {
    "attempts": "SELECT phase_ordinal, attempt, phase, status FROM phaselog_checkpoints "
    "WHERE ticket_id = ? AND run_id = ? ORDER BY phase_ordinal, attempt",
    "get": "SELECT phase, status, body FROM phaselog_checkpoints WHERE ticket_id = ? AND "
    "run_id = ? AND phase_ordinal = ? AND attempt = ?",
    "append check": "SELECT MAX(attempt), MAX(CASE WHEN attempt = ? THEN content_hash END) FROM "
    "phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ?",
    "list": "SELECT run_id, phase_ordinal, phase, attempt, status, body FROM phaselog_checkpoints "
    "WHERE ticket_id = ? ORDER BY run_id, phase_ordinal, attempt",
    "entries": "SELECT name, body FROM phaselog_entries WHERE kind = ? AND ticket_id = ? AND run_id = ? ORDER BY name",
}


def _plans(t: Target, store: Any, built: _sqldata.Built) -> None:
    layout = built.layout
    tk, rn = layout.target_ticket, layout.target_run
    params = {
        "attempts": (tk, rn),
        "get": (tk, rn, 1, 2),
        "append check": (3, tk, rn, 1),
        "list": (tk,),
        "entries": ("progress", tk, rn),
    }
    print(f"\n   4. query plans at {layout.records:,} records")
    explain = "EXPLAIN QUERY PLAN " if t.key == "sqlite" else "EXPLAIN "
    for name, sql in PLANNED.items():
        rows = store.conn.execute(t.placeholder(explain + sql), params[name]).fetchall()
        plan = [str(r[-1]) if t.key == "sqlite" else str(r[0]) for r in rows]
        print(f"   {name}: " + " | ".join(p.strip() for p in plan)[:160])
