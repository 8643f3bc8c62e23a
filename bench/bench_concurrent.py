"""[7] Concurrent writers: 8 processes appending to one SQLite store, total throughput.

Each round starts 8 writer processes (fork) behind a barrier; each appends ``per_writer``
checkpoints to a run of its own (phaselog) or a thread of its own (LangGraph's SqliteSaver), both
with WAL + synchronous=FULL on the same kind of file. A sample is the round's wall time divided by
the writes it made (time per write, all writers together). Goal: phaselog's throughput >= 1.5x
LangGraph's with 8 writers.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import sqlite3
import time
from pathlib import Path
from typing import Any

import phaselog
from bench import _data
from bench._timing import REFERENCE, SUBJECT, Contestant, Section, skipped_stat, summarise
from bench.bench_api import RunWrites, ThreadPuts

WRITERS = 8
GOAL = 1.5


def _phaselog_writer(url: str, label: str, n: int, barrier: Any, seeds: Any) -> None:
    ledger = phaselog.open(url)
    try:
        writes = RunWrites(ledger, f"BENCH-7-{label}")  # 5-phase runs, a fresh Run per run
        writes(writes.prepare())  # the connection and the first run exist before timing
        barrier.wait()
        for _ in range(n):
            writes(writes.prepare())
    finally:
        ledger.close()


def _langgraph_writer(path: str, label: str, n: int, barrier: Any, seeds: Any) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False, timeout=60)
    conn.execute("PRAGMA synchronous=FULL")
    saver = SqliteSaver(conn)
    puts = ThreadPuts(saver, seeds)  # the same seed documents, 5 puts per thread
    puts(puts.prepare())  # exists before timing
    barrier.wait()
    for _ in range(n):
        puts(puts.prepare())
    conn.close()


def _round(target: Any, args: tuple[Any, ...], labels: list[str], n: int, seeds: Any) -> float:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(WRITERS + 1)
    procs = [ctx.Process(target=target, args=(*args, lbl, n, barrier, seeds)) for lbl in labels]
    for p in procs:
        p.start()
    barrier.wait()
    t0 = time.perf_counter_ns()
    for p in procs:
        p.join()
    dt = time.perf_counter_ns() - t0
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        raise RuntimeError(f"a writer failed (exit codes {bad})")
    return dt / (WRITERS * n)


def run(workdir: Path, *, rounds: int, per_writer: int = 50, progress: Any = None) -> Section:
    """Alternate phaselog and LangGraph rounds; report time per write and the throughput ratio."""
    pl_url = f"sqlite:///{workdir / 'concurrent-phaselog.db'}"
    lg_path = str(workdir / "concurrent-langgraph.db")
    with phaselog.open(pl_url) as ledger:
        results = [
            ledger.run("BENCH-7-SAMPLE", _data.run_id("sample")).write(p, _data.PAYLOADS[p], **_data.write_kwargs())
            for p in _data.PHASES
        ]
    seeds = [r.record.seed_dict() for r in results]
    lg_skip = ""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(lg_path, check_same_thread=False)
        SqliteSaver(conn).setup()
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
    except ImportError as exc:
        lg_skip = f"{exc.name} not installed; pip install -e '.[bench]'"
    pl = Contestant("writers8", f"{WRITERS} processes x Ledger.write (SQLite)", SUBJECT, lambda _: None)
    lg = Contestant("lg_writers8", f"{WRITERS} processes x SqliteSaver.put", REFERENCE, lambda _: None)
    for i in range(rounds + 1):
        labels = [f"c{i}-{w}" for w in range(WRITERS)]
        order = [(pl, _phaselog_writer, (pl_url,))]
        if not lg_skip:
            order.append((lg, _langgraph_writer, (lg_path,)))
        if i % 2:
            order.reverse()
        for c, target, args in order:
            sample = _round(target, args, labels, per_writer, seeds)
            if i:  # the first round warms up
                c.samples_ns.append(sample)
                c.rounds_ns.append([sample])  # one sample a round: the ratio is per round
        if progress is not None:
            progress(f"round {i}/{rounds}")
    section = Section(
        "concurrent",
        f"[7] {WRITERS} concurrent writers on one SQLite store: time per write (all writers together)",
        [
            f"{rounds} rounds alternating; each round {WRITERS} forked processes x {per_writer} writes, "
            "5-phase runs (a fresh Run per run) / threads of 5 puts of the same seeds, WAL + "
            "synchronous=FULL on both sides",
        ],
        show_rate=True,
    )
    section.stats = [summarise(pl), summarise(lg) if not lg_skip else skipped_stat("lg_writers8", lg_skip, REFERENCE)]
    section.speedup("writers8", "lg_writers8", goal=GOAL, note="total throughput, 8 writers")
    with contextlib.suppress(OSError):
        Path(lg_path).unlink()
    return section
