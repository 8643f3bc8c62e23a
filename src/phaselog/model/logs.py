"""An attempt's output kept in the store: live chunks while it runs, the kept tail when it ends.

A shell phase's stdout and stderr (interleaved as they came) and a Python phase's ``ctx.logger``
lines are one text per attempt. While the attempt runs, the runner appends :class:`LogChunk`
entries (the output in order, from its start, up to the cap: a follower on another machine reads
them); when it ends, one :class:`KeptLog` entry holds the last ``cap_bytes`` of the output and says
how many bytes were dropped before them. Both are audit entries of kind ``logs`` (names in
:mod:`phaselog.stores.names`), immutable, content-hashed like every entry; the attempt's record is
never touched. Sizes are counted in bytes of the text's UTF-8 (the output decoded as UTF-8, a bad
byte read as U+FFFD). See docs/runner.md "Logs" and decisions D310-D314.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from phaselog.model._lazyre import LazyPattern
from phaselog.model.entries import EntryRecord
from phaselog.model.errors import UsageError
from phaselog.model.records import SCHEMA_VERSION

#: The entry kind of log chunks and kept logs.
LOGS = "logs"
#: The default cap on what the store keeps of one attempt's output (its tail), in bytes.
DEFAULT_LOG_CAP = 1024 * 1024
#: The largest cap a run may ask for (an entry must stay well under the store's entry cap).
MAX_LOG_CAP = 8 * 1024 * 1024
#: The most one live chunk holds: a follower sees output at least this often (or once a second).
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class LogChunk(EntryRecord):
    """Part of an attempt's live output: ``text`` starts ``offset`` bytes into the output."""

    KIND: ClassVar[str] = "phaselog.log_chunk"
    WHAT: ClassVar[str] = "log chunk"

    ticket_id: str
    run_id: str
    phase: str
    phase_ordinal: int
    attempt_number: int
    seq: int
    offset: int
    text: str
    timestamp: datetime
    #: Said once, on the last chunk, when the live output reached the cap (the rest comes at the end).
    note: str | None = None
    schema_version: str = SCHEMA_VERSION

    @property
    def end(self) -> int:
        """The output's byte offset just after this chunk."""
        return self.offset + len(self.text.encode("utf-8"))


@dataclass(frozen=True)
class KeptLog(EntryRecord):
    """An attempt's log as kept when it ended: the last ``cap_bytes`` (at most) of its output."""

    KIND: ClassVar[str] = "phaselog.log"
    WHAT: ClassVar[str] = "attempt log"

    ticket_id: str
    run_id: str
    phase: str
    phase_ordinal: int
    attempt_number: int
    text: str
    #: Bytes the attempt wrote in all; ``dropped_bytes`` of them (the oldest) are not kept.
    total_bytes: int
    dropped_bytes: int
    cap_bytes: int
    #: How many live chunks the attempt's output was appended as while it ran.
    chunks: int
    timestamp: datetime
    schema_version: str = SCHEMA_VERSION


_SIZE_RE = LazyPattern(r"(\d+)\s*(B|KB|KiB|MB|MiB|K|M)?", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024 * 1024, "mb": 1000 * 1000, "mib": 1024 * 1024}


def parse_log_cap(value: str | int | None, *, field: str = "log_cap") -> int:
    """A log cap in bytes from ``1048576``, ``512KiB``, ``1MiB``, ``2MB`` (None: the default; 0: keep none).

    UsageError naming ``field`` for anything else, or for a cap over :data:`MAX_LOG_CAP`.
    """
    if value is None:
        return DEFAULT_LOG_CAP
    if isinstance(value, bool):
        raise UsageError(f"{field}: must be a size in bytes, e.g. 1MiB, got {value!r}", field=field, rule="type")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE_RE.fullmatch(value.strip())
        if m is None:
            raise UsageError(
                f"{field}: must be a size such as 1048576, 512KiB or 1MiB, got {value!r:.40}", field=field, rule="size"
            )
        n = int(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if n < 0 or n > MAX_LOG_CAP:
        raise UsageError(
            f"{field}: must be from 0 (keep no log) to {MAX_LOG_CAP} bytes (8 MiB), got {n}", field=field, rule="range"
        )
    return n
