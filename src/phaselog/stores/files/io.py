"""The files store's system calls: descriptors, temp files, capped reads, concurrent fsyncs.

Nothing here knows about records; :mod:`phaselog.stores.files.store` (the store), its admin half
(:mod:`phaselog.stores.files.admin`) and its leases use these so that every path below the root
is opened segment by segment without following a symlink, and every publication goes through a
temp file that is fsynced before it is linked.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from phaselog.model._lazyre import LazyPattern
from phaselog.model.errors import Corrupt, InvalidIdentifier, PhaselogError, StoreError, TooLarge

#: Temp files older than this (seconds) are a crash's leftovers; a later writer removes them.
TEMP_MAX_AGE_S = 60.0
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted under a record's name must not hang the reader; fstat
# then refuses it as "not a regular file". Regular files ignore the flag.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@contextlib.contextmanager
def os_errors(what: str, **context: Any) -> Iterator[None]:
    """Turn an OSError raised inside into a StoreError ``"{what}: {strerror}"`` (with ``context``).

    phaselog's own errors pass as they are: AlreadyExists (a FileExistsError) and StoreError are
    OSErrors too, and callers rely on their type and context (a writer retries on AlreadyExists).
    """
    try:
        yield
    except PhaselogError:
        raise
    except OSError as exc:
        raise StoreError(f"{what}: {exc.strerror}", **context) from None


def create_temp(dir_fd: int, data: bytes) -> tuple[str, int]:
    """Write ``data`` to a new temp file; return its name and open descriptor (not fsynced)."""
    name = f".tmp-{os.getpid()}-{os.urandom(6).hex()}"
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        set_mode(fd, 0o600)  # whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    return name, fd


def set_mode(fd: int, mode: int) -> None:
    """Give ``fd`` exactly ``mode``; a no-op (one fstat) when it has it already.

    A chmod to the same mode still changes the inode (its ctime), and the next fsync of the run
    folder then carries that change to the journal: the files store calls this on every write.
    """
    if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
        os.fchmod(fd, mode)


def lock_run(run_fd: int, *, shared: bool = False) -> int:
    """Open the run folder's ``.lock`` (created if missing) and flock it; closing the fd releases it."""
    fd = os.open(".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=run_fd)
    try:
        set_mode(fd, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_temp(dir_fd: int, data: bytes) -> str:
    """Write ``data`` to a new temp file in ``dir_fd`` and fsync it; return its name."""
    name, fd = create_temp(dir_fd, data)
    try:
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    os.close(fd)
    return name


_TEMP_NAME = LazyPattern(r"\.tmp-")  # compiled by the first write, not at every start


def clean_temps(dir_fd: int, names: list[str]) -> int:
    """Remove the temp files among ``names`` older than TEMP_MAX_AGE_S (a crash left them); return
    how many temp files were left (too young, or another writer's)."""
    now = time.time()
    left = 0
    for n in filter(_TEMP_NAME.compiled.match, names):  # filtered in C: a long history's folder holds thousands
        left += 1
        try:
            st = os.stat(n, dir_fd=dir_fd, follow_symlinks=False)
            if now - st.st_mtime > TEMP_MAX_AGE_S:
                os.unlink(n, dir_fd=dir_fd)
                left -= 1
        except OSError:
            continue
    return left


def read_capped(dir_fd: int, name: str, rel_dir: str, limit: int) -> bytes | None:
    """Read a regular file of at most ``limit`` bytes (None: absent), never through a symlink."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Corrupt(
                f"{rel_dir}/{name} is a symlink; records are never read through symlinks",
                path=f"{rel_dir}/{name}",
                rule="no_symlinks",
            ) from None
        raise StoreError(f"cannot read {rel_dir}/{name}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Corrupt(f"{rel_dir}/{name} is not a regular file", path=f"{rel_dir}/{name}")
        if st.st_size > limit:
            raise TooLarge(
                f"{rel_dir}/{name} is {st.st_size} bytes, over the cap of {limit} bytes; not parsed",
                path=f"{rel_dir}/{name}",
                rule="max_record_bytes",
            )
        # One read of the size fstat gave (and a byte more) is the whole file unless it grew meanwhile.
        first = os.read(fd, min(st.st_size, limit) + 1)
        if len(first) <= st.st_size:
            return first
        chunks = [first]
        remaining = limit + 1 - len(first)
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise TooLarge(
                f"{rel_dir}/{name} grew over the cap while being read",
                path=f"{rel_dir}/{name}",
            )
        return data
    finally:
        os.close(fd)


_POOL: tuple[int, Any] | None = None


def fsync_all(fds: list[int]) -> None:
    """fsync every descriptor, the others concurrently with the first (os.fsync drops the GIL).

    One worker thread per process, created on first use and re-created after a fork (a forked
    child has no copy of the parent's threads).
    """
    global _POOL  # noqa: PLW0603 - a per-process cache of one worker thread
    if len(fds) == 1:
        os.fsync(fds[0])
        return
    if _POOL is None or _POOL[0] != os.getpid():
        from concurrent.futures import ThreadPoolExecutor  # lazy: only fsyncing many files uses threads

        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=len(fds) - 1, thread_name_prefix="phaselog-fsync"))
    futures = [_POOL[1].submit(os.fsync, fd) for fd in fds[1:]]
    os.fsync(fds[0])
    for f in futures:
        f.result()


def check_segment(seg: Any, root: Path) -> None:
    # O_NOFOLLOW only guards the last component of a path: a segment holding '/' or '..' (an
    # unvalidated run id passed to get/attempts/iter_records) would walk out.
    if not isinstance(seg, str) or seg in ("", ".", "..") or "/" in seg or "\x00" in seg:
        raise InvalidIdentifier(
            f"{seg!r} is not a single path segment; refusing to open it under {root}",
            rule="traversal",
        )


def same_folder(parent_fd: int, name: str, fd: int) -> bool:
    """True while ``fd`` is still the folder named ``name`` in ``parent_fd``."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)


def exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
