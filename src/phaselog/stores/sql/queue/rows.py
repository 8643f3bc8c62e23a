"""The queue of runs on PostgreSQL: submitted runs that workers on any machine claim.

Two tables (migration 3; created on SQLite too, where they stay empty: the queue refuses
non-PostgreSQL stores, see docs/decisions.md):

* ``phaselog_queue``: one row per submitted run, keyed like every other table by
  ``(ticket_id, run_id)``. ``state`` is one of :data:`STATES`; a running row names its
  ``worker`` and carries a ``claim_token`` raised by one at every claim, so a worker that lost
  the row (it was recovered from under it) cannot change it any more: every transition is an
  ``UPDATE … WHERE claim_token = mine AND state = 'running'``.
* ``phaselog_queue_workers``: one row per live worker process (host, pid, process start time)
  with ``expires_at`` in the database's clock, renewed by the worker's heartbeat. A running row
  whose worker's row expired, vanished, or names a process that is provably gone on the
  claimer's own host is *recovered*: claimed again, ``recoveries`` + 1, and after the workers'
  ``max_recoveries`` it is ``dead`` with the reason (a poison run does not loop forever).

Claiming is one transaction: ``SELECT … FOR UPDATE OF q SKIP LOCKED LIMIT 1`` over the
claimable rows (queued and due, or running under a dead worker), then an ``UPDATE``. Submits,
re-queues and retries ``pg_notify`` the queue's channel (:func:`channel`) inside their
transaction, so idle workers blocked in ``LISTEN`` wake when it commits.

This module knows rows, not pipelines or processes: the runner decides liveness of processes
(``dead_local``) and what a run's outcome means for its row (phaselog.runner.worker).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from phaselog.model.errors import Conflict, NotFound, QueueRefused, UsageError
from phaselog.model.ids import is_canonical_uuid, validate_ticket_id
from phaselog.model.records import format_timestamp
from phaselog.stores.base import Capability, Store
from phaselog.stores.sql.store import SqlStore

if TYPE_CHECKING:
    from phaselog.stores.sql.session import Transaction

T = TypeVar("T")

QUEUED, RUNNING, AWAITING, DEAD, DONE, CANCELLED = (
    "queued",
    "running",
    "awaiting_approval",
    "dead",
    "done",
    "cancelled",
)
STATES = (QUEUED, RUNNING, AWAITING, DEAD, DONE, CANCELLED)
#: A run in one of these states still holds its dedup key.
ACTIVE = (QUEUED, RUNNING, AWAITING)
DEFAULT_QUEUE = "default"

#: The columns of a queue row, in :class:`QueueEntry`'s order.
COLUMNS = (
    "ticket_id, run_id, queue, pipeline, manifest, manifest_hash, priority, not_before, dedup_key, state, "
    "worker, claim_token, claims, recoveries, phase, reason, cancel_requested, submitted_at, since, run_name, params"
)


def timestamp(epoch: float | None) -> str | None:
    """An epoch (the database clock) as ISO-8601 UTC."""
    if epoch is None:
        return None

    return format_timestamp(datetime.fromtimestamp(round(float(epoch), 6), UTC))


@dataclass(frozen=True)
class QueueEntry:
    """One row of the queue, as read (``now``: the database clock when it was read)."""

    ticket_id: str
    run_id: str
    queue: str
    pipeline: str
    manifest: str | None
    manifest_hash: str | None
    priority: int
    not_before: float
    dedup_key: str | None
    state: str
    worker: str | None
    claim_token: int
    claims: int
    recoveries: int
    phase: str | None
    reason: str | None
    cancel_requested: bool
    submitted_at: float
    since: float
    #: The run id as it was submitted when it is a name (``w49``); None when it was a UUID.
    run_name: str | None = None
    #: The run's parameters as submitted (JSON text; None: none given, D262).
    params: str | None = None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> QueueEntry:
        """Build from a row of ``COLUMNS``."""
        r = list(row[:21])
        for i in (6, 11, 12, 13):
            r[i] = int(r[i])
        r[16] = bool(r[16])
        for i in (7, 17, 18):
            r[i] = float(r[i])
        return cls(*r)

    @property
    def manifest_doc(self) -> dict[str, Any] | None:
        """The submitted manifest (None: the worker resolves the pipeline by name)."""
        return json.loads(self.manifest) if self.manifest is not None else None

    @property
    def params_doc(self) -> dict[str, Any] | None:
        """The submitted parameters (None: none given; the worker's run uses the recorded ones or defaults)."""
        return json.loads(self.params) if self.params is not None else None

    def to_json(self) -> dict[str, Any]:
        """The JSON view (``queue list`` / ``queue show``); times are ISO-8601 UTC."""
        return {
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "run_name": self.run_name,
            **({"params": self.params_doc} if self.params is not None else {}),
            "state": self.state,
            "worker": self.worker,
            "phase": self.phase,
            "since": timestamp(self.since),
            "queue": self.queue,
            "pipeline": self.pipeline,
            "manifest_hash": self.manifest_hash,
            "priority": self.priority,
            "not_before": timestamp(self.not_before),
            "dedup_key": self.dedup_key,
            "claims": self.claims,
            "recoveries": self.recoveries,
            "reason": self.reason,
            "cancel_requested": self.cancel_requested,
            "submitted_at": timestamp(self.submitted_at),
        }


@dataclass(frozen=True)
class Claim:
    """A row this worker now runs; ``token`` fences every later transition of the row."""

    entry: QueueEntry
    token: int
    #: Set when the row was recovered from a dead worker: who, and why it counts as dead.
    recovered_from: str | None = None


def channel(store: SqlStore) -> str:
    """The NOTIFY channel of the store's queue (one per schema: tests share a database)."""
    dialect: Any = store.dialect  # a PostgresDialect (require_postgres): its schema, if the URL names one
    schema = dialect.schema
    return f"phaselog_queue_{schema}"[:63] if schema else "phaselog_queue"


def require_postgres(store: Store) -> SqlStore:
    """The store, if it can hold the queue; QueueRefused (exit 2) naming what to do otherwise."""
    if Capability.QUEUE not in store.capabilities or not isinstance(store, SqlStore):
        kind = {"FilesStore": "files", "SqliteStore": "SQLite"}.get(type(store).__name__, type(store).__name__)
        raise QueueRefused(
            f"the queue of runs lives in a PostgreSQL store (workers on many machines share it); this is a {kind} "
            "store. On one machine, run pipelines with `phaselog run`; for workers, use --store postgresql://…",
            field="store",
            rule="queue_needs_postgresql",
        )
    return store


def check_key(ticket_id: str, run_id: str) -> tuple[str, str]:
    """Validated (ticket_id, run_id); run_id must be canonical already (normalize first)."""
    validate_ticket_id(ticket_id)
    if not is_canonical_uuid(run_id):
        raise UsageError(f"run_id {run_id!r} is not a canonical UUID", field="run_id")
    return ticket_id, run_id


def not_queued(ticket_id: str, run_id: str) -> NotFound:
    """The error for a run that was never submitted to the queue (rule ``not_queued``)."""
    return NotFound(f"run {run_id} of ticket {ticket_id} is not in the queue", rule="not_queued")


class SqlQueue:
    """The queue's statements over one PostgreSQL store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = require_postgres(store)
        self.session = self.store.session
        self.channel = channel(self.store)

    # -- plumbing ---------------------------------------------------------------------------------
    def transact(self, fn: Callable[[Transaction], T]) -> T:
        """``fn(tx)`` in one write transaction, retried on transient errors (a new connection)."""
        return self.session.transact(fn)

    def notify(self, conn: Transaction, queue: str) -> None:
        """Wake the workers of ``queue`` when the transaction commits (``pg_notify``)."""
        conn.execute("SELECT pg_notify(%s, %s)", (self.channel, queue))

    def row(self, conn: Transaction, key: tuple[str, str], *, lock: bool = False) -> QueueEntry | None:
        """The queue row of ``key`` read inside ``conn`` (``lock``: locked until it ends)."""
        row = conn.execute(
            f"SELECT {COLUMNS} FROM phaselog_queue WHERE ticket_id = %s AND run_id = %s"
            + (" FOR UPDATE" if lock else ""),
            key,
        ).fetchone()
        return QueueEntry.from_row(row) if row else None

    def now(self) -> float:
        """The database clock (epoch seconds)."""
        return float(self.session.query_raw(f"SELECT {self.session.dialect.now}")[0][0])

    # -- submitting -------------------------------------------------------------------------------
    def submit(
        self,
        ticket_id: str,
        run_id: str,
        *,
        pipeline: str,
        manifest: Mapping[str, Any] | None,
        manifest_hash: str | None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        not_before: float | None = None,
        delay: float | None = None,
        dedup_key: str | None = None,
        run_name: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> tuple[QueueEntry, bool]:
        """Queue a run; idempotent by run and by dedup key. Returns (entry, created).

        ``not_before``: an epoch; ``delay``: seconds from now in the database's clock (one or
        neither). A run already in the queue is returned as it is (Conflict if it was submitted
        with another pipeline); so is the unfinished run holding ``dedup_key``. ``run_name``: the
        run id as it was given, when it is a name (kept with the row; the worker runs it by that name).
        """
        key = check_key(ticket_id, run_id)
        body = json.dumps(dict(manifest), sort_keys=True) if manifest is not None else None
        given = json.dumps(dict(params), sort_keys=True) if params is not None else None

        def put(conn: Transaction) -> tuple[QueueEntry, bool]:
            now = conn.dialect.now  # the database clock
            existing = self.row(conn, key)
            if existing is None and dedup_key is not None:
                row = conn.execute(
                    f"SELECT {COLUMNS} FROM phaselog_queue WHERE queue = %s AND dedup_key = %s "
                    "AND state IN ('queued', 'running', 'awaiting_approval')",
                    (queue, dedup_key),
                ).fetchone()
                if row is not None:
                    return QueueEntry.from_row(row), False
            if existing is not None:
                if existing.pipeline != pipeline or (
                    manifest_hash is not None and existing.manifest_hash not in (None, manifest_hash)
                ):
                    raise Conflict(
                        f"run {run_id} of ticket {ticket_id} is already in the queue with pipeline "
                        f"{existing.pipeline} ({existing.manifest_hash or 'by name'}); submit another run id",
                        rule="submitted_differently",
                    )
                if given is not None and existing.params != given:
                    raise Conflict(
                        f"run {run_id} of ticket {ticket_id} is already in the queue with parameters "
                        f"{existing.params or 'none'}; a run keeps its parameters: submit another run id",
                        rule="submitted_differently",
                        field="params",
                    )
                return existing, False
            at = None if not_before is None else float(not_before)
            due = (at, float(delay or 0.0))
            row = conn.execute(
                f"INSERT INTO phaselog_queue ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, "
                f"COALESCE(%s::double precision, {now} + %s), %s, 'queued', NULL, 0, 0, 0, NULL, NULL, 0, "
                f"{now}, {now}, %s, %s) RETURNING {COLUMNS}",
                (*key, queue, pipeline, body, manifest_hash, int(priority), *due, dedup_key, run_name, given),
            ).fetchone()
            self.notify(conn, queue)
            return QueueEntry.from_row(row), True

        for _ in range(5):
            try:
                result: tuple[QueueEntry, bool] = self.transact(put)
                return result
            except Exception as exc:
                # Two submits of one run (or one dedup key) at once: the loser reads the winner's row.
                if not self.store.dialect.is_unique_violation(exc):
                    raise
        raise Conflict(f"could not queue run {run_id}: concurrent submits kept colliding")

    def position(self, entry: QueueEntry) -> int | None:
        """1 + the queued runs of its queue that a worker takes before it (None unless queued)."""
        if entry.state != QUEUED:
            return None
        rows = self.session.query_raw(
            "SELECT COUNT(*) FROM phaselog_queue WHERE queue = %s AND state = 'queued' AND (priority > %s OR "
            "(priority = %s AND (submitted_at, run_id) < (%s, %s)))",
            (entry.queue, entry.priority, entry.priority, entry.submitted_at, entry.run_id),
        )
        return int(rows[0][0]) + 1

    # -- reading ----------------------------------------------------------------------------------
    def get(self, ticket_id: str, run_id: str) -> QueueEntry:
        """One row; NotFound if the run was never submitted."""
        key = check_key(ticket_id, run_id)
        rows = self.session.query(f"SELECT {COLUMNS} FROM phaselog_queue WHERE ticket_id = %s AND run_id = %s", key)
        if not rows:
            raise not_queued(ticket_id, run_id)
        return QueueEntry.from_row(rows[0])

    def entries(
        self, *, queue: str | None = None, states: Sequence[str] = (), ticket_id: str | None = None, limit: int = 1000
    ) -> list[QueueEntry]:
        """Rows in claim order within each state (priority, then age); one query."""
        where: list[str] = ["TRUE"]
        params: list[Any] = []
        if queue is not None:
            where.append("queue = %s")
            params.append(queue)
        if states:
            where.append("state = ANY(%s)")
            params.append(list(states))
        if ticket_id is not None:
            where.append("ticket_id = %s")
            params.append(ticket_id)
        rows = self.session.query(
            f"SELECT {COLUMNS} FROM phaselog_queue WHERE {' AND '.join(where)} ORDER BY submitted_at, run_id LIMIT %s",
            (*params, int(limit)),
        )
        return [QueueEntry.from_row(r) for r in rows]

    def counts(self, queue: str | None = None) -> dict[str, int]:
        """How many runs are in each state."""
        rows = self.session.query(
            "SELECT state, COUNT(*) FROM phaselog_queue" + (" WHERE queue = %s" if queue else "") + " GROUP BY state",
            (queue,) if queue else (),
        )
        found = {str(s): int(n) for s, n in rows}
        return {s: found.get(s, 0) for s in STATES}

    # -- workers ----------------------------------------------------------------------------------
    def register(
        self, worker_id: str, queue: str, host: str, pid: int, process_start: float | None, ttl: float
    ) -> None:
        """Announce a live worker (its heartbeat row)."""

        def put(conn: Transaction) -> None:
            now = conn.dialect.now  # the database clock
            conn.execute(
                "INSERT INTO phaselog_queue_workers (worker_id, queue, host, pid, process_start, started_at, "
                f"heartbeat_at, expires_at) VALUES (%s, %s, %s, %s, %s, {now}, {now}, {now} + %s) "
                f"ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = {now}, expires_at = {now} + %s",
                (worker_id, queue, host, pid, process_start, float(ttl), float(ttl)),
            )

        self.transact(put)

    def beat(self, worker_id: str, ttl: float) -> bool:
        """Renew the worker's row; False if it is gone (declared dead and removed)."""

        def renew(conn: Transaction) -> bool:
            now = conn.dialect.now  # the database clock
            cur = conn.execute(
                f"UPDATE phaselog_queue_workers SET heartbeat_at = {now}, expires_at = {now} + %s WHERE worker_id = %s",
                (float(ttl), worker_id),
            )
            return bool(cur.rowcount)

        alive: bool = self.transact(renew)
        return alive

    def unregister(self, worker_id: str) -> None:
        """Remove the worker's row (a worker stopping cleanly, after releasing its run)."""
        self.transact(
            lambda conn: conn.execute("DELETE FROM phaselog_queue_workers WHERE worker_id = %s", (worker_id,))
        )

    def workers_on(self, host: str) -> list[tuple[str, int, float | None]]:
        """(worker_id, pid, process start) of every worker registered from ``host``."""
        rows = self.session.query(
            "SELECT worker_id, pid, process_start FROM phaselog_queue_workers WHERE host = %s", (host,)
        )
        return [(str(w), int(p), None if s is None else float(s)) for w, p, s in rows]

    def workers(self) -> list[dict[str, Any]]:
        """Every registered worker, with whether its heartbeat is current."""
        rows = self.session.query(
            "SELECT worker_id, queue, host, pid, process_start, started_at, heartbeat_at, expires_at < "
            f"{self.session.dialect.now} FROM phaselog_queue_workers ORDER BY started_at, worker_id"
        )
        return [
            {
                "worker": w,
                "queue": q,
                "host": h,
                "pid": int(p),
                "process_start": None if ps is None else float(ps),
                "started_at": timestamp(s),
                "heartbeat_at": timestamp(b),
                "expired": bool(x),
            }
            for w, q, h, p, ps, s, b, x in rows
        ]

    def forget_workers(self, worker_ids: Sequence[str], *, expired_for: float) -> int:
        """Remove rows of workers known dead (``worker_ids``) or expired for ``expired_for`` s,
        unless a running row still names them (it must be recovered first)."""

        def forget(conn: Transaction) -> int:
            now = conn.dialect.now  # the database clock
            cur = conn.execute(
                "DELETE FROM phaselog_queue_workers w WHERE (w.worker_id = ANY(%s) OR w.expires_at < "
                f"{now} - %s) AND NOT EXISTS (SELECT 1 FROM phaselog_queue q WHERE q.worker = w.worker_id "
                "AND q.state = 'running')",
                (list(worker_ids), float(expired_for)),
            )
            return int(cur.rowcount or 0)

        gone: int = self.transact(forget)
        return gone
