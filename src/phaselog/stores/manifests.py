"""Recorded pipeline manifests: a store keeps the manifest of every pipeline it has records for.

A manifest is kept under its pipeline's name and its content hash (``Pipeline.manifest_hash``,
the SHA-256 a checkpoint's ``pipeline.manifest_hash`` names), created if absent and never
replaced, so a store describes itself: ``status`` of a run copied to another store finds the
pipeline there even when no manifest file is at hand. The store keeps bytes (the manifest as JSON);
:mod:`phaselog.ledger.recorded_pipelines` builds them and checks them (name and hash) when it reads them back.

* files store: ``<root>/manifests/<name>/<sha256>.json`` (temp file, fsync, ``link``, fsync the
  folder; the folders are opened without following symlinks, like every path of the store):
  :mod:`phaselog.stores.files.manifests`;
* SQL stores: the table ``phaselog_pipelines (name, manifest_hash, body)`` (migration 4):
  :mod:`phaselog.stores.sql.manifests`.

This module holds what both share: the document, its key's rules and the :class:`Manifests` protocol.

A write records its pipeline's manifest inside its append (``Store.append(..., manifest=…)``): on
SQL in the same transaction, on files just before the checkpoint is published (under the run's
lock, after the append's checks), so a record never exists without its manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

from phaselog.model._lazyre import LazyPattern
from phaselog.model.errors import StoreError
from phaselog.model.limits import MAX_MANIFEST_BYTES
from phaselog.stores.values import Capability

#: A pipeline name (the manifest grammar's) and a manifest hash (SHA-256, lowercase hex).
NAME_RE = LazyPattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
HASH_RE = LazyPattern(r"[0-9a-f]{64}")
#: The files store's folder of recorded manifests, below its root.
FOLDER = "manifests"


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


class Declaring(Protocol):
    """What this module needs of a store: its declared capabilities (a :class:`~phaselog.stores.base.Store`
    is one; the contract imports this module, so it is named structurally here)."""

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The optional parts of the contract the store has."""
        ...


class ManifestKeeper(Declaring, Protocol):
    """A store that keeps the manifest of every pipeline it has records for (``Capability.MANIFESTS``)."""

    def pipeline_manifests(self) -> Manifests:
        """The store's recorded manifests."""
        ...


def manifests_of(store: Declaring) -> Manifests:
    """The recorded manifests of a store that declares :attr:`Capability.MANIFESTS` (StoreError otherwise)."""
    if not has_manifests(store):
        raise StoreError("this store keeps no pipeline manifests", rule="no_manifests")
    return cast(ManifestKeeper, store).pipeline_manifests()  # the capability declares the member


def has_manifests(store: Declaring) -> bool:
    """True when ``store`` declares :attr:`Capability.MANIFESTS` (every built-in store does)."""
    return Capability.MANIFESTS in store.capabilities


def check_size(doc: ManifestDoc) -> None:
    """Refuse a manifest over :data:`MAX_MANIFEST_BYTES` (before it is written)."""
    if len(doc.body) > MAX_MANIFEST_BYTES:
        raise StoreError(
            f"the manifest of pipeline {doc.name} is {len(doc.body)} bytes, over the cap of {MAX_MANIFEST_BYTES}",
            rule="max_manifest_bytes",
        )
