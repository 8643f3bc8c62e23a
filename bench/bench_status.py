"""[3] Status: Ledger.status of a run with 100 attempts vs listing + reading its files.

Every status sample runs on a ledger opened just before it (untimed), so no memo of the previous
sample's status carries the figure (issue 22).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import _data, _raw
from bench._timing import BASELINE, SUBJECT, Contestant, Section, run_interleaved
from bench.bench_api import FreshLedger

TICKET = "BENCH-3"


def run(workdir: Path, *, rounds: int, attempts: int = 100, progress: Any = None) -> Section:
    """Time Ledger.status against the raw cost of reading the run folder."""
    root = workdir / "status-store"
    ledger = _data.open_ledger(root, clock=_data.Clock())
    run_uuid = _data.run_id("status")
    with _data.no_fsync():
        _data.build_run(ledger, TICKET, run_uuid, attempts)
    folder = str(root / "checkpoints" / TICKET / run_uuid)
    st = ledger.status(TICKET, run_uuid)
    assert sum(p.attempts for p in st.phases) == attempts, st
    files = _raw.list_read(folder)
    fresh = FreshLedger(root)

    contestants = [
        Contestant(
            "status",
            f"Ledger.status, run of {attempts} attempts (fresh ledger)",
            SUBJECT,
            lambda fresh: fresh.status(TICKET, run_uuid),
            fresh,
        ),
        Contestant(
            "raw_list_read",
            f"raw listdir + read its {files} record files",
            BASELINE,
            lambda _: _raw.list_read(folder),
        ),
        Contestant(
            "raw_list_parse",
            f"raw listdir + read + CSafeLoader parse, {attempts} YAML",
            BASELINE,
            lambda _: _raw.list_parse(folder),
        ),
    ]
    section = Section(
        "status",
        f"[3] status: Ledger.status of a run with {attempts} attempts over the 5 phases ({attempts // 5} each)",
        [
            f"store {root} on {_data.filesystem_of(root, options=False)} (warm page cache)",
            f"{rounds} rounds, interleaved; record files = seed YAML + JSON sidecar per attempt",
            f"next phase: {st.next_phase}; states: " + ", ".join(f"{p.phase}={p.state}" for p in st.phases),
        ],
    )
    try:
        section.stats = run_interleaved(contestants, rounds, warmup=2, progress=progress)
    finally:
        fresh.close()
    section.ratio("status", "raw_list_read", note="I/O floor: every file phaselog reads")
    section.ratio("status", "raw_list_parse", note="what the seed tool does: parse every YAML")
    return section
