"""Guard storage on the files store: files under ``<root>/pipeline_checkpoints``.

The files backend of :class:`phaselog.stores.base.GuardStorage` (the guard itself, which
decides, is :mod:`phaselog.guard`).

``<name>-state.yaml`` (seed 000's schema), ``<name>.lock`` (the holder: readable YAML),
``<name>.history/`` (one JSON file per pass, takeover or reset; append-only) and ``.<name>.mutex``
(an flock that serialises decisions). Nothing is read or written through a symlink, and every
I/O failure is a StoreError naming the file (a full or read-only disk included); a replaced file
is whole or absent (temp file, fsync, rename, directory fsync).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from phaselog import _faults
from phaselog.model import _yaml
from phaselog.model.errors import AlreadyExists, Corrupt, Fenced, StoreError, UsageError
from phaselog.model.guard import Holder, LoopState, validate_name
from phaselog.model.limits import json_loads

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
MAX_FILE_BYTES = 1 << 20


def io_error(exc: OSError, doing: str, path: Path | str) -> StoreError:
    """A StoreError for a failed read or write, naming the file and the reason."""
    hint = ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = " (the disk is full: free some space)"
    elif exc.errno == errno.EROFS:
        hint = " (the file system is read-only)"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        hint = " (permission denied: check the owner and mode of the store root)"
    return StoreError(
        f"cannot {doing} {path}: {exc.strerror or exc}{hint}",
        path=str(path),
        rule=errno.errorcode.get(exc.errno or 0, "io").lower(),
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)  # a nearly full disk may take part of it: write the rest (or fail)
        view = view[n:]


class FileGuardStore:
    """Guard files under ``<root>/pipeline_checkpoints`` (a :class:`~phaselog.stores.base.GuardStorage`)."""

    def __init__(self, root: str | os.PathLike[str], name: str) -> None:
        """The storage of guard ``name`` (UsageError if the name is not one) beside the store at ``root``."""
        self.name = validate_name(name)
        self.dir = Path(root).expanduser().absolute() / "pipeline_checkpoints"
        self.state_path = self.dir / f"{name}-state.yaml"
        self.lock_path = self.dir / f"{name}.lock"
        self.history_dir = self.dir / f"{name}.history"

    # -- plumbing -----------------------------------------------------------------------------------
    def _check_dirs(self) -> None:
        """Refuse a guard directory that is a symlink (the root itself may be one: the user's choice)."""
        for d in (self.dir, self.history_dir):
            if d.is_symlink():
                raise StoreError(f"refusing to use {d}: it is a symlink", path=str(d), rule="no_symlinks")

    def _ensure(self) -> None:
        self._check_dirs()
        for d in (self.dir.parent, self.dir, self.history_dir):
            try:
                if not d.exists():
                    with contextlib.suppress(FileExistsError):
                        d.mkdir(mode=0o700)
                    os.chmod(d, 0o700)
            except OSError as exc:
                raise io_error(exc, "create", d) from None
        self._check_dirs()

    def _read_bytes(self, path: Path) -> bytes | None:
        """A regular file's bytes (None if absent); never through a symlink, never unbounded."""
        self._check_dirs()
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StoreError(
                    f"refusing to read {path}: it is a symlink", path=str(path), rule="no_symlinks"
                ) from None
            raise io_error(exc, "read", path) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise StoreError(f"refusing to read {path}: not a regular file", path=str(path), rule="regular_file")
            if st.st_size > MAX_FILE_BYTES:
                raise Corrupt(
                    f"{path}: {st.st_size} bytes, more than a guard file holds ({MAX_FILE_BYTES})",
                    path=str(path),
                    rule="max_bytes",
                )
            chunks, size = [], 0
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_FILE_BYTES:
                    raise Corrupt(f"{path}: larger than a guard file holds", path=str(path), rule="max_bytes")
            return b"".join(chunks)
        except OSError as exc:
            raise io_error(exc, "read", path) from None
        finally:
            os.close(fd)

    def _read_yaml(self, path: Path) -> Any:
        data = self._read_bytes(path)
        if data is None:
            return None
        try:
            return _yaml.load(data)
        except Corrupt as exc:
            raise Corrupt(f"{path}: {exc.message}", path=str(path), rule=exc.context.get("rule")) from None

    def _fsync_dir(self, d: Path) -> None:
        dfd = os.open(d, _DIR_FLAGS | os.O_NOFOLLOW)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _write_replace(self, path: Path, text: str) -> None:
        """Replace ``path`` atomically: temp file, fsync, rename, directory fsync."""
        tmp = path.with_name(f".tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.fchmod(fd, 0o600)
                _write_all(fd, text.encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
            if path == self.state_path:
                _faults.point("guard.before_replace")
            else:
                _faults.point("guard.before_lock_replace")
            os.replace(tmp, path)
            self._fsync_dir(self.dir)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # never leave a half-written temp file behind
            raise io_error(exc, "write", path) from None

    # -- the mutex ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def mutex(self) -> Iterator[None]:
        """Serialise lock decisions and state updates (an flock; the kernel drops it on death)."""
        self._ensure()
        path = self.dir / f".{self.name}.mutex"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise io_error(exc, "open", path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- state --------------------------------------------------------------------------------------
    def read_state(self) -> LoopState:
        """The loop state (fresh if there is no file yet)."""
        data = self._read_yaml(self.state_path)
        return LoopState() if data is None else LoopState.from_seed(data, str(self.state_path))

    def write_state(self, state: LoopState, *, token: str | None = None) -> None:
        """Write the loop state atomically; with ``token``, only while it still holds the lock."""
        if token is not None:
            self._check_token(token, "the loop state was not written")
        self._ensure()
        self._write_replace(self.state_path, _yaml.dump(state.to_seed()))

    # -- the lock -----------------------------------------------------------------------------------
    def lock_data(self) -> Any:
        """The lock's content as parsed YAML (None when free); Corrupt if it does not parse."""
        return self._read_yaml(self.lock_path)

    def read_lock(self) -> Holder | None:
        """The current holder, or None."""
        data = self.lock_data()
        return None if data is None else Holder.from_json(data, str(self.lock_path))

    def _check_token(self, token: str, what: str) -> None:
        try:
            current = self.read_lock()
        except Corrupt:
            current = None
        if current is None or current.token != token:
            raise Fenced(f"guard {self.name}: the lock was taken over; {what}", rule="lock_token")

    def write_lock(self, holder: Holder) -> Holder:
        """Install ``holder`` (called under the mutex, after the decision)."""
        self._ensure()
        self._write_replace(self.lock_path, _yaml.dump(holder.to_json()))
        return holder

    def update_lock(self, holder: Holder) -> None:
        """Rewrite our own lock (same token), e.g. to name the job's group (under the mutex)."""
        self._check_token(holder.token, "the job was not started")
        self._write_replace(self.lock_path, _yaml.dump(holder.to_json()))

    def remove_lock(self, token: str) -> bool:
        """Remove the lock if ``token`` still holds it (under the mutex)."""
        try:
            current = self.read_lock()
        except Corrupt:
            current = None
        if current is None or current.token != token:
            return False
        try:
            os.unlink(self.lock_path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise io_error(exc, "remove", self.lock_path) from None
        return True

    # -- history ------------------------------------------------------------------------------------
    def append_history(self, entry: dict[str, Any]) -> None:
        """Append one history entry (create-if-absent by sequence number)."""
        self._ensure()
        for _ in range(1000):
            seq = len(self._history_names()) + 1
            entry = {**entry, "seq": seq}
            tmp = self.history_dir / f".tmp-{os.getpid()}-{secrets.token_hex(4)}"
            final = self.history_dir / f"{seq:09d}.json"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    _write_all(fd, (json.dumps(entry, ensure_ascii=False) + "\n").encode())
                    os.fsync(fd)
                finally:
                    os.close(fd)
                try:
                    os.link(tmp, final)
                except FileExistsError:
                    continue
                finally:
                    os.unlink(tmp)
                self._fsync_dir(self.history_dir)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise io_error(exc, "write", final) from None
            return
        raise AlreadyExists("could not append to the guard history")

    def _history_names(self) -> list[str]:
        self._check_dirs()
        try:
            names = os.listdir(self.history_dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise io_error(exc, "list", self.history_dir) from None
        return sorted(n for n in names if n.endswith(".json") and not n.startswith("."))

    def history(self) -> list[dict[str, Any]]:
        """Every history entry, oldest first (one that cannot be read is listed as damaged)."""
        out: list[dict[str, Any]] = []
        for n in self._history_names():
            try:
                data = self._read_bytes(self.history_dir / n)
                entry = json_loads(data or b"")
                if not isinstance(entry, dict):
                    raise ValueError("not a JSON object")
                out.append(entry)
            except (ValueError, StoreError) as exc:
                out.append({"seq": n[:-5], "kind": "damaged", "error": str(exc)})
        return out


def file_guard_names(root: str | os.PathLike[str]) -> list[str]:
    """Every guard with state, a lock or history under a files-store root."""
    folder = Path(root).expanduser().absolute() / "pipeline_checkpoints"
    try:
        entries = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = set()
    for entry in entries:
        for suffix in ("-state.yaml", ".lock", ".history"):
            if entry.endswith(suffix) and not entry.startswith("."):
                with contextlib.suppress(UsageError):  # not a guard's file: someone else's
                    found.add(validate_name(entry[: -len(suffix)]))
    return sorted(found)
