"""The SQL core shared by the SQLite and PostgreSQL stores: the store over one database.

One schema, one set of statements; a dialect (:mod:`phaselog.stores.sql.dialect`) says what
differs between databases. Each record is one row holding the same JSON document the files store
keeps in its sidecar, so content hashes, CLI output and exports are identical across stores.

:class:`SqlStore` is the contract's face; the work is done by services handed the store's
:class:`~phaselog.stores.sql.session.Session` (the one seam to the database): the checkpoint rows
(:mod:`~phaselog.stores.sql.checkpoints`), the audit entries (:mod:`~phaselog.stores.sql.entries`),
the run snapshot, leases, manifests, stamps, retention,
quarantine, guard storage and, on PostgreSQL, the queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import Corrupt
from phaselog.model.ids import validate_ticket_id
from phaselog.stores import kernel
from phaselog.stores.base import AttemptRef, Capability, Damaged, PruneTarget, RunFence, Stored
from phaselog.stores.snapshot import detached
from phaselog.stores.sql import quarantine as sql_quarantine
from phaselog.stores.sql import stamps
from phaselog.stores.sql.checkpoints import SqlCheckpoints
from phaselog.stores.sql.entries import SqlEntries
from phaselog.stores.sql.lease import SqlRunLeases
from phaselog.stores.sql.manifests import SqlManifests
from phaselog.stores.sql.retention import SqlRetention
from phaselog.stores.sql.session import Session

if TYPE_CHECKING:
    import contextlib

    from phaselog.model.records import Checkpoint
    from phaselog.stores.manifests import ManifestDoc
    from phaselog.stores.snapshot import RunSnapshot
    from phaselog.stores.sql.dialect import Dialect
    from phaselog.stores.sql.guard import SqlGuardStore

#: What the SQL stores have beyond the contract (no LEFTOVERS: a transaction leaves nothing behind;
#: no LOCAL_ROOT: a database is not a folder). QUARANTINE moves a damaged row aside (sql/quarantine.py).
SQL_CAPABILITIES = frozenset(
    {
        Capability.LEASES,
        Capability.RETENTION,
        Capability.MIGRATE,
        Capability.GUARD_STORAGE,
        Capability.STAMPS,
        Capability.MANIFESTS,
        Capability.PHASE_READ,
        Capability.CARRIED_RUNS,
        Capability.QUARANTINE,
    }
)


class SqlStore:
    """A store over one SQL database (see the module docstring)."""

    url: str
    capabilities = SQL_CAPABILITIES

    def __init__(
        self,
        url: str,
        dialect: Dialect,
        *,
        create: bool = True,
        migrate: bool = False,
        max_record_bytes: int | None = None,
        read_only: bool = False,
    ) -> None:
        """Open the store; nothing is created or written here (unless ``migrate``).

        ``read_only``: every write is refused (StoreError, rule ``read_only``) before it reaches the
        database, and the database is told so too (SQLite ``mode=ro``, PostgreSQL read-only sessions).

        The schema version is checked now: too new → UnsupportedVersion, too old →
        MigrationNeeded. A database or schema that does not exist is StoreNotFound unless
        ``create`` is set; then the first write creates it (reads see an empty store until then).
        ``migrate=True`` creates or upgrades the schema now (``phaselog store migrate``).
        """
        self.url = url
        self.dialect = dialect
        #: Opened for reading only: no transaction that writes is ever started through this object.
        self.read_only = dialect.read_only = read_only
        if read_only:
            create = False
        self.max_record_bytes = max_record_bytes or kernel.DEFAULT_MAX_RECORD_BYTES
        #: The connection, its reads, transactions and retries: what every service below uses.
        self.session = Session(url, dialect, may_create=create)
        #: The checkpoint rows: appends and reads.
        self.checkpoints = SqlCheckpoints(self.session, self.max_record_bytes)
        #: The audit entries' rows (progress events, approvals, markers, prune notes).
        self.audit_entries = SqlEntries(self.session, self.max_record_bytes)
        #: ``prune``'s operations (one transaction with writers locked out).
        self.retention = SqlRetention(self.session)
        #: (from, to) schema versions of the migration ``migrate=True`` ran at open.
        self.migrated: tuple[int, int] | None = None
        try:
            if migrate:
                self.migrated = self.migrate()
                return
            self.session.open()
        except BaseException:
            self.session.reset()  # a store that cannot open must not leak its connection
            raise

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dialect.describe()!r})"

    @property
    def conn(self) -> Any:
        """The open connection (reconnecting if needed)."""
        return self.session.conn

    # -- migrations -------------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The database's schema version (0 when empty)."""
        rows = self.session.query("SELECT version FROM phaselog_schema WHERE id = 1")
        return int(rows[0][0]) if rows else 0

    def migrate(self, *, upgrade: bool = True) -> tuple[int, int]:
        """Create or upgrade the schema; safe to run concurrently. Returns (from, to) (see Session.migrate)."""
        return self.session.migrate(upgrade=upgrade)

    # -- checkpoints ------------------------------------------------------------------------------
    def append(
        self,
        record: Checkpoint,
        *,
        expected_latest: int,
        fence: RunFence | None = None,
        manifest: ManifestDoc | None = None,
    ) -> str:
        """Append ``record`` (see Store.append): constraints decide, the first writer wins."""
        return self.checkpoints.append(record, expected_latest=expected_latest, fence=fence, manifest=manifest)

    def attempts(self, ticket_id: str, run_id: str) -> list[AttemptRef]:
        """Every committed attempt of a run, sorted by (phase ordinal, attempt)."""
        return self.checkpoints.attempts(ticket_id, run_id)

    def get(self, ticket_id: str, run_id: str, phase_ordinal: int, phase: str, attempt: int) -> Stored:
        """Read one record."""
        return self.checkpoints.get(ticket_id, run_id, phase_ordinal, phase, attempt)

    def read_phase(self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None = None) -> Stored | None:
        """A phase's latest checkpoint (or one attempt) in one statement; None: ask the general way."""
        return self.checkpoints.read_phase(ticket_id, run_id, phase, attempt)

    def iter_records(self, ticket_id: str, run_id: str | None = None) -> Iterator[Stored | Damaged]:
        """Yield records in (run, phase ordinal, attempt) order; damaged ones as Damaged."""
        return self.checkpoints.iter_records(ticket_id, run_id)

    def location(self, record: Checkpoint) -> str:
        """The record's logical path (the same string the files store uses)."""
        return kernel.record_location(record)

    def tickets(self) -> list[str]:
        """Every ticket with a record or an audit entry, sorted."""
        rows = self.session.query(
            "SELECT ticket_id FROM phaselog_checkpoints UNION SELECT ticket_id FROM phaselog_entries"
        )
        return sorted(r[0] for r in rows)

    def runs(self, ticket_id: str) -> list[str]:
        """Every run of a ticket (with a checkpoint or a run-level entry), sorted."""
        validate_ticket_id(ticket_id)
        rows = self.session.query(
            "SELECT run_id FROM phaselog_checkpoints WHERE ticket_id = ? UNION "
            "SELECT run_id FROM phaselog_entries WHERE ticket_id = ? AND run_id <> ''",
            (ticket_id, ticket_id),
        )
        return sorted(r[0] for r in rows)

    # -- audit entries (see SqlEntries) ---------------------------------------------------------
    def put_entry(self, kind: str, ticket_id: str, run_id: str | None, name: str, body: bytes) -> str:
        """Insert an audit entry; AlreadyExists if the name is taken."""
        return self.audit_entries.put(kind, ticket_id, run_id, name, body)

    def entry_names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        """Names of a kind's entries, sorted."""
        return self.audit_entries.names(kind, ticket_id, run_id)

    def entries(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind as (name, location, bytes), sorted by name."""
        return self.audit_entries.read(kind, ticket_id, run_id, prefix)

    # -- capabilities -----------------------------------------------------------------------------
    def snapshot(self, ticket_id: str, run_id: str, *, history: bool = False) -> RunSnapshot:
        """Everything a write or a status needs about a run (see :mod:`phaselog.stores.snapshot`)."""
        from phaselog.stores.sql.snapshot import sql_snapshot  # lazy: `phaselog read` never loads a snapshot

        if history:
            return sql_snapshot(self, self.checkpoints, ticket_id, run_id, history=True)
        # A reader's copy: the carried records stay as they were read, whatever the reader does.
        return detached(self._carried(ticket_id, run_id, self.checkpoints.carried.fresh))

    def state_snapshot(self, ticket_id: str, run_id: str) -> RunSnapshot:
        """``snapshot`` without the reader's copy: for status, which reads the state and hands no
        record out (D192); the carried run is served only when unchanged, as ``snapshot``'s."""
        return self._carried(ticket_id, run_id, self.checkpoints.carried.fresh)

    def premise_snapshot(self, ticket_id: str, run_id: str) -> tuple[RunSnapshot, bool]:
        """The run as this handle last saw it, for a write whose append checks it, and whether it may
        be stale (stores/sql/carried.py)."""
        carried = self.checkpoints.carried
        found = carried.premise((ticket_id, run_id))
        if found is not None:
            return found
        return self._carried(ticket_id, run_id, carried.fresh), False

    def _carried(
        self, ticket_id: str, run_id: str, carried: Callable[[tuple[str, str]], RunSnapshot | None]
    ) -> RunSnapshot:
        """The carried snapshot ``carried`` hands out, else the run read afresh and carried from now on."""

        key = (ticket_id, run_id)
        snap = carried(key)
        if snap is None:
            from phaselog.stores.sql.snapshot import stamped_snapshot  # lazy: as in snapshot()

            snap, stamp, check = stamped_snapshot(self, self.checkpoints, ticket_id, run_id)
            self.checkpoints.carried.keep(key, snap, stamp, check)
        return snap

    def pipeline_manifests(self) -> SqlManifests:
        """The recorded pipeline manifests (``phaselog_pipelines``: see stores/sql/manifests.py)."""
        return SqlManifests(self.session, read_only=self.read_only)

    def run_leases(self) -> SqlRunLeases:
        """The run-lease service (lease rows in this database)."""
        return SqlRunLeases(self.session)

    def run_stamps(self, ticket_id: str) -> dict[str, str | None]:
        """Every run of a ticket with its change stamp (see :mod:`phaselog.stores.stamps`)."""
        ticket_id = validate_ticket_id(ticket_id)
        return stamps.run_stamps(self.session, self.runs(ticket_id), ticket_id)

    def ticket_stamp(self, ticket_id: str) -> str | None:
        """The change stamp of the ticket's own entries (its marker revisions)."""
        return stamps.ticket_stamp(self.session, validate_ticket_id(ticket_id))

    def quarantine(self, location: str, reason: str) -> list[dict[str, Any]]:
        """Move the damaged row at ``location`` into ``phaselog_quarantine`` (``doctor --quarantine``)."""
        return sql_quarantine.quarantine(self.checkpoints, location, reason)

    def quarantined(self, ticket_id: str, run_id: str) -> dict[tuple[str, int], str | None]:
        """The run's attempts ``doctor --quarantine`` moved into ``phaselog_quarantine``: (phase, attempt)
        → the content hash their row recorded at write (D115)."""
        return sql_quarantine.quarantined(self.session, ticket_id, run_id)

    def guard_storage(self, name: str) -> SqlGuardStore:
        """Where guard ``name`` keeps its lock, state and history: rows in this database."""
        from phaselog.stores.sql.guard import SqlGuardStore  # lazy: only the guard uses it (and its records)

        return SqlGuardStore(self.session, name)

    def guard_names(self) -> list[str]:
        """Every guard with state, a lease or history in this database."""
        from phaselog.stores.sql.guard import sql_guard_names  # lazy: as guard_storage

        return sql_guard_names(self.session)

    # -- retention (see SqlRetention) -------------------------------------------------------------
    def locked_run(self, ticket_id: str, run_id: str) -> contextlib.AbstractContextManager[tuple[str, str] | None]:
        """Hold one write transaction with writers locked out (see Retention.locked_run)."""
        return self.retention.locked_run(ticket_id, run_id)

    def put_note(self, handle: object, name: str, body: bytes) -> str:
        """Insert a prune note (inside locked_run)."""
        return self.retention.put_note(handle, name, body)

    def delete_records(
        self, handle: object, records: Sequence[PruneTarget], entries: Sequence[tuple[str, str]]
    ) -> tuple[int, int]:
        """Delete rows (inside locked_run): a record only while it still has the hash decided on."""
        return self.retention.delete_records(handle, records, entries)

    def remove_run(self, handle: object) -> int:
        """Delete every row of the run (inside locked_run: all of it or, on any error, none)."""
        return self.retention.remove_run(handle)

    def finish_removals(self, ticket_id: str) -> list[dict[str, object]]:
        """Nothing to finish: a SQL prune is one transaction."""
        return self.retention.finish_removals(ticket_id)

    def close(self) -> None:
        """Close the connection (SQLite: after moving the WAL into the database file). Idempotent."""
        self.session.close(read_only=self.read_only)

    def __enter__(self) -> SqlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
