"""Following on PostgreSQL wakes on NOTIFY, not on the poll (D207).

Migration 8 adds a trigger on phaselog_checkpoints and phaselog_entries that ``pg_notify``s
``phaselog_feed`` with "schema:ticket/run"; the PostgreSQL store's change waiter LISTENs on it.
Over a real PostgreSQL server: a follower whose poll is 30 s sees a write made through another
store handle long before the poll could have fired (a wait with a deadline, not a timing); the
migration upgrades a schema-7 database and creates a fresh one with the trigger; SQLite has none.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from phaselog.ledger.facade import Ledger
from phaselog.model.pipelines import Pipeline, pipeline_from_dict
from phaselog.stores import open_store
from phaselog.stores.base import Capability, change_waiter
from phaselog.stores.sql import schema as sql_schema
from phaselog.stores.sql.dialect import Dialect
from phaselog.stores.sql.postgres import PostgresStore
from phaselog.stores.sql.sqlite import SqliteStore

T = "LISTEN-1"
#: Far longer than any wait below: an event seen within WITHIN came from the notify, not the poll.
LONG_POLL = 30.0
WITHIN = 12.0


def _free() -> Pipeline:
    phases = [{"name": "a"}, {"name": "b"}]
    return pipeline_from_dict({"name": "listen", "version": "1", "order": "free", "phases": phases})


def _connect(url: str) -> Any:
    import psycopg  # lazy: the postgres extra may be absent (the SQLite tests below still run)

    return psycopg.connect(url.partition("?")[0], autocommit=True)


def _triggers(url: str) -> set[tuple[str, str]]:
    schema = url.rpartition("schema=")[2]
    with _connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND NOT t.tgisinternal",
            (schema,),
        ).fetchall()
    return {(str(r[0]), str(r[1])) for r in rows}


FEED_TRIGGERS = {
    ("phaselog_checkpoints", "phaselog_checkpoints_feed"),
    ("phaselog_entries", "phaselog_entries_feed"),
}


def test_a_follower_with_a_long_poll_wakes_on_a_write_through_another_handle(pg_schema_url: str) -> None:
    writer = Ledger(open_store(pg_schema_url, migrate=True))
    follower = Ledger(open_store(pg_schema_url))
    got: queue.Queue[str] = queue.Queue()
    stop = threading.Event()

    def follow() -> None:
        for event in follower.follow(ticket_id=T, poll=LONG_POLL, stop=stop):
            got.put(event.event_id)

    thread = threading.Thread(target=follow, daemon=True)
    try:
        first = writer.write(T, "r1", "a", {}, pipeline=_free())
        thread.start()
        assert got.get(timeout=60) == f"checkpoint.written:{first.record.content_hash}"
        later = writer.write(T, "r2", "a", {}, pipeline=_free())
        assert got.get(timeout=WITHIN) == f"checkpoint.written:{later.record.content_hash}"
        again = writer.write(T, "r2", "a", {"n": 2}, pipeline=_free())  # the waiter listens on after a wake-up
        assert got.get(timeout=WITHIN) == f"checkpoint.written:{again.record.content_hash}"
    finally:
        stop.set()
        thread.join(timeout=10)  # the follower looks at stop between short waits, not once per poll
        writer.close()
        follower.close()
    assert not thread.is_alive()
    assert got.empty()


def test_the_trigger_notifies_schema_ticket_and_run_at_commit_for_checkpoints_and_entries(
    pg_schema_url: str,
) -> None:
    schema = pg_schema_url.rpartition("schema=")[2]
    ledger = Ledger(open_store(pg_schema_url, migrate=True))
    listener: Any = _connect(pg_schema_url)
    try:
        listener.execute("LISTEN phaselog_feed")
        run = ledger.write(T, "r1", "a", {}, pipeline=_free()).record.run_id  # "r1", as the store keys it
        ledger.progress(T, "r1", "b", "start")  # an audit entry (phaselog_entries)
        payloads = [n.payload for n in listener.notifies(timeout=WITHIN, stop_after=2)]
    finally:
        listener.close()
        ledger.close()
    assert payloads == [f"{schema}:{T}/{run}", f"{schema}:{T}/{run}"]  # one per transaction: two commits


def test_a_waiter_ignores_other_schemas_and_times_out_without_a_write(pg_schema_url: str) -> None:
    store = open_store(pg_schema_url, migrate=True)
    other = pg_schema_url.rpartition("schema=")[0] + "schema=" + pg_schema_url.rpartition("schema=")[2] + "_other"
    elsewhere = Ledger(open_store(other, migrate=True))
    try:
        waiter = change_waiter(store)
        assert waiter is not None
        elsewhere.write(T, "r1", "a", {}, pipeline=_free())  # another schema of the same database
        assert waiter.wait(1.0) is False
        Ledger(store).write(T, "r1", "a", {}, pipeline=_free())
        assert waiter.wait(WITHIN) is True
        waiter.close()
        waiter.close()  # idempotent
    finally:
        store.close()
        elsewhere.close()
        with _connect(pg_schema_url) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other.rpartition("schema=")[2]}" CASCADE')


def test_a_fresh_store_has_the_feed_triggers(pg_schema_url: str) -> None:
    with open_store(pg_schema_url, migrate=True) as store:
        assert Capability.CHANGE_WAIT in store.capabilities
    assert _triggers(pg_schema_url) == FEED_TRIGGERS


def test_a_store_of_schema_7_migrates_past_8_and_its_follower_wakes(pg_schema_url: str) -> None:
    with open_store(pg_schema_url, create=True) as store:
        conn: Any = store.dialect.connect()  # type: ignore[attr-defined]
        try:
            store.dialect.create_schema(conn)  # type: ignore[attr-defined]
            for version in range(1, 8):
                for statement in sql_schema.MIGRATIONS[version]:
                    conn.execute(statement)
            conn.execute("CREATE TABLE phaselog_schema (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
            conn.execute("INSERT INTO phaselog_schema (id, version) VALUES (1, 7)")
            conn.commit()
        finally:
            conn.close()
    assert _triggers(pg_schema_url) == set()
    with open_store(pg_schema_url, migrate=True) as store:
        assert store.migrated == (7, sql_schema.SCHEMA_VERSION)  # type: ignore[attr-defined]
    with open_store(pg_schema_url, migrate=True) as store:  # again: nothing to do, no error
        assert store.migrated == (sql_schema.SCHEMA_VERSION,) * 2  # type: ignore[attr-defined]
    assert _triggers(pg_schema_url) == FEED_TRIGGERS
    store = open_store(pg_schema_url)
    try:
        waiter = change_waiter(store)
        assert waiter is not None
        Ledger(store).write(T, "r1", "a", {}, pipeline=_free())
        assert waiter.wait(WITHIN) is True
        waiter.close()
    finally:
        store.close()


def test_sqlite_gets_schema_8_without_a_trigger_and_follows_by_polling(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ledger.db")
    try:
        Ledger(store).write(T, "r1", "a", {}, pipeline=_free())
        assert Capability.CHANGE_WAIT not in store.capabilities
        assert change_waiter(store) is None
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        assert conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall() == []
        assert conn.execute("SELECT version FROM phaselog_schema").fetchone() == (sql_schema.SCHEMA_VERSION,)
    assert sql_schema.SCHEMA_VERSION >= 8  # the trigger came with version 8


@pytest.mark.parametrize(
    ("statement", "name", "runs"),
    [
        ("CREATE TABLE x (a TEXT)", "sqlite", True),
        ("-- dialect: postgresql\nCREATE TRIGGER t", "postgresql", True),
        ("-- dialect: postgresql\nCREATE TRIGGER t", "sqlite", False),
        ("-- dialect: sqlite\nCREATE TRIGGER t", "postgresql", False),
    ],
)
def test_a_dialect_line_limits_a_migration_statement_to_its_database(statement: str, name: str, runs: bool) -> None:
    dialect = Dialect()
    dialect.name = name
    assert dialect.runs(statement) is runs


def test_the_postgres_store_declares_its_waiter() -> None:
    assert Capability.CHANGE_WAIT in PostgresStore.capabilities
    assert Capability.CHANGE_WAIT not in SqliteStore.capabilities
