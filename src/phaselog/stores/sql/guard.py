"""Guard storage on a SQL store: the lock is a lease row with a fencing token.

Cron jobs on several machines share one guard through PostgreSQL (or, on one machine, SQLite).
Every acquisition increments the lease's ``fencing_token`` and the holder carries it; the loop
state is written only in a transaction that still sees the holder's token on the lease, so a
holder whose lease was taken over (it looked dead, or hung past ``--stale-after`` on another
host) can no longer write state.

A job may run for an hour while the guard's connection idles; the server may restart or drop it
meanwhile. Every transaction therefore starts by (re)connecting with the store's retries, and a
history append that loses its connection around the commit looks for its own row before it tries
again, so a pass is neither lost nor recorded twice. Database errors come out as StoreError.
Everything goes through the store's session (:mod:`phaselog.stores.sql.session`); the row lock
is the dialect's (``lock_rows``: ``FOR UPDATE`` on PostgreSQL, nothing more on SQLite, whose
``BEGIN IMMEDIATE`` holds the database).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from phaselog.model import _yaml
from phaselog.model.errors import Corrupt, Fenced, PhaselogError, StoreError
from phaselog.model.guard import Holder, LoopState, validate_name
from phaselog.model.limits import json_loads

if TYPE_CHECKING:
    from phaselog.stores.sql.session import Session, Transaction

_DB_MODULES = ("sqlite3", "psycopg")


def _is_db_error(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in _DB_MODULES


@contextlib.contextmanager
def db_errors(session: Session, doing: str) -> Iterator[None]:
    """Turn a database's own exceptions into StoreError (never an "internal error")."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, PhaselogError) or not _is_db_error(exc):
            raise
        raise StoreError(
            f"{session.dialect.describe()}: cannot {doing}: {str(exc).strip() or type(exc).__name__}",
            rule="database",
        ) from None


class SqlGuardStore:
    """Guard state, lease and history in the SQL store's tables."""

    def __init__(self, session: Session, name: str) -> None:
        self.session = session
        self.name = validate_name(name)
        #: The mutex's transaction while it is held.
        self._tx: Transaction | None = None
        where = session.dialect.describe()
        self.state_path = f"{where}#phaselog_guard_state/{name}"
        self.lock_path = f"{where}#phaselog_guard_lease/{name}"

    @contextlib.contextmanager
    def mutex(self) -> Iterator[None]:
        """One transaction holding the lease row's lock (``FOR UPDATE`` / ``BEGIN IMMEDIATE``).

        Opening it reconnects if the connection was lost (a job may have run for an hour)."""
        lease = "SELECT fencing_token FROM phaselog_guard_lease WHERE name = ?"

        def lock(tx: Transaction) -> None:
            tx.execute(
                "INSERT INTO phaselog_guard_lease (name, fencing_token, holder) VALUES (?, 0, NULL) "
                "ON CONFLICT DO NOTHING",
                (self.name,),
            )
            tx.dialect.lock_rows(tx, lease, (self.name,))

        with db_errors(self.session, f"lock guard {self.name}"), self.session.hold(lock) as tx:
            self._tx = tx
            try:
                yield
            finally:
                self._tx = None

    def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        with db_errors(self.session, f"read guard {self.name}"):
            if self._tx is not None:
                return self._tx.one(sql, params)
            rows = self.session.query(sql, params)
            return rows[0] if rows else None

    def _exec(self, sql: str, params: tuple[Any, ...]) -> Any:
        with db_errors(self.session, f"write guard {self.name}"):
            return (self._tx or self.session.current).execute(sql, params)

    # -- lease --------------------------------------------------------------------------------------
    def lock_data(self) -> Any:
        """The lease holder as parsed JSON (None when free); Corrupt if it does not parse."""
        row = self._one("SELECT holder, fencing_token FROM phaselog_guard_lease WHERE name = ?", (self.name,))
        if row is None or row[0] is None:
            return None
        try:
            return json_loads(row[0])
        except ValueError as exc:
            raise Corrupt(f"{self.lock_path}: damaged lease ({exc})", path=self.lock_path, rule="json") from None

    def read_lock(self) -> Holder | None:
        """The current holder, or None."""
        data = self.lock_data()
        return None if data is None else Holder.from_json(data, self.lock_path)

    def write_lock(self, holder: Holder) -> Holder:
        """Install ``holder`` with the next fencing token (inside the mutex); returns it with the token."""
        row = self._one("SELECT fencing_token FROM phaselog_guard_lease WHERE name = ?", (self.name,))
        token = int(row[0]) + 1
        mine = Holder(holder.pid, holder.host, holder.process_start, holder.started_at, str(token))
        self._exec(
            "UPDATE phaselog_guard_lease SET fencing_token = ?, holder = ? WHERE name = ?",
            (token, json.dumps(mine.to_json()), self.name),
        )
        return mine

    def update_lock(self, holder: Holder) -> None:
        """Rewrite our own lease (same token), e.g. to name the job's group (inside the mutex)."""
        cur = self._exec(
            "UPDATE phaselog_guard_lease SET holder = ? WHERE name = ? AND fencing_token = ? AND holder IS NOT NULL",
            (json.dumps(holder.to_json()), self.name, int(holder.token)),
        )
        if not cur.rowcount:
            raise Fenced(
                f"guard {self.name}: the lease was taken over (ours: fencing token {holder.token}); "
                "the job was not started",
                rule="fencing_token",
            )

    def remove_lock(self, token: str) -> bool:
        """Release the lease if ``token`` still holds it (inside the mutex)."""
        cur = self._exec(
            "UPDATE phaselog_guard_lease SET holder = NULL WHERE name = ? AND fencing_token = ? AND holder IS NOT NULL",
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
        self._exec(
            "INSERT INTO phaselog_guard_state (name, body) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET body = excluded.body",
            (self.name, _yaml.dump(state.to_seed())),
        )

    # -- history ------------------------------------------------------------------------------------
    def _stored(self, entry: dict[str, Any]) -> bool:
        """``entry`` is already among the newest rows (a retry after a commit whose outcome was lost)."""
        rows = self.session.query(
            "SELECT body FROM phaselog_guard_history WHERE name = ? ORDER BY seq DESC LIMIT 5", (self.name,)
        )
        for (body,) in rows:
            with contextlib.suppress(ValueError):
                stored = json.loads(body)
                stored.pop("seq", None)
                if stored == entry:
                    return True
        return False

    def append_history(self, entry: dict[str, Any]) -> None:
        """Append one history entry: exactly once, across lost connections."""

        def run(tx: Transaction) -> None:
            row = tx.one("SELECT COALESCE(MAX(seq), 0) FROM phaselog_guard_history WHERE name = ?", (self.name,))
            seq = int(row[0] if row else 0) + 1
            tx.execute(
                "INSERT INTO phaselog_guard_history (name, seq, body) VALUES (?, ?, ?)",
                (self.name, seq, json.dumps({**entry, "seq": seq}, ensure_ascii=False)),
            )

        # Compare with what a reader gets back: JSON types (tuples become lists).
        plain = json.loads(json.dumps(entry, ensure_ascii=False))
        tried = False

        def attempt() -> None:
            nonlocal tried
            if tried and self._stored(plain):
                return  # the earlier attempt's commit went through before its connection was lost
            tried = True
            self.session.write(run)

        with db_errors(self.session, f"append to the history of guard {self.name}"):
            for _ in range(50):
                try:
                    self.session.retry(attempt)  # lost connection: reconnect with backoff, try again
                    return
                except Exception as exc:
                    if not self.session.dialect.is_unique_violation(exc):
                        raise
            raise StoreError(f"guard {self.name}: could not append to the history", rule="retries")

    def history(self) -> list[dict[str, Any]]:
        """Every history entry, oldest first."""
        with db_errors(self.session, f"read the history of guard {self.name}"):
            rows = self.session.query(
                "SELECT body FROM phaselog_guard_history WHERE name = ? ORDER BY seq",
                (self.name,),
            )
        out: list[dict[str, Any]] = []
        for (body,) in rows:
            try:
                entry = json_loads(body)
                if not isinstance(entry, dict):
                    raise ValueError("not a JSON object")
                out.append(entry)
            except ValueError as exc:
                out.append({"kind": "damaged", "error": str(exc)})
        return out


def sql_guard_names(session: Session) -> list[str]:
    """Every guard with state, a lease or history in a SQL store."""
    rows = session.query(
        "SELECT name FROM phaselog_guard_state UNION SELECT name FROM phaselog_guard_lease "
        "UNION SELECT name FROM phaselog_guard_history"
    )
    return sorted({str(r[0]) for r in rows})
