"""The files store's administrative operations: retention deletes and doctor's support.

Kept apart from the append/read path in :mod:`phaselog.stores.files`; these are the only
operations of the files store that delete (``prune``) or move (``doctor --quarantine``) anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from phaselog.errors import NotFound, StoreError
from phaselog.ids import is_canonical_uuid, validate_ticket_id
from phaselog.stores import files as _f  # a cycle by design: names are looked up at call time
from phaselog.stores import names as _names


class FilesAdminMixin:
    """Retention and doctor support for :class:`phaselog.stores.files.FilesStore`."""

    root: Path

    # provided by FilesStore
    def _open_dir(self, *segments: str, create: bool = False) -> int:  # pragma: no cover
        raise NotImplementedError

    def runs(self, ticket_id: str) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def _write_temp(self, dir_fd: int, data: bytes) -> str:  # pragma: no cover
        raise NotImplementedError

    # -- retention ------------------------------------------------------------------------------
    def delete_records(
        self,
        checkpoints: list[tuple[str, str, int, str, int, bool]],
        entries: list[tuple[str, str, str, str]],
        *,
        whole_run: tuple[str, str] | None = None,
    ) -> int:
        """Delete records (``prune`` only); returns the bytes freed. Nothing else deletes."""
        freed = 0
        if whole_run is not None:
            import shutil

            tid, rid = whole_run
            validate_ticket_id(tid)
            if not is_canonical_uuid(rid):
                raise StoreError(f"run_id {rid!r} is not a canonical UUID")
            run_dir = self.root / "checkpoints" / tid / rid
            if run_dir.is_symlink():
                raise StoreError(f"refusing to delete through a symlink: {run_dir}", rule="no_symlinks")
            for p in run_dir.rglob("*"):
                if p.is_file() and not p.is_symlink():
                    freed += p.stat().st_size
            shutil.rmtree(run_dir)  # fd-based on Linux: does not follow symlinks inside
            parent = os.open(run_dir.parent, _f._DIR_FLAGS)
            try:
                os.fsync(parent)
            finally:
                os.close(parent)
            return freed
        by_dir: dict[tuple[str, ...], list[str]] = {}
        for tid, rid, ordinal, phase, attempt, completed in checkpoints:
            names = (
                [_names.checkpoint_name(ordinal, phase, attempt), _names.meta_name(ordinal, phase, attempt)]
                if completed
                else [_names.failed_name(ordinal, phase, attempt)]
            )
            by_dir.setdefault((tid, rid), []).extend(names)
        for kind, tid, rid, name in entries:
            by_dir.setdefault((tid, rid, f".{kind}"), []).append(f"{name}.json")
        for segs, names in by_dir.items():
            try:
                fd = self._open_dir("checkpoints", *segs)
            except NotFound:
                continue
            try:
                for n in names:
                    try:
                        freed += os.stat(n, dir_fd=fd, follow_symlinks=False).st_size
                        os.unlink(n, dir_fd=fd)
                    except FileNotFoundError:
                        continue
                os.fsync(fd)
            finally:
                os.close(fd)
        return freed

    # -- doctor support ---------------------------------------------------------------------------
    def leftovers(self, ticket_id: str) -> list[dict[str, Any]]:
        """Temp files older than a minute and sidecars without their seed file, for a ticket."""
        found: list[dict[str, Any]] = []
        now = time.time()
        dirs: list[tuple[str, list[str]]] = [(".markers", [ticket_id, ".markers"])]
        for rid in self.runs(ticket_id):
            dirs.append((rid, [ticket_id, rid]))
            for kind in _names.ENTRY_KINDS[:2]:
                dirs.append((f"{rid}/.{kind}", [ticket_id, rid, f".{kind}"]))
        for _label, segs in dirs:
            try:
                fd = self._open_dir("checkpoints", *segs)
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
                        if age > _f.TEMP_MAX_AGE_S:
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

    def quarantine(self, location: str, reason: str) -> list[dict[str, Any]]:
        """Move a damaged file (and its partner: seed file ↔ sidecar) into ``<root>/quarantine/``.

        Files are moved by ``link`` + ``unlink`` (never overwriting), with a note beside each
        recording where it came from, why, and its SHA-256. Returns one entry per move.
        """
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
        src_fd = self._open_dir("checkpoints", *segs[:-1])
        q_fd = self._open_dir("quarantine", create=True)
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
                    fd = os.open(n, _f._READ_FLAGS, dir_fd=src_fd)
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
                tmp = self._write_temp(q_fd, (json.dumps(note, ensure_ascii=False, indent=2) + "\n").encode())
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
