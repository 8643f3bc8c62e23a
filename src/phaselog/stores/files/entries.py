"""The files store's audit entries: progress events, approvals and ticket markers.

Each entry is one immutable JSON file, ``<run>/.progress/``, ``<run>/.approvals/`` or
``<ticket>/.markers/`` (every name format lives in :mod:`phaselog.stores.names`), published like a
record: temp file, fsync, ``link`` to its name (refused if taken), fsync the folder.
"""

from __future__ import annotations

import contextlib
import os

from phaselog import _faults
from phaselog.model.errors import AlreadyExists, Corrupt, NotFound
from phaselog.stores import kernel
from phaselog.stores import names as _names
from phaselog.stores.files.folders import Folders
from phaselog.stores.files.io import clean_temps, os_errors, read_capped, write_temp


def _segments(kind: str, ticket_id: str, run_id: str | None) -> list[str]:
    kernel.check_entry_key(kind, ticket_id, run_id)
    return ["checkpoints", ticket_id, *([] if run_id is None else [run_id]), f".{kind}"]


class FileEntries:
    """Audit entries below one store root (the store's ``put_entry``, ``entry_names``, ``entries``)."""

    def __init__(self, folders: Folders, *, max_record_bytes: int, max_entry_bytes: int) -> None:
        """``max_record_bytes`` caps what is written, ``max_entry_bytes`` what is read back."""
        self.folders = folders
        self.max_record_bytes = max_record_bytes
        self.max_entry_bytes = max_entry_bytes

    def _dir(self, kind: str, ticket_id: str, run_id: str | None, *, create: bool, run_fd: int | None = None) -> int:
        segments = _segments(kind, ticket_id, run_id)
        if run_fd is not None and run_id is not None:
            # The run folder is open already (a snapshot's): one openat, not a walk from the root.
            return self.folders.open_child(run_fd, segments[-1], create=create, rel="/".join(segments[1:]))
        return self.folders.open_dir(*segments, create=create)

    def put(self, kind: str, ticket_id: str, run_id: str | None, name: str, body: bytes) -> str:
        """Publish an audit entry durably under a new name; AlreadyExists if the name is taken."""
        self.folders.refuse_if_read_only("record an audit entry")
        kernel.check_entry(name, body, self.max_record_bytes)
        rel = kernel.entry_location(kind, ticket_id, run_id, name)
        lock_fd = None
        if run_id is None:
            dir_fd = self._dir(kind, ticket_id, run_id, create=True)
        else:
            # A run's entries wait for a prune of that run (shared lock; appends and prunes hold it
            # exclusively), so a prune never removes an entry it did not decide on.
            _segments(kind, ticket_id, run_id)
            run_fd, lock_fd = self.folders.open_run(ticket_id, run_id, create=True, shared=True)
            try:
                dir_fd = self.folders.open_child(run_fd, f".{kind}", create=True, rel=f"{ticket_id}/{run_id}/.{kind}")
            except BaseException:
                os.close(lock_fd)
                raise
            finally:
                os.close(run_fd)
        try:
            with os_errors(f"cannot write {rel}"):
                names = os.listdir(dir_fd)
                clean_temps(dir_fd, names)
                tmp = write_temp(dir_fd, body)
                try:
                    _faults.point("files.after_entry_temp")
                    try:
                        os.link(tmp, f"{name}.json", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                    except FileExistsError:
                        raise AlreadyExists(f"{rel} already exists", path=rel) from None
                    _faults.point("files.after_entry_link")
                    os.fsync(dir_fd)
                finally:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
            if lock_fd is not None:
                os.close(lock_fd)
        return rel

    def names(self, kind: str, ticket_id: str, run_id: str | None, run_fd: int | None = None) -> list[str]:
        """Names of a kind's entries (sorted), without reading them (``run_fd``: the run's folder, open)."""
        try:
            dir_fd = self._dir(kind, ticket_id, run_id, create=False, run_fd=run_fd)
        except NotFound:
            return []
        try:
            return sorted(n[:-5] for n in os.listdir(dir_fd) if n.endswith(".json") and _names.is_entry_name(n[:-5]))
        finally:
            os.close(dir_fd)

    def read_all(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = "", run_fd: int | None = None
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind as (name, location, bytes), sorted by name (``run_fd``: as for names).

        An unreadable entry comes back as a Corrupt error in place of its bytes.
        """
        try:
            dir_fd = self._dir(kind, ticket_id, run_id, create=False, run_fd=run_fd)
        except NotFound:
            return []
        rel_dir = kernel.entry_dir_location(kind, ticket_id, run_id)
        out: list[tuple[str, str, bytes | Corrupt]] = []
        try:
            for n in sorted(os.listdir(dir_fd)):
                if not n.endswith(".json") or not n.startswith(prefix):
                    continue
                stem = n[:-5]
                if not _names.is_entry_name(stem):
                    continue
                try:
                    data = read_capped(dir_fd, n, rel_dir, self.max_entry_bytes)
                except Corrupt as exc:
                    out.append((stem, f"{rel_dir}/{n}", exc))
                    continue
                if data is not None:
                    out.append((stem, f"{rel_dir}/{n}", data))
        finally:
            os.close(dir_fd)
        return out
