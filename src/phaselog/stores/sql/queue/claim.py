"""The queue's transitions: claim (with recovery), phase marks, finishing, cancel, retry.

Every transition of a running row is fenced by its ``claim_token``: ``UPDATE … WHERE
claim_token = mine AND state = 'running'``; zero rows means the row was recovered by another
worker (this one was presumed dead) and nothing is changed. A transition whose answer was lost
(the connection dropped during COMMIT) is retried and resolved by reading the row back.

    queued ──claim──▶ running ──▶ done | dead | cancelled | awaiting_approval
      ▲                  │  └─ worker died ─▶ running again (recoveries + 1) ─ too many ─▶ dead
      └── release (SIGTERM, run held) / approve, reject / retry (from dead, cancelled) ──┘
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import Conflict, PhaselogError
from phaselog.model.events import Event, Judged, RunDead, emit, subscribe
from phaselog.stores.base import Capability, Store
from phaselog.stores.sql.queue.rows import (
    ACTIVE,
    AWAITING,
    CANCELLED,
    COLUMNS,
    DEAD,
    DONE,
    QUEUED,
    RUNNING,
    Claim,
    QueueEntry,
    SqlQueue,
    check_key,
    not_queued,
)

if TYPE_CHECKING:
    from phaselog.stores.sql.session import Transaction

#: Where a running row may go from the worker that holds it.
ENDINGS = (DONE, DEAD, CANCELLED, AWAITING, QUEUED)


def claim(
    q: SqlQueue,
    worker_id: str,
    *,
    queue: str,
    dead_local: Sequence[str] = (),
    max_recoveries: int = 3,
) -> Claim | None:
    """Take the next run of ``queue`` for ``worker_id`` (None: nothing to take now).

    Claimable: a queued row that is due, or a running row whose worker is dead — its heartbeat
    row expired or vanished, or it is one of ``dead_local`` (workers on this host whose process
    is provably gone) — or that names ``worker_id`` itself (a claim whose answer was lost).
    Recovered rows go first. A recovery past ``max_recoveries`` makes the row ``dead`` (with
    the reason) and the search goes on.
    """
    while True:
        outcome: tuple[str, Any] = q.transact(
            lambda conn: _claim_one(conn, worker_id, queue, dead_local, max_recoveries)
        )
        kind, value = outcome
        if kind == "none":
            return None
        if kind == "claim":
            claimed: Claim = value
            return claimed
        if kind == "dead":  # a poison run was retired (committed): tell the subscribers
            emit([value], q.store)
        # "dead": a poison run was retired; "retry": the row changed under us. Look again.


def _claim_one(
    conn: Transaction, worker_id: str, queue: str, dead_local: Sequence[str], max_recoveries: int
) -> tuple[str, Any]:
    now = conn.dialect.now  # the database clock
    row = conn.execute(
        "SELECT q.ticket_id, q.run_id, q.state, q.worker, q.recoveries, q.claim_token FROM phaselog_queue q "
        "LEFT JOIN phaselog_queue_workers w ON w.worker_id = q.worker "
        f"WHERE q.queue = %s AND ((q.state = 'queued' AND q.not_before <= {now}) OR (q.state = 'running' AND "
        f"(q.worker = %s OR w.worker_id IS NULL OR w.expires_at < {now} OR q.worker = ANY(%s)))) "
        "ORDER BY (q.state = 'running') DESC, q.priority DESC, q.submitted_at, q.run_id "
        "FOR UPDATE OF q SKIP LOCKED LIMIT 1",
        (queue, worker_id, list(dead_local)),
    ).fetchone()
    if row is None:
        return "none", None
    # The row is locked now, and its columns are its latest version — but a row that another
    # claim took while this statement waited is re-checked by PostgreSQL against the *old* join
    # (a NULL worker passes "w.worker_id IS NULL"). So the verdict on its worker is made here,
    # from a fresh read.
    ticket_id, run_id, state, previous, recoveries, token = row
    recovered_from = None
    if state == RUNNING and previous != worker_id:
        why = _dead_because(conn, previous, dead_local)
        if why is None:
            return "retry", None  # taken by a live worker meanwhile: search again
        recovered_from = f"worker {previous} died: {why}"
        recoveries = int(recoveries) + 1
        if recoveries > max_recoveries:
            reason = (
                f"its worker died {recoveries} times (more than --max-recoveries {max_recoveries}); last: "
                f"{recovered_from}. A phase that kills its process? `phaselog queue retry` queues it again"
            )
            conn.execute(
                "UPDATE phaselog_queue SET state = 'dead', worker = NULL, recoveries = %s, reason = %s, "
                f"since = {now} WHERE ticket_id = %s AND run_id = %s",
                (recoveries, reason, ticket_id, run_id),
            )
            return "dead", RunDead(ticket_id, run_id, reason, recoveries, int(token))
    elif state not in (QUEUED, RUNNING):
        return "retry", None  # finished or cancelled meanwhile
    got = conn.execute(
        f"UPDATE phaselog_queue SET state = 'running', worker = %s, claim_token = claim_token + 1, "
        f"claims = claims + 1, recoveries = %s, reason = %s, since = {now} "
        f"WHERE ticket_id = %s AND run_id = %s RETURNING {COLUMNS}",
        (worker_id, int(recoveries), recovered_from, ticket_id, run_id),
    ).fetchone()
    entry = QueueEntry.from_row(got)
    return "claim", Claim(entry, entry.claim_token, recovered_from)


def _dead_because(conn: Transaction, worker: str | None, dead_local: Sequence[str]) -> str | None:
    """Why ``worker`` counts as dead now (None: it is alive)."""
    now = conn.dialect.now  # the database clock
    if worker in dead_local:
        return "its process is gone"
    row = conn.execute(
        f"SELECT expires_at < {now}, host, pid FROM phaselog_queue_workers WHERE worker_id = %s", (worker,)
    ).fetchone()
    if row is None:
        return "its heartbeat row is gone"
    if row[0]:
        return f"its heartbeat expired (pid {row[2]} on {row[1]})"
    return None


def mark_phase(q: SqlQueue, c: Claim, phase: str) -> bool | None:
    """Note the phase starting now; return whether a cancel was asked (None: the row was lost).

    Only a hint for ``queue list``: committed without waiting for the disk (a crash may lose it,
    and the next mark or the end of the run rewrites it).
    """

    def mark(conn: Transaction) -> bool | None:
        conn.execute("SET LOCAL synchronous_commit TO off")
        row = conn.execute(
            "UPDATE phaselog_queue SET phase = %s WHERE ticket_id = %s AND run_id = %s AND claim_token = %s "
            "AND state = 'running' RETURNING cancel_requested",
            (phase, c.entry.ticket_id, c.entry.run_id, c.token),
        ).fetchone()
        return None if row is None else bool(row[0])

    result: bool | None = q.transact(mark)
    return result


def finish(
    q: SqlQueue,
    c: Claim,
    state: str,
    *,
    reason: str | None = None,
    phase: str | None = None,
    delay: float = 0.0,
) -> bool:
    """Move the claimed row to ``state`` (one of :data:`ENDINGS`); False if it was lost.

    ``queued`` releases the run (SIGTERM, or held by another runner): it is claimable again after
    ``delay`` seconds and no recovery is counted.
    """
    if state not in ENDINGS:
        raise ValueError(f"cannot finish a running row as {state}")
    key = (c.entry.ticket_id, c.entry.run_id)

    def move(conn: Transaction) -> bool:
        now = conn.dialect.now  # the database clock
        cur = conn.execute(
            f"UPDATE phaselog_queue SET state = %s, worker = NULL, reason = %s, phase = COALESCE(%s, phase), "
            f"since = {now}, not_before = CASE WHEN %s = 'queued' THEN {now} + %s ELSE not_before END, "
            "cancel_requested = CASE WHEN %s = 'queued' THEN cancel_requested ELSE 0 END "
            "WHERE ticket_id = %s AND run_id = %s AND claim_token = %s AND state = 'running'",
            (state, reason, phase, state, float(delay), state, *key, c.token),
        )
        if state == QUEUED and cur.rowcount:
            q.notify(conn, c.entry.queue)
        return bool(cur.rowcount)

    for _ in range(3):
        try:
            moved: bool = q.transact(move)
        except Exception as exc:
            if not q.store.dialect.is_transient(exc):
                raise
            continue  # the answer was lost: read the row back below, or try again
        if moved:
            if state == DEAD:  # durable now: the queue gave up on the run
                emit([RunDead(*key, reason or "", c.entry.recoveries, c.token)], q.store)
            return True
        row = q.transact(lambda conn: q.row(conn, key))
        # Our own update whose commit we did not hear about: the row is where we sent it, with our token.
        return bool(row is not None and row.claim_token == c.token and row.state == state)
    return False


def requeue_judged(q: SqlQueue, ticket_id: str, run_id: str) -> bool:
    """A run waiting for approval goes back to the queue (after ``approve`` or ``reject``)."""
    key = check_key(ticket_id, run_id)

    def move(conn: Transaction) -> bool:
        now = conn.dialect.now  # the database clock
        row = conn.execute(
            f"UPDATE phaselog_queue SET state = 'queued', reason = NULL, since = {now}, not_before = {now} "
            "WHERE ticket_id = %s AND run_id = %s AND state = 'awaiting_approval' RETURNING queue",
            key,
        ).fetchone()
        if row is not None:
            q.notify(conn, row[0])
        return row is not None

    moved: bool = q.transact(move)
    return moved


def after_judgement(store: Store, ticket_id: str, run_id: str) -> bool:
    """After ``approve``/``reject``: requeue the run if it waits at a gate in the queue.

    A no-op (False) on stores without a queue (files, SQLite) and for runs never submitted.
    """
    if Capability.QUEUE not in store.capabilities:
        return False
    return requeue_judged(SqlQueue(store), ticket_id, run_id)


def requeue_after_judgement(event: Event, origin: object) -> list[str]:
    """The queue's subscriber: after a judgement, a run waiting at that gate in the queue goes back to it."""
    if not isinstance(event, Judged) or not isinstance(origin, Store):
        return []
    try:
        after_judgement(origin, event.ticket_id, event.run_id)
    except PhaselogError as exc:  # the judgement is recorded; say what did not happen
        return [f"recorded, but the run could not be put back in the queue: {exc.message}"]
    return []


subscribe(requeue_after_judgement)  # the queue's one subscriber, registered once, when the queue is loaded


def _change_row(
    q: SqlQueue, ticket_id: str, run_id: str, change: Callable[[Transaction, QueueEntry, tuple[str, str]], None]
) -> QueueEntry:
    """``change(conn, entry, key)`` on the run's queue row, locked, in one transaction; the row after it.

    NotFound (rule ``not_queued``) when the run is not in the queue.
    """
    key = check_key(ticket_id, run_id)

    def locked(conn: Transaction) -> QueueEntry:
        entry = q.row(conn, key, lock=True)
        if entry is None:
            raise not_queued(ticket_id, run_id)
        change(conn, entry, key)
        after = q.row(conn, key)
        assert after is not None
        return after

    return q.transact(locked)


def cancel(q: SqlQueue, ticket_id: str, run_id: str, *, reason: str) -> QueueEntry:
    """Cancel a run: at once if it is not running, else between phases (``cancel_requested``)."""

    def stop(conn: Transaction, entry: QueueEntry, key: tuple[str, str]) -> None:
        now = conn.dialect.now  # the database clock
        if entry.state not in ACTIVE:
            raise Conflict(
                f"run {run_id} is {entry.state} already; nothing to cancel", rule="queue_state", state=entry.state
            )
        if entry.state == RUNNING:
            conn.execute(
                "UPDATE phaselog_queue SET cancel_requested = 1, reason = %s WHERE ticket_id = %s AND run_id = %s",
                (reason, *key),
            )
        else:
            conn.execute(
                f"UPDATE phaselog_queue SET state = 'cancelled', reason = %s, since = {now} "
                "WHERE ticket_id = %s AND run_id = %s",
                (reason, *key),
            )

    return _change_row(q, ticket_id, run_id, stop)


def retry(q: SqlQueue, ticket_id: str, run_id: str) -> QueueEntry:
    """Queue a dead or cancelled run again (recoveries start over; the run resumes where it stopped)."""

    def again(conn: Transaction, entry: QueueEntry, key: tuple[str, str]) -> None:
        now = conn.dialect.now  # the database clock
        if entry.state not in (DEAD, CANCELLED):
            raise Conflict(
                f"run {run_id} is {entry.state}; only dead or cancelled runs are retried",
                rule="queue_state",
                state=entry.state,
            )
        conn.execute(
            f"UPDATE phaselog_queue SET state = 'queued', worker = NULL, recoveries = 0, reason = NULL, "
            f"cancel_requested = 0, since = {now}, not_before = {now} WHERE ticket_id = %s AND run_id = %s",
            key,
        )
        q.notify(conn, entry.queue)

    try:
        return _change_row(q, ticket_id, run_id, again)
    except Exception as exc:
        if q.store.dialect.is_unique_violation(exc):
            raise Conflict(
                f"run {run_id}: another unfinished run holds its dedup key now; cancel that one first",
                rule="dedup_key_taken",
            ) from None
        raise


__all__ = [
    "ENDINGS",
    "QUEUED",
    "after_judgement",
    "cancel",
    "claim",
    "finish",
    "mark_phase",
    "requeue_after_judgement",
    "requeue_judged",
    "retry",
]
