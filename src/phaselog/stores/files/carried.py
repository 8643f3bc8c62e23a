"""The runs a files store handle carries: the snapshot it last saw of each, with stamps (D186).

A write reads its run's snapshot (``Store.snapshot``: a listing or the hint, and every phase's
newest record read and decoded), decides, and appends. Instead, the handle keeps the snapshot a
write decided on plus the record it appended (:func:`phaselog.stores.carry.with_appended`,
the same derivation as the SQL stores'), with the stamps of everything that snapshot was read
from: the run folder (device, inode, mtime and ctime in ns: any name added or removed), its
``.progress`` and ``.approvals`` folders (an event or a judgement added), and every file behind a
carried record (inode, size, mtime, ctime: a record edited in place). The next write into the run
takes the carried snapshot only when every stamp is still the same (checked at the premise: a
dozen ``stat`` calls instead of a snapshot's reads and decodes), and the append carries the new
snapshot on only when the stamps still held under the run's lock, before it published.

What is carried is what a fresh read would give, or nothing: a snapshot with damaged records,
with attempts in flight, with the ticket's markers (no record names the pipeline yet: the
markers' folder is not stamped), or read with ``history`` is never carried, and any doubt (a stamp that
moved, an append refused) drops the run. Snapshots served to readers (status) are not carried.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import TYPE_CHECKING

from phaselog.stores.carry import premise_holds, with_appended
from phaselog.stores.names import checkpoint_name, failed_name, meta_name
from phaselog.stores.values import Stored

if TYPE_CHECKING:
    from phaselog.model.records import Checkpoint
    from phaselog.stores.snapshot import RunSnapshot

#: How many runs one store handle carries (the oldest is dropped first).
CARRIED_RUNS = 64

Key = tuple[str, str]
FileStamp = tuple[int, int, int, int] | None
RunStamp = tuple[FileStamp, FileStamp, FileStamp, tuple[FileStamp, ...]]


def _stat(dir_fd: int, name: str) -> FileStamp:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def record_files(snap: RunSnapshot) -> list[str] | None:
    """The files behind the snapshot's records (None: a damaged record; such a snapshot is not carried)."""
    names: list[str] = []
    for (ordinal, attempt), entry in sorted(snap.records.items()):
        if not isinstance(entry, Stored):
            return None
        phase = entry.record.phase
        if entry.record.completed:
            names += (checkpoint_name(ordinal, phase, attempt), meta_name(ordinal, phase, attempt))
        else:
            names.append(failed_name(ordinal, phase, attempt))
    return names


def run_stamp(run_fd: int, files: list[str], *, entries: RunStamp | None = None) -> RunStamp:
    """The stamps of the run folder open as ``run_fd``, its entry folders and ``files`` in it.

    ``entries``: a stamp whose entry folders' stamps are taken as they are (the caller holds the
    run's exclusive lock, which every audit entry of the run waits for).
    """
    st = os.fstat(run_fd)
    folder = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns)
    if entries is None:
        progress, approvals = _stat(run_fd, ".progress"), _stat(run_fd, ".approvals")
    else:
        progress, approvals = entries[1], entries[2]
    return (folder, progress, approvals, tuple(_stat(run_fd, n) for n in files))


class CarriedRuns:
    """The snapshots one files store handle carries, by (ticket, run), each with its stamps."""

    def __init__(self, limit: int = CARRIED_RUNS) -> None:
        self.limit = limit
        self._runs: OrderedDict[Key, tuple[RunSnapshot, list[str], RunStamp]] = OrderedDict()

    def premise(self, key: Key, run_fd: int) -> RunSnapshot | None:
        """The carried snapshot of ``key`` when nothing it was read from moved (else it is dropped)."""
        got = self._runs.get(key)
        if got is None:
            return None
        snap, files, stamp = got
        if run_stamp(run_fd, files) != stamp:
            del self._runs[key]
            return None
        return snap

    def keep(self, key: Key, snap: RunSnapshot, run_fd: int, *, entries: RunStamp | None = None) -> None:
        """Carry ``snap``, which is what the run folder open as ``run_fd`` holds now."""
        files = record_files(snap)
        if files is None or snap.history or snap.events or snap.markers is not None:
            self._runs.pop(key, None)
            return
        self._runs[key] = (snap, files, run_stamp(run_fd, files, entries=entries))
        self._runs.move_to_end(key)
        while len(self._runs) > self.limit:
            self._runs.popitem(last=False)

    def begin(self, record: Checkpoint, expected_latest: int, run_fd: int) -> tuple[RunSnapshot, RunStamp] | None:
        """Under the run's lock, before ``record`` is published: the carried snapshot it was decided
        on, if its stamps still hold (None otherwise). The run is dropped either way until
        :meth:`appended` carries it on."""
        got = self._runs.pop((record.ticket_id, record.run_id), None)
        if got is None:
            return None
        snap, files, stamp = got
        if not premise_holds(snap, record, expected_latest):
            return None
        now = run_stamp(run_fd, files)
        return (snap, now) if now == stamp else None

    def begin_empty(self, record: Checkpoint, run_fd: int) -> tuple[RunSnapshot, RunStamp] | None:
        """Under the run's lock, for a run folder that holds no record and no audit entry yet: the
        snapshot any write into it is decided on (None when ``record`` names no pipeline, as then
        the ticket's markers are part of the snapshot)."""
        from phaselog.stores.snapshot import RunSnapshot  # lazy: `phaselog read` builds no snapshot

        now = run_stamp(run_fd, [])
        if record.pipeline is None or now[1] is not None or now[2] is not None:
            return None
        return RunSnapshot(record.ticket_id, record.run_id, (), {}), now

    def appended(self, base: tuple[RunSnapshot, RunStamp], record: Checkpoint, location: str, run_fd: int) -> None:
        """``record`` is durable (and the run still locked): carry ``base`` with it."""
        from phaselog.model.records import detached_copy  # lazy: only a carried append copies a record

        snap = with_appended(base[0], Stored(detached_copy(record), location, record.content_hash))
        if snap is not None:
            self.keep((record.ticket_id, record.run_id), snap, run_fd, entries=base[1])

    def drop(self, key: Key) -> None:
        """Carry nothing for ``key``."""
        self._runs.pop(key, None)
