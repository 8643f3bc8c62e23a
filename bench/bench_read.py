"""[2] Read: Ledger.read of the latest attempt vs open + read + CSafeLoader parse of its file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import _data, _raw
from bench._timing import BASELINE, INFO, SUBJECT, Contestant, Section, run_interleaved

TICKET = "BENCH-2"
INNER = 10


def run(workdir: Path, *, rounds: int, progress: Any = None) -> Section:
    """Time Ledger.read (latest completed attempt of implement) against a raw read + parse."""
    root = workdir / "read-store"
    ledger = _data.open_ledger(root)
    run_uuid = _data.run_id("read")
    for phase in ("implement", "implement", "local_review"):
        _data.write_phase(ledger, TICKET, run_uuid, phase)
    stored = ledger.read(TICKET, run_uuid, "implement")
    path = str(root / "checkpoints" / stored.location)
    assert stored.record.attempt_number == 2, stored.location
    store = ledger.store

    contestants = [
        Contestant(
            "read",
            "Ledger.read, latest attempt of implement",
            SUBJECT,
            lambda _: ledger.read(TICKET, run_uuid, "implement"),
            inner=INNER,
        ),
        Contestant(
            "store_get",
            "FilesStore.get of that attempt (no Ledger)",
            INFO,
            lambda _: store.get(TICKET, run_uuid, 1, "implement", 2),
            inner=INNER,
        ),
        Contestant(
            "raw_read",
            "raw open + read + CSafeLoader parse, same file",
            BASELINE,
            lambda _: _raw.read_parse(path),
            inner=INNER,
        ),
    ]
    section = Section(
        "read",
        f"[2] read: Ledger.read of the latest attempt ({Path(path).stat().st_size}-byte YAML "
        "+ sidecar; run has 3 records)",
        [
            f"store {root} on {_data.filesystem_of(root, options=False)} (warm page cache)",
            f"{rounds} rounds x {INNER} calls (a sample is their mean), interleaved",
        ],
    )
    section.stats = run_interleaved(contestants, rounds, warmup=3, progress=progress)
    section.ratio("read", "raw_read")
    section.ratio("store_get", "raw_read", note="one record, without the Ledger's lookups")
    return section
