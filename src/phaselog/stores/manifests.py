"""Recorded pipeline manifests: a store keeps the manifest of every pipeline it has records for.

A manifest is kept under its pipeline's name and its content hash (``Pipeline.manifest_hash``,
the SHA-256 a checkpoint's ``pipeline.manifest_hash`` names), created if absent and never
replaced, so a store describes itself: ``status`` of a run copied to another store finds the
pipeline there even when no manifest file is at hand. The store keeps bytes (the manifest as JSON);
:mod:`phaselog.ledger.recorded_pipelines` builds them and checks them (name and hash) when it reads them back.

* files store: ``<root>/manifests/<name>/<sha256>.json`` (temp file, fsync, ``link``, fsync the
  folder; the folders are opened without following symlinks, like every path of the store);
* SQL stores: the table ``phaselog_pipelines (name, manifest_hash, body)`` (migration 4).

A write records its pipeline's manifest inside its append (``Store.append(..., manifest=…)``): on
SQL in the same transaction, on files just before the checkpoint is published (under the run's
lock, after the append's checks), so a record never exists without its manifest.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from phaselog.model._lazyre import LazyPattern
from phaselog.model.errors import NotFound, PhaselogError, StoreError
from phaselog.model.limits import MAX_MANIFEST_BYTES

if TYPE_CHECKING:
    from phaselog.stores.files.store import FilesStore
    from phaselog.stores.sql.store import SqlStore

#: A pipeline name (the manifest grammar's) and a manifest hash (SHA-256, lowercase hex).
NAME_RE = LazyPattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
HASH_RE = LazyPattern(r"[0-9a-f]{64}")
#: The files store's folder of recorded manifests, below its root.
FOLDER = "manifests"

#: Migration 4 of the SQL schema.
SQL_MIGRATION = """CREATE TABLE IF NOT EXISTS phaselog_pipelines (
    name TEXT NOT NULL,
    manifest_hash TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (name, manifest_hash)
)"""


@dataclass(frozen=True)
class ManifestDoc:
    """A manifest as a store keeps it: the pipeline's name, its manifest hash, the JSON bytes."""

    name: str
    manifest_hash: str
    body: bytes

    @property
    def location(self) -> str:
        """Where it lives (files: relative to the root; SQL: the same name, for messages)."""
        return location(self.name, self.manifest_hash)


def location(name: str, manifest_hash: str) -> str:
    """``manifests/<name>/<hash>.json``."""
    return f"{FOLDER}/{name}/{manifest_hash}.json"


def check_key(name: object, manifest_hash: object) -> tuple[str, str]:
    """Refuse a name or hash that could not have come from a pipeline (before any path or query)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise StoreError(f"pipeline name {name!r} must be 1-64 of [A-Za-z0-9._-]", field="name", rule="pipeline_name")
    if not isinstance(manifest_hash, str) or not HASH_RE.fullmatch(manifest_hash):
        raise StoreError(
            f"manifest hash {manifest_hash!r} must be 64 lowercase hex digits", field="manifest_hash", rule="sha256"
        )
    return name, manifest_hash


class Manifests(Protocol):
    """A store's recorded manifests."""

    def put(self, doc: ManifestDoc) -> bool:
        """Record ``doc`` durably unless its (name, hash) is there; True when it was added."""
        ...

    def get(self, name: str, manifest_hash: str) -> bytes:
        """The bytes recorded for (name, hash); NotFound when there are none."""
        ...

    def keys(self) -> list[tuple[str, str]]:
        """Every recorded (name, hash), sorted."""
        ...


def manifests_of(store: Any) -> Manifests:
    """The recorded manifests of a store that declares :attr:`Capability.MANIFESTS`."""
    shelf: Manifests = store.pipeline_manifests()
    return shelf


def has_manifests(store: Any) -> bool:
    """True when ``store`` declares :attr:`Capability.MANIFESTS` (every built-in store does)."""
    from phaselog.stores.base import Capability

    return Capability.MANIFESTS in store.capabilities


def _check_size(doc: ManifestDoc) -> None:
    if len(doc.body) > MAX_MANIFEST_BYTES:
        raise StoreError(
            f"the manifest of pipeline {doc.name} is {len(doc.body)} bytes, over the cap of {MAX_MANIFEST_BYTES}",
            rule="max_manifest_bytes",
        )


# -- files ----------------------------------------------------------------------------------------
class FilesManifests:
    """``<root>/manifests/<name>/<hash>.json``, published like a record (never replaced)."""

    # The store's own folder opening (segment by segment, never through a symlink) is reused.

    def __init__(self, store: FilesStore) -> None:
        self.store = store

    def put(self, doc: ManifestDoc) -> bool:
        """Record ``doc`` (see Manifests.put)."""
        from phaselog.stores.files.io import write_temp

        check_key(doc.name, doc.manifest_hash)
        _check_size(doc)
        store: Any = self.store
        store.refuse_if_read_only("record a pipeline manifest")
        final = f"{doc.manifest_hash}.json"
        try:
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
        except PhaselogError:
            raise
        except OSError as exc:
            raise StoreError(f"cannot write {doc.location}: {exc.strerror}", path=doc.location) from None

    def get(self, name: str, manifest_hash: str) -> bytes:
        """Read the bytes of (name, hash) (see Manifests.get)."""
        from phaselog.stores.files.io import read_capped

        check_key(name, manifest_hash)
        store: Any = self.store
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
        store: Any = self.store
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
                    sub = store.open_child(top, name, create=False, rel=f"{FOLDER}/{name}")
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


# -- SQL ------------------------------------------------------------------------------------------
def sql_insert(store: SqlStore, conn: Any, doc: ManifestDoc) -> bool:
    """Insert ``doc`` inside the caller's write transaction unless it is there; True when added."""
    check_key(doc.name, doc.manifest_hash)
    _check_size(doc)
    cur = conn.execute(
        store._sql(
            "INSERT INTO phaselog_pipelines (name, manifest_hash, body) VALUES (?, ?, ?) "
            "ON CONFLICT (name, manifest_hash) DO NOTHING"
        ),
        (doc.name, doc.manifest_hash, doc.body.decode("utf-8")),
    )
    return bool(getattr(cur, "rowcount", 0) == 1)


class SqlManifests:
    """Rows of ``phaselog_pipelines``."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def put(self, doc: ManifestDoc) -> bool:
        """Record ``doc`` in its own transaction (see Manifests.put)."""
        check_key(doc.name, doc.manifest_hash)
        _check_size(doc)
        if self.store.read_only:
            raise StoreError(f"{self.store.url} is open read-only: cannot record a pipeline manifest", rule="read_only")
        added: bool = self.store._retry(lambda: self.store._write(lambda conn: sql_insert(self.store, conn, doc)))
        return added

    def get(self, name: str, manifest_hash: str) -> bytes:
        """Read the bytes of (name, hash) (see Manifests.get)."""
        check_key(name, manifest_hash)
        rows = self.store._query(
            "SELECT body FROM phaselog_pipelines WHERE name = ? AND manifest_hash = ?", (name, manifest_hash)
        )
        if not rows:
            where = location(name, manifest_hash)
            raise NotFound(f"no recorded manifest {where}", path=where)
        return str(rows[0][0]).encode("utf-8")

    def keys(self) -> list[tuple[str, str]]:
        """Every recorded (name, hash), sorted."""
        rows = self.store._query("SELECT name, manifest_hash FROM phaselog_pipelines")
        return sorted((str(n), str(h)) for n, h in rows)
