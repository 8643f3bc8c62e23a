"""An attempt's output on its way into the store, in bounded memory (model/logs.py says the shape).

The sink is handed the output as it comes (a shell phase's stdout and stderr bytes, a Python
phase's formatted ``ctx.logger`` lines). It keeps two bounded buffers: the tail (the last ``cap``
bytes, the oldest dropped and counted) and the live part not yet appended. Live chunks go to the
store at most :data:`~phaselog.model.logs.CHUNK_BYTES` at a time, when that much is waiting or a
second after the last one, until ``cap`` bytes went live; :meth:`close` appends the kept log (the
tail), which also holds what had not gone live yet. An attempt that printed nothing writes nothing;
one that ended within a second of its first output writes only its kept log.

Writes go through the store of the thread that made the sink (the executor's): output from another
thread is buffered and written by the next call on that thread (or kept by ``close``). A store that
refuses a log entry never fails the phase: the console says so once and the sink stops writing.
"""

from __future__ import annotations

import codecs
import contextlib
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from phaselog.model.entries import entry_bytes
from phaselog.model.errors import PhaselogError
from phaselog.model.logs import CHUNK_BYTES, LOGS, KeptLog, LogChunk
from phaselog.runner.outcome import Failure, Success
from phaselog.runner.signals import Interrupt
from phaselog.stores.names import log_chunk_name, log_end_name, log_prefix, parse_log_name

if TYPE_CHECKING:
    from phaselog.stores.base import Store

#: How long live output waits for more before it is appended as a chunk (seconds).
FLUSH_AFTER_S = 1.0


def _char_start(buf: bytes | bytearray, i: int) -> int:
    """The first index ≥ ``i`` that starts a UTF-8 character (at most 3 continuation bytes on)."""
    n = len(buf)
    while i < n and (buf[i] & 0xC0) == 0x80:
        i += 1
    return i


def _char_cut(buf: bytes, i: int) -> int:
    """The last index ≤ ``i`` at which ``buf`` may be cut between two UTF-8 characters."""
    while 0 < i < len(buf) and (buf[i] & 0xC0) == 0x80:
        i -= 1
    return i


class LogSink:
    """One attempt's output: the kept tail and the live chunks (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        ticket_id: str,
        run_id: str,
        phase: str,
        ordinal: int,
        attempt: int,
        cap: int,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.key = (ticket_id, run_id, phase, ordinal, attempt)
        self.cap = cap
        self.say = say
        self.owner = threading.get_ident()
        self.lock = threading.Lock()
        self.decoders: dict[str, codecs.IncrementalDecoder] = {}
        self.tail = bytearray()
        self.total = 0
        self.dropped = 0
        self.pending = bytearray()
        self.live_offset = 0  # bytes appended live so far (the next chunk's offset)
        self.live_left = cap  # bytes that may still go live
        self.chunks = 0
        self.stopped_note: str | None = None
        self.broken = cap == 0
        self.closed = False
        self.take: int | None = None
        self.last_flush = time.monotonic()

    # -- taking output --------------------------------------------------------------------------
    def write(self, data: bytes, stream: str = "out") -> None:
        """Take raw output of ``stream`` (each stream decoded as UTF-8 on its own)."""
        if self.cap == 0 or not data:
            return
        dec = self.decoders.get(stream)
        if dec is None:
            dec = self.decoders[stream] = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.write_text(dec.decode(data))

    def write_text(self, text: str) -> None:
        """Take decoded output (a Python phase's log line, with its newline)."""
        if self.cap == 0 or not text:
            return
        data = text.encode("utf-8")
        with self.lock:
            self._keep(data)
            self._live(data)
        self.tick(force=len(self.pending) >= CHUNK_BYTES)

    def _keep(self, data: bytes) -> None:
        self.total += len(data)
        if len(data) >= self.cap:
            self.dropped += len(self.tail) + len(data) - self.cap
            self.tail = bytearray(data[len(data) - self.cap :])
        else:
            self.tail += data
            over = len(self.tail) - self.cap
            if over <= 0:
                return
            self.dropped += over
            del self.tail[:over]
        start = _char_start(self.tail, 0)  # never keep half a character
        if start:
            self.dropped += start
            del self.tail[:start]

    def _live(self, data: bytes) -> None:
        if self.live_left <= 0:
            return
        if len(data) > self.live_left:
            cut = _char_cut(data, self.live_left)
            self.pending += data[:cut]
            self.live_left = 0
            self.stopped_note = (
                f"live output stops here, at the cap of {self.cap} bytes: the last {self.cap} bytes "
                "are kept when the attempt ends"
            )
            return
        self.pending += data
        self.live_left -= len(data)

    # -- writing --------------------------------------------------------------------------------
    def tick(self, *, force: bool = False) -> None:
        """Append what is waiting as a chunk when a second passed since the last one (or ``force``)."""
        if not self.pending and self.stopped_note is None:
            return
        if threading.get_ident() != self.owner or self.broken:
            return
        if force or self.stopped_note is not None or time.monotonic() - self.last_flush >= FLUSH_AFTER_S:
            self._flush()

    def _flush(self) -> None:
        with self.lock:
            if not self.pending and self.stopped_note is None:
                return
            data = bytes(self.pending)
            self.pending.clear()
            note, self.stopped_note = self.stopped_note, None
            if note is not None:
                self.live_left = -1  # said once: nothing more goes live
            offset = self.live_offset
            self.live_offset += len(data)
            self.chunks += 1
            seq = self.chunks
        self.last_flush = time.monotonic()
        t, r, phase, ordinal, attempt = self.key
        chunk = LogChunk(
            ticket_id=t,
            run_id=r,
            phase=phase,
            phase_ordinal=ordinal,
            attempt_number=attempt,
            seq=seq,
            offset=offset,
            text=data.decode("utf-8", "replace"),
            timestamp=datetime.now(UTC),
            note=note,
        )
        self._put(log_chunk_name(ordinal, phase, attempt, seq, self._take()), entry_bytes(chunk))

    def close(self) -> KeptLog | None:
        """Append the kept log; None when nothing was kept (or it failed)."""
        if self.closed or self.cap == 0:
            return None
        self.closed = True
        for dec in self.decoders.values():
            rest = dec.decode(b"", final=True)
            if rest:
                data = rest.encode("utf-8")
                self._keep(data)
                self._live(data)
        if self.total == 0 or self.broken:
            return None
        # What is still waiting to go live is not appended: the kept log holds it (its tail at least),
        # and a follower takes what it lacks from there. A quick phase costs one write, not two.
        self.pending.clear()
        t, r, phase, ordinal, attempt = self.key
        kept = KeptLog(
            ticket_id=t,
            run_id=r,
            phase=phase,
            phase_ordinal=ordinal,
            attempt_number=attempt,
            text=bytes(self.tail).decode("utf-8", "replace"),
            total_bytes=self.total,
            dropped_bytes=self.dropped,
            cap_bytes=self.cap,
            chunks=self.chunks,
            timestamp=datetime.now(UTC),
        )
        return kept if self._put(log_end_name(ordinal, phase, attempt, self._take()), entry_bytes(kept)) else None

    def _take(self) -> int:
        """This execution's number among the attempt's (found on the first write: a silent phase lists
        nothing): 1, or one more than an earlier execution's whose runner died before the record (D319)."""
        if self.take is None:
            t, r, phase, ordinal, attempt = self.key
            prefix = log_prefix(ordinal, phase, attempt)
            try:
                names = self.store.entry_names(LOGS, t, r)
            except (PhaselogError, OSError):
                names = []  # the write that follows reports what is wrong
            taken = [got.take for n in names if n.startswith(prefix) and (got := parse_log_name(n)) is not None]
            self.take = max(taken, default=0) + 1
        return self.take

    def _put(self, name: str, body: bytes) -> bool:
        if self.broken:
            return False
        t, r = self.key[0], self.key[1]
        try:
            self.store.put_entry(LOGS, t, r, name, body)
        except (PhaselogError, OSError) as exc:
            self.broken = True
            if self.say is not None:
                message = exc.message if isinstance(exc, PhaselogError) else str(exc)
                self.say(f"log {self.key[2]} attempt {self.key[4]}: not kept in the store ({message})")
            return False
        return True


def finish(sink: LogSink, outcome: Success | Failure) -> Success | Failure:
    """Close ``sink`` once the attempt's work is done; a signal meanwhile makes the attempt interrupted
    (recorded as such by the engine, which then stops the run), as a signal during the work does."""
    try:
        sink.close()
    except Interrupt as exc:
        name = signal.Signals(exc.signum).name
        return Failure("interrupted", f"interrupted by {name}", {"signal": name}, cause=exc, signum=exc.signum)
    return outcome


def abandon(sink: LogSink) -> None:
    """Keep what the sink holds while the runner fails (best effort: the runner's error goes on)."""
    with contextlib.suppress(Exception):
        sink.close()
