"""Data sets for the SQL-store benchmarks: phaselog's rows and LangGraph's, 10k to 1M records.

One pass builds every database of a scale (SQLite, PostgreSQL) with the same records:

* **phaselog rows.** One run of ``LIST_RUN_SHAPE`` (8 checkpoints over the 5 phases) is written
  through the real API (``Ledger.write`` into a throwaway SQLite store), and every other run is a
  clone of it: ``Checkpoint.evolve`` with the ticket, run id and timestamps changed and the basis
  and prev_hash links re-pointed at the clone's own earlier records, so that phaselog itself
  recomputes every content hash and ``record_document`` (the store's serialiser) produces every body.
  Cloning the template's own run reproduces its rows byte for byte (checked before each build),
  and a cloned run passes ``Ledger.verify`` afterwards (checked after each build). The rows go in
  with the store's own ``INSERT`` statement, thousands per transaction.
* **LangGraph rows.** For every phaselog record, ``put`` of a checkpoint whose channel
  ``checkpoint`` holds the record's seed document (the ~1 KB checkpoint), thread_id = ticket,
  checkpoint_ns = run id, the previous checkpoint of the namespace as parent. ``put`` runs for
  real, but against a cursor that records its statements, which are then executed in batches in
  one transaction each (LangGraph's own SQL and serialisation, without a commit per record).

Both sets live in the **same database** (the same SQLite file, the same PostgreSQL schema), in
their own tables.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import _data
from phaselog.ledger.facade import Ledger
from phaselog.model.records import BasisEntry, Checkpoint
from phaselog.stores.kernel import record_document

#: Runs of 8 checkpoints per ticket: 1,000 checkpoints per ticket (the ticket that is listed).
RUNS_PER_TICKET = 125
RUN_SHAPE = _data.LIST_RUN_SHAPE
PER_RUN = len(RUN_SHAPE)
TICKET_FMT = "SQL-{:05d}"
RUN_SPACING = timedelta(seconds=10)  # the template's 8 records span 8 s; runs never overlap
BATCH_RUNS = 1_000  # runs per transaction while building (8,000 rows)

SCALES = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000}
DEFAULT_SCALES = ("10k", "100k")
QUICK_SCALES = ("10k",)

#: phaselog's checkpoint row, as ``SqlStore.append`` inserts it (``?`` placeholders).
INSERT_SQL = (
    "INSERT INTO phaselog_checkpoints (ticket_id, run_id, phase_ordinal, phase, attempt, "
    "prev_attempt, status, content_hash, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

Row = tuple[str, str, int, str, int, int, str, str, str]


def parse_scale(text: str) -> int:
    """``10k``, ``100k``, ``1m`` (or any count like ``2k``, ``250000``) → records."""
    t = text.strip().lower().replace("_", "").replace(",", "")
    mult = 1
    if t.endswith("k"):
        t, mult = t[:-1], 1_000
    elif t.endswith("m"):
        t, mult = t[:-1], 1_000_000
    if not t.isdigit():
        raise ValueError(f"not a record count: {text!r} (use 10k, 100k, 1m)")
    n = int(t) * mult
    if n < 2 * RUNS_PER_TICKET * PER_RUN:
        raise ValueError(f"{text}: at least {2 * RUNS_PER_TICKET * PER_RUN:,} records")
    return n


def scale_label(n: int) -> str:
    """10000 → ``10k``, 1000000 → ``1m``."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


# -- layout ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Which tickets and runs a data set of ``records`` checkpoints has, and which are timed."""

    records: int

    @property
    def runs(self) -> int:
        """Runs of 8 checkpoints."""
        return self.records // PER_RUN

    @property
    def tickets(self) -> int:
        """Tickets of (up to) 125 runs."""
        return -(-self.runs // RUNS_PER_TICKET)

    @property
    def target_ticket(self) -> str:
        """The ticket that is listed (a full one in the middle of the key space)."""
        return TICKET_FMT.format(self.tickets // 2 - (1 if self.tickets % 2 == 0 else 0))

    @property
    def target_run(self) -> str:
        """The run that is read and whose status is derived (in the middle of its ticket)."""
        return run_uuid(self.target_ticket, RUNS_PER_TICKET // 2)

    def all_runs(self) -> Iterator[tuple[int, str, str]]:
        """(global run index, ticket, run id) of every run, in build order."""
        for i in range(self.runs):
            ticket = TICKET_FMT.format(i // RUNS_PER_TICKET)
            yield i, ticket, run_uuid(ticket, i % RUNS_PER_TICKET)

    def write_runs(self) -> Iterator[tuple[str, str]]:
        """(ticket, run) pairs that the write benchmark appends to: every run but the target
        ticket's, cycled."""
        while True:
            for _, ticket, run in self.all_runs():
                if ticket != self.target_ticket:
                    yield ticket, run


def run_uuid(ticket: str, j: int) -> str:
    """The canonical run id of run ``j`` of ``ticket``."""
    return _data.run_id(f"{ticket}-run-{j:05d}")


# -- phaselog rows ---------------------------------------------------------------------------------
class Template:
    """One run written through ``Ledger.write``; every row of a data set is a clone of it."""

    TICKET = "SQL-TEMPLATE"

    def __init__(self, workdir: Path) -> None:
        from phaselog.stores.sql.sqlite import SqliteStore

        path = workdir / "sql-template.db"
        store = SqliteStore(path)
        try:
            ledger = Ledger(store, clock=_data.Clock())
            run = run_uuid(self.TICKET, 0)
            for phase in RUN_SHAPE:
                _data.write_phase(ledger, self.TICKET, run, phase)
            page = ledger.list(self.TICKET)
            self.records: list[Checkpoint] = [s.record for s in page.items]
            written = [
                tuple(r)
                for r in store.conn.execute(
                    "SELECT ticket_id, run_id, phase_ordinal, phase, attempt, prev_attempt, status,"
                    " content_hash, body FROM phaselog_checkpoints ORDER BY rowid"
                ).fetchall()
            ]
        finally:
            store.close()
            for p in path.parent.glob(path.name + "*"):
                p.unlink()
        assert len(self.records) == PER_RUN, len(self.records)
        cloned = [row for row, _ in self.clone(self.TICKET, run, timedelta(0))]
        if cloned != written:
            raise AssertionError("cloning the template's own run does not reproduce its rows")
        self.body_bytes = [len(r[8].encode()) for r in written]

    def clone(self, ticket: str, run: str, shift: timedelta) -> list[tuple[Row, Checkpoint]]:
        """The template run as run ``run`` of ``ticket``, ``shift`` later: rows and records."""
        hashes: dict[tuple[str, int], str] = {}
        out: list[tuple[Row, Checkpoint]] = []
        for cp in self.records:
            basis = (
                None
                if cp.basis is None
                else {k: BasisEntry(v.attempt, hashes[(k, v.attempt)]) for k, v in cp.basis.items()}
            )
            prev = hashes[(cp.phase, cp.attempt_number - 1)] if cp.attempt_number > 1 else None
            new = cp.evolve(
                ticket_id=ticket,
                run_id=run,
                timestamp_utc=cp.timestamp_utc + shift,
                basis=basis,
                prev_hash=prev,
            )
            hashes[(new.phase, new.attempt_number)] = new.content_hash
            body = record_document(new, None).decode()
            row: Row = (
                ticket,
                run,
                new.phase_ordinal,
                new.phase,
                new.attempt_number,
                new.attempt_number - 1,
                new.status,
                new.content_hash,
                body,
            )
            out.append((row, new))
        return out

    def next_implement(self, ticket: str, run: str, attempt: int) -> tuple[Row, Checkpoint]:
        """A row like the one Ledger.write appends for implement attempt ``attempt`` (prev_hash
        and timestamp are stand-ins): what the raw-insert baseline writes."""
        base = self.records[1]  # implement, attempt 2
        cp = base.evolve(
            ticket_id=ticket,
            run_id=run,
            attempt_number=attempt,
            timestamp_utc=datetime.now(UTC),
            prev_hash=base.content_hash,
        )
        body = record_document(cp, None).decode()
        row: Row = (
            ticket,
            run,
            1,
            cp.phase,
            attempt,
            attempt - 1,
            cp.status,
            cp.content_hash,
            body,
        )
        return row, cp


# -- LangGraph rows --------------------------------------------------------------------------------
class _Recorder:
    """A cursor that records statements instead of executing them (for batched builds)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = None) -> _Recorder:
        self.calls.append((sql, params))
        return self

    def executemany(self, sql: str, seq: Any) -> None:
        for params in seq:
            self.calls.append((sql, params))

    def grouped(self) -> list[tuple[str, list[Any]]]:
        """The recorded parameters by statement, in first-use order (for executemany). Only the
        order within a statement is kept: LangGraph's tables have no foreign keys."""
        out: dict[str, list[Any]] = {}
        for sql, params in self.calls:
            out.setdefault(sql, []).append(params)
        self.calls = []
        return list(out.items())


def lg_checkpoint(saver: Any, seed: dict[str, Any], version: str | None, step: int) -> Any:
    """A LangGraph checkpoint carrying ``seed`` in channel ``checkpoint``; returns (cp, version)."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    new_version = saver.get_next_version(version, None)
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=step))
    cp["ts"] = seed["timestamp_utc"]
    cp["channel_values"] = {"checkpoint": seed}
    cp["channel_versions"] = {"checkpoint": new_version}
    cp["versions_seen"] = {"checkpoint": {"checkpoint": new_version}}
    return cp, new_version


def lg_config(ticket: str, run: str, parent: str | None = None) -> dict[str, Any]:
    """thread_id = ticket, checkpoint_ns = run (and the parent checkpoint, when there is one)."""
    conf: dict[str, Any] = {"thread_id": ticket, "checkpoint_ns": run}
    if parent is not None:
        conf["checkpoint_id"] = parent
    return {"configurable": conf}


class Parent:
    """The parent of the next ``put``: its config and its channel version (a CheckpointTuple
    read back from the saver has the same two attributes)."""

    def __init__(self, config: dict[str, Any], version: str) -> None:
        self.config = config
        self.checkpoint = {"channel_versions": {"checkpoint": version}}


def lg_put(saver: Any, ticket: str, run: str, seed: dict[str, Any], *, parent: Any, step: int) -> Parent:
    """``put`` the next checkpoint of (ticket, run) after ``parent`` (None for the first), as
    LangGraph's loop does: parent's checkpoint_id in the config, the channel's version bumped."""
    version = parent.checkpoint["channel_versions"]["checkpoint"] if parent else None
    parent_id = parent.config["configurable"]["checkpoint_id"] if parent else None
    cp, new_version = lg_checkpoint(saver, seed, version, step)
    meta = {"source": "loop", "step": step, "parents": {}}
    cfg = saver.put(lg_config(ticket, run, parent_id), cp, meta, {"checkpoint": new_version})
    return Parent(cfg, new_version)


@contextlib.contextmanager
def recording(saver: Any) -> Iterator[_Recorder]:
    """Make ``saver``'s put() record its statements (its SQL, its serialisation) for batching."""
    rec = _Recorder()
    names = ("cursor", "_cursor")
    for name in names:
        if hasattr(saver, name):
            setattr(saver, name, lambda *a, **k: contextlib.nullcontext(rec))
    try:
        yield rec
    finally:
        for name in names:
            saver.__dict__.pop(name, None)


# -- databases -------------------------------------------------------------------------------------
@dataclass
class Target:
    """One database under test: phaselog's store and LangGraph's saver in it."""

    key: str
    name: str
    url: str
    lg_name: str
    skip_reason: str | None = None
    lg_skip: str | None = None
    saver: Any = None
    lg_conn: Any = None
    notes: list[str] = field(default_factory=list)

    def placeholder(self, sql: str) -> str:
        """``?`` placeholders as this database spells them."""
        return sql

    # What each database does its own way.
    def open_store(self) -> Any:
        """phaselog's store over this database (migrating it)."""
        raise NotImplementedError

    def raw_connect(self) -> Any:
        """A plain driver connection with the store's durability settings."""
        raise NotImplementedError

    def raw_insert(self, conn: Any, row: Row) -> None:
        """INSERT + COMMIT of one phaselog row, nothing else."""
        raise NotImplementedError

    def open_saver(self) -> None:
        """Set ``saver`` and ``lg_conn`` (or ``lg_skip``)."""
        raise NotImplementedError

    def begin_bulk(self) -> None:
        """Open the bulk-insert connection."""
        raise NotImplementedError

    def insert_rows(self, rows: list[Row]) -> None:
        """Insert phaselog rows in one transaction."""
        raise NotImplementedError

    def lg_flush(self, rec: _Recorder) -> None:
        """Execute LangGraph's recorded statements in one transaction."""
        raise NotImplementedError

    def finish(self) -> None:
        """After the build: statistics, WAL, close the bulk connection."""
        raise NotImplementedError

    def size(self) -> str:
        """The data's size on disk."""
        raise NotImplementedError

    def where(self) -> str:
        """Where the database lives, for the notes."""
        return self.url

    def durability(self, store: Any, raw: Any) -> str:
        """Durability settings of phaselog's and the raw connection ('' if not per connection)."""
        return ""

    def drop(self) -> None:
        """Remove the database."""
        self.close()

    def close(self) -> None:
        """Close LangGraph's connection."""
        if self.lg_conn is not None:
            with contextlib.suppress(Exception):
                self.lg_conn.close()
            self.lg_conn = None
            self.saver = None


class SqliteTarget(Target):
    """A SQLite database file (phaselog's settings: WAL, synchronous=FULL)."""

    def __init__(self, path: Path) -> None:
        super().__init__("sqlite", "SQLite", f"sqlite:///{path}", "SqliteSaver")
        self.path = path
        self._bulk: sqlite3.Connection | None = None

    def open_store(self) -> Any:
        from phaselog.stores.sql.sqlite import SqliteStore

        return SqliteStore(self.path)

    def raw_connect(self) -> sqlite3.Connection:
        """A plain sqlite3 connection with the store's durability: WAL, synchronous=FULL."""
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def raw_insert(self, conn: sqlite3.Connection, row: Row) -> None:
        """INSERT + COMMIT (autocommit: one statement, one transaction)."""
        conn.execute(INSERT_SQL, row)

    def where(self) -> str:
        return f"{self.url} on {_data.filesystem_of(self.path, options=False)}"

    def durability(self, store: Any, raw: Any) -> str:
        return f"durability: phaselog {self.synchronous(store.conn.raw)}; raw sqlite3 {self.synchronous(raw)}"

    def synchronous(self, conn: sqlite3.Connection) -> str:
        """PRAGMA synchronous of a connection, spelled out."""
        val = conn.execute("PRAGMA synchronous").fetchone()[0]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        return f"journal_mode={mode}, synchronous={val} ({_SYNC_NAMES.get(val, '?')})"

    def open_saver(self) -> None:
        """LangGraph's SqliteSaver on its own connection to the same file."""
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError as exc:
            self.lg_skip = f"{exc.name} not installed; pip install -e '.[bench]'"
            return
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        default = conn.execute("PRAGMA synchronous").fetchone()[0]
        saver = SqliteSaver(conn)
        saver.setup()
        conn.execute("PRAGMA synchronous=FULL")
        self.notes.append(
            f"LangGraph SqliteSaver: own connection, {self.synchronous(conn)} "
            f"(its default is {default}: set FULL explicitly, same durability as phaselog)"
        )
        self.saver, self.lg_conn = saver, conn

    def begin_bulk(self) -> None:
        """Open the connection that bulk-inserts phaselog rows."""
        self._bulk = self.raw_connect()

    def insert_rows(self, rows: list[Row]) -> None:
        """phaselog rows, one transaction."""
        assert self._bulk is not None
        self._bulk.execute("BEGIN IMMEDIATE")
        self._bulk.executemany(INSERT_SQL, rows)
        self._bulk.execute("COMMIT")

    def lg_flush(self, rec: _Recorder) -> None:
        """LangGraph's recorded statements, one transaction."""
        conn = self.lg_conn
        conn.execute("BEGIN IMMEDIATE")
        for sql, params in rec.grouped():
            conn.executemany(sql, params)
        conn.execute("COMMIT")

    def finish(self) -> None:
        """ANALYZE, and fold the WAL into the database so timing starts with an empty WAL."""
        assert self._bulk is not None
        self._bulk.execute("ANALYZE")
        self._bulk.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._bulk.close()
        self._bulk = None

    def size(self) -> str:
        """The database's size on disk."""
        return f"{self.path.stat().st_size / 1e6:,.0f} MB"

    def drop(self) -> None:
        """Delete the database files."""
        self.close()
        for p in self.path.parent.glob(self.path.name + "*"):
            with contextlib.suppress(OSError):
                p.unlink()


_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


class PostgresTarget(Target):
    """A schema of its own in a PostgreSQL database (dropped afterwards)."""

    def __init__(self, base_url: str, schema: str) -> None:
        sep = "&" if "?" in base_url else "?"
        super().__init__("postgres", "PostgreSQL", f"{base_url}{sep}schema={schema}", "PostgresSaver")
        self.base_url, self.schema = base_url, schema
        self._bulk: Any = None
        try:
            import psycopg
        except ImportError:
            self.skip_reason = "psycopg 3 is not installed (pip install 'phaselog[postgres]')"
            return
        self.psycopg = psycopg
        try:
            with psycopg.connect(base_url, connect_timeout=5, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                conn.execute(f'CREATE SCHEMA "{schema}"')
                self.server = conn.execute("SHOW server_version").fetchone()[0]
                self.sync_commit = conn.execute("SHOW synchronous_commit").fetchone()[0]
                self.fsync = conn.execute("SHOW fsync").fetchone()[0]
        except Exception as exc:  # any failure means: not reachable
            why = " ".join(str(exc).split())[:200]
            self.skip_reason = f"PostgreSQL at {base_url} is not reachable: {why}"

    def placeholder(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def open_store(self) -> Any:
        from phaselog.stores.sql.postgres import PostgresStore

        return PostgresStore(self.url)

    def _connect(self, **kw: Any) -> Any:
        return self.psycopg.connect(self.base_url, options=f"-c search_path={self.schema}", **kw)

    def raw_connect(self) -> Any:
        """A plain psycopg connection in autocommit mode (INSERT = INSERT + COMMIT)."""
        return self._connect(autocommit=True)

    def raw_insert(self, conn: Any, row: Row) -> None:
        """INSERT + COMMIT in one round trip (autocommit)."""
        conn.execute(self.placeholder(INSERT_SQL), row)

    def open_saver(self) -> None:
        """LangGraph's PostgresSaver, connected as ``PostgresSaver.from_conn_string`` does."""
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row
        except ImportError as exc:
            self.lg_skip = f"{exc.name} not installed; pip install -e '.[bench]'"
            return
        conn = self._connect(autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = PostgresSaver(conn)
        saver.setup()
        self.notes.append(
            f"LangGraph PostgresSaver: own connection as from_conn_string makes it (autocommit, "
            f"prepare_threshold=0); setup() run; server {self.server}, "
            f"synchronous_commit={self.sync_commit}, fsync={self.fsync} for both"
        )
        self.saver, self.lg_conn = saver, conn

    def begin_bulk(self) -> None:
        """Open the connection that bulk-inserts phaselog rows."""
        self._bulk = self._connect(autocommit=False)

    def insert_rows(self, rows: list[Row]) -> None:
        """phaselog rows, one transaction (psycopg's executemany pipelines them)."""
        with self._bulk.cursor() as cur:
            cur.executemany(self.placeholder(INSERT_SQL), rows)
        self._bulk.commit()

    def lg_flush(self, rec: _Recorder) -> None:
        """LangGraph's recorded statements, one transaction, binary cursor as it uses."""
        conn = self.lg_conn
        with conn.transaction(), conn.cursor(binary=True) as cur:
            for sql, params in rec.grouped():
                cur.executemany(sql, params)

    def finish(self) -> None:
        """VACUUM ANALYZE every table (what autovacuum would have done by now)."""
        self._bulk.close()
        with self._connect(autocommit=True) as conn:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s", (self.schema,)
                ).fetchall()
            ]
            for t in tables:
                conn.execute(f'VACUUM ANALYZE "{self.schema}"."{t}"')
        self._bulk = None

    def size(self) -> str:
        """The schema's size (tables, indexes, TOAST)."""
        with self._connect(autocommit=True) as conn:
            row = conn.execute(
                "SELECT COALESCE(SUM(pg_total_relation_size(format('%%I.%%I', schemaname, "
                "tablename))), 0) FROM pg_tables WHERE schemaname = %s",
                (self.schema,),
            ).fetchone()
        return f"{int(row[0]) / 1e6:,.0f} MB"

    def drop(self) -> None:
        """Drop the schema."""
        self.close()
        if self.skip_reason is None:
            with (
                contextlib.suppress(Exception),
                self.psycopg.connect(self.base_url, autocommit=True) as conn,
            ):
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


# -- building --------------------------------------------------------------------------------------
@dataclass
class Built:
    """What a build did, and how long each part took (seconds)."""

    layout: Layout
    template: Template
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, part: str, dt: float) -> None:
        """Account ``dt`` seconds to ``part``."""
        self.seconds[part] = self.seconds.get(part, 0.0) + dt

    def describe(self) -> str:
        """``41.2 s (phaselog rows 18.0 s, …)``."""
        total = sum(self.seconds.values())
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())
        return f"{total:.1f} s ({parts})"


def build(
    targets: list[Target],
    records: int,
    workdir: Path,
    progress: Callable[[str], None] | None = None,
) -> Built:
    """Fill every target with the same ``records`` checkpoints (phaselog's and LangGraph's)."""
    layout = Layout(records)
    t0 = time.perf_counter()
    template = Template(workdir)
    built = Built(layout, template)
    built.add("template", time.perf_counter() - t0)
    live = [t for t in targets if t.skip_reason is None]
    for t in live:
        store = t.open_store()
        store.migrate()  # creates phaselog's schema (opening a store never does), then closes
        store.close()
        t.open_saver()
        t.begin_bulk()
    savers = [t for t in live if t.saver is not None]
    rows: list[Row] = []
    recs = {t.key: _Recorder() for t in savers}
    clock = time.perf_counter
    step = 0
    next_report = clock() + 15
    for i, ticket, run in layout.all_runs():
        a = clock()
        cloned = template.clone(ticket, run, RUN_SPACING * i)
        b = clock()
        built.add("phaselog rows (clone + hash)", b - a)
        rows.extend(r for r, _ in cloned)
        for t in savers:
            a = clock()
            parent = None
            with recording(t.saver) as rec:
                for _, cp in cloned:
                    step += 1
                    parent = lg_put(t.saver, ticket, run, cp.seed_dict(), parent=parent, step=step)
                recs[t.key].calls.extend(rec.calls)
            built.add(f"LangGraph {t.lg_name}.put (recorded)", clock() - a)
        if (i + 1) % BATCH_RUNS == 0 or i + 1 == layout.runs:
            for t in live:
                a = clock()
                t.insert_rows(rows)
                built.add(f"{t.name} inserts (phaselog)", clock() - a)
            for t in savers:
                a = clock()
                t.lg_flush(recs[t.key])
                built.add(f"{t.name} inserts (LangGraph)", clock() - a)
            rows = []
            if progress is not None and clock() > next_report:
                progress(f"building {records:,} records: {(i + 1) * PER_RUN:,} done")
                next_report = clock() + 15
    for t in live:
        a = clock()
        t.finish()
        built.add("ANALYZE / WAL checkpoint", clock() - a)
    return built


def check(target: Target, built: Built) -> list[str]:
    """Read the built data back through both APIs; return facts for the notes (raises if wrong)."""
    layout = built.layout
    store = target.open_store()
    try:
        ledger = Ledger(store)
        page = ledger.list(layout.target_ticket)
        assert len(page.items) == RUNS_PER_TICKET * PER_RUN, len(page.items)
        assert not page.damaged, page.damaged[:1]
        report = ledger.verify(layout.target_ticket, layout.target_run)
        if not report.ok or report.checked != PER_RUN:
            raise AssertionError(f"a cloned run does not verify: {report}")
        st = ledger.status(layout.target_ticket, layout.target_run)
        assert st.next_phase is None or isinstance(st.next_phase, str)
    finally:
        store.close()
    facts = [
        f"check: Ledger.list of {layout.target_ticket} = {len(page.items):,} records, none "
        "damaged; "
        f"Ledger.verify of a cloned run: ok ({report.checked} records)"
    ]
    if target.saver is not None:
        tup = target.saver.get_tuple(lg_config(layout.target_ticket, layout.target_run))
        seed = tup.checkpoint["channel_values"]["checkpoint"]
        assert seed["run_id"] == layout.target_run, seed
        assert seed["phase"] == RUN_SHAPE[-1], seed
        n = sum(1 for _ in target.saver.list({"configurable": {"thread_id": layout.target_ticket}}))
        assert n == RUNS_PER_TICKET * PER_RUN, n
        facts.append(
            f"check: {target.lg_name}.get_tuple returns the run's last seed; list of the thread "
            f"= {n:,} checkpoints; seed JSON {len(json.dumps(seed)):,} bytes"
        )
    return facts


def pg_schema(label: str) -> str:
    """A schema name of this process's own for one scale."""
    return f"phaselog_bench_{label}_{os.getpid()}"
