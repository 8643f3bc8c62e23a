"""Recorded pipeline manifests on the SQL stores: rows of ``phaselog_pipelines (name, manifest_hash,
body)`` (migration 4), created if absent and never replaced (see :mod:`phaselog.stores.manifests`).

A write records its pipeline's manifest inside its append's transaction (:func:`insert`), so a
record never exists without its manifest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from phaselog.model.errors import NotFound, StoreError
from phaselog.stores.manifests import ManifestDoc, check_key, check_size, location

if TYPE_CHECKING:
    from phaselog.stores.sql.session import Session, Transaction


def insert(tx: Transaction, doc: ManifestDoc) -> bool:
    """Insert ``doc`` inside the caller's write transaction unless it is there; True when added."""
    check_key(doc.name, doc.manifest_hash)
    check_size(doc)
    cur = tx.execute(
        "INSERT INTO phaselog_pipelines (name, manifest_hash, body) VALUES (?, ?, ?) "
        "ON CONFLICT (name, manifest_hash) DO NOTHING",
        (doc.name, doc.manifest_hash, doc.body.decode("utf-8")),
    )
    return bool(getattr(cur, "rowcount", 0) == 1)


class SqlManifests:
    """Rows of ``phaselog_pipelines``."""

    def __init__(self, session: Session, *, read_only: bool) -> None:
        self.session = session
        self.read_only = read_only

    def put(self, doc: ManifestDoc) -> bool:
        """Record ``doc`` in its own transaction (see Manifests.put)."""
        check_key(doc.name, doc.manifest_hash)
        check_size(doc)
        if self.read_only:
            raise StoreError(
                f"{self.session.url} is open read-only: cannot record a pipeline manifest", rule="read_only"
            )
        return self.session.transact(lambda tx: insert(tx, doc))

    def get(self, name: str, manifest_hash: str) -> bytes:
        """Read the bytes of (name, hash) (see Manifests.get)."""
        check_key(name, manifest_hash)
        rows = self.session.query(
            "SELECT body FROM phaselog_pipelines WHERE name = ? AND manifest_hash = ?", (name, manifest_hash)
        )
        if not rows:
            where = location(name, manifest_hash)
            raise NotFound(f"no recorded manifest {where}", path=where)
        return str(rows[0][0]).encode("utf-8")

    def keys(self) -> list[tuple[str, str]]:
        """Every recorded (name, hash), sorted."""
        rows = self.session.query("SELECT name, manifest_hash FROM phaselog_pipelines")
        return sorted((str(n), str(h)) for n, h in rows)
