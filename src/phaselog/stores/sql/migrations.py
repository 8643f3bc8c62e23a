"""The SQL schema's migrations, frozen: each numbered migration's statements, verbatim.

A released migration is data that never changes (LangGraph's Postgres saver keeps the same
append-only list). A change to the schema is a NEW number appended here, never an edit of an old
one: a database migrated by an older phaselog has run exactly these statements, and
``tests/test_migrations.py`` pins each number's SHA-256 so an edit fails the build. The statements
are plain text on purpose: no constant of another module is interpolated into them. A statement
whose first line is ``-- dialect: NAME`` runs only on that database (the dialect's ``runs``).
:mod:`phaselog.stores.sql.schema` applies them in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

_FROZEN: dict[int, tuple[str, ...]] = {
    # Checkpoints, audit entries and the guard's state, lease and history.
    1: (
        """CREATE TABLE IF NOT EXISTS phaselog_checkpoints (
            ticket_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            phase_ordinal INTEGER NOT NULL,
            phase TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            prev_attempt INTEGER NOT NULL,
            status TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (ticket_id, run_id, phase_ordinal, attempt),
            UNIQUE (ticket_id, run_id, phase_ordinal, prev_attempt)
        )""",
        """CREATE TABLE IF NOT EXISTS phaselog_entries (
            kind TEXT NOT NULL,
            ticket_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (kind, ticket_id, run_id, name)
        )""",
        """CREATE TABLE IF NOT EXISTS phaselog_guard_state (
            name TEXT PRIMARY KEY,
            body TEXT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS phaselog_guard_lease (
            name TEXT PRIMARY KEY,
            fencing_token BIGINT NOT NULL,
            holder TEXT
        )""",
        """CREATE TABLE IF NOT EXISTS phaselog_guard_history (
            name TEXT NOT NULL,
            seq INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (name, seq)
        )""",
    ),
    # Run leases (the runner): one row per run with its fencing token (stores/sql/lease.py).
    2: (
        """CREATE TABLE IF NOT EXISTS phaselog_run_leases (
    ticket_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    fencing_token BIGINT NOT NULL,
    holder TEXT,
    renewed_at DOUBLE PRECISION,
    expires_at DOUBLE PRECISION,
    PRIMARY KEY (ticket_id, run_id)
)""",
    ),
    # The queue of runs that workers drain (PostgreSQL; empty elsewhere): stores/sql/queue/.
    3: (
        """CREATE TABLE IF NOT EXISTS phaselog_queue (
        ticket_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        queue TEXT NOT NULL,
        pipeline TEXT NOT NULL,
        manifest TEXT,
        manifest_hash TEXT,
        priority INTEGER NOT NULL,
        not_before DOUBLE PRECISION NOT NULL,
        dedup_key TEXT,
        state TEXT NOT NULL,
        worker TEXT,
        claim_token BIGINT NOT NULL,
        claims INTEGER NOT NULL,
        recoveries INTEGER NOT NULL,
        phase TEXT,
        reason TEXT,
        cancel_requested INTEGER NOT NULL,
        submitted_at DOUBLE PRECISION NOT NULL,
        since DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (ticket_id, run_id)
    )""",
        "CREATE INDEX IF NOT EXISTS phaselog_queue_claim ON phaselog_queue (queue, state, priority, submitted_at)",
        "CREATE UNIQUE INDEX IF NOT EXISTS phaselog_queue_dedup ON phaselog_queue (queue, dedup_key) "
        "WHERE dedup_key IS NOT NULL AND state IN ('queued', 'running', 'awaiting_approval')",
        """CREATE TABLE IF NOT EXISTS phaselog_queue_workers (
        worker_id TEXT PRIMARY KEY,
        queue TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        process_start DOUBLE PRECISION,
        started_at DOUBLE PRECISION NOT NULL,
        heartbeat_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    ),
    # Recorded pipeline manifests, content-addressed (stores/sql/manifests.py).
    4: (
        """CREATE TABLE IF NOT EXISTS phaselog_pipelines (
    name TEXT NOT NULL,
    manifest_hash TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (name, manifest_hash)
)""",
    ),
    # A covering index for the run snapshot's per-phase aggregate (stores/sql/snapshot.py): a write
    # or a status reads the index, never a row per attempt (decisions: "A phase summary").
    5: (
        "CREATE INDEX IF NOT EXISTS phaselog_checkpoints_summary "
        "ON phaselog_checkpoints (ticket_id, run_id, phase_ordinal, phase, attempt, status)",
    ),
    # Where `doctor --quarantine` moves damaged rows, append-only (stores/sql/quarantine.py, D117).
    6: (
        """CREATE TABLE IF NOT EXISTS phaselog_quarantine (
        seq INTEGER PRIMARY KEY,
        location TEXT NOT NULL,
        origin TEXT NOT NULL,
        row_columns TEXT NOT NULL,
        body TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        reason TEXT NOT NULL,
        moved_at TEXT NOT NULL
    )""",
    ),
    # The name a submitted run was given (`submit --run-id w49`), kept with its queue row (D93).
    7: ("ALTER TABLE phaselog_queue ADD COLUMN run_name TEXT",),
    # PostgreSQL only (the "-- dialect:" line, Dialect.runs): a run that gains a checkpoint or an
    # audit entry NOTIFYs phaselog_feed with "schema:ticket/run", so `Ledger.follow` wakes in LISTEN (D207).
    # Delivered at commit, one per distinct payload per transaction; ids are short (< 8000 bytes).
    8: (
        """-- dialect: postgresql
CREATE OR REPLACE FUNCTION phaselog_feed_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('phaselog_feed', left(TG_TABLE_SCHEMA || ':' || NEW.ticket_id || '/' || NEW.run_id, 1900));
    RETURN NULL;
END
$$""",
        "-- dialect: postgresql\nDROP TRIGGER IF EXISTS phaselog_checkpoints_feed ON phaselog_checkpoints",
        "-- dialect: postgresql\nCREATE TRIGGER phaselog_checkpoints_feed AFTER INSERT ON phaselog_checkpoints "
        "FOR EACH ROW EXECUTE FUNCTION phaselog_feed_notify()",
        "-- dialect: postgresql\nDROP TRIGGER IF EXISTS phaselog_entries_feed ON phaselog_entries",
        "-- dialect: postgresql\nCREATE TRIGGER phaselog_entries_feed AFTER INSERT ON phaselog_entries "
        "FOR EACH ROW EXECUTE FUNCTION phaselog_feed_notify()",
    ),
    # The parameters a submitted run was given (`submit --param`), JSON, kept with its queue row (D262).
    9: ("ALTER TABLE phaselog_queue ADD COLUMN params TEXT",),
}

#: Migration number → its statements, in order (read-only: a released migration never changes).
FROZEN: Mapping[int, tuple[str, ...]] = MappingProxyType(_FROZEN)

#: The newest migration: the schema version this code writes and understands.
LATEST = max(_FROZEN)
