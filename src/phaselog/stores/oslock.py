"""The operating system's advisory locks, as the backends take them: no backend's rules, only the OS.

A low-level module any backend may import (the files store for a folder being removed, the SQLite
store for its write gate) without one backend importing another.
"""

from __future__ import annotations

import fcntl
import os


def open_locked(path: str, flags: int, *, dir_fd: int | None = None) -> int | None:
    """Open ``path`` with ``flags`` and wait for an exclusive ``flock`` on it; the descriptor, or None.

    None when the path cannot be opened or locked (the descriptor is closed then): the caller goes
    on without the lock (a folder already gone, a gate that cannot be taken). Closing the
    descriptor releases the lock.
    """
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        return None
    return fd
