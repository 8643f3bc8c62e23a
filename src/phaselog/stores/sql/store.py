"""The SQL core shared by the SQLite and PostgreSQL stores.

One schema, one set of statements; a dialect overrides only connecting, placeholders, locking for
migrations, and error classification (DBOS's ``_sys_db_sqlite.py`` pattern). Each record is one
row holding the same JSON document the files store keeps in its sidecar, so content hashes, CLI
output and exports are identical across stores.

Append-only and "one writer wins" come from constraints, not from reads:

* ``PRIMARY KEY (ticket_id, run_id, phase_ordinal, attempt)``: a duplicate attempt is refused;
* ``UNIQUE (ticket_id, run_id, phase_ordinal, prev_attempt)``: every attempt has at most one
  successor, so the attempts of a phase form one chain and a writer that read a stale "latest"
  loses with a conflict instead of forking the chain.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import (
    AlreadyExists,
    Conflict,
    Corrupt,
    MigrationNeeded,
    NotFound,
    OutcomeUnknown,
    PhaselogError,
    StoreError,
    StoreNotFound,
    UnsupportedVersion,
)
from phaselog.model.ids import validate_ticket_id
from phaselog.model.records import Checkpoint
from phaselog.stores import kernel, manifests
from phaselog.stores.base import AttemptRef, Damaged, RunFence, Stored
from phaselog.stores.sql import lease as sql_lease
from phaselog.stores.sql.admin import SQL_CAPABILITIES, SqlAdminMixin
from phaselog.stores.sql.pages import paged_by_key
from phaselog.stores.sql.retention import SqlRetentionMixin
from phaselog.stores.sql.schema import MIGRATIONS, SCHEMA_VERSION, Dialect

if TYPE_CHECKING:
    from phaselog.stores.snapshot import RunSnapshot


class SqlStore(SqlRetentionMixin, SqlAdminMixin):
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
        self._conn: Any = None
        self._held = False  # inside locked_run (one transaction; no retries)
        #: Records decoded before, by (ordinal, row body): a row read again is not decoded again.
        self._decoded = kernel.DecodedRecords()
        #: The schema exists at SCHEMA_VERSION (False: nothing exists yet; the first write creates it).
        self._ready = False
        #: (from, to) schema versions of the migration ``migrate=True`` ran at open.
        self.migrated: tuple[int, int] | None = None
        #: A missing store may be created by a write (else every access raises StoreNotFound).
        self.may_create = create
        try:
            if migrate:
                self.migrated = self.migrate()
                return
            version = self._probe()
            if version is not None:
                self._check_version(version)
                self._ready = True
        except BaseException:
            self._reset()  # a store that cannot open must not leak its connection
            raise

    def _missing(self) -> StoreNotFound:
        what = "the database has no phaselog tables" if self.dialect.exists() else "the database does not exist"
        return StoreNotFound(
            f"no phaselog store at {self.dialect.describe()}: {what}; check the URL, or create the store with "
            f"`phaselog store migrate --store {self.url}`",
            path=self.dialect.describe(),
        )

    def _probe(self) -> int | None:
        """The schema version found, or None when the database or phaselog's tables are absent."""
        if not self.dialect.exists():
            return None
        try:
            rows = self._query_raw("SELECT version FROM phaselog_schema WHERE id = 1", typed=False)
        except Exception as exc:
            if self.dialect.is_missing_schema(exc):
                self._end_failed_read()
                return None
            better = self._translate(exc)
            if better is not None:
                raise better from None
            raise
        return int(rows[0][0]) if rows else None

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise UnsupportedVersion(
                f"the database at {self.dialect.describe()} has schema version {version}, newer than this "
                f"phaselog understands ({SCHEMA_VERSION}); upgrade phaselog (pip install -U phaselog) "
                "before using this store",
                found=version,
                supported=SCHEMA_VERSION,
            )
        if version < SCHEMA_VERSION:
            raise MigrationNeeded(
                f"the database at {self.dialect.describe()} has schema version {version}; this phaselog needs "
                f"{SCHEMA_VERSION}. Back it up, then run `phaselog store migrate --store {self.url}`",
                found=version,
                required=SCHEMA_VERSION,
            )

    def _ensure_ready(self) -> None:
        """Create the store on its first write (a store opened with create=True that did not exist)."""
        if not self._ready:
            if not self.may_create and self._still_absent():
                raise self._missing()
            if not self._ready:
                self.migrate(upgrade=False)

    def _still_absent(self) -> bool:
        """For reads of a store not created yet: is it still absent? (Another process may have created it.)"""
        if self._ready:
            return False
        version = self._probe()
        if version is None:
            return True
        self._check_version(version)
        self._ready = True
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dialect.describe()!r})"

    # -- connection & statements ----------------------------------------------------------------
    @property
    def conn(self) -> Any:
        """The open connection (reconnecting if needed)."""
        if self._conn is None:
            self._conn = self.dialect.connect()
        return self._conn

    def _reset(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection may fail; it is gone anyway
                self._conn.close()
        self._conn = None

    def _sql(self, text: str) -> str:
        return text if self.dialect.placeholder == "?" else text.replace("?", self.dialect.placeholder)

    def _query(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of one read; none while the store does not exist yet (nothing is created by a read)."""
        if not self._ready and self._still_absent():
            if not self.may_create:
                raise self._missing()
            return []
        return self._query_raw(text, params)

    def _query_raw(self, text: str, params: Sequence[Any] = (), *, typed: bool = True) -> list[tuple[Any, ...]]:
        def go() -> list[tuple[Any, ...]]:
            cur = self.conn.execute(self._sql(text), tuple(params))
            rows = cur.fetchall()
            self._end_read()
            return list(rows)

        result: list[tuple[Any, ...]] = self._retry(go, typed=typed)
        return result

    def _end_read(self) -> None:
        # psycopg opens a transaction implicitly even for SELECT; end it so nothing stays idle in one.
        if getattr(self.conn, "autocommit", True) is False:
            self.conn.rollback()

    def _end_failed_read(self) -> None:
        with contextlib.suppress(Exception):  # only to leave no aborted transaction behind
            self._end_read()

    def _translate(self, exc: BaseException) -> Exception | None:
        """A typed error in place of a driver error (None: keep ``exc``, the caller handles it)."""
        if isinstance(exc, PhaselogError) or not isinstance(exc, Exception):
            return None
        if self.dialect.is_unique_violation(exc) or self.dialect.is_transient(exc):
            return None
        better: Exception | None = self.dialect.translate(exc)
        return better

    def _retry(self, fn: Callable[[], Any], attempts: int = 5, *, typed: bool = True) -> Any:
        if self._held:
            return fn()  # inside locked_run's transaction: a retry would run outside it
        delay = 0.05
        for i in range(attempts):
            try:
                return fn()
            except Exception as exc:
                if not self.dialect.is_transient(exc) or i == attempts - 1:
                    if self.dialect.is_transient(exc):
                        raise StoreError(f"{self.dialect.name}: {exc}".strip()) from None
                    better = self._translate(exc) if typed else None
                    if better is not None:
                        raise better from None
                    raise
                self._reset()
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise StoreError("unreachable")  # pragma: no cover

    def _write(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(conn)`` in one write transaction, committing at the end (creating the store first
        if it does not exist yet)."""
        self._ensure_ready()
        return self._write_tx(fn)

    def _write_tx(self, fn: Callable[[Any], Any]) -> Any:
        self.dialect.check_writable()
        conn = self.conn
        try:
            self.dialect.begin_write(conn)
            try:
                result = fn(conn)
                conn.commit()
            except BaseException:
                with contextlib.suppress(Exception):  # the original error matters, not the rollback's
                    conn.rollback()
                raise
        except Exception as exc:
            typed = self._translate(exc)
            if typed is not None:
                raise typed from None
            raise
        return result

    # -- migrations -------------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The database's schema version (0 when empty)."""
        rows = self._query("SELECT version FROM phaselog_schema WHERE id = 1")
        return int(rows[0][0]) if rows else 0

    def migrate(self, *, upgrade: bool = True) -> tuple[int, int]:
        """Create or upgrade the schema; safe to run concurrently. Returns (from, to).

        ``upgrade=False`` (a first write creating a new store) only creates: an existing older
        schema raises MigrationNeeded, because upgrades are explicit (``phaselog store migrate``).
        """

        def run(conn: Any) -> tuple[int, int]:
            self.dialect.lock_for_migration(conn)
            self.dialect.create_schema(conn)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS phaselog_schema (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)"
            )
            row = conn.execute("SELECT version FROM phaselog_schema WHERE id = 1").fetchone()
            current = int(row[0]) if row else 0
            if current > SCHEMA_VERSION or (current and not upgrade):
                self._check_version(current)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version]:
                    conn.execute(statement)
            if current == 0:
                conn.execute(self._sql("INSERT INTO phaselog_schema (id, version) VALUES (1, ?)"), (SCHEMA_VERSION,))
            elif current < SCHEMA_VERSION:
                conn.execute(self._sql("UPDATE phaselog_schema SET version = ? WHERE id = 1"), (SCHEMA_VERSION,))
            return current, SCHEMA_VERSION

        if not self.dialect.exists():
            self._reset()
            self.dialect.prepare_create()
        for i in range(5):
            try:
                result: tuple[int, int] = self._retry(lambda: self._write_tx(run))
                self._ready = True
                return result
            except Exception as exc:
                # Two first-time migrations can race to create phaselog_schema; the loser retries.
                if self.dialect.is_unique_violation(exc) and i < 4:
                    continue
                raise
        raise StoreError("could not migrate")  # pragma: no cover

    # -- appending --------------------------------------------------------------------------------
    def append(
        self,
        record: Checkpoint,
        *,
        expected_latest: int,
        fence: RunFence | None = None,
        manifest: manifests.ManifestDoc | None = None,
    ) -> str:
        """Append ``record`` (see Store.append): constraints decide, the first writer wins."""
        kernel.check_record_key(record)
        body = kernel.encode_record(record, self.max_record_bytes).decode()
        key = (record.ticket_id, record.run_id, record.phase_ordinal, record.attempt_number)
        location = kernel.record_location(record)

        def insert(conn: Any) -> None:
            # One round trip, two primary-key lookups (no scan: attempt 1,000 costs what attempt 2 does):
            # the phase's latest attempt, and this attempt's hash if it exists (NULL: no such row).
            latest, existing = conn.execute(
                self._sql(
                    "SELECT (SELECT MAX(attempt) FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
                    "AND phase_ordinal = ?), (SELECT content_hash FROM phaselog_checkpoints WHERE ticket_id = ? "
                    "AND run_id = ? AND phase_ordinal = ? AND attempt = ?)"
                ),
                (*key[:3], *key[:3], record.attempt_number),
            ).fetchone()
            try:
                kernel.decide_append(
                    record,
                    exists=existing is not None,
                    latest=latest or 0,
                    expected_latest=expected_latest,
                    check_fence=None if fence is None else lambda: sql_lease.check_fence(self, conn, fence),
                )
            except AlreadyExists as exc:
                exc.context["_same"] = existing == record.content_hash
                raise
            if manifest is not None:  # in the same transaction: a record never lacks its manifest
                manifests.sql_insert(self, conn, manifest)
            conn.execute(
                self._sql(
                    "INSERT INTO phaselog_checkpoints (ticket_id, run_id, phase_ordinal, phase, attempt, "
                    "prev_attempt, status, content_hash, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    *key[:3],
                    record.phase,
                    record.attempt_number,
                    expected_latest,
                    record.status,
                    record.content_hash,
                    body,
                ),
            )

        def attempt_once() -> None:
            if fence is None and manifest is None and self.dialect.round_trips_dear and self.dialect.append_at_once:
                from phaselog.stores.sql.append import insert_at_once

                if insert_at_once(self, record, body, expected_latest):
                    return  # else the transaction below reads why (and inserts if it now may)
            try:
                self._write(insert)
            except Exception as exc:
                if self.dialect.is_unique_violation(exc):
                    # A concurrent writer got there between our read and our insert.
                    raise Conflict(f"phase {record.phase} changed while writing") from None
                raise

        for i in range(5):
            try:
                attempt_once()
                return location
            except AlreadyExists as exc:
                if exc.context.pop("_same", False) and i > 0:
                    return location  # our own insert, whose commit we did not hear about
                exc.context.pop("_same", None)
                raise
            except Exception as exc:
                if not self.dialect.is_transient(exc):
                    raise
                # Commit outcome unknown (connection lost): the next round's read decides by content hash.
                self._reset()
                time.sleep(0.05 * (2**i))
        raise OutcomeUnknown(
            f"{self.dialect.name}: the database stopped answering while {location} was being written; it may or "
            "may not be stored — read it back before writing again",
            path=location,
        )

    # -- reading ----------------------------------------------------------------------------------
    def attempts(self, ticket_id: str, run_id: str) -> list[AttemptRef]:
        """Every committed attempt of a run, sorted by (phase ordinal, attempt)."""
        validate_ticket_id(ticket_id)
        rows = self._query(
            "SELECT phase_ordinal, attempt, phase, status FROM phaselog_checkpoints WHERE ticket_id = ? "
            "AND run_id = ? ORDER BY phase_ordinal, attempt",
            (ticket_id, run_id),
        )
        return [AttemptRef(r[0], r[1], r[2], r[3] == "completed") for r in rows]

    def get(self, ticket_id: str, run_id: str, phase_ordinal: int, phase: str, attempt: int) -> Stored:
        """Read one record."""
        validate_ticket_id(ticket_id)
        rows = self._query(
            "SELECT phase, status, content_hash, body FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
            "AND phase_ordinal = ? AND attempt = ?",
            (ticket_id, run_id, phase_ordinal, attempt),
        )
        if not rows or rows[0][0] != phase:
            raise NotFound(
                f"no attempt {attempt} of phase {phase} in run {run_id}",
                path=kernel.attempt_location(ticket_id, run_id, phase_ordinal, phase, attempt, completed=True),
            )
        return self._stored(ticket_id, run_id, phase_ordinal, phase, attempt, rows[0][1], rows[0][3], rows[0][2])

    def read_phase(self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None = None) -> Stored | None:
        """A phase's latest checkpoint (or one attempt) in one statement; None: ask the general way."""
        from phaselog.stores.sql.phase import read_phase

        return read_phase(self, ticket_id, run_id, phase, attempt)

    def _stored(
        self,
        ticket_id: str,
        run_id: str,
        ordinal: int,
        phase: str,
        attempt: int,
        status: str,
        body: str,
        column_hash: str | None,
    ) -> Stored:
        location = kernel.attempt_location(ticket_id, run_id, ordinal, phase, attempt, completed=status == "completed")
        stored = self._decoded.get(ordinal, body, location)
        kept = stored is not None
        if stored is None:
            doc = kernel.decode_document(body.encode("utf-8"), location)
            stored = kernel.record_from_document(doc, ordinal, location)
        kernel.check_identity(stored, ticket_id, run_id, ordinal, phase, attempt)
        cp = stored.record
        # The key columns decide what readers see without reading the body (attempts() lists the
        # status column): each must say what the hashed body says, or the row is damaged.
        if status != cp.status or column_hash != stored.recorded_hash:
            column, value = ("status", status) if status != cp.status else ("content_hash", column_hash)
            raise Corrupt(
                f"{location}: the row's {column} column ({str(value)[:20]!r}) differs from its hashed content",
                path=location,
                rule="row_mismatch",
            )
        if not kept and stored.recorded_hash is not None:
            self._decoded.put(ordinal, body, stored)
        return stored

    def tickets(self) -> list[str]:
        """Every ticket with a record or an audit entry, sorted."""
        rows = self._query("SELECT ticket_id FROM phaselog_checkpoints UNION SELECT ticket_id FROM phaselog_entries")
        return sorted(r[0] for r in rows)

    def runs(self, ticket_id: str) -> list[str]:
        """Every run of a ticket (with a checkpoint or a run-level entry), sorted."""
        validate_ticket_id(ticket_id)
        rows = self._query(
            "SELECT run_id FROM phaselog_checkpoints WHERE ticket_id = ? UNION "
            "SELECT run_id FROM phaselog_entries WHERE ticket_id = ? AND run_id <> ''",
            (ticket_id, ticket_id),
        )
        return sorted(r[0] for r in rows)

    def iter_records(self, ticket_id: str, run_id: str | None = None) -> Iterator[Stored | Damaged]:
        """Yield records in (run, phase ordinal, attempt) order; damaged ones as Damaged."""
        validate_ticket_id(ticket_id)
        sql = (
            "SELECT run_id, phase_ordinal, phase, attempt, status, body, content_hash FROM phaselog_checkpoints "
            "WHERE ticket_id = ?"
        )
        params: list[Any] = [ticket_id]
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        # In pages: memory stays flat however many records the ticket has (see sql_pages).
        rows = paged_by_key(self._query, sql, params, self.dialect.collate, key=(0, 1, 3))
        for rid, ordinal, phase, attempt, status, body, column_hash in rows:
            try:
                yield self._stored(ticket_id, rid, ordinal, phase, attempt, status, body, column_hash)
            except (Corrupt, UnsupportedVersion) as exc:
                yield kernel.damaged_from(exc, ticket_id, rid, ordinal, phase, attempt)

    def location(self, record: Checkpoint) -> str:
        """The record's logical path (the same string the files store uses)."""
        return kernel.record_location(record)

    # -- audit entries ----------------------------------------------------------------------------
    @staticmethod
    def _entry_key(kind: str, ticket_id: str, run_id: str | None) -> tuple[str, str, str]:
        kernel.check_entry_key(kind, ticket_id, run_id)
        return kind, ticket_id, run_id or ""

    def put_entry(self, kind: str, ticket_id: str, run_id: str | None, name: str, body: bytes) -> str:
        """Insert an audit entry; AlreadyExists if the name is taken."""
        key = self._entry_key(kind, ticket_id, run_id)
        kernel.check_entry(name, body, self.max_record_bytes)
        rel = kernel.entry_location(kind, ticket_id, run_id, name)
        text = body.decode("utf-8")

        def insert(conn: Any) -> None:
            conn.execute(
                self._sql("INSERT INTO phaselog_entries (kind, ticket_id, run_id, name, body) VALUES (?, ?, ?, ?, ?)"),
                (*key, name, text),
            )

        for i in range(5):
            try:
                self._write(insert)
                return rel
            except Exception as exc:
                if self.dialect.is_unique_violation(exc):
                    rows = self._query(
                        "SELECT body FROM phaselog_entries WHERE kind = ? AND ticket_id = ? "
                        "AND run_id = ? AND name = ?",
                        (*key, name),
                    )
                    if i > 0 and rows and rows[0][0] == text:
                        return rel  # our own insert whose commit we did not hear about
                    raise AlreadyExists(f"{rel} already exists", path=rel) from None
                if not self.dialect.is_transient(exc):
                    raise
                self._reset()
                time.sleep(0.05 * (2**i))
        raise StoreError(f"{self.dialect.name}: could not write {rel} (database unreachable)")

    def entry_names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        """Names of a kind's entries, sorted."""
        order = f"ORDER BY name{self.dialect.collate}"  # a fixed collation clause; values are bound
        rows = self._query(
            "SELECT name FROM phaselog_entries WHERE kind = ? AND ticket_id = ? AND run_id = ? " + order,
            self._entry_key(kind, ticket_id, run_id),
        )
        return [r[0] for r in rows]

    def entries(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind as (name, location, bytes), sorted by name."""
        key = self._entry_key(kind, ticket_id, run_id)
        order = f"ORDER BY name{self.dialect.collate}"  # a fixed collation clause; values are bound
        # The prefix is matched in the database, so only the wanted bodies travel (one attempt's
        # progress events, not the whole run's).
        where = "WHERE kind = ? AND ticket_id = ? AND run_id = ? " + ("AND substr(name, 1, ?) = ? " if prefix else "")
        params = (*key, len(prefix), prefix) if prefix else key
        rows = self._query("SELECT name, body FROM phaselog_entries " + where + order, params)
        rel_dir = kernel.entry_dir_location(kind, ticket_id, run_id)
        return [(n, f"{rel_dir}/{n}.json", b.encode("utf-8")) for n, b in rows if n.startswith(prefix)]

    def pipeline_manifests(self) -> manifests.SqlManifests:
        """The recorded pipeline manifests (``phaselog_pipelines``: see stores/manifests.py)."""
        return manifests.SqlManifests(self)

    def run_leases(self) -> sql_lease.SqlRunLeases:
        """The run-lease service (lease rows in this database)."""
        return sql_lease.SqlRunLeases(self)

    def snapshot(self, ticket_id: str, run_id: str, *, history: bool = False) -> RunSnapshot:
        """Everything a write or a status needs about a run (see :mod:`phaselog.stores.snapshot`)."""
        from phaselog.stores.sql.snapshot import sql_snapshot

        return sql_snapshot(self, ticket_id, run_id, history=history)

    def close(self) -> None:
        """Close the connection (SQLite: after moving the WAL into the database file). Idempotent."""
        if self._conn is not None and not self.read_only:
            with contextlib.suppress(Exception):  # best effort: a read-only file cannot be checkpointed
                self.dialect.before_close(self._conn)
        self._reset()

    def __enter__(self) -> SqlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
