"""[4] List: Ledger.list of a ticket with 10,000 checkpoints vs glob + read of the same files."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench import _data, _raw
from bench._timing import BASELINE, INFO, SUBJECT, Contestant, Section, run_interleaved

TICKET = "BENCH-4"
PAGE = 100


def run(workdir: Path, *, rounds: int, checkpoints: int = 10_000, progress: Any = None) -> Section:
    """Build the ticket once (Ledger.write, fsync off), then time listings of it."""
    root = workdir / "list-store"
    ledger = _data.open_ledger(root, clock=_data.Clock())
    t0 = time.perf_counter()
    with _data.no_fsync():
        runs = _data.build_ticket(ledger, TICKET, checkpoints)
    built_s = time.perf_counter() - t0
    page = ledger.list(TICKET)
    assert len(page.items) == checkpoints, len(page.items)
    assert not page.damaged, page.damaged
    base = str(root / "checkpoints" / TICKET)
    both = [f"{base}/*/phase_*.yaml", f"{base}/*/.meta_*.json"]
    seeds = [f"{base}/*/phase_*.yaml"]
    files = _raw.glob_read(both, parse=False)

    contestants = [
        Contestant(
            "list",
            f"Ledger.list, all {checkpoints:,} checkpoints",
            SUBJECT,
            lambda _: ledger.list(TICKET),
        ),
        Contestant(
            "list_page",
            f"Ledger.list --limit {PAGE} (first page)",
            INFO,
            lambda _: ledger.list(TICKET, limit=PAGE),
        ),
        Contestant(
            "raw_glob_read",
            f"raw glob + read of its {files:,} record files",
            BASELINE,
            lambda _: _raw.glob_read(both, parse=False),
        ),
        Contestant(
            "raw_glob_parse",
            f"raw glob + read + CSafeLoader parse, {checkpoints:,} YAML",
            BASELINE,
            lambda _: _raw.glob_read(seeds, parse=True),
        ),
    ]
    section = Section(
        "list",
        f"[4] list: Ledger.list of a ticket with {checkpoints:,} checkpoints in {runs:,} runs "
        f"({len(_data.LIST_RUN_SHAPE)} per run)",
        [
            f"store {root} on {_data.filesystem_of(root, options=False)} (warm page cache)",
            f"built once with Ledger.write (fsync off, one sync at the end) in {built_s:.1f} s",
            f"{rounds} rounds, interleaved; record files = seed YAML + JSON sidecar per checkpoint",
        ],
    )
    section.stats = run_interleaved(contestants, rounds, warmup=1, progress=progress)
    section.ratio("list", "raw_glob_read", note="I/O floor: every file phaselog reads")
    section.ratio("list", "raw_glob_parse", note="what the seed tool does: parse every YAML")
    return section
