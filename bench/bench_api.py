"""[api] A write, a read and a status as a user's program makes them, beside LangGraph's savers.

One section per store (SQLite, files, PostgreSQL), three groups each, timed in rounds
(``run_rounds``: ``ops`` calls of every contestant per round, interleaved call by call; the figure
is the median of the round medians, a ratio the median of the per-round ratios):

* write:  ``phaselog.open(url)`` once, then a fresh ``Run`` per run (``ledger.run(ticket, run)``)
  writing the run's 5 phases of ticket-pipeline in order (records of ~1 KB: payload, repo map,
  artifacts); beside it LangGraph's ``put`` of the same seed documents, 5 per thread (a thread per
  run, its parent the previous put), and the floor: a raw INSERT + COMMIT of the same JSON
  (SQLite), a raw tmp+fsync+link+dir fsync of the same seed YAML (files).
* read:   the newest checkpoint of a phase (implement), **once per run, a fresh Run each**, on a
  ledger opened after the data were written (another handle wrote them, so no memo of the writer
  and no repeated read of one record carries the figure); beside it ``get_tuple`` of a thread's
  latest checkpoint, each thread once, on a saver opened after the build.
* status: ``Run.status()`` of a 5-phase run, each run once, a fresh Run each, on a third handle;
  beside it ``get_tuple`` + ``list`` of a thread, each thread once, on a third saver.

The data sets the reads use are written through the same API (phaselog) and ``put`` (LangGraph)
before timing, with durability off while building (a tmpfs copy for SQLite, no fsync for files,
``synchronous_commit=off`` for PostgreSQL): the same rows, written faster. Timed calls are durable:
WAL + ``synchronous=FULL`` on every SQLite connection, fsync on files, commits on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import phaselog
from bench import _data, _raw
from bench._sqldata import PG_URL, Parent, lg_put
from bench._timing import BASELINE, INFO, REFERENCE, SUBJECT, Contestant, Section, run_rounds, skipped_stat

PHASES = _data.PHASES  # ticket-pipeline's five phases
RUNS_PER_TICKET = 5
READ_PHASE = "implement"
FILES_READ_LIMIT_NS = 60e3
FILES_STATUS_LIMIT_NS = 150e3
_steps = itertools.count(1)


@dataclass
class Plan:
    """How much to time: ``rounds`` rounds of ``ops`` calls, after ``warmup_ops`` untimed ones."""

    rounds: int
    ops: int
    warmup_ops: int

    @property
    def calls(self) -> int:
        """Calls of one contestant in all: the runs a read group needs (each read once)."""
        return self.warmup_ops + self.rounds * self.ops


@dataclass
class Sample:
    """The 5 records of one run written through the API: seed dicts, JSON bodies, YAML bytes."""

    seeds: list[dict[str, Any]]
    bodies: list[bytes]
    yaml: list[bytes] = field(default_factory=list)


def ticket_of(prefix: str, i: int) -> str:
    return f"{prefix}-{i // RUNS_PER_TICKET:05d}"


def write_run(ledger: Any, ticket: str, run_id: str) -> list[Any]:
    run = ledger.run(ticket, run_id)
    return [run.write(p, _data.PAYLOADS[p], **_data.write_kwargs()) for p in PHASES]


def _body(record: Any) -> bytes:
    """The JSON the SQL store keeps for ``record`` (its serialiser), else the seed document."""
    try:
        from phaselog.stores.kernel import record_document

        return record_document(record)
    except Exception:  # the serialiser's home or signature moved: the seed JSON is close enough
        return json.dumps(record.seed_dict()).encode()


def _sample(ledger: Any, root: Path | None = None) -> Sample:
    results = write_run(ledger, "BENCH-SAMPLE", str(uuid.uuid4()))
    sample = Sample([r.record.seed_dict() for r in results], [_body(r.record) for r in results])
    if root is not None:
        sample.yaml = [(root / "checkpoints" / r.location).read_bytes() for r in results]
    return sample


# -- contestants ----------------------------------------------------------------------------------
class FreshLedger:
    """A prepare that opens a fresh ledger for every sample (closing the previous one)."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.ledger: Any = None

    def __call__(self) -> Any:
        self.close()
        self.ledger = phaselog.open(self.target)
        return self.ledger

    def close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
            self.ledger = None


class RunWrites:
    """Write runs of 5 phases through a fresh ``Run`` per run (its creation is timed, as a user pays it)."""

    def __init__(self, ledger: Any, prefix: str) -> None:
        self.ledger, self.prefix = ledger, prefix
        self.i = 0
        self.run: Any = None

    def prepare(self) -> tuple[str | None, str]:
        i, self.i = self.i, self.i + 1
        new = None if i % len(PHASES) else str(uuid.uuid4())
        return (ticket_of(self.prefix, i // len(PHASES)) + "|" + new) if new else None, PHASES[i % len(PHASES)]

    def __call__(self, arg: tuple[str | None, str]) -> None:
        new, phase = arg
        if new is not None:
            ticket, run_id = new.split("|")
            self.run = self.ledger.run(ticket, run_id)
        self.run.write(phase, _data.PAYLOADS[phase], **_data.write_kwargs())


class ThreadPuts:
    """LangGraph's ``put`` of the same seed documents: a thread per run, 5 puts each, as its loop does."""

    def __init__(self, saver: Any, seeds: list[dict[str, Any]]) -> None:
        self.saver, self.seeds = saver, seeds
        self.i = 0
        self.thread = ""
        self.parent: Parent | None = None

    def prepare(self) -> int:
        i, self.i = self.i, self.i + 1
        if i % len(PHASES) == 0:
            self.thread, self.parent = str(uuid.uuid4()), None
        return i % len(PHASES)

    def __call__(self, k: int) -> None:
        self.parent = lg_put(self.saver, self.thread, "", self.seeds[k], parent=self.parent, step=next(_steps))


def _lg_thread(saver: Any, thread: str, seeds: list[dict[str, Any]]) -> None:
    parent = None
    for seed in seeds:
        parent = lg_put(saver, thread, "", seed, parent=parent, step=next(_steps))


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _once(items: list[Any]) -> Callable[[], Any]:
    """A prepare that hands out each item once (a read group reads every record once)."""
    it = iter(items)
    return lambda: next(it)


def _read_contestants(open_ledger: Callable[[], Any], runs: list[tuple[str, str]]) -> list[Contestant]:
    reader, stater = open_ledger(), open_ledger()
    read = Contestant(
        "read",
        f"Run.read newest {READ_PHASE}, fresh Run each, each run once",
        SUBJECT,
        lambda tr: reader.run(*tr).read(READ_PHASE),
        _once(runs),
    )
    status = Contestant(
        "status",
        "Run.status of a 5-phase run, fresh Run each, each run once",
        SUBJECT,
        lambda tr: stater.run(*tr).status(),
        _once(list(runs)),
    )
    return [read, status]


def _lg_read_contestants(open_saver: Callable[[], Any], name: str, threads: list[str]) -> list[Contestant]:
    getter, lister = open_saver(), open_saver()

    def lg_status(thread: str) -> None:
        cfg = _cfg(thread)
        lister.get_tuple(cfg)
        for _tup in lister.list(cfg):
            pass

    return [
        Contestant(
            "lg_get",
            f"{name}.get_tuple latest, each thread once",
            REFERENCE,
            getter.get_tuple,
            _once(list(map(_cfg, threads))),
        ),
        Contestant("lg_status", f"{name}.get_tuple + list of a thread (5)", REFERENCE, lg_status, _once(list(threads))),
    ]


def _time(section: Section, plan: Plan, groups: list[list[Contestant]], progress: Any, skipped: list[Any]) -> None:
    for group in groups:
        name = group[0].key
        report = (lambda m, n=name: progress(f"{section.key} {n}: {m}")) if progress else None
        section.stats += run_rounds(
            group, rounds=plan.rounds, ops=plan.ops, warmup_ops=plan.warmup_ops, progress=report
        )
    section.stats += [s for s in skipped if s is not None]


def _notes(plan: Plan, sample: Sample) -> list[str]:
    sizes = [len(b) for b in sample.bodies]
    return [
        f"{plan.rounds} rounds x {plan.ops} calls per contestant (after {plan.warmup_ops} warm-up calls), "
        "interleaved call by call, order rotated each call; figure = median of the round medians",
        f"records: ticket-pipeline's 5 phases, JSON bodies {min(sizes):,}-{max(sizes):,} bytes; LangGraph's "
        "checkpoints carry the same seed documents in channel_values['checkpoint']",
        "reads and statuses: each run (thread) once, on a handle opened after the data were written",
    ]


# -- SQLite ---------------------------------------------------------------------------------------
def _sqlite_conn(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _lg_sqlite(path: Path) -> tuple[Any, sqlite3.Connection]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = _sqlite_conn(path)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute("PRAGMA synchronous=FULL")
    return saver, conn


@contextlib.contextmanager
def on_tmpfs(*targets: Path) -> Iterator[list[Path]]:
    """Paths on tmpfs (when there is one) to build SQLite files in; copied to ``targets`` after."""
    shm = Path("/dev/shm")
    tmp = Path(tempfile.mkdtemp(prefix="phaselog-bench-", dir=shm if shm.is_dir() else None))
    try:
        built = [tmp / t.name for t in targets]
        yield built
        for src, dst in zip(built, targets, strict=True):
            for suffix in ("", "-wal"):
                if Path(f"{src}{suffix}").exists():
                    shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")
        os.sync()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sqlite(workdir: Path, plan: Plan, progress: Any) -> Section:
    base = workdir / "api-sqlite"
    base.mkdir()
    pl_db, lg_db = base / "phaselog.db", base / "langgraph.db"
    section = Section(
        "api-sqlite",
        "[api] SQLite store: write, read, status as a user's program calls them, "
        "vs LangGraph's SqliteSaver (WAL, synchronous=FULL on both)",
    )
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError as exc:
        lg_skip = f"{exc.name} not installed; pip install -e '.[bench]'"
    else:
        lg_skip = ""
    runs = [(ticket_of("BENCH-R", i), str(uuid.uuid4())) for i in range(plan.calls)]
    threads = [str(uuid.uuid4()) for _ in range(plan.calls)]
    if progress:
        progress(f"api-sqlite: building {plan.calls:,} runs of 5 (phaselog) and threads of 5 (LangGraph)")
    with on_tmpfs(pl_db, lg_db) as (pl_tmp, lg_tmp):
        with phaselog.open(f"sqlite:///{pl_tmp}") as ledger:
            for ticket, run_id in runs:
                write_run(ledger, ticket, run_id)
        if not lg_skip:
            saver, conn = _lg_sqlite(lg_tmp)
            with phaselog.open(f"sqlite:///{pl_tmp}") as ledger:
                seeds = _sample(ledger).seeds
            for t in threads:
                _lg_thread(saver, t, seeds)
            conn.close()
    url = f"sqlite:///{pl_db}"
    writer = phaselog.open(url)
    closers: list[Callable[[], None]] = [writer.close]
    try:
        sample = _sample(writer)
        raw = _raw.SqliteInsert(base / "raw.db")
        closers.append(raw.close)
        names = (f"r{i:07d}" for i in itertools.count())
        bodies = itertools.cycle(sample.bodies)
        rw = RunWrites(writer, "BENCH-W")
        write = [
            Contestant("write", "Run.write, fresh Run per 5-phase run", SUBJECT, rw, rw.prepare),
            Contestant(
                "raw_insert",
                "raw sqlite3 INSERT + COMMIT of the same JSON",
                BASELINE,
                lambda arg: raw.insert(*arg),
                lambda: (next(names), next(bodies)),
            ),
        ]
        read, status = _read_contestants(lambda: _opened(url, closers), runs)
        skipped: list[Any] = []
        if lg_skip:
            skipped = [
                skipped_stat(k, f"SqliteSaver: {lg_skip}"[:58], REFERENCE) for k in ("lg_put", "lg_get", "lg_status")
            ]
            groups = [write, [read], [status]]
        else:
            saver, conn = _lg_sqlite(lg_db)
            closers.append(conn.close)
            puts = ThreadPuts(saver, sample.seeds)
            write.append(
                Contestant("lg_put", "SqliteSaver.put, 5 per thread, same seeds", REFERENCE, puts, puts.prepare)
            )

            def open_saver() -> Any:
                s, c = _lg_sqlite(lg_db)
                closers.append(c.close)
                return s

            lg_get, lg_status = _lg_read_contestants(open_saver, "SqliteSaver", threads)
            groups = [write, [read, lg_get], [status, lg_status]]
        section.notes += [
            f"databases {pl_db.parent} on {_data.filesystem_of(pl_db, options=False)}: "
            "phaselog.db, langgraph.db, raw.db",
            f"durability: phaselog {_pragmas(writer)}; SqliteSaver and raw sqlite3: WAL, synchronous=FULL (set)",
            *_notes(plan, sample),
        ]
        _time(section, plan, groups, progress, skipped)
    finally:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                close()
    section.ratio("write", "lg_put", goal=1.0, note="vs LangGraph SqliteSaver.put")
    section.ratio("write", "raw_insert", goal=1.2, note="the floor: same JSON, same durability")
    section.ratio("read", "lg_get", goal=1.5)
    section.ratio("status", "lg_status", goal=1.0, note="LangGraph derives no status: get_tuple + list")
    return section


def _opened(url: Any, closers: list[Callable[[], None]]) -> Any:
    ledger = phaselog.open(url)
    closers.append(ledger.close)
    return ledger


def _pragmas(ledger: Any) -> str:
    with contextlib.suppress(Exception):
        conn = ledger.store.conn.raw
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        return f"journal_mode={mode}, synchronous={sync}"
    return "(its connection is not visible here: WAL, synchronous=FULL by contract)"


# -- files ----------------------------------------------------------------------------------------
def _files(workdir: Path, plan: Plan, progress: Any) -> Section:
    root = workdir / "api-files"
    section = Section(
        "api-files",
        "[api] files store: write, read, status as a user's program calls them, "
        "vs a raw durable write of the same seed YAML",
    )
    runs = [(ticket_of("BENCH-R", i), str(uuid.uuid4())) for i in range(plan.calls)]
    if progress:
        progress(f"api-files: building {plan.calls:,} runs of 5 (fsync off while building)")
    paths: list[Path] = []
    with _data.no_fsync(), phaselog.open(root) as ledger:
        for ticket, run_id in runs:
            paths.append(root / "checkpoints" / write_run(ledger, ticket, run_id)[0].location)
    writer = phaselog.open(root)
    closers: list[Callable[[], None]] = [writer.close]
    try:
        sample = _sample(writer, root)
        raw_dir = workdir / "api-files-raw"
        raw_dir.mkdir()
        names = (f"r{i:07d}.yaml" for i in itertools.count())
        yamls = itertools.cycle(sample.yaml)
        rw = RunWrites(writer, "BENCH-W")
        write = [
            Contestant("write", "Run.write, fresh Run per 5-phase run", SUBJECT, rw, rw.prepare),
            Contestant(
                "raw_write",
                "raw tmp+write+fsync+link+dir fsync, same seed YAML",
                BASELINE,
                lambda arg: _raw.durable_write(str(raw_dir), *arg),
                lambda: (next(names), next(yamls)),
            ),
        ]
        read, status = _read_contestants(lambda: _opened(root, closers), runs)
        raw_read = Contestant(
            "raw_read",
            "raw open + read + CSafeLoader parse of that seed file",
            INFO,
            lambda p: _raw.read_parse(str(p)),
            _once(list(paths)),
        )
        raw_status = Contestant(
            "raw_status",
            "raw listdir + read of the run's record files",
            INFO,
            lambda p: _raw.list_read(str(p.parent)),
            _once(list(paths)),
        )
        section.notes += [
            f"store {root} on {_data.filesystem_of(root, options=False)} (warm page cache); fsync per record",
            *_notes(plan, sample),
        ]
        _time(section, plan, [write, [read, raw_read], [status, raw_status]], progress, [])
    finally:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                close()
    section.ratio("write", "raw_write", goal=1.5, note="the floor: same seed YAML, one file")
    section.ratio("read", "raw_read", note="info")
    section.ratio("status", "raw_status", note="info: the I/O floor")
    section.limit("read", FILES_READ_LIMIT_NS, note="absolute goal")
    section.limit("status", FILES_STATUS_LIMIT_NS, note="absolute goal")
    return section


# -- PostgreSQL -----------------------------------------------------------------------------------
def _pg_url(base: str, *params: str) -> str:
    return base + ("&" if "?" in base else "?") + "&".join(params)


def _postgres(workdir: Path, plan: Plan, pg_url: str, progress: Any) -> Section:
    section = Section(
        "api-postgres",
        "[api] PostgreSQL store: write, read, status as a user's program calls "
        "them, vs LangGraph's PostgresSaver on the same server",
    )
    schema = f"phaselog_bench_api_{os.getpid()}"
    why = _pg_prepare(pg_url, schema)
    if why:
        section.notes.append(f"skipped: {why}")
        section.stats = [skipped_stat(k, why[:58], SUBJECT) for k in ("write", "read", "status")]
        for sub, base in (("write", "lg_put"), ("read", "lg_get"), ("status", "lg_status")):
            section.stats.append(skipped_stat(base, why[:58], REFERENCE))
            section.ratio(sub, base, goal=1.0)
        return section
    import psycopg

    url = _pg_url(pg_url, f"schema={schema}")
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
    except ImportError as exc:
        lg_skip = f"{exc.name} not installed; pip install -e '.[bench]'"
    else:
        lg_skip = ""

    def lg_conn(*, build: bool = False) -> Any:
        opts = f"-c search_path={schema}" + (" -c synchronous_commit=off" if build else "")
        return psycopg.connect(pg_url, options=opts, autocommit=True, prepare_threshold=0, row_factory=dict_row)

    closers: list[Callable[[], None]] = []
    runs = [(ticket_of("BENCH-R", i), str(uuid.uuid4())) for i in range(plan.calls)]
    threads = [str(uuid.uuid4()) for _ in range(plan.calls)]
    try:
        if progress:
            progress(f"api-postgres: building {plan.calls:,} runs of 5 and threads of 5 (synchronous_commit=off)")
        build_url = _pg_url(pg_url, "options=-c%20synchronous_commit%3Doff", f"schema={schema}")
        with phaselog.open(build_url) as ledger:
            for ticket, run_id in runs:
                write_run(ledger, ticket, run_id)
            seeds = _sample(ledger).seeds
        if not lg_skip:
            conn = lg_conn(build=True)
            saver = PostgresSaver(conn)
            saver.setup()
            for t in threads:
                _lg_thread(saver, t, seeds)
            conn.close()
        writer = _opened(url, closers)
        sample = _sample(writer)
        rw = RunWrites(writer, "BENCH-W")
        write = [Contestant("write", "Run.write, fresh Run per 5-phase run", SUBJECT, rw, rw.prepare)]
        read, status = _read_contestants(lambda: _opened(url, closers), runs)
        skipped: list[Any] = []
        if lg_skip:
            skipped = [
                skipped_stat(k, f"PostgresSaver: {lg_skip}"[:58], REFERENCE) for k in ("lg_put", "lg_get", "lg_status")
            ]
            groups = [write, [read], [status]]
        else:

            def open_saver() -> Any:
                c = lg_conn()
                closers.append(c.close)
                return PostgresSaver(c)

            puts = ThreadPuts(open_saver(), sample.seeds)
            write.append(
                Contestant("lg_put", "PostgresSaver.put, 5 per thread, same seeds", REFERENCE, puts, puts.prepare)
            )
            lg_get, lg_status = _lg_read_contestants(open_saver, "PostgresSaver", threads)
            groups = [write, [read, lg_get], [status, lg_status]]
        with psycopg.connect(pg_url, autocommit=True) as c:
            server = c.execute("SHOW server_version").fetchone()
            sync = c.execute("SHOW synchronous_commit").fetchone()
        section.notes += [
            f"server {pg_url} (PostgreSQL {server[0] if server else '?'}, synchronous_commit="
            f"{sync[0] if sync else '?'} for the timed calls), schema {schema} for both",
            "PostgresSaver connected as from_conn_string does (autocommit, prepare_threshold=0, dict rows)",
            *_notes(plan, sample),
        ]
        _time(section, plan, groups, progress, skipped)
    finally:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                close()
        with contextlib.suppress(Exception), psycopg.connect(pg_url, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    section.ratio("write", "lg_put", goal=1.0, note="vs LangGraph PostgresSaver.put (goal: one round trip)")
    section.ratio("read", "lg_get", goal=1.0)
    section.ratio("status", "lg_status", goal=1.0, note="get_tuple + list of the thread")
    return section


def _pg_prepare(pg_url: str, schema: str) -> str:
    """Create the schema; return why PostgreSQL cannot be used ('' when it can)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg 3 is not installed (pip install 'phaselog[postgres]')"
    try:
        with psycopg.connect(pg_url, connect_timeout=5, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.execute(f'CREATE SCHEMA "{schema}"')
    except Exception as exc:  # any failure means: not reachable
        return f"PostgreSQL at {pg_url} is not reachable: {' '.join(str(exc).split())[:160]}"
    return ""


def run(
    workdir: Path,
    *,
    rounds: int,
    ops: int,
    warmup_ops: int,
    pg_url: str = PG_URL,
    keep: bool = False,
    progress: Any = None,
) -> Iterator[Section]:
    """Time each store's write, read and status; yield a section per store as it is measured."""
    plan = Plan(rounds, ops, warmup_ops)
    yield _sqlite(workdir, plan, progress)
    yield _files(workdir, plan, progress)
    yield _postgres(workdir, plan, pg_url, progress)
