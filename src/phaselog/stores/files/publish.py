"""How a record becomes visible in a files store: the crash-safe sequence, with its fault points.

temp file(s) → write → fsync → ``link`` to the final name (fails if it exists) → fsync the
directory. A completed record is two files: the sidecar is linked first, then the seed file, so a
crash between the two leaves a sidecar without its seed file, which is never visible as a record
and is replaced by the next writer (under the run's lock). ``tests/test_crash.py`` kills writers
at every fault point named here.
"""

from __future__ import annotations

import contextlib
import os

from phaselog import _faults
from phaselog.model.errors import AlreadyExists
from phaselog.model.records import Checkpoint
from phaselog.stores.files.io import create_temp, exists, fsync_all, write_temp
from phaselog.stores.kernel import record_location
from phaselog.stores.names import checkpoint_name, failed_name, meta_name


def publish_completed(run_fd: int, record: Checkpoint, names: set[str] | None, files: tuple[bytes, bytes]) -> None:
    """Publish a completed record: its sidecar, then its seed file (``files``), never overwriting.

    ``names``: the run folder's listing, taken under the run's lock (None: not listed, the
    sidecar's name is looked up by itself).
    """
    ordinal, phase, attempt = record.phase_ordinal, record.phase, record.attempt_number
    meta_bytes, yaml_bytes = files
    final_meta, final_cp = meta_name(ordinal, phase, attempt), checkpoint_name(ordinal, phase, attempt)
    temps: list[str] = []
    fds: list[int] = []
    try:
        name, fd = create_temp(run_fd, meta_bytes)
        temps.append(name)
        fds.append(fd)
        _faults.point("files.after_meta_temp")
        name, fd = create_temp(run_fd, yaml_bytes)
        temps.append(name)
        fds.append(fd)
        _faults.point("files.after_cp_temp")
        # Both files must reach the disk before either is linked: fsync them concurrently
        # (the journal commits them together), then link the sidecar, then the seed file.
        fsync_all(fds)
        for fd in fds:
            os.close(fd)
        fds.clear()
        _faults.point("files.after_temps_fsync")
        if final_meta in names if names is not None else exists(run_fd, final_meta):
            # A sidecar without its seed file is what a crash between the two links leaves
            # behind. It was never visible as a record, and we hold the run's lock.
            os.unlink(final_meta, dir_fd=run_fd)
        os.link(temps[0], final_meta, src_dir_fd=run_fd, dst_dir_fd=run_fd)
        _faults.point("files.after_meta_link")
        try:
            os.link(temps[1], final_cp, src_dir_fd=run_fd, dst_dir_fd=run_fd)
        except FileExistsError:
            # Another tool (the seed tool takes no lock) published this attempt first.
            os.unlink(final_meta, dir_fd=run_fd)
            raise AlreadyExists(
                f"attempt {attempt} of phase {phase} already exists ({record_location(record)})",
                path=record_location(record),
            ) from None
        _faults.point("files.after_cp_link")
        os.fsync(run_fd)
        _faults.point("files.after_dir_fsync")
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        for t in temps:
            with contextlib.suppress(OSError):
                os.unlink(t, dir_fd=run_fd)


def publish_failed(run_fd: int, record: Checkpoint, meta_bytes: bytes) -> None:
    """Publish the record of a failed attempt (one file), never overwriting."""
    final = failed_name(record.phase_ordinal, record.phase, record.attempt_number)
    tmp = write_temp(run_fd, meta_bytes)
    try:
        _faults.point("files.after_failed_temp")
        os.link(tmp, final, src_dir_fd=run_fd, dst_dir_fd=run_fd)
        _faults.point("files.after_failed_link")
        os.fsync(run_fd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=run_fd)
