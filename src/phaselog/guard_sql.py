"""The guard on a SQL store: the lock is a lease row with a fencing token.

Cron jobs on several machines share one guard through PostgreSQL (or, on one machine, SQLite).
Every acquisition increments the lease's ``fencing_token`` and the holder carries it; the loop
state is written only in a transaction that still sees the holder's token on the lease, so a
holder whose lease was taken over (it looked dead, or hung past ``--stale-after`` on another
host) can no longer write state.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from phaselog import _yaml
from phaselog.errors import Corrupt, Fenced
from phaselog.guard import Holder, LoopState, validate_name

__all__ = ["Fenced", "SqlGuardStore"]  # Fenced lives in phaselog.errors; re-exported for old imports


class SqlGuardStore:
    """Guard state, lease and history in the SQL store's tables."""

    def __init__(self, store: Any, name: str) -> None:
        self.store = store
        self.name = validate_name(name)
        self._tx = False
        where = store.dialect.describe()
        self.state_path = f"{where}#phaselog_guard_state/{name}"
        self.lock_path = f"{where}#phaselog_guard_lease/{name}"

    def _sql(self, text: str) -> str:
        return str(self.store._sql(text))

    @contextlib.contextmanager
    def mutex(self) -> Iterator[None]:
        """One transaction holding the lease row's lock (``FOR UPDATE`` / ``BEGIN IMMEDIATE``)."""
        conn = self.store.conn
        self.store.dialect.begin_write(conn)
        try:
            conn.execute(
                self._sql(
                    "INSERT INTO phaselog_guard_lease (name, fencing_token, holder) VALUES (?, 0, NULL) "
                    "ON CONFLICT DO NOTHING"
                ),
                (self.name,),
            )
            if self.store.dialect.name == "postgresql":
                conn.execute(
                    self._sql("SELECT fencing_token FROM phaselog_guard_lease WHERE name = ? FOR UPDATE"), (self.name,)
                )
            self._tx = True
            yield
            conn.commit()
        except BaseException:
            with contextlib.suppress(Exception):
                conn.rollback()
            raise
        finally:
            self._tx = False

    def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        if self._tx:
            return self.store.conn.execute(self._sql(sql), params).fetchone()
        rows = self.store._query(sql, params)
        return rows[0] if rows else None

    # -- lease --------------------------------------------------------------------------------------
    def read_lock(self) -> Holder | None:
        """The current holder, or None."""
        row = self._one("SELECT holder, fencing_token FROM phaselog_guard_lease WHERE name = ?", (self.name,))
        if row is None or row[0] is None:
            return None
        try:
            return Holder.from_json(json.loads(row[0]), self.lock_path)
        except ValueError as exc:
            raise Corrupt(f"{self.lock_path}: damaged lease ({exc})", path=self.lock_path) from None

    def write_lock(self, holder: Holder) -> Holder:
        """Install ``holder`` with the next fencing token (inside the mutex); returns it with the token."""
        row = self._one("SELECT fencing_token FROM phaselog_guard_lease WHERE name = ?", (self.name,))
        token = int(row[0]) + 1
        mine = Holder(holder.pid, holder.host, holder.process_start, holder.started_at, str(token))
        self.store.conn.execute(
            self._sql("UPDATE phaselog_guard_lease SET fencing_token = ?, holder = ? WHERE name = ?"),
            (token, json.dumps(mine.to_json()), self.name),
        )
        return mine

    def remove_lock(self, token: str) -> bool:
        """Release the lease if ``token`` still holds it (inside the mutex)."""
        cur = self.store.conn.execute(
            self._sql(
                "UPDATE phaselog_guard_lease SET holder = NULL WHERE name = ? AND fencing_token = ? "
                "AND holder IS NOT NULL"
            ),
            (self.name, int(token)),
        )
        return bool(cur.rowcount)

    # -- state --------------------------------------------------------------------------------------
    def read_state(self) -> LoopState:
        """The loop state (fresh if none yet)."""
        row = self._one("SELECT body FROM phaselog_guard_state WHERE name = ?", (self.name,))
        return LoopState() if row is None else LoopState.from_seed(_yaml.load(row[0]), self.state_path)

    def write_state(self, state: LoopState, *, token: str | None = None) -> None:
        """Write the state (inside the mutex); with ``token``, only while it still holds the lease."""
        if token is not None:
            row = self._one("SELECT fencing_token, holder FROM phaselog_guard_lease WHERE name = ?", (self.name,))
            if row is None or str(row[0]) != token or row[1] is None:
                raise Fenced(
                    f"guard {self.name}: the lease was taken over (fencing token {row[0] if row else '?'}, ours "
                    f"{token}); the loop state was not written",
                    rule="fencing_token",
                )
        body = _yaml.dump(state.to_seed())
        self.store.conn.execute(
            self._sql(
                "INSERT INTO phaselog_guard_state (name, body) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET body = excluded.body"
            ),
            (self.name, body),
        )

    # -- history ------------------------------------------------------------------------------------
    def append_history(self, entry: dict[str, Any]) -> None:
        """Append one history entry."""

        def run(conn: Any) -> None:
            row = conn.execute(
                self._sql("SELECT COALESCE(MAX(seq), 0) FROM phaselog_guard_history WHERE name = ?"), (self.name,)
            ).fetchone()
            seq = int(row[0]) + 1
            conn.execute(
                self._sql("INSERT INTO phaselog_guard_history (name, seq, body) VALUES (?, ?, ?)"),
                (self.name, seq, json.dumps({**entry, "seq": seq}, ensure_ascii=False)),
            )

        for _ in range(50):
            try:
                self.store._write(run)
                return
            except Exception as exc:
                if not self.store.dialect.is_unique_violation(exc):
                    raise

    def history(self) -> list[dict[str, Any]]:
        """Every history entry, oldest first."""
        rows = self.store._query(
            "SELECT body FROM phaselog_guard_history WHERE name = ? ORDER BY seq",
            (self.name,),
        )
        return [json.loads(r[0]) for r in rows]
