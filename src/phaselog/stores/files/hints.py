"""The run folder's newest-attempt hint: a derived accelerator, never the truth (D185).

A write, a read of a phase's newest checkpoint and a status need each phase's record groups
(:data:`phaselog.stores.names.RecordGroup`: how many attempts, the newest, the newest completed),
which a listing of the run folder gives at a cost that grows with the attempts. The last append
leaves them, with the folder's stamp, in the bytes of the run's ``.lock`` file (which every
append already holds open read-write to take its flock: no extra file, no extra inode)::

    phaselog-hint 1 <st_dev> <st_ino> <st_mtime_ns> <st_ctime_ns> <temps> <body bytes> <sha256[:16] of body>
    <ordinal> <phase> <count> <newest> <newest completed or ->      one line per group, sorted

A hint is used only when all of these hold, else the caller lists the folder as before (and a
folder of a few dozen names is always listed: that costs less than the checks below):

* it parses exactly (header, length, checksum: a torn write or a hand edit fails here);
* the run folder's stamp (device, inode, mtime and ctime in ns) is the one it names: any name
  added, removed or renamed in the folder since the hint was written changes the folder's
  mtime/ctime (with fine-grained timestamps, a change after a ``stat`` always gets a new one);
* the attempt after each group's newest is absent under both of its names (two ``stat`` calls per
  group: a tool that writes a phase's next attempt without touching the hint is seen even on a
  kernel whose folder timestamps are coarse).

Only an append, under the run's exclusive lock and after its record is durable, writes a hint;
readers never write (a read-only store stays untouched). A crash before or during the hint's
write leaves a hint whose stamp or checksum no longer matches: the next call lists. Seed-tool
runs (no ``.lock``, or an empty one) are listed as before. ``<temps>`` is 1 when the listing
behind the hint left young temp files in the folder: the next append lists again so that it can
remove them once they are old (a crash's leftovers are still cleaned up).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat

from phaselog import _faults
from phaselog.stores.files.io import READ_FLAGS, exists
from phaselog.stores.names import RecordGroup, checkpoint_name, failed_name

#: The file whose bytes hold the hint (the run's flock target; see io.lock_run).
HINT_FILE = ".lock"
_MAGIC = "phaselog-hint 1"
#: A hint larger than this is not read (a run with thousands of phase groups lists instead).
MAX_HINT_BYTES = 1 << 16

#: A folder smaller than this (its ``st_size``: one or two blocks on ext4, a few hundred names on
#: tmpfs or btrfs) is listed: a listing of a few dozen names costs less than the hint's checks.
MIN_FOLDER_BYTES = 8192

Stamp = tuple[int, int, int, int]


def folder_stamp(run_fd: int) -> Stamp:
    """The run folder's stamp: what any change to its names changes."""
    st = os.fstat(run_fd)
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def encode(stamp: Stamp, groups: list[RecordGroup], *, temps: bool) -> bytes:
    """The hint's bytes for ``groups`` of a folder whose stamp is ``stamp``."""
    body = "".join(
        f"{o} {p} {n} {top} {'-' if done is None else done}\n" for o, p, n, top, done in sorted(groups)
    ).encode()
    digest = hashlib.sha256(body).hexdigest()[:16]
    head = f"{_MAGIC} {stamp[0]} {stamp[1]} {stamp[2]} {stamp[3]} {int(temps)} {len(body)} {digest}\n"
    return head.encode() + body


def decode(data: bytes, stamp: Stamp) -> tuple[list[RecordGroup], bool] | None:
    """The groups and the temps flag of a hint written at ``stamp``; None for anything else."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        return None
    parts = head.decode("ascii", "replace").split(" ")
    if len(parts) != 9 or " ".join(parts[:2]) != _MAGIC:
        return None
    try:
        dev, ino, mtime, ctime, temps, size = (int(x) for x in parts[2:8])
    except ValueError:
        return None
    if (dev, ino, mtime, ctime) != stamp or temps not in (0, 1) or size != len(body):
        return None
    if hashlib.sha256(body).hexdigest()[:16] != parts[8]:
        return None
    groups: list[RecordGroup] = []
    try:
        for line in body.decode("ascii").splitlines():
            o, p, n, top, done = line.split(" ")
            groups.append((int(o), p, int(n), int(top), None if done == "-" else int(done)))
    except (UnicodeDecodeError, ValueError):
        return None
    return groups, bool(temps)


def read(run_fd: int) -> tuple[list[RecordGroup], bool] | None:
    """The run folder's groups and temps flag from its hint, checked (see the module docstring);
    None when there is no usable hint, or the folder is small enough to list (the caller lists)."""
    st = os.fstat(run_fd)
    if st.st_size < MIN_FOLDER_BYTES:
        return None
    stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    try:
        fd = os.open(HINT_FILE, READ_FLAGS, dir_fd=run_fd)
    except OSError:
        return None  # no .lock (a seed-tool run, or never written by phaselog), or a symlink
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not 0 < st.st_size <= MAX_HINT_BYTES:
            return None
        data = os.read(fd, MAX_HINT_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    found = decode(data, stamp)
    if found is None:
        return None
    for o, p, _n, top, _done in found[0]:
        # The attempt after the newest, written by a tool that does not keep the hint?
        if exists(run_fd, checkpoint_name(o, p, top + 1)) or exists(run_fd, failed_name(o, p, top + 1)):
            return None
    return found


def with_attempt(
    groups: list[RecordGroup], ordinal: int, phase: str, attempt: int, *, completed: bool
) -> list[RecordGroup]:
    """``groups`` with one new attempt (absent from them) added, as a fresh listing would group it."""
    out: list[RecordGroup] = []
    found = False
    for o, p, n, top, done in groups:
        if (o, p) == (ordinal, phase):
            found = True
            newest_done = attempt if completed and (done is None or attempt > done) else done
            out.append((o, p, n + 1, max(top, attempt), newest_done))
        else:
            out.append((o, p, n, top, done))
    if not found:
        out.append((ordinal, phase, 1, attempt, attempt if completed else None))
    return out


def write(lock_fd: int, run_fd: int, groups: list[RecordGroup], *, temps: bool) -> None:
    """Leave ``groups`` as the hint in the run's ``.lock`` (held open read-write, locked).

    Called after the append's record is durable and its temp files are gone, so the stamp taken
    here is the folder's last. Not fsynced: a hint lost in a crash is a listing later. A failure
    to write it is ignored for the same reason (the hint it leaves fails its checks).
    """
    _faults.point("files.before_hint")  # the record is durable, the hint stale: the next call lists
    with contextlib.suppress(OSError):
        data = encode(folder_stamp(run_fd), groups, temps=temps)
        if len(data) > MAX_HINT_BYTES:
            os.ftruncate(lock_fd, 0)
            return
        half = len(data) // 2
        os.pwrite(lock_fd, data[:half], 0)
        _faults.point("files.hint_half_written")  # a torn hint: its checksum fails, the next call lists
        os.pwrite(lock_fd, data[half:], half)
        os.ftruncate(lock_fd, len(data))
