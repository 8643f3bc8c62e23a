"""``--profile``: where a write's, a read's and a status's time goes, on the user's path.

The same calls as ``bench_api`` (``phaselog.open(url)``, a fresh ``Run`` per run, 5-phase runs of
ticket-pipeline, each record read once on a handle that did not write it), on SQLite and on the
files store, each run under cProfile. Printed per operation: the unprofiled median, the SQL
statements per call (SQLite, counted with the connection's trace callback when the store's
connection can be found), and cProfile's top functions by own time, in µs per call. cProfile
inflates Python-heavy parts: read it for *where*, the median for *how much*.
"""

from __future__ import annotations

import cProfile
import pstats
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import phaselog
from bench import _data
from bench._timing import fmt_time
from bench.bench_api import PHASES, READ_PHASE, RunWrites, on_tmpfs, ticket_of, write_run

TOP = 14


def _connection(ledger: Any) -> sqlite3.Connection | None:
    """The SQLite store's connection, if it can be found (for the statement count only)."""
    try:
        raw = ledger.store.conn.raw
    except Exception:  # another store, or the connection moved: no statement count
        return None
    return raw if isinstance(raw, sqlite3.Connection) else None


def _profile(title: str, calls: int, call: Callable[[int], object], conn: sqlite3.Connection | None) -> None:
    # Unprofiled first (the median), then the statements of a few calls, then cProfile.
    times = []
    half = calls // 2
    for i in range(half):
        t0 = time.perf_counter_ns()
        call(i)
        times.append(time.perf_counter_ns() - t0)
    statements: list[str] = []
    if conn is not None:
        conn.set_trace_callback(statements.append)
        call(half)
        conn.set_trace_callback(None)
    prof = cProfile.Profile()
    start = half + 1
    prof.enable()
    for i in range(start, calls):
        call(i)
    prof.disable()
    n = calls - start
    print(f"\n-- {title}: median {fmt_time(statistics.median(times))} unprofiled ({half} calls), cProfile of {n} calls")
    if conn is not None:
        print(f"   SQL statements in one call: {len(statements)}")
        for s in statements:
            print(f"     {' '.join(s.split())[:150]}")
    stats = pstats.Stats(prof)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:TOP]  # type: ignore[attr-defined]
    print(f"   {'own µs/call':>11} {'cum µs/call':>11} {'calls/call':>10}  function")
    for (file, line, func), (_cc, nc, tt, ct, _callers) in rows:
        where = file.split("/src/")[-1].split("site-packages/")[-1]
        print(f"   {tt / n * 1e6:>11.1f} {ct / n * 1e6:>11.1f} {nc / n:>10.1f}  {func} ({where}:{line})")


def _user_path(label: str, target: Any, build: Callable[[], list[tuple[str, str]]], calls: int) -> None:
    runs = build()
    writer = phaselog.open(target)
    reader, stater = phaselog.open(target), phaselog.open(target)
    try:
        writes = RunWrites(writer, "BENCH-P")
        wcalls = calls - calls % len(PHASES)
        _profile(
            f"{label} write (Run.write, fresh Run per 5-phase run)",
            wcalls,
            lambda _i: writes(writes.prepare()),
            _connection(writer),
        )
        _profile(
            f"{label} read (newest {READ_PHASE}, fresh Run each, each run once)",
            calls,
            lambda i: reader.run(*runs[i]).read(READ_PHASE),
            _connection(reader),
        )
        _profile(
            f"{label} status (5-phase run, fresh Run each, each run once)",
            calls,
            lambda i: stater.run(*runs[i]).status(),
            _connection(stater),
        )
    finally:
        for ledger in (writer, reader, stater):
            ledger.close()


def run(workdir: Path, *, quick: bool = False) -> None:
    """Profile the user's write, read and status on SQLite and on the files store."""
    calls = 40 if quick else 300
    print("\n== profile: where a write's, a read's and a status's time goes (the user's path, as bench_api)")
    db = workdir / "profile-api.db"

    def build_sqlite() -> list[tuple[str, str]]:
        runs = [(ticket_of("BENCH-PR", i), str(uuid.uuid4())) for i in range(calls)]
        with on_tmpfs(db) as (tmp,), phaselog.open(f"sqlite:///{tmp}") as ledger:
            for ticket, run_id in runs:
                write_run(ledger, ticket, run_id)
        return runs

    root = workdir / "profile-api-files"

    def build_files() -> list[tuple[str, str]]:
        runs = [(ticket_of("BENCH-PR", i), str(uuid.uuid4())) for i in range(calls)]
        with _data.no_fsync(), phaselog.open(root) as ledger:
            for ticket, run_id in runs:
                write_run(ledger, ticket, run_id)
        return runs

    _user_path("SQLite", f"sqlite:///{db}", build_sqlite, calls)
    _user_path("files", root, build_files, calls)
