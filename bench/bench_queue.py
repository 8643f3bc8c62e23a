"""[queue] Workers draining a queue on PostgreSQL, beside DBOS queues on the same server.

Four ``phaselog worker`` processes and four DBOS worker processes (each a DBOS executor with a
queue of worker concurrency 1) run side by side on the same PostgreSQL server, each in a schema
of its own. Every run / workflow has 3 phases / steps that do nothing but (the first) write the
time it started to a file.

- ``*_drain``: submit (enqueue) a batch of runs, wait until all are done; one sample = the batch
  time divided by its size (so 1 / median = runs per second with 4 workers).
- ``*_claim``: one run at a time with idle workers: from the moment ``submit`` (``enqueue``)
  returns to the moment the first phase (step) starts — how fast an idle worker notices. phaselog
  workers block in LISTEN (woken by the submit's NOTIFY); DBOS queues poll (interval set to 0.1 s
  here; its default is 1 s).

Both sides are waited for the same way (a query every 2 ms on the run's row), so the waiting costs
them alike. Ratios are phaselog over DBOS: below 1.00x, phaselog is faster.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._timing import BASELINE, REFERENCE, SUBJECT, Contestant, Section, run_interleaved, skipped_stat, summarise

WORKERS = 4
PHASES_PY = """
import os, time

def first(ctx):
    with open(os.path.join(os.environ["BENCH_STAMPS"], ctx.run_id), "w") as f:
        f.write(repr(time.time()))
    return {}

def noop(ctx):
    return {}
"""
MANIFEST = (
    '{"name": "benchq", "version": "1", "phases": [{"name": "one", "call": "benchq_phases:first"}, '
    '{"name": "two", "call": "benchq_phases:noop"}, {"name": "three", "call": "benchq_phases:noop"}]}'
)
DBOS_WORKER = Path(__file__).with_name("_dbos_queue_worker.py")
POLL_S = 0.002


def _wait_stamp(path: Path, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return float(path.read_text())
        if time.monotonic() > deadline:
            raise TimeoutError(f"no stamp at {path}")
        time.sleep(POLL_S)


def _wait_all(conn: Any, sql: str, ids: list[str], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while conn.execute(sql, (ids,)).fetchone()[0] < len(ids):
        if time.monotonic() > deadline:
            raise TimeoutError("the workers did not finish the batch")
        time.sleep(POLL_S)


class _Side:
    """One system under test: its worker processes, how to submit, and how to see a run done."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.procs: list[subprocess.Popen[bytes]] = []

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


class _Phaselog(_Side):
    def __init__(self, url: str, workdir: Path) -> None:
        super().__init__("phaselog")
        from phaselog.runner import queue
        from phaselog.stores import open_store

        self.queue = queue
        self.store = open_store(url, migrate=True)
        self.url = url
        pipes = workdir / "pipelines"
        pipes.mkdir(parents=True)
        (pipes / "benchq_phases.py").write_text(PHASES_PY)
        self.manifest = pipes / "benchq.json"
        self.manifest.write_text(MANIFEST)
        self.stamps = workdir / "pl-stamps"
        self.stamps.mkdir()
        env = {**os.environ, "BENCH_STAMPS": str(self.stamps)}
        env.pop("PHASELOG_STORE", None)
        bin_ = Path(sys.executable).parent / "phaselog"
        args = [str(bin_), "worker", "--store", url, "--pipelines", str(pipes), "--workdir", str(workdir), "--quiet"]
        self.procs = [
            subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(WORKERS)
        ]
        deadline = time.monotonic() + 120
        while len(queue.list_view(self.store, limit=1)["workers"]) < WORKERS:
            if time.monotonic() > deadline:
                raise TimeoutError("phaselog workers did not start")
            time.sleep(0.1)
        import psycopg

        from phaselog.stores.sql.postgres import split_url

        dsn, schema = split_url(url)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(f'SET search_path TO "{schema}"')
        self.n = 0

    def submit(self) -> str:
        self.n += 1
        view = self.queue.submit(self.store, ticket_id="BENCH", pipeline_file=self.manifest, run_id=str(uuid.uuid4()))
        run_id: str = view["run_id"]
        return run_id

    def drain(self, batch: int) -> None:
        ids = [self.submit() for _ in range(batch)]
        _wait_all(self.conn, "SELECT count(*) FROM phaselog_queue WHERE state = 'done' AND run_id = ANY(%s)", ids)

    def claim(self, out: list[float]) -> None:
        run_id = self.submit()
        t0 = time.time()
        started = _wait_stamp(self.stamps / run_id)
        out.append((started - t0) * 1e9)
        _wait_all(self.conn, "SELECT count(*) FROM phaselog_queue WHERE state = 'done' AND run_id = ANY(%s)", [run_id])

    def stop(self) -> None:
        super().stop()
        self.conn.close()
        self.store.close()


class _Dbos(_Side):
    def __init__(self, url: str, schema: str, workdir: Path) -> None:
        super().__init__("dbos")
        from dbos import DBOSClient

        self.stamps = workdir / "dbos-stamps"
        self.stamps.mkdir()
        for i in range(WORKERS):
            env = {**os.environ, "DBOS__VMID": f"bench-{i}"}
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, str(DBOS_WORKER), url, schema, str(self.stamps)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            )
        for p in self.procs:  # each prints "ready" once launched
            assert p.stdout is not None
            if p.stdout.readline().strip() != b"ready":
                raise RuntimeError("a DBOS worker did not start")
        self.client = DBOSClient(system_database_url=url, dbos_system_schema=schema)
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.schema = schema

    def submit(self) -> str:
        wf = str(uuid.uuid4())
        self.client.enqueue({"queue_name": "bench", "workflow_name": "bench_wf", "workflow_id": wf}, wf)
        return wf

    def _done_sql(self) -> str:
        table = f'"{self.schema}".workflow_status'
        return f"SELECT count(*) FROM {table} WHERE status = 'SUCCESS' AND workflow_uuid = ANY(%s)"

    def drain(self, batch: int) -> None:
        ids = [self.submit() for _ in range(batch)]
        _wait_all(self.conn, self._done_sql(), ids)

    def claim(self, out: list[float]) -> None:
        wf = self.submit()
        t0 = time.time()
        started = _wait_stamp(self.stamps / wf)
        out.append((started - t0) * 1e9)
        _wait_all(self.conn, self._done_sql(), [wf])

    def stop(self) -> None:
        super().stop()
        with contextlib.suppress(Exception):
            self.client.destroy()
        self.conn.close()


def run(
    workdir: Path,
    *,
    rounds: int,
    batch: int,
    claims: int,
    pg_url: str,
    keep: bool = False,
    progress: Any = None,
) -> Section:
    """Throughput and claim latency of 4 phaselog workers and 4 DBOS queue workers."""
    notes = [
        f"{WORKERS} worker processes per side, one run (workflow) at a time each; runs of 3 phases (steps) "
        "doing nothing but stamping the start time",
        f"drain: {batch} runs submitted then waited for, per run (1/median = runs/s); claim: submit → first "
        "phase starting, idle workers, one run at a time",
        "phaselog: LISTEN/NOTIFY wake-up (poll fallback 2 s); DBOS: queue polling every 0.1 s (default 1 s)",
        f"both on {pg_url.rsplit('@', 1)[-1]}, a schema each (dropped at the end)",
    ]
    section = Section("queue", "[queue] workers draining a PostgreSQL queue, beside DBOS queues", notes)
    try:
        import psycopg
    except ImportError:
        section.notes.append("psycopg is not installed: skipped")
        return section
    tag = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
    pl_schema, dbos_schema = f"phaselog_bench_queue_{tag}", f"dbos_bench_queue_{tag}"
    sep = "&" if "?" in pg_url else "?"
    sides: list[_Side] = []
    pl: _Phaselog | None = None
    db: _Dbos | None = None
    skipped_dbos = ""
    try:
        try:
            pl = _Phaselog(f"{pg_url}{sep}schema={pl_schema}", workdir / "queue-phaselog")
        except Exception as exc:  # no server, no psycopg: say so, as the sql benchmark does
            section.notes.append(f"skipped: PostgreSQL at {pg_url.rsplit('@', 1)[-1]}: {exc}")
            return section
        sides.append(pl)
        try:
            db = _Dbos(pg_url, dbos_schema, workdir)
            sides.append(db)
        except ImportError:
            skipped_dbos = "DBOS: not installed (pip install -e '.[bench]'); skipped"
        if progress:
            progress("workers up")
        pl_lat: list[float] = []
        db_lat: list[float] = []
        contestants = [
            Contestant(
                "phaselog_drain",
                f"phaselog, {batch} runs / {WORKERS} workers, per run",
                SUBJECT,
                lambda _: pl.drain(batch),
            ),
            Contestant(
                "phaselog_claim", "phaselog, submit → first phase (idle workers)", SUBJECT, lambda _: pl.claim(pl_lat)
            ),
        ]
        if db is not None:
            contestants += [
                Contestant(
                    "dbos_drain",
                    f"DBOS queue, {batch} workflows / {WORKERS} workers, per workflow",
                    REFERENCE,
                    lambda _: db.drain(batch),
                ),
                Contestant(
                    "dbos_claim",
                    "DBOS queue, enqueue → first step (idle workers)",
                    REFERENCE,
                    lambda _: db.claim(db_lat),
                ),
            ]
        drains = [c for c in contestants if c.key.endswith("_drain")]
        run_interleaved(drains, rounds, warmup=1, progress=progress)
        for c in drains:
            c.samples_ns = [s / batch for s in c.samples_ns]
        lats = [c for c in contestants if c.key.endswith("_claim")]
        run_interleaved(lats, claims, warmup=2, progress=progress)
        for c in lats:
            c.samples_ns = list(pl_lat if c.key.startswith("phaselog") else db_lat)[-claims:]
        section.stats = [summarise(c) for c in contestants]
        section.show_rate = True
        if db is not None:
            section.ratio("phaselog_drain", "dbos_drain", note="time per run at 4 workers (lower is faster)")
            section.ratio("phaselog_claim", "dbos_claim", note="claim latency of an idle worker")
        else:
            section.notes.append(skipped_dbos)
            section.stats += [
                skipped_stat("dbos_drain", skipped_dbos, REFERENCE),
                skipped_stat("dbos_claim", skipped_dbos, BASELINE),
            ]
    finally:
        for side in sides:
            side.stop()
        if not keep:
            with contextlib.suppress(Exception), psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{pl_schema}" CASCADE')
                conn.execute(f'DROP SCHEMA IF EXISTS "{dbos_schema}" CASCADE')
    return section
