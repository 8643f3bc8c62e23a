"""[2] Read: Ledger.read of the latest attempt vs open + read + CSafeLoader parse of its file.

Each sample reads a run of its own (implement a1, a2 and local_review a1), on a ledger opened
after the runs were written: no memo of a repeated read carries the figure (issue 22).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import phaselog
from bench import _data, _raw
from bench._timing import BASELINE, INFO, SUBJECT, Contestant, Section, run_interleaved

TICKET = "BENCH-2"
WARMUP = 3


def run(workdir: Path, *, rounds: int, progress: Any = None) -> Section:
    """Time Ledger.read (latest completed attempt of implement) against a raw read + parse."""
    root = workdir / "read-store"
    runs = [_data.run_id(f"read-{i}") for i in range(rounds + WARMUP)]
    paths = []
    with _data.no_fsync(), phaselog.open(root) as writer:
        for run_uuid in runs:
            written = [
                _data.write_phase(writer, TICKET, run_uuid, p) for p in ("implement", "implement", "local_review")
            ]
            paths.append(str(root / "checkpoints" / written[1].location))
    ledger = phaselog.open(root)
    store = phaselog.open(root).store  # a handle of its own: its reads do not warm the ledger's

    def each(items: list[Any]) -> Any:
        it = iter(items)
        return lambda: next(it)

    contestants = [
        Contestant(
            "read",
            "Ledger.read, latest attempt of implement, each run once",
            SUBJECT,
            lambda r: ledger.read(TICKET, r, "implement"),
            each(runs),
        ),
        Contestant(
            "store_get",
            "FilesStore.get of that attempt (no Ledger), each run once",
            INFO,
            lambda r: store.get(TICKET, r, 1, "implement", 2),
            each(runs),
        ),
        Contestant(
            "raw_read",
            "raw open + read + CSafeLoader parse, same file",
            BASELINE,
            _raw.read_parse,
            each(paths),
        ),
    ]
    section = Section(
        "read",
        f"[2] read: Ledger.read of the latest attempt ({Path(paths[0]).stat().st_size}-byte YAML "
        "+ sidecar; each run has 3 records)",
        [
            f"store {root} on {_data.filesystem_of(root, options=False)} (warm page cache)",
            f"{rounds} rounds, interleaved; each sample reads a run of its own, on a ledger opened after the build",
        ],
    )
    try:
        section.stats = run_interleaved(contestants, rounds, warmup=WARMUP, progress=progress)
    finally:
        ledger.close()
        store.close()
    section.ratio("read", "raw_read")
    section.ratio("store_get", "raw_read", note="one record, without the Ledger's lookups")
    return section
