"""The files store's optional capabilities: retention deletes, doctor's support, stamps, guards.

Kept apart from the append/read path in :mod:`phaselog.stores.files.store`; these are the only
operations of the files store that delete (``prune``) or move (``doctor --quarantine``) anything.
Each is declared in ``FilesStore.capabilities`` (see :class:`phaselog.stores.base.Capability`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phaselog import _faults
from phaselog.model.errors import AlreadyExists, NotFound, StoreError
from phaselog.model.ids import validate_ticket_id
from phaselog.stores import names as _names
from phaselog.stores.base import Capability, GuardStorage
from phaselog.stores.files.folders import Folders
from phaselog.stores.files.io import DIR_FLAGS, READ_FLAGS, TEMP_MAX_AGE_S, exists, os_errors, write_temp
from phaselog.stores.kernel import check_run_key, entry_location
from phaselog.stores.oslock import open_locked

if TYPE_CHECKING:
    from phaselog.stores.admin_values import PruneTarget

#: What the files store has beyond the contract (no MIGRATE: a folder tree has no schema).
FILES_CAPABILITIES = frozenset(
    {
        Capability.LEASES,
        Capability.RETENTION,
        Capability.QUARANTINE,
        Capability.LEFTOVERS,
        Capability.GUARD_STORAGE,
        Capability.STAMPS,
        Capability.LOCAL_ROOT,
        Capability.MANIFESTS,
        Capability.PHASE_READ,
        Capability.CARRIED_RUNS,
    }
)
#: Prefix of a run folder being removed whole (moved aside first; not a run name).
_REMOVING = ".removing-"


@dataclass(frozen=True)
class _RunHandle:
    """A run held under its lock by :meth:`FilesAdminMixin.locked_run`."""

    ticket_id: str
    run_id: str
    run_fd: int


def _handle(handle: object) -> _RunHandle:
    if not isinstance(handle, _RunHandle):
        raise StoreError("a prune operation needs the handle of locked_run()")
    return handle


def _record_files(r: PruneTarget) -> list[str]:
    key = (r.phase_ordinal, r.phase, r.attempt_number)
    if r.completed:  # the seed file is the commit point: it goes first
        return [_names.checkpoint_name(*key), _names.meta_name(*key)]
    return [_names.failed_name(*key)]


def _unlink(dir_fd: int, name: str) -> int | None:
    """Delete one file (never through a symlink); its size, or None if it was not there."""
    try:
        size = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    return size


def _tree_bytes(dir_fd: int) -> int:
    total = 0
    for _root, _dirs, files, fd in os.fwalk(".", dir_fd=dir_fd):
        for n in files:
            with contextlib.suppress(OSError):
                total += os.stat(n, dir_fd=fd, follow_symlinks=False).st_size
    return total


def _rmtree(parent_fd: int, name: str) -> bool:
    """Delete a folder tree (fd-based: never follows a symlink); False if it was already gone."""
    if not exists(parent_fd, name):
        return False

    def skip_missing(_fn: Any, _path: str, exc: Any) -> None:
        # Another doctor may be finishing the same removal: what it deleted first is fine.
        err = exc[1] if isinstance(exc, tuple) else exc
        if not isinstance(err, FileNotFoundError):
            raise err

    import shutil  # lazy: only a prune removes folders; shutil would cost `phaselog read`

    shutil.rmtree(name, dir_fd=parent_fd, onerror=skip_missing)
    return True


def _wait_for_lock(dir_fd: int) -> int | None:
    """Take the lock of a folder being removed (its remover holds it until done); None if none."""
    return open_locked(".lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)


class FilesAdminMixin:
    """Retention and doctor support for :class:`phaselog.stores.files.store.FilesStore`."""

    root: Path
    #: The store's folders (set by FilesStore): every folder below the root, never through a symlink.
    folders: Folders

    # -- retention ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked_run(self, ticket_id: str, run_id: str) -> Iterator[_RunHandle | None]:
        """Hold the run's append lock (exclusive); yield a handle, or None if there is no such run."""
        self.folders.refuse_if_read_only("lock a run for pruning")
        check_run_key(ticket_id, run_id)
        try:
            run_fd, lock_fd = self.folders.open_run(ticket_id, run_id, create=False)
        except NotFound:
            yield None
            return
        try:
            yield _RunHandle(ticket_id, run_id, run_fd)
        finally:
            os.close(lock_fd)  # releases the flock
            os.close(run_fd)

    def put_note(self, handle: object, name: str, body: bytes) -> str:
        """Publish a prune note (inside locked_run): temp file, fsync, link, fsync the folder."""
        self.folders.refuse_if_read_only("write a prune note")
        h = _handle(handle)
        if _names.parse_note_name(name) is None:
            raise StoreError(f"{name!r} is not a prune note name")
        rel = entry_location("pruned", h.ticket_id, h.run_id, name)
        with os_errors(f"cannot write {rel}"):
            dir_fd = self.folders.open_child(h.run_fd, ".pruned", create=True, rel=rel)
            try:
                tmp = write_temp(dir_fd, body)
                try:
                    os.link(tmp, f"{name}.json", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except FileExistsError:
                    raise AlreadyExists(f"{rel} already exists", path=rel) from None
                finally:
                    os.unlink(tmp, dir_fd=dir_fd)
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        _faults.point("files.prune_after_note")
        return rel

    def delete_records(
        self, handle: object, records: Sequence[PruneTarget], entries: Sequence[tuple[str, str]]
    ) -> tuple[int, int]:
        """Delete records and audit entries (inside locked_run); returns (count, bytes freed).

        A completed attempt's seed file goes first (it is the commit point: the record is gone),
        then its sidecar; a crash in between leaves an invisible sidecar that doctor removes when
        it finishes the prune. What is already gone is skipped, so finishing can repeat this.
        """
        self.folders.refuse_if_read_only("delete records")
        h = _handle(handle)
        count = freed = 0
        with os_errors(f"prune of {h.ticket_id}/{h.run_id} failed"):
            for r in records:
                sizes = [_unlink(h.run_fd, n) for n in _record_files(r)]
                if any(size is not None for size in sizes):
                    count += 1
                    freed += sum(size or 0 for size in sizes)
                _faults.point("files.prune_after_record")
            os.fsync(h.run_fd)
            by_kind: dict[str, list[str]] = {}
            for kind, name in entries:
                by_kind.setdefault(kind, []).append(name)
            for kind, names in by_kind.items():
                if kind not in ("progress", "approvals", "logs"):
                    raise StoreError(f"prune does not delete {kind} entries")
                try:
                    fd = self.folders.open_child(
                        h.run_fd, f".{kind}", create=False, rel=f"{h.ticket_id}/{h.run_id}/.{kind}"
                    )
                except NotFound:
                    continue
                try:
                    for n in names:
                        if not _names.is_entry_name(n):
                            raise StoreError(f"{n!r} is not an entry name")
                        size = _unlink(fd, f"{n}.json")
                        if size is not None:
                            freed += size
                            count += 1
                    os.fsync(fd)
                finally:
                    os.close(fd)
        return count, freed

    def remove_run(self, handle: object) -> int:
        """Remove a whole run (inside locked_run): moved aside atomically, then deleted.

        The rename is the commit point: before it the run is whole, after it the run is gone
        (``.removing-<run>-<hex>`` is not a run name, so nothing reads it). A crash before the
        deletion ends leaves that folder; ``doctor`` finishes it (:meth:`finish_removals`).
        """
        self.folders.refuse_if_read_only("remove a run")
        h = _handle(handle)
        with os_errors(f"cannot remove run {h.ticket_id}/{h.run_id}"):
            freed = _tree_bytes(h.run_fd)
            ticket_fd = self.folders.open_dir("checkpoints", h.ticket_id)
            try:
                aside = f"{_REMOVING}{h.run_id}-{os.urandom(4).hex()}"
                os.rename(h.run_id, aside, src_dir_fd=ticket_fd, dst_dir_fd=ticket_fd)
                os.fsync(ticket_fd)
                _faults.point("files.prune_after_move_aside")
                _rmtree(ticket_fd, aside)
                os.fsync(ticket_fd)
            finally:
                os.close(ticket_fd)
        return freed

    def finish_removals(self, ticket_id: str) -> list[dict[str, object]]:
        """Delete the folders of whole-run removals a crash interrupted (doctor)."""
        self.folders.refuse_if_read_only("finish an interrupted prune")
        try:
            ticket_fd = self.folders.open_dir("checkpoints", validate_ticket_id(ticket_id))
        except NotFound:
            return []
        done: list[dict[str, object]] = []
        try:
            for n in sorted(os.listdir(ticket_fd)):
                if not n.startswith(_REMOVING):
                    continue
                try:
                    fd = os.open(n, DIR_FLAGS, dir_fd=ticket_fd)
                except OSError:
                    continue
                lock = _wait_for_lock(fd)  # a prune still deleting it holds its lock
                try:
                    freed = _tree_bytes(fd)
                    if _rmtree(ticket_fd, n):
                        os.fsync(ticket_fd)
                        run = n[len(_REMOVING) : len(_REMOVING) + 36]
                        done.append(
                            {
                                "kind": "interrupted_prune",
                                "path": f"{ticket_id}/{n}",
                                "message": f"finished removing run {run} (a prune of the whole run was "
                                f"interrupted); {freed} bytes freed",
                            }
                        )
                finally:
                    os.close(fd)
                    if lock is not None:
                        os.close(lock)
        finally:
            os.close(ticket_fd)
        return done

    # -- stamps and guards ------------------------------------------------------------------------
    def run_stamps(self, ticket_id: str) -> dict[str, str | None]:
        """Every run of a ticket with its change stamp (see :mod:`phaselog.stores.stamps`)."""
        from phaselog.stores.stamps import files_run_stamps  # lazy: `phaselog read` stamps nothing

        return files_run_stamps(self.root / "checkpoints", validate_ticket_id(ticket_id))

    def ticket_stamp(self, ticket_id: str) -> str | None:
        """The change stamp of the ticket's own entries (its marker revisions)."""
        from phaselog.stores.stamps import files_ticket_stamp  # lazy: `phaselog read` stamps nothing

        return files_ticket_stamp(self.root / "checkpoints", validate_ticket_id(ticket_id))

    def guard_storage(self, name: str) -> GuardStorage:
        """Where guard ``name`` keeps its lock, state and history: files beside the store."""
        from phaselog.stores.files.guard import FileGuardStore  # lazy: only `guard` commands need it (~19 ms)

        return FileGuardStore(self.root, name)

    def guard_names(self) -> list[str]:
        """Every guard with state, a lock or history beside this store."""
        from phaselog.stores.files.guard import file_guard_names  # lazy: only `guard` commands need it (~19 ms)

        return file_guard_names(self.root)

    # -- doctor support ---------------------------------------------------------------------------
    def leftovers(self, ticket_id: str) -> list[dict[str, Any]]:
        """Temp files older than a minute and sidecars without their seed file, for a ticket."""
        found: list[dict[str, Any]] = []
        now = time.time()
        dirs: list[tuple[str, list[str]]] = [(".markers", [ticket_id, ".markers"])]
        for rid in self.folders.runs(ticket_id):
            dirs.append((rid, [ticket_id, rid]))
            for kind in _names.ENTRY_KINDS[:2]:
                dirs.append((f"{rid}/.{kind}", [ticket_id, rid, f".{kind}"]))
        for _label, segs in dirs:
            try:
                fd = self.folders.open_dir("checkpoints", *segs)
            except (NotFound, StoreError):
                continue
            try:
                names = os.listdir(fd)
                for n in names:
                    rel = "/".join([*segs, n])
                    if n.startswith(".tmp-"):
                        try:
                            age = now - os.stat(n, dir_fd=fd, follow_symlinks=False).st_mtime
                        except OSError:
                            continue
                        if age > TEMP_MAX_AGE_S:
                            found.append(
                                {
                                    "kind": "leftover_temp",
                                    "path": rel,
                                    "age_sec": int(age),
                                    "message": "temp file left by an interrupted write; the next "
                                    "writer in this folder removes it",
                                }
                            )
                    elif (meta := _names.parse_meta_name(n)) is not None and (
                        _names.checkpoint_name(*meta) not in names
                    ):
                        found.append(
                            {
                                "kind": "orphan_sidecar",
                                "path": rel,
                                "message": "sidecar without its seed file (a write interrupted "
                                "between its two links); invisible, replaced by the next write "
                                "of that attempt",
                            }
                        )
            finally:
                os.close(fd)
        return found

    def quarantined(self, ticket_id: str, run_id: str) -> dict[tuple[str, int], str | None]:
        """The attempts of a run that ``doctor --quarantine`` moved aside: (phase, attempt) → the content
        hash its quarantined sidecar recorded at write (None: not known). Read only; nothing is moved."""
        try:
            q_fd = self.folders.open_dir("quarantine")
        except (NotFound, StoreError, OSError):
            return {}
        out: dict[tuple[str, int], str | None] = {}
        prefix = f"checkpoints/{ticket_id}/{run_id}/"
        try:
            for note_name in sorted(os.listdir(q_fd)):
                if not note_name.endswith(".note.json") or f"__{run_id}__" not in note_name:
                    continue
                note = _read_json(q_fd, note_name, 64 * 1024)
                original = note.get("original_path") if isinstance(note, dict) else None
                if not isinstance(original, str) or not original.startswith(prefix):
                    continue
                name = original[len(prefix) :]
                if (seed := _names.parse_checkpoint_name(name)) is not None:
                    out.setdefault((seed[1], seed[2]), None)
                elif (meta := _names.parse_meta_name(name)) is not None:
                    side = _read_json(q_fd, note_name[: -len(".note.json")], 4 * 1024 * 1024)
                    recorded = side.get("content_hash") if isinstance(side, dict) else None
                    if isinstance(recorded, str) or out.get((meta[1], meta[2])) is None:
                        out[(meta[1], meta[2])] = recorded if isinstance(recorded, str) else None
        finally:
            os.close(q_fd)
        return out

    def quarantine(self, location: str, reason: str) -> list[dict[str, Any]]:
        """Move a damaged file (and its partner: seed file ↔ sidecar) into ``<root>/quarantine/``.

        Files are moved by ``link`` + ``unlink`` (never overwriting), with a note beside each
        recording where it came from, why, and its SHA-256. Returns one entry per move.
        """
        self.folders.refuse_if_read_only("quarantine a file")
        segs = location.split("/")
        if len(segs) < 3 or any(s in ("", ".", "..") or "\\" in s for s in segs):
            raise StoreError(f"not a file location in this store: {location!r}")
        validate_ticket_id(segs[0])
        name = segs[-1]
        names = [name]
        if (seed := _names.parse_checkpoint_name(name)) is not None:
            names.append(_names.meta_name(*seed))
        elif (meta := _names.parse_meta_name(name)) is not None:
            names.append(_names.checkpoint_name(*meta))
        src_fd = self.folders.open_dir("checkpoints", *segs[:-1])
        q_fd = self.folders.open_dir("quarantine", create=True)
        moved: list[dict[str, Any]] = []
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        try:
            for n in names:
                try:
                    st = os.stat(n, dir_fd=src_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
                    continue
                rel = "/".join([*segs[:-1], n])
                dest = f"{stamp}__{rel.replace('/', '__')}"
                data = b""
                if stat.S_ISREG(st.st_mode):
                    fd = os.open(n, READ_FLAGS, dir_fd=src_fd)
                    try:
                        data = os.read(fd, st.st_size + 1)
                    finally:
                        os.close(fd)
                note = {
                    "original_path": f"checkpoints/{rel}",
                    "moved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "reason": reason,
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "size": st.st_size,
                }
                tmp = write_temp(q_fd, (json.dumps(note, ensure_ascii=False, indent=2) + "\n").encode())
                try:
                    os.link(tmp, f"{dest}.note.json", src_dir_fd=q_fd, dst_dir_fd=q_fd)
                finally:
                    os.unlink(tmp, dir_fd=q_fd)
                os.link(n, dest, src_dir_fd=src_fd, dst_dir_fd=q_fd, follow_symlinks=False)
                os.fsync(q_fd)
                os.unlink(n, dir_fd=src_fd)
                os.fsync(src_fd)
                moved.append(
                    {
                        "from": f"checkpoints/{rel}",
                        "to": f"quarantine/{dest}",
                        "note": f"quarantine/{dest}.note.json",
                        "reason": reason,
                    }
                )
        except FileExistsError:
            raise StoreError(f"quarantine already holds {location} from this second; run doctor again") from None
        except OSError as exc:
            raise StoreError(f"cannot quarantine {location}: {exc.strerror}") from None
        finally:
            os.close(src_fd)
            os.close(q_fd)
        return moved


def _read_json(dir_fd: int, name: str, limit: int) -> Any:
    """A small JSON file in ``dir_fd`` (None: missing, too big, or not JSON)."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None
