"""[1] Durable write: Ledger.write of a ~1 KB implement checkpoint vs the raw publish protocol."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

from bench import _data, _raw
from bench._timing import BASELINE, INFO, REFERENCE, SUBJECT, Contestant, Section, run_interleaved

TICKET = "BENCH-1"
GOAL = 1.5


def _langgraph(workdir: Path, seed: dict[str, Any]) -> tuple[Contestant | None, str, sqlite3.Connection | None]:
    """LangGraph's SqliteSaver.put of a checkpoint carrying the same record, when installed."""
    try:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        return (
            None,
            "LangGraph SqliteSaver: not installed (pip install -e '.[bench]'); skipped",
            None,
        )
    conn = sqlite3.connect(workdir / "langgraph.sqlite", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    counter = itertools.count()

    def prepare() -> tuple[dict[str, Any], Any]:
        cp = empty_checkpoint()
        cp["channel_values"] = {"checkpoint": seed}
        config = {"configurable": {"thread_id": f"t{next(counter)}", "checkpoint_ns": ""}}
        return config, cp

    def put(arg: tuple[dict[str, Any], Any]) -> None:
        config, cp = arg
        saver.put(config, cp, {"source": "loop", "step": 1}, {})  # type: ignore[arg-type]

    note = f"LangGraph SqliteSaver.put: its own connection, WAL, PRAGMA synchronous={sync}"
    label = "LangGraph SqliteSaver.put (same record)"
    return Contestant("langgraph_put", label, REFERENCE, put, prepare), note, conn


def run(workdir: Path, *, rounds: int, progress: Any = None) -> Section:
    """Time Ledger.write against the raw publish protocol, interleaved."""
    root = workdir / "write-store"
    ledger = _data.open_ledger(root)
    sample_run = _data.run_id("sample")
    _data.write_phase(ledger, TICKET, sample_run, "implement")
    sample = _data.write_phase(ledger, TICKET, sample_run, "implement")  # attempt 2, as timed
    seed_file = root / "checkpoints" / sample.location
    yaml_bytes, meta_bytes = seed_file.read_bytes(), _data.sidecar_of(seed_file).read_bytes()
    seed = sample.record.seed_dict()

    raw_dir = workdir / "raw-write"
    raw_dir.mkdir()
    sql = _raw.SqliteInsert(workdir / "raw.sqlite")
    names = (f"r{i:06d}.yaml" for i in itertools.count())
    runs = (_data.run_id(f"write-{i}") for i in itertools.count())

    def prepare_next() -> str:
        run = next(runs)
        ledger.write(TICKET, run, "implement", _data.IMPLEMENT, **_data.write_kwargs())
        return run

    def write(run: str) -> None:
        ledger.write(TICKET, run, "implement", _data.IMPLEMENT, **_data.write_kwargs())

    contestants = [
        Contestant(
            "write_next",
            "Ledger.write, next attempt (run has attempt 1)",
            SUBJECT,
            write,
            prepare_next,
        ),
        Contestant(
            "write_first",
            "Ledger.write, attempt 1 of a new run (mkdir run)",
            SUBJECT,
            write,
            lambda: next(runs),
        ),
        Contestant(
            "raw_write",
            "raw temp+write+fsync+link+dir fsync, same YAML",
            BASELINE,
            lambda name: _raw.durable_write(str(raw_dir), name, yaml_bytes),
            lambda: next(names),
        ),
        Contestant(
            "raw_write_pair",
            "raw, same protocol for YAML + JSON sidecar",
            INFO,
            lambda name: _raw.durable_write_pair(str(raw_dir), name, yaml_bytes, meta_bytes),
            lambda: next(names),
        ),
        Contestant(
            "raw_write_pair_at_once",
            "raw, YAML + JSON sidecar, both file fsyncs at once (as phaselog)",
            INFO,
            lambda name: _raw.durable_write_pair(str(raw_dir), name, yaml_bytes, meta_bytes, concurrent=True),
            lambda: next(names),
        ),
        Contestant(
            "sqlite_insert",
            "sqlite3 INSERT + COMMIT of the YAML (WAL, FULL)",
            REFERENCE,
            lambda name: sql.insert(name, yaml_bytes),
            lambda: next(names),
        ),
    ]
    lg, lg_note, lg_conn = _langgraph(workdir, seed)
    if lg is not None:
        contestants.append(lg)

    section = Section(
        "write",
        f"[1] write: Ledger.write of a {len(yaml_bytes)}-byte implement checkpoint "
        f"(+ {len(meta_bytes)}-byte JSON sidecar), auto attempt, files store",
        [
            f"store {root} on {_data.filesystem_of(root, options=False)}",
            f"{rounds} rounds after 3 warm-up rounds; contestants interleaved, order rotated each round",
            "fsyncs per write: phaselog 2 files (at once) + 1 folder (so do the raw pairs); raw baseline 1 file + 1 "
            "folder",
            f"sqlite3 reference: PRAGMA synchronous={sql.synchronous}, journal_mode=WAL; {lg_note}",
        ],
    )
    section.stats = run_interleaved(contestants, rounds, warmup=3, progress=progress)
    section.ratio("write_next", "raw_write", goal=GOAL)
    section.ratio("write_first", "raw_write", note="also creates and fsyncs the run folder")
    section.ratio("write_next", "raw_write_pair", note="the raw pair fsyncs its files one after the other")
    section.ratio("raw_write_pair", "raw_write", note="two files, fsyncs one after the other")
    section.ratio("raw_write_pair_at_once", "raw_write", note="floor of phaselog's protocol (D77)")
    section.ratio("write_next", "raw_write_pair_at_once", note="Python and the extra system calls")
    section.ratio("write_next", "sqlite_insert")
    if lg is not None:
        section.ratio("write_next", "langgraph_put")
    sql.close()
    if lg_conn is not None:
        lg_conn.close()
    return section
