"""Seed files without sidecars: when the files store trusts one (history from before phaselog).

A run folder may hold YAML seed files the seed tool wrote (no sidecar). :class:`RunView` decides,
from one listing of the folder, whether such a file is trusted or is a phaselog record whose
sidecar was deleted (damaged, rule ``missing_sidecar``).
"""

from __future__ import annotations

import os
from datetime import datetime

from phaselog.model.errors import Corrupt, UnsupportedVersion
from phaselog.model.records import Checkpoint, parse_timestamp
from phaselog.stores import kernel
from phaselog.stores import names as _names
from phaselog.stores.files.io import read_capped
from phaselog.stores.names import meta_name


class RunView:
    """What a run directory says about a seed file that has no sidecar (read lazily, once per listing).

    A seed file without a sidecar is what the seed tool writes. In a run phaselog writes (it holds
    sidecars) it is trusted only as history from before phaselog took the run over: a phaselog
    record links to its hash, or it is older than every phaselog record of the run. Otherwise it
    is a checkpoint phaselog wrote whose sidecar was deleted — and whose YAML may have been
    edited with it — so it is damaged (rule ``missing_sidecar``), never silently used.
    """

    def __init__(self, sidecar_cap: int, run_fd: int, rel_dir: str, names: list[str] | None = None) -> None:
        self.sidecar_cap, self.run_fd, self.rel_dir = sidecar_cap, run_fd, rel_dir
        self.names = names
        self._vouched: tuple[set[str], datetime | None, int] | None = None

    def _load(self) -> tuple[set[str], datetime | None, int]:
        if self._vouched is None:
            names = self.names if self.names is not None else os.listdir(self.run_fd)
            sidecars = [n for n in names if _names.parse_meta_name(n) or _names.parse_failed_name(n)]
            hashes: set[str] = set()
            earliest: datetime | None = None
            for n in sidecars:
                try:
                    raw = read_capped(self.run_fd, n, self.rel_dir, self.sidecar_cap)
                    doc = kernel.decode_document(raw, f"{self.rel_dir}/{n}") if raw is not None else None
                    if doc is None:
                        continue
                    meta = doc.get("phaselog") or {}
                    hashes.add(str(meta.get("prev_hash")))
                    for entry in (meta.get("basis") or {}).values():
                        hashes.add(str(entry.get("hash")) if isinstance(entry, dict) else "")
                    ts = parse_timestamp((doc.get("checkpoint") or {}).get("timestamp_utc"))
                except (Corrupt, UnsupportedVersion, AttributeError):
                    continue  # a damaged sidecar vouches for nothing (and is reported on its own)
                earliest = ts if earliest is None or ts < earliest else earliest
            self._vouched = (hashes, earliest, len(sidecars))
        return self._vouched

    def check_unsidecared(self, cp: Checkpoint, location: str) -> None:
        """Raise Corrupt (rule ``missing_sidecar``) unless ``cp`` may be a seed-tool checkpoint."""
        hashes, earliest, sidecars = self._load()
        if not sidecars or cp.content_hash in hashes or (earliest is not None and cp.timestamp_utc < earliest):
            return
        raise Corrupt(
            f"{location}: its sidecar {meta_name(cp.phase_ordinal, cp.phase, cp.attempt_number)} is missing in a "
            "run phaselog writes, and no phaselog record vouches for it: it cannot be trusted (restore the "
            "sidecar, or move it aside with `phaselog doctor --quarantine`)",
            path=location,
            rule="missing_sidecar",
        )
