"""[runner] The runner's cost per no-op phase, beside LangGraph's per node and DBOS's per step.

One sample is a whole run of a fresh pipeline of ``PHASES`` no-op phases; figures are per phase
(the sample divided by ``PHASES``), so the run's start (lease, plan) and end (release) are shared
out over its phases, as they are in real use.

- ``runner_files`` / ``runner_sqlite``: ``pipe.run`` of a fresh run (phaselog's runner: lease,
  explain, one fenced checkpoint per phase, release).
- ``write_files`` / ``write_sqlite`` (baselines): ``Ledger.write`` of the same checkpoints, one per
  phase, into a fresh run — "one checkpoint write" per phase, with no runner around it.
- ``langgraph_node``: a LangGraph ``StateGraph`` of ``PHASES`` no-op nodes in a chain with
  ``SqliteSaver`` (WAL, ``synchronous=FULL``, as phaselog's SQLite store), ``durability="sync"``.
- ``dbos_step``: a DBOS workflow of ``PHASES`` no-op steps on a SQLite system database (DBOS's
  own defaults), in this process.

Goals: runner_sqlite ≤ dbos_step / 4 (issue 22; issue 11 had asked for / 8); runner_sqlite ≤
langgraph_node and runner_files ≤ 1.3 x write_files (issue 11). Timed in rounds (``run_rounds``).
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

from bench._timing import BASELINE, REFERENCE, SUBJECT, Contestant, Section, run_rounds, summarise

PHASES = 10


def _pipeline() -> Any:
    import phaselog

    names = [f"n{i}" for i in range(1, PHASES + 1)]
    pipe = phaselog.pipeline("bench-noop", phases=names)
    for name in names:
        pipe.phase(name)(lambda ctx: None)
    return pipe


def _langgraph(workdir: Path) -> tuple[Contestant | None, str, Any]:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None, "LangGraph: not installed (pip install -e '.[bench]'); skipped", None
    from typing import TypedDict

    class State(TypedDict):
        x: int

    graph = StateGraph(State)
    prev = START
    for i in range(PHASES):
        graph.add_node(f"n{i}", lambda s: {"x": s["x"] + 1})
        graph.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    graph.add_edge(prev, END)
    conn = sqlite3.connect(workdir / "langgraph.sqlite", check_same_thread=False)
    default_sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    saver = SqliteSaver(conn)
    saver.setup()
    app = graph.compile(checkpointer=saver)

    def invoke(thread: str) -> None:
        app.invoke({"x": 0}, {"configurable": {"thread_id": thread}}, durability="sync")

    note = f"LangGraph: SqliteSaver, WAL, synchronous=FULL (its default was {default_sync}), durability='sync'"
    label = f"LangGraph StateGraph, {PHASES} no-op nodes, per node"
    return Contestant("langgraph_node", label, REFERENCE, invoke, lambda: str(uuid.uuid4())), note, conn


def _dbos(workdir: Path) -> tuple[Contestant | None, str, Any]:
    try:
        from dbos import DBOS
    except ImportError:
        return None, "DBOS: not installed (pip install -e '.[bench]'); skipped", None
    import logging

    dbos = DBOS(
        config={
            "name": "phaselog-bench",
            "system_database_url": f"sqlite:///{workdir / 'dbos.sqlite'}",
            "run_admin_server": False,
            "log_level": "WARNING",
        }
    )
    logging.getLogger("dbos").setLevel(logging.WARNING)

    @DBOS.step()
    def noop_step(i: int) -> int:
        return i

    @DBOS.workflow()
    def workflow() -> None:
        for i in range(PHASES):
            noop_step(i)

    DBOS.launch()
    engine = dbos._sys_db.engine if hasattr(dbos, "_sys_db") else None
    sync = "?"
    if engine is not None:
        with engine.connect() as conn:
            sync = conn.exec_driver_sql("PRAGMA synchronous").fetchone()[0]
            journal = conn.exec_driver_sql("PRAGMA journal_mode").fetchone()[0]
            sync = f"journal_mode={journal}, synchronous={sync}"
    note = f"DBOS {_version('dbos')}: SQLite system database with its own settings ({sync})"
    label = f"DBOS workflow, {PHASES} no-op steps, per step"
    return Contestant("dbos_step", label, REFERENCE, lambda _: workflow()), note, DBOS


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def run(workdir: Path, *, rounds: int, ops: int = 12, warmup_ops: int = 2, progress: Any = None) -> Section:
    """Time the runner per no-op phase against one checkpoint write, LangGraph and DBOS."""
    import phaselog

    pipe = _pipeline()
    pl = pipe.pipeline
    folder = workdir / "runner-work"
    folder.mkdir()
    files = phaselog.open(workdir / "runner-files")
    sqlite = phaselog.open(f"sqlite:///{workdir / 'runner.sqlite'}")

    def runner(ledger: Any) -> Any:
        def go(run_id: str) -> None:
            pipe.run("BENCH", run_id, store=ledger, workdir=folder, handle_signals=False)

        return go

    def writes(ledger: Any) -> Any:
        def go(run_id: str) -> None:
            for ph in pl.phases:
                ledger.write("BENCH", run_id, ph.name, {}, pipeline=pl)

        return go

    def fresh() -> str:
        return str(uuid.uuid4())

    per = f"{PHASES} no-op phases, per phase"
    contestants = [
        Contestant("runner_files", f"pipe.run, files store, {per}", SUBJECT, runner(files), fresh),
        Contestant("write_files", f"Ledger.write per phase, files store, {per}", BASELINE, writes(files), fresh),
        Contestant("runner_sqlite", f"pipe.run, SQLite store, {per}", SUBJECT, runner(sqlite), fresh),
        Contestant("write_sqlite", f"Ledger.write per phase, SQLite store, {per}", BASELINE, writes(sqlite), fresh),
    ]
    notes = [
        f"{rounds} rounds x {ops} runs per contestant (after {warmup_ops} warm-up runs), interleaved run by run",
        f"one sample = a fresh run of {PHASES} no-op phases; figures are per phase (sample / {PHASES})",
        "phaselog SQLite store: WAL, synchronous=FULL; files store: fsync per record",
    ]
    lg, lg_note, lg_conn = _langgraph(workdir)
    notes.append(lg_note)
    if lg is not None:
        contestants.append(lg)
    db, db_note, dbos = _dbos(workdir)
    notes.append(db_note)
    if db is not None:
        contestants.append(db)
    section = Section("runner", f"[runner] runner overhead per no-op phase ({PHASES}-phase runs)", notes)
    try:
        run_rounds(contestants, rounds=rounds, ops=ops, warmup_ops=warmup_ops, progress=progress)
        for c in contestants:
            c.samples_ns = [s / PHASES for s in c.samples_ns]
            c.rounds_ns = [[s / PHASES for s in r] for r in c.rounds_ns]
        section.stats = [summarise(c) for c in contestants]
        section.ratio("runner_files", "write_files", goal=1.3, note="the runner around one checkpoint write")
        section.ratio("runner_sqlite", "write_sqlite", note="the runner around one checkpoint write")
        if lg is not None:
            section.ratio("runner_sqlite", "langgraph_node", goal=1.0)
        if db is not None:
            section.ratio("runner_sqlite", "dbos_step", goal=0.25, note="issue 22")
    finally:
        files.close()
        sqlite.close()
        if lg_conn is not None:
            lg_conn.close()
        if dbos is not None:
            dbos.destroy()
    return section
