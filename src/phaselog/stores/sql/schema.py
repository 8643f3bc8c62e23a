"""The SQL stores' schema: its version, and applying the frozen migrations in order.

The migrations themselves are data (:mod:`phaselog.stores.sql.migrations`); this module checks a
database's version against the code's and brings it up to date inside one transaction (the
session's :meth:`~phaselog.stores.sql.session.Session.migrate`) that concurrent migrations
serialise on (the dialect's ``lock_for_migration``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phaselog.model.errors import MigrationNeeded, UnsupportedVersion
from phaselog.stores.sql.migrations import FROZEN, LATEST

if TYPE_CHECKING:
    from phaselog.stores.sql.dialect import Transaction

#: The schema version this code writes and understands (the newest frozen migration).
SCHEMA_VERSION = LATEST

#: The migrations :func:`migrate` applies: the frozen ones (a mutable copy, so that a test can add a
#: failing migration; the frozen text itself never changes, see tests/test_migrations.py).
MIGRATIONS: dict[int, Any] = dict(FROZEN)


def check_version(version: int, where: str, url: str) -> None:
    """UnsupportedVersion when ``version`` is newer than this code, MigrationNeeded when older."""
    if version > SCHEMA_VERSION:
        raise UnsupportedVersion(
            f"the database at {where} has schema version {version}, newer than this "
            f"phaselog understands ({SCHEMA_VERSION}); upgrade phaselog (pip install -U phaselog) "
            "before using this store",
            found=version,
            supported=SCHEMA_VERSION,
        )
    if version < SCHEMA_VERSION:
        raise MigrationNeeded(
            f"the database at {where} has schema version {version}; this phaselog needs "
            f"{SCHEMA_VERSION}. Back it up, then run `phaselog store migrate --store {url}`",
            found=version,
            required=SCHEMA_VERSION,
        )


def apply(tx: Transaction, url: str, *, upgrade: bool = True) -> tuple[int, int]:
    """Inside the migration transaction: bring the schema to :data:`SCHEMA_VERSION`. Returns (from, to).

    ``upgrade=False`` (a first write creating a new store) only creates: an existing older
    schema raises MigrationNeeded, because upgrades are explicit (``phaselog store migrate``).
    """
    dialect = tx.dialect
    dialect.lock_for_migration(tx.conn)
    dialect.create_schema(tx.conn)
    tx.execute("CREATE TABLE IF NOT EXISTS phaselog_schema (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
    row = tx.one("SELECT version FROM phaselog_schema WHERE id = 1")
    current = int(row[0]) if row else 0
    if current > SCHEMA_VERSION or (current and not upgrade):
        check_version(current, dialect.describe(), url)
    for version in range(current + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[version]:
            if dialect.runs(statement):
                tx.conn.execute(statement)  # verbatim: a migration's text is run as it was frozen
    if current == 0:
        tx.execute("INSERT INTO phaselog_schema (id, version) VALUES (1, ?)", (SCHEMA_VERSION,))
    elif current < SCHEMA_VERSION:
        tx.execute("UPDATE phaselog_schema SET version = ? WHERE id = 1", (SCHEMA_VERSION,))
    return current, SCHEMA_VERSION
