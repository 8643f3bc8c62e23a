"""[5] SQL stores: write, read-latest, status and list on SQLite and PostgreSQL at 10k-1M records.

For each scale, one database per backend holds the data set twice, in their own tables: phaselog's
checkpoints and LangGraph's (``_sqldata``). Four groups of contestants are timed, each interleaved:

* write:  ``Ledger.write`` of the next implement attempt into an existing run of 8 checkpoints,
  against LangGraph's ``put`` of the next checkpoint of the same thread/namespace and, on SQLite,
  a raw ``sqlite3`` INSERT + COMMIT of the same row into phaselog's table (WAL, synchronous=FULL);
* read:   ``Ledger.read`` of the latest implement checkpoint of a run vs ``get_tuple`` of the
  namespace without a checkpoint_id (its latest checkpoint);
* status: ``Ledger.status`` of that run vs ``get_tuple`` + ``list`` of the namespace (LangGraph
  has no derived status: that is the closest it comes, reading the same rows);
* list:   ``Ledger.list`` of a ticket with 1,000 checkpoints vs ``list`` of the thread.

Raw SQL (a SELECT of the same rows + ``json.loads``) is printed beside read, status and list as
``info``: what phaselog adds over the database.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import _data, _sqldata
from bench._sqldata import Built, Target, lg_config, lg_put
from bench._timing import (
    BASELINE,
    INFO,
    REFERENCE,
    SUBJECT,
    Contestant,
    Ratio,
    Section,
    Stat,
    run_interleaved,
    skipped_stat,
)
from phaselog.ledger.facade import Ledger

# Issue 10's goals (time ratios; a speedup goal is their inverse, ops/s phaselog / ops/s LangGraph):
GOAL_WRITE_VS_PUT = 1.0  # write at least as fast as LangGraph's put (SQLite and PostgreSQL)
GOAL_READ_VS_GET = 1 / 1.5  # read latest <= 1.5x get_tuple (SQLite)
GOAL_STATUS_VS_LG = 1.0  # status <= 1.0x get_tuple + list (SQLite)
GOAL_RAW_WRITE = 1.3  # SQLite Ledger.write <= 1.3x a raw sqlite3 insert of the same row
STATUS_LIMIT_NS = 2e6  # status of one run <= 2 ms (the issue: at 1M records)
INNER = {"write": 1, "read": 1, "status": 1, "list": 1}  # one call a sample: each read a run of its own
RAW_TICKET = "SQL-RAW"

_COLS = "run_id, phase_ordinal, attempt, status, body FROM phaselog_checkpoints"
RAW_READ = (
    f"SELECT {_COLS} WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ? "
    "AND status = 'completed' ORDER BY attempt DESC LIMIT 1"
)
RAW_RUN = f"SELECT {_COLS} WHERE ticket_id = ? AND run_id = ? ORDER BY phase_ordinal, attempt"
RAW_TICKET_SQL = f"SELECT {_COLS} WHERE ticket_id = ? ORDER BY run_id, phase_ordinal, attempt"


def run(
    workdir: Path,
    *,
    write_rounds: int,
    read_rounds: int,
    status_rounds: int,
    list_rounds: int,
    scales: list[int],
    pg_url: str = _sqldata.PG_URL,
    keep: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Iterator[Section]:
    """Build each scale's databases, time every backend, drop the databases; yield a section
    per backend and scale as soon as it is measured."""
    rounds = {
        "write": write_rounds,
        "read": read_rounds,
        "status": status_rounds,
        "list": list_rounds,
    }
    for n in scales:
        label = _sqldata.scale_label(n)
        targets: list[Target] = [
            _sqldata.SqliteTarget(workdir / f"sql-{label}.sqlite"),
            _sqldata.PostgresTarget(pg_url, _sqldata.pg_schema(label)),
        ]
        try:
            if progress:
                progress(f"{label}: building {n:,} records per backend (phaselog + LangGraph)")
            built = _sqldata.build(targets, n, workdir, progress)
            if progress:
                progress(f"{label}: built in {built.describe()}")
            for t in targets:
                yield _time_target(t, built, rounds, progress)
        finally:
            for t in targets:
                t.close() if keep else t.drop()


def _time_target(t: Target, built: Built, rounds: dict[str, int], progress: Callable[[str], None] | None) -> Section:
    layout = built.layout
    label = _sqldata.scale_label(layout.records)
    section = Section(
        f"{t.key}-{label}",
        f"[5] sql: {t.name} store at {layout.records:,} records ({layout.runs:,} runs of "
        f"{_sqldata.PER_RUN} in {layout.tickets:,} tickets), LangGraph {t.lg_name} on the same "
        "database",
        show_rate=True,
    )
    if t.skip_reason is not None:
        section.notes.append(f"skipped: {t.skip_reason}")
        for sub, ref in (
            ("write", "lg_put"),
            ("read", "lg_get"),
            ("status", "lg_status"),
            ("list", "lg_list"),
        ):
            section.ratios.append(Ratio(sub, ref, math.nan, None, at_least=True, skipped=t.skip_reason))
        return section
    section.notes += [
        f"database {t.where()}; {t.size()} after the build (phaselog + LangGraph tables)",
        f"built in {built.describe()}",
        *_sqldata.check(t, built),
        f"phaselog bodies {min(built.template.body_bytes):,}-{max(built.template.body_bytes):,} "
        "bytes (seed checkpoint + phaselog metadata, JSON); LangGraph's checkpoints carry the "
        "same seed checkpoint in channel_values['checkpoint']",
        "mapping: ticket = thread_id, run = checkpoint_ns; read-latest = get_tuple without "
        "checkpoint_id; status = get_tuple + list of the namespace (LangGraph derives no status); "
        "list of a ticket = list of the thread",
    ]
    if t.lg_skip:
        section.notes.append(f"LangGraph {t.lg_name}: skipped: {t.lg_skip}")
    store = t.open_store()
    ledger = Ledger(store)
    raw = t.raw_connect()
    try:
        if durability := t.durability(store, raw):
            section.notes.append(durability)
        section.notes += t.notes
        section.notes.append(
            "rounds: "
            + ", ".join(f"{k} {r}" + (f" x {INNER[k]} calls" if INNER[k] > 1 else "") for k, r in rounds.items())
            + "; interleaved within each group, order rotated each round; ops/s = 1 / median"
        )
        _write_group(section, t, built, ledger=ledger, raw=raw, rounds=rounds["write"], progress=progress)
        _read_groups(section, t, built, ledger=ledger, raw=raw, rounds=rounds, progress=progress)
    finally:
        store.close()
        with contextlib.suppress(Exception):
            raw.close()
    _ratios(section, t)
    return section


def _lg_row(t: Target, key: str, label: str) -> Stat | None:
    """The skipped row for a LangGraph contestant that cannot run (None if it can)."""
    if t.saver is not None:
        return None
    return skipped_stat(key, f"{label}: skipped ({t.lg_skip})"[:58], REFERENCE)


def _run_group(
    section: Section,
    contestants: list[Contestant],
    skipped: list[Stat | None],
    *,
    rounds: int,
    progress: Callable[[str], None] | None,
    name: str,
) -> None:
    report = (lambda m: progress(f"{section.key} {name}: {m}")) if progress else None
    section.stats += run_interleaved(contestants, rounds, warmup=3, progress=report)
    section.stats += [s for s in skipped if s is not None]


def _write_group(
    section: Section,
    t: Target,
    built: Built,
    *,
    ledger: Ledger,
    raw: Any,
    rounds: int,
    progress: Callable[[str], None] | None,
) -> None:
    runs = built.layout.write_runs()
    lg_runs = built.layout.write_runs()
    steps = itertools.count(10_000_000)
    template = built.template

    def prepare_write() -> tuple[str, str]:
        ticket, run = next(runs)
        ledger.recorded_pipeline(ticket, run)  # the process knows the run (as a pipeline does)
        return ticket, run

    def write(arg: tuple[str, str]) -> None:
        ledger.write(arg[0], arg[1], "implement", _data.IMPLEMENT, **_data.write_kwargs())

    def prepare_raw() -> Any:
        return template.next_implement(RAW_TICKET, str(uuid.uuid4()), 3)[0]

    contestants = [
        Contestant(
            "write",
            "Ledger.write, next implement attempt (run of 8)",
            SUBJECT,
            write,
            prepare_write,
        ),
        Contestant(
            "raw_insert",
            f"raw {'sqlite3' if t.key == 'sqlite' else 'psycopg'} INSERT + COMMIT, same row",
            BASELINE if t.key == "sqlite" else INFO,
            lambda row: t.raw_insert(raw, row),
            prepare_raw,
        ),
    ]
    if t.saver is not None:
        saver = t.saver

        def prepare_put() -> tuple[str, str, dict[str, Any], Any]:
            ticket, run = next(lg_runs)
            parent = saver.get_tuple(lg_config(ticket, run))
            seed = template.next_implement(ticket, run, 3)[1].seed_dict()
            return ticket, run, seed, parent

        def put(arg: tuple[str, str, dict[str, Any], Any]) -> None:
            ticket, run, seed, parent = arg
            lg_put(saver, ticket, run, seed, parent=parent, step=next(steps))

        contestants.append(
            Contestant(
                "lg_put",
                f"LangGraph {t.lg_name}.put, next checkpoint of the ns",
                REFERENCE,
                put,
                prepare_put,
            )
        )
    skipped = [_lg_row(t, "lg_put", f"LangGraph {t.lg_name}.put")]
    _run_group(section, contestants, skipped, rounds=rounds, progress=progress, name="write")


def _read_groups(
    section: Section,
    t: Target,
    built: Built,
    *,
    ledger: Ledger,
    raw: Any,
    rounds: dict[str, int],
    progress: Callable[[str], None] | None,
) -> None:
    layout = built.layout
    ticket = layout.target_ticket
    saver = t.saver
    # Each read and status sample reads a run of its own (no memo of a repeated read carries a
    # figure), taken from the end of the data set (the writes append to runs from its start).
    pool = [(tk, rn) for _, tk, rn in layout.all_runs()][::-1]
    n_read, n_status = rounds["read"] + 3, rounds["status"] + 3
    read_runs, status_runs = pool[:n_read], pool[n_read : n_read + n_status]

    def each(runs: list[tuple[str, str]]) -> Callable[[], tuple[str, str]]:
        it = itertools.cycle(runs)  # cycles only when the data set has fewer runs than samples
        return lambda: next(it)

    thread_cfg = {"configurable": {"thread_id": ticket}}
    per_ticket = _sqldata.RUNS_PER_TICKET * _sqldata.PER_RUN
    sql = t.placeholder

    def raw_rows(text: str, params: tuple[Any, ...]) -> int:
        rows = raw.execute(sql(text), params).fetchall()
        for r in rows:
            json.loads(r[4])
        return len(rows)

    # -- read-latest -------------------------------------------------------------------------------
    contestants = [
        Contestant(
            "read",
            "Ledger.read, latest implement, each run once",
            SUBJECT,
            lambda tr: ledger.read(*tr, "implement"),
            prepare=each(read_runs),
            inner=INNER["read"],
        ),
        Contestant(
            "raw_read",
            "raw SELECT of that row + json.loads",
            INFO,
            lambda tr: raw_rows(RAW_READ, (*tr, 1)),
            prepare=each(read_runs),
            inner=INNER["read"],
        ),
    ]
    if saver is not None:
        contestants.append(
            Contestant(
                "lg_get",
                f"{t.lg_name}.get_tuple, latest of the ns",
                REFERENCE,
                lambda tr: saver.get_tuple(lg_config(*tr)),
                prepare=each(read_runs),
                inner=INNER["read"],
            )
        )
    skipped = [_lg_row(t, "lg_get", f"{t.lg_name}.get_tuple")]
    _run_group(section, contestants, skipped, rounds=rounds["read"], progress=progress, name="read")

    # -- status of one run -------------------------------------------------------------------------
    def lg_status(tr: tuple[str, str]) -> None:
        cfg = lg_config(*tr)
        saver.get_tuple(cfg)
        for _tup in saver.list(cfg):
            pass

    contestants = [
        Contestant(
            "status",
            f"Ledger.status, run of {_sqldata.PER_RUN}, each run once",
            SUBJECT,
            lambda tr: ledger.status(*tr),
            prepare=each(status_runs),
            inner=INNER["status"],
        ),
        Contestant(
            "raw_status",
            f"raw SELECT of the run's {_sqldata.PER_RUN} rows + json.loads",
            INFO,
            lambda tr: raw_rows(RAW_RUN, tr),
            prepare=each(status_runs),
            inner=INNER["status"],
        ),
    ]
    if saver is not None:
        contestants.append(
            Contestant(
                "lg_status",
                f"{t.lg_name}.get_tuple + list of the ns ({_sqldata.PER_RUN})",
                REFERENCE,
                lg_status,
                prepare=each(status_runs),
                inner=INNER["status"],
            )
        )
    skipped = [_lg_row(t, "lg_status", f"{t.lg_name}.get_tuple + list")]
    _run_group(section, contestants, skipped, rounds=rounds["status"], progress=progress, name="status")

    # -- list of one ticket ------------------------------------------------------------------------
    contestants = [
        Contestant(
            "list",
            f"Ledger.list, ticket of {per_ticket:,} ({_sqldata.RUNS_PER_TICKET} runs)",
            SUBJECT,
            lambda _: ledger.list(ticket),
        ),
        Contestant(
            "raw_list",
            f"raw SELECT of its {per_ticket:,} rows + json.loads",
            INFO,
            lambda _: raw_rows(RAW_TICKET_SQL, (ticket,)),
        ),
    ]
    if saver is not None:
        contestants.append(
            Contestant(
                "lg_list",
                f"{t.lg_name}.list of the thread ({per_ticket:,})",
                REFERENCE,
                lambda _: sum(1 for _tup in saver.list(thread_cfg)),
            )
        )
    skipped = [_lg_row(t, "lg_list", f"{t.lg_name}.list")]
    _run_group(section, contestants, skipped, rounds=rounds["list"], progress=progress, name="list")


def _ratios(section: Section, t: Target) -> None:
    lg = f"vs LangGraph {t.lg_name}, same database"
    sqlite = t.key == "sqlite"
    section.speedup("write", "lg_put", goal=GOAL_WRITE_VS_PUT, note=lg + " (goal: at least as fast)")
    if sqlite:
        section.ratio("write", "raw_insert", goal=GOAL_RAW_WRITE, note="same durability: WAL, FULL")
    else:
        section.ratio("write", "raw_insert", note="info: the issue sets no goal here")
    section.speedup(
        "read",
        "lg_get",
        goal=GOAL_READ_VS_GET if sqlite else None,
        note=lg + (" (goal: <= 1.5x its time)" if sqlite else ""),
    )
    section.ratio("read", "raw_read", note="info: over the bare SELECT")
    section.speedup(
        "status",
        "lg_status",
        goal=GOAL_STATUS_VS_LG if sqlite else None,
        note="LangGraph has no status: get_tuple + list of the same run",
    )
    section.ratio("status", "raw_status", note="info: over the bare SELECT")
    section.speedup("list", "lg_list", note=lg + " (info: no goal in issue 10)")
    section.ratio("list", "raw_list", note="info: over the bare SELECT")
    section.limit(
        "status",
        STATUS_LIMIT_NS,
        note="the issue's goal at 1M records" + ("" if section.key.endswith("-1m") else "; shown at every scale"),
    )
