"""Run leases on the files store: the run's ``.lease`` file, locked for as long as a runner lives.

The runner holds an exclusive ``flock`` on ``checkpoints/<ticket>/<run>/.lease`` from acquisition
to release. The kernel drops the lock when the holder's process ends however it ends (SIGKILL
included), so "its process is provably gone" is exactly "the lock is free": a new runner takes
over at once and never displaces a live one. The file's content says who holds it (host, pid,
process start time, since when) and carries the fencing token, which rises by one at every
acquisition; the store's append checks it under the run's append lock (``fence=``).

The lock is on the file's inode, so the content is rewritten in place (never replaced by a
rename, which would give later contenders a fresh, unlocked inode). A reader may catch it half
written; it retries, and a holder it cannot read is reported as unknown.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from phaselog.model.errors import Fenced, NotFound, RunHeld, StoreError
from phaselog.stores.base import Judge, LeaseState, RunFence
from phaselog.stores.files.folders import Folders
from phaselog.stores.kernel import check_run_key, fenced

LEASE_NAME = ".lease"
_MAX_BYTES = 64 * 1024


def _parse(raw: bytes) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("token"), int) else None


def _state(ticket_id: str, run_id: str, doc: dict[str, Any] | None, *, lock_free: bool | None) -> LeaseState:
    doc = doc or {"token": 0, "holder": None}
    holder = doc.get("holder")
    return LeaseState(
        ticket_id,
        run_id,
        int(doc["token"]),
        holder if isinstance(holder, dict) else None,
        doc.get("renewed_at"),
        doc.get("expires_at"),
        time.time(),
        lock_free,
    )


def read_lease(run_fd: int) -> dict[str, Any] | None:
    """The run's lease document, or None if there is none (for the append fence)."""
    try:
        fd = os.open(LEASE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=run_fd)
    except FileNotFoundError:
        return None
    try:
        for _ in range(50):
            doc = _parse(os.pread(fd, _MAX_BYTES, 0))
            if doc is not None:
                return doc
            time.sleep(0.001)  # caught mid-rewrite by its holder: read again
    finally:
        os.close(fd)
    return None


def check_fence(run_fd: int, fence: RunFence) -> None:
    """Fenced unless the run's lease still carries ``fence`` (called under the append lock)."""
    doc = read_lease(run_fd)
    holder = doc.get("holder") if doc is not None else None
    ok = (
        doc is not None
        and doc.get("token") == fence.token
        and isinstance(holder, dict)
        and (fence.runner_id is None or holder.get("runner_id") == fence.runner_id)
    )
    if not ok:
        raise fenced(fence, None if doc is None else doc.get("token"), released=not holder)


class FileRunLeases:
    """The files store's run leases (see the module docstring)."""

    def __init__(self, folders: Folders) -> None:
        """Leases of the runs below the store root that ``folders`` opens."""
        self.folders = folders
        self._held: dict[tuple[str, str], int] = {}  # (ticket, run) -> the locked descriptor

    def _run_dir(self, ticket_id: str, run_id: str, *, create: bool) -> int:
        check_run_key(ticket_id, run_id)
        return self.folders.open_dir("checkpoints", ticket_id, run_id, create=create)

    def acquire(
        self, ticket_id: str, run_id: str, holder: Mapping[str, Any], *, ttl: float, judge: Judge
    ) -> LeaseState:
        """Lock the run's lease file; RunHeld if a live runner (or what it left running) holds it."""
        self.folders.refuse_if_read_only("take a run lease")
        if (ticket_id, run_id) in self._held:
            raise RunHeld(f"run {run_id} is already held by this process", rule="reentrant")
        run_fd = self._run_dir(ticket_id, run_id, create=True)
        try:
            fd = os.open(LEASE_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=run_fd)
        except OSError as exc:
            os.close(run_fd)
            raise StoreError(f"cannot open the lease of run {run_id}: {exc.strerror}", rule="lease") from None
        os.close(run_fd)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise StoreError(f"cannot lock the lease of run {run_id}: {exc.strerror}") from None
                current = _state(ticket_id, run_id, self._read_fd(fd), lock_free=False)
                verdict = judge(current)
                raise RunHeld(
                    f"run {run_id} is held by another runner: {verdict.reason}",
                    rule="lease_held",
                    holder=dict(current.holder) if current.holder else None,
                ) from None
            previous = _state(ticket_id, run_id, _parse(os.pread(fd, _MAX_BYTES, 0)), lock_free=True)
            took_over = None
            if previous.holder is not None:
                verdict = judge(previous)
                if not verdict.take:
                    raise RunHeld(
                        f"run {run_id} is held: {verdict.reason}", rule="lease_held", holder=dict(previous.holder)
                    )
                took_over = {"holder": dict(previous.holder), "token": previous.token, "reason": verdict.reason}
            now = time.time()
            doc = {
                "token": previous.token + 1,
                "holder": dict(holder),
                "renewed_at": now,
                "expires_at": now + ttl,
            }
            self._write_fd(fd, doc)
        except BaseException:
            os.close(fd)  # drops the lock if we had it
            raise
        self._held[(ticket_id, run_id)] = fd
        state = _state(ticket_id, run_id, doc, lock_free=False)
        return LeaseState(**{**state.__dict__, "took_over": took_over})

    def renew(
        self, ticket_id: str, run_id: str, token: int, *, ttl: float, holder: Mapping[str, Any] | None = None
    ) -> LeaseState:
        """Rewrite the holder's details (the lock needs no heartbeat); Fenced if no longer ours."""
        fd = self._held.get((ticket_id, run_id))
        doc = self._read_fd(fd) if fd is not None else None
        if (
            fd is None
            or doc is None
            or doc.get("token") != token
            or doc.get("holder") is None
            or not self._same_inode(fd)
        ):
            raise Fenced(f"run {run_id}: the lease (fencing token {token}) is no longer held", rule="fencing_token")
        now = time.time()
        doc.update(renewed_at=now, expires_at=now + ttl)
        if holder is not None:
            doc["holder"] = dict(holder)
        self._write_fd(fd, doc)
        return _state(ticket_id, run_id, doc, lock_free=False)

    def release(self, ticket_id: str, run_id: str, token: int) -> bool:
        """Mark the lease free and unlock it."""
        fd = self._held.pop((ticket_id, run_id), None)
        if fd is None:
            return False
        try:
            doc = self._read_fd(fd)
            if doc is None or doc.get("token") != token:
                return False
            doc["holder"] = None
            with contextlib.suppress(OSError):
                self._write_fd(fd, doc)
            return True
        finally:
            os.close(fd)

    def read(self, ticket_id: str, run_id: str) -> LeaseState | None:
        """The lease as stored (``lock_free`` None: judge the holder by its process)."""
        try:
            run_fd = self._run_dir(ticket_id, run_id, create=False)
        except NotFound:
            return None
        try:
            try:
                fd = os.open(LEASE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=run_fd)
            except FileNotFoundError:
                return None
        finally:
            os.close(run_fd)
        try:
            # Not probed with a lock of our own: even a shared lock, for a moment, would make a
            # runner starting right then see the lease as held. Liveness is judged from the content.
            return _state(ticket_id, run_id, self._read_fd(fd), lock_free=None)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Unlock every lease this service still holds (their holders end)."""
        for fd in self._held.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._held.clear()

    def _same_inode(self, fd: int) -> bool:
        """False when the lease file was removed or replaced under us (our lock is on a lost inode)."""
        mine = os.fstat(fd)
        run_fd = None
        try:
            holder = next(k for k, v in self._held.items() if v == fd)
            run_fd = self._run_dir(*holder, create=False)
            now = os.stat(LEASE_NAME, dir_fd=run_fd, follow_symlinks=False)
        except (StopIteration, OSError, NotFound):
            return False
        finally:
            if run_fd is not None:
                os.close(run_fd)
        return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)

    @staticmethod
    def _read_fd(fd: int) -> dict[str, Any] | None:
        for _ in range(50):
            doc = _parse(os.pread(fd, _MAX_BYTES, 0))
            if doc is not None or os.fstat(fd).st_size == 0:
                return doc
            time.sleep(0.001)
        return None

    @staticmethod
    def _write_fd(fd: int, doc: Mapping[str, Any]) -> None:
        data = json.dumps(doc, sort_keys=True).encode("utf-8") + b"\n"
        # Write over the old content, then cut what is left: a reader sees either document, or
        # (briefly) a mix it cannot parse and reads again. No fsync: after a power loss every
        # holder is gone anyway, and the token only has to rise among live processes.
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
