"""Run leases on the SQL stores: one row per run with a fencing token.

``phaselog_run_leases (ticket_id, run_id, fencing_token, holder, renewed_at, expires_at)``.
Acquiring is one write transaction that locks the row (the dialect's ``for_update``: ``SELECT …
FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` serialises every writer), judges the
current holder and, if it may be displaced, raises the token by one. Times come from the
database's clock (the dialect's ``now``), so machines whose clocks disagree still agree on when a
lease expires. A holder renews its lease (heartbeats) with ``UPDATE … WHERE fencing_token =
mine``; zero rows updated means it was taken over (fenced).

Every checkpoint the runner writes carries its token (``fence=``); the append re-reads the lease
row inside its own transaction (the dialect's ``for_share``: ``FOR SHARE`` on PostgreSQL, so a
takeover waits for the append to commit, or the append waits for the takeover and then fails), so
a fenced runner cannot write.

Taking and freeing a lease commit without waiting for the disk where the dialect can do that
safely (SQLite in WAL mode: ``synchronous=NORMAL`` for that transaction, D176): the change is safe
from a crash of any process, and a power loss can only lose it together with every process that
held it — the first checkpoint fenced by a token flushes the WAL, the token's change with it.
PostgreSQL commits them as any write (its runners live on other machines than the server).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import Fenced, RunHeld
from phaselog.stores.base import Judge, LeaseState, RunFence
from phaselog.stores.kernel import check_run_key, fenced

if TYPE_CHECKING:
    from phaselog.stores.sql.session import Session, Transaction


def check_fence(tx: Transaction, fence: RunFence) -> None:
    """Fenced unless the lease row still carries ``fence.token`` (inside the append's transaction)."""
    row = tx.one(
        "SELECT fencing_token, holder IS NOT NULL FROM phaselog_run_leases WHERE ticket_id = ? AND run_id = ?"
        + tx.dialect.for_share,
        (fence.ticket_id, fence.run_id),
    )
    if row is None or int(row[0]) != fence.token or not row[1]:
        raise fenced(fence, None if row is None else row[0], released=row is None or not row[1])


class SqlRunLeases:
    """The SQL stores' run leases (see the module docstring)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.now = session.dialect.now

    @staticmethod
    def _key(ticket_id: str, run_id: str) -> tuple[str, str]:
        check_run_key(ticket_id, run_id)
        return ticket_id, run_id

    def _state(self, key: tuple[str, str], row: Any, now: float) -> LeaseState:
        holder = json.loads(row[1]) if row[1] is not None else None
        return LeaseState(key[0], key[1], int(row[0]), holder, row[2], row[3], float(now))

    def _select(self, tx: Transaction, key: tuple[str, str], *, lock: bool) -> tuple[Any, float]:
        suffix = tx.dialect.for_update if lock else ""
        row = tx.one(
            f"SELECT fencing_token, holder, renewed_at, expires_at, {self.now} FROM phaselog_run_leases "
            "WHERE ticket_id = ? AND run_id = ?" + suffix,
            key,
        )
        if row is None:
            (now,) = tx.one(f"SELECT {self.now}") or (None,)
            return None, float(now)
        return row, float(row[4])

    def acquire(
        self, ticket_id: str, run_id: str, holder: Mapping[str, Any], *, ttl: float, judge: Judge
    ) -> LeaseState:
        """Take the lease in one transaction; RunHeld if ``judge`` says the holder is live."""
        key = self._key(ticket_id, run_id)
        body = json.dumps(dict(holder), sort_keys=True)

        def take(tx: Transaction) -> LeaseState:
            tx.execute(
                "INSERT INTO phaselog_run_leases (ticket_id, run_id, fencing_token, holder) VALUES (?, ?, 0, NULL) "
                "ON CONFLICT DO NOTHING",
                key,
            )
            row, now = self._select(tx, key, lock=True)
            current = self._state(key, row, now)
            took_over = None
            if current.holder is not None:
                if current.holder.get("runner_id") == holder.get("runner_id"):
                    return current  # our own acquisition, whose commit we did not hear about
                verdict = judge(current)
                if not verdict.take:
                    raise RunHeld(
                        f"run {run_id} is held by another runner: {verdict.reason}",
                        rule="lease_held",
                        holder=dict(current.holder),
                    )
                took_over = {"holder": dict(current.holder), "token": current.token, "reason": verdict.reason}
            token = current.token + 1
            tx.execute(
                f"UPDATE phaselog_run_leases SET fencing_token = ?, holder = ?, renewed_at = {self.now}, "
                f"expires_at = {self.now} + ? WHERE ticket_id = ? AND run_id = ?",
                (token, body, float(ttl), *key),
            )
            return LeaseState(key[0], key[1], token, dict(holder), now, now + ttl, now, None, took_over)

        return self.session.transact(take, flush=False)  # not a record: see the module docstring

    def renew(
        self, ticket_id: str, run_id: str, token: int, *, ttl: float, holder: Mapping[str, Any] | None = None
    ) -> LeaseState:
        """Extend the lease by ``ttl`` from now (database clock); Fenced if it was taken over."""
        key = self._key(ticket_id, run_id)

        def extend(tx: Transaction) -> LeaseState:
            sets = f"renewed_at = {self.now}, expires_at = {self.now} + ?"
            params: list[Any] = [float(ttl)]
            if holder is not None:
                sets += ", holder = ?"
                params.append(json.dumps(dict(holder), sort_keys=True))
            cur = tx.execute(
                f"UPDATE phaselog_run_leases SET {sets} WHERE ticket_id = ? AND run_id = ? "
                "AND fencing_token = ? AND holder IS NOT NULL",
                (*params, *key, token),
            )
            if not cur.rowcount:
                raise Fenced(
                    f"run {run_id}: the lease (fencing token {token}) was taken over; stop writing",
                    rule="fencing_token",
                    token=token,
                )
            row, now = self._select(tx, key, lock=False)
            return self._state(key, row, now)

        return self.session.transact(extend)

    def release(self, ticket_id: str, run_id: str, token: int) -> bool:
        """Free the lease if ``token`` still holds it."""
        key = self._key(ticket_id, run_id)

        def free(tx: Transaction) -> bool:
            cur = tx.execute(
                "UPDATE phaselog_run_leases SET holder = NULL WHERE ticket_id = ? AND run_id = ? AND fencing_token = ?",
                (*key, token),
            )
            return bool(cur.rowcount)

        return self.session.transact(free, flush=False)

    def read(self, ticket_id: str, run_id: str) -> LeaseState | None:
        """The lease row (None: never taken)."""
        key = self._key(ticket_id, run_id)
        rows = self.session.query(
            f"SELECT fencing_token, holder, renewed_at, expires_at, {self.now} FROM phaselog_run_leases "
            "WHERE ticket_id = ? AND run_id = ?",
            key,
        )
        if not rows:
            return None
        return self._state(key, rows[0], rows[0][4])

    def close(self) -> None:
        """Nothing to release: a lease row outlives its connection by design (it expires)."""
