"""The files store's folders: every path below the root, opened without following a symlink.

A folder is opened segment by segment with ``O_NOFOLLOW`` relative to its parent's descriptor,
so nothing below the root is ever reached through a symlink. Only the root's descriptor is
cached (and dup'ed per call); a run folder is opened with its ``.lock`` taken, and re-checked
after the lock is granted, since a prune may have moved it aside meanwhile.

:class:`Folders` is the one service the store's parts share (records, audit entries, retention,
doctor, leases, recorded manifests); the store hands it to each of them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from phaselog.model.errors import NotFound, StoreError, StoreNotFound
from phaselog.model.ids import is_canonical_uuid, validate_ticket_id
from phaselog.stores.files.io import DIR_FLAGS, check_segment, lock_run, same_folder


class Folders:
    """The folders below one store root (see the module docstring)."""

    def __init__(self, root: Path, url: str, *, read_only: bool, may_create: bool) -> None:
        """``root``: absolute; ``may_create``: a missing root may be created by a write."""
        self.root = root
        self.url = url
        self.read_only = read_only
        self.may_create = may_create
        self._root_fd: int | None = None

    def refuse_if_read_only(self, what: str) -> None:
        """Raise StoreError (rule ``read_only``) when the store was opened read-only."""
        if self.read_only:
            raise StoreError(f"{self.url} is open read-only: cannot {what}", rule="read_only", path=str(self.root))

    def check_root(self) -> None:
        """Refuse a root that exists but is not a directory (a missing one is fine: see open_root)."""
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            return  # reads say so (StoreNotFound, or an empty store if it may be created); writes create it
        except OSError as exc:
            raise StoreError(f"cannot open store root {self.root}: {exc.strerror}", path=str(self.root)) from None
        if not stat.S_ISDIR(st.st_mode):
            raise StoreError(
                f"{self.root} is not a directory; a files store is a directory (a SQLite file needs a sqlite:/// URL)",
                path=str(self.root),
                rule="not_a_directory",
            )

    def _missing(self) -> StoreNotFound:
        return StoreNotFound(
            f"no store at {self.root}: the directory does not exist (check the path; a command that writes creates it)",
            path=str(self.root),
        )

    # -- opening ----------------------------------------------------------------------------------
    def open_root(self, *, create: bool) -> int:
        """A new descriptor of the root (created if missing and ``create``)."""
        # The root is opened once per store and dup'ed per call: resolving its path on every
        # operation cost as much as the rest of a read. (The root itself may be a symlink.)
        if self._root_fd is not None:
            try:
                return os.dup(self._root_fd)
            except OSError:
                self._root_fd = None
        fd = self._open_root_path(create=create)
        self._root_fd = os.dup(fd)
        return fd

    def _open_root_path(self, *, create: bool) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not self.may_create:
                raise self._missing() from None
            if not create:
                raise NotFound(f"store root {self.root} does not exist", path=str(self.root)) from None
        except OSError as exc:
            raise StoreError(f"cannot open store root {self.root}: {exc.strerror}") from None
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreError(f"cannot create store root {self.root}: {exc.strerror}") from None

    def open_dir(self, *segments: str, create: bool = False) -> int:
        """Open ``root/segments…`` without following any symlink below the root.

        NotFound if a folder is missing (``create``: it is made, mode 0700, and its parent fsynced);
        StoreError (rule ``no_symlinks``) for a symlink or a non-folder on the way. The caller
        closes the returned descriptor.
        """
        for seg in segments:
            check_segment(seg, self.root)
        # Only the root descriptor is cached: a cached descriptor of a folder below it would follow
        # that folder if it were moved away and replaced by a symlink (tests/test_security.py).
        fd = self.open_root(create=create)
        try:
            for i, seg in enumerate(segments):
                nfd = self.open_child(fd, seg, create=create, rel="/".join(segments[: i + 1]))
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_child(self, parent_fd: int, seg: str, *, create: bool, rel: str) -> int:
        """Open the folder ``seg`` below ``parent_fd`` (never through a symlink); ``rel`` names it."""
        check_segment(seg, self.root)
        try:
            return os.open(seg, DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                raise NotFound(f"{rel} does not exist in {self.root}", path=rel) from None
            return self._mkdir(parent_fd, seg)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise StoreError(
                    f"refusing to follow a symlink or non-directory at {rel} under {self.root}",
                    path=rel,
                    rule="no_symlinks",
                ) from None
            raise StoreError(f"cannot open {seg}: {exc.strerror}") from None

    def _mkdir(self, parent_fd: int, name: str) -> int:
        self.refuse_if_read_only(f"create {name}")
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            os.fsync(parent_fd)  # the new directory entry must survive a crash too
        except FileExistsError:
            pass
        except OSError as exc:  # a read-only or full filesystem, no permission: say so, typed
            raise StoreError(f"cannot create {name}: {exc.strerror}", path=name) from None
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise StoreError(f"refusing to follow a symlink at {name}", rule="no_symlinks") from None
            raise StoreError(f"cannot open {name}: {exc.strerror}") from None
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) != 0o700 and st.st_uid == os.getuid():
            os.fchmod(fd, 0o700)  # whatever the umask
        return fd

    # -- runs -------------------------------------------------------------------------------------
    def open_run(self, ticket_id: str, run_id: str, *, create: bool, shared: bool = False) -> tuple[int, int]:
        """Open a run folder and take its lock; return (run folder fd, lock fd).

        Appends and prunes take the lock exclusively, audit entries of the run shared. A prune
        that removes the run whole moves its folder aside while holding the lock, so a writer that
        waited for the lock checks that its folder is still the run's; if not, it starts over
        (with ``create``: in a new folder). Closing the lock fd releases the lock.
        """
        for _ in range(1000):
            ticket_fd = self.open_dir("checkpoints", ticket_id, create=create)
            try:
                run_fd = self.open_child(ticket_fd, run_id, create=create, rel=f"{ticket_id}/{run_id}")
                try:
                    lock_fd = self.lock(run_fd, shared=shared)
                except OSError as exc:
                    os.close(run_fd)
                    raise StoreError(f"cannot lock run {ticket_id}/{run_id}: {exc.strerror}") from None
                except BaseException:
                    os.close(run_fd)
                    raise
                if same_folder(ticket_fd, run_id, run_fd):
                    return run_fd, lock_fd
                os.close(lock_fd)
                os.close(run_fd)
            finally:
                os.close(ticket_fd)
        raise StoreError(f"run {ticket_id}/{run_id} kept being removed while waiting for its lock")

    def lock(self, run_fd: int, *, shared: bool = False) -> int:
        """Take the run folder's ``.lock``; closing the returned fd releases it."""
        self.refuse_if_read_only("lock a run")  # only writers lock (and creating .lock is a write)
        return lock_run(run_fd, shared=shared)

    def listing(self, *segments: str) -> list[str] | None:
        """The names in ``root/segments…`` (None when the folder does not exist)."""
        try:
            fd = self.open_dir(*segments)
        except NotFound:
            return None
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def runs(self, ticket_id: str) -> list[str]:
        """Every run folder (canonical UUID names) of a ticket, sorted."""
        names = self.listing("checkpoints", validate_ticket_id(ticket_id))
        return sorted(n for n in names or () if is_canonical_uuid(n))

    def close(self) -> None:
        """Release the cached root descriptor."""
        fd, self._root_fd = self._root_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
