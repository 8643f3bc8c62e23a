"""Recorded pipeline manifests on the files store: ``<root>/manifests/<name>/<hash>.json``.

Published like a record (temp file, fsync, ``link``, fsync the folder), never replaced; the folders
are opened through the store's :meth:`~phaselog.stores.files.store.FilesStore.open_dir` (segment
by segment, never through a symlink). See :mod:`phaselog.stores.manifests`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Protocol

from phaselog.model.errors import NotFound, PhaselogError
from phaselog.model.limits import MAX_MANIFEST_BYTES
from phaselog.stores.files.io import os_errors, read_capped, write_temp
from phaselog.stores.manifests import FOLDER, HASH_RE, NAME_RE, ManifestDoc, check_key, check_size, location


class Folders(Protocol):
    """What the manifests need of the files store (:class:`~phaselog.stores.files.store.FilesStore`)."""

    def open_dir(self, *segments: str, create: bool = False) -> int:
        """A descriptor of ``root/segments…`` opened without following symlinks; NotFound when absent."""
        ...

    def refuse_if_read_only(self, what: str) -> None:
        """StoreError (rule ``read_only``) when the store was opened read-only."""
        ...


class FilesManifests:
    """``<root>/manifests/<name>/<hash>.json``, published like a record (never replaced)."""

    def __init__(self, store: Folders) -> None:
        self.store = store

    def put(self, doc: ManifestDoc) -> bool:
        """Record ``doc`` (see Manifests.put)."""

        check_key(doc.name, doc.manifest_hash)
        check_size(doc)
        store = self.store
        store.refuse_if_read_only("record a pipeline manifest")
        final = f"{doc.manifest_hash}.json"
        with os_errors(f"cannot write {doc.location}", path=doc.location):
            fd = store.open_dir(FOLDER, doc.name, create=True)
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.stat(final, dir_fd=fd, follow_symlinks=False)
                    return False  # content-addressed: what is there is this manifest (reads check it)
                tmp = write_temp(fd, doc.body)
                try:
                    os.link(tmp, final, src_dir_fd=fd, dst_dir_fd=fd)
                except FileExistsError:
                    return False  # another writer recorded it meanwhile
                finally:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=fd)
                os.fsync(fd)
                return True
            finally:
                os.close(fd)

    def get(self, name: str, manifest_hash: str) -> bytes:
        """Read the bytes of (name, hash) (see Manifests.get)."""

        check_key(name, manifest_hash)
        store = self.store
        where = location(name, manifest_hash)
        try:
            fd = store.open_dir(FOLDER, name)
        except NotFound:
            raise NotFound(f"no recorded manifest {where}", path=where) from None
        try:
            data = read_capped(fd, f"{manifest_hash}.json", f"{FOLDER}/{name}", MAX_MANIFEST_BYTES)
        finally:
            os.close(fd)
        if data is None:
            raise NotFound(f"no recorded manifest {where}", path=where)
        return bytes(data)

    def keys(self) -> list[tuple[str, str]]:
        """Every recorded (name, hash), sorted; anything else in the folder is ignored."""
        store = self.store
        try:
            top = store.open_dir(FOLDER)
        except NotFound:
            return []
        out: list[tuple[str, str]] = []
        try:
            for name in os.listdir(top):
                if not NAME_RE.fullmatch(name):
                    continue
                try:
                    sub = store.open_dir(FOLDER, name)
                except PhaselogError:
                    continue  # not a folder (or a symlink): not ours
                try:
                    for entry in os.listdir(sub):
                        stem, dot, ext = entry.partition(".")
                        if dot and ext == "json" and HASH_RE.fullmatch(stem):
                            out.append((name, stem))
                finally:
                    os.close(sub)
        finally:
            os.close(top)
        return sorted(out)
