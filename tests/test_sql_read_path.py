"""A SQL read on the open connection runs its statement directly (D331), and its first error is
handled as the retry loop handles it: a non-transient error is raised once, typed, never sent
twice; a transient one (SQLite's "database is locked") is tried again on a new connection."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT
from phaselog.model.errors import StoreError

T = "READPATH-1"


class _Flaky:
    """The store's connection, failing the first ``fails`` statements with ``error``."""

    def __init__(self, conn: Any, error: Exception, fails: int) -> None:
        self.conn = conn
        self.error = error
        self.fails = fails
        self.sent = 0
        self.autocommit = True

    def execute(self, sql: str, params: Any = ()) -> Any:
        self.sent += 1
        if self.fails > 0:
            self.fails -= 1
            raise self.error
        return self.conn.execute(sql, params)

    def close(self) -> None:
        self.conn.close()


def _ledger(tmp_path: Path) -> tuple[Any, str]:
    led = phaselog.open(f"sqlite:///{tmp_path / 'l.db'}")
    run_id = "r1"
    led.write(T, run_id, "implement", IMPLEMENT)
    return led, run_id


def test_a_read_is_one_statement_on_the_open_connection(tmp_path: Path) -> None:
    led, run_id = _ledger(tmp_path)
    session = led.store.session
    flaky = _Flaky(session.conn, sqlite3.OperationalError("unused"), 0)
    session.conn = flaky
    assert led.run(T, run_id).read("implement").record.attempt_number == 1
    assert flaky.sent == 1
    led.close()


def test_a_non_transient_error_is_raised_typed_and_the_statement_is_not_sent_again(tmp_path: Path) -> None:
    led, _ = _ledger(tmp_path)
    session = led.store.session
    flaky = _Flaky(session.conn, sqlite3.DatabaseError("file is not a database"), 1)
    session.conn = flaky
    with pytest.raises(StoreError) as raised:
        session.query_raw("SELECT 1")
    assert "l.db" in str(raised.value)  # the dialect's message, naming the file (not a bare driver error)
    assert raised.value.__cause__ is None
    assert flaky.sent == 1
    led.close()


def test_a_transient_error_is_tried_again_on_a_new_connection(tmp_path: Path) -> None:
    led, _ = _ledger(tmp_path)
    session = led.store.session
    session.conn = _Flaky(session.conn, sqlite3.OperationalError("database is locked"), 1)
    assert session.query_raw("SELECT 1") == [(1,)]
    assert not isinstance(session.conn, _Flaky)  # the failed connection was dropped for a new one
    led.close()


def test_a_read_on_the_open_connection_does_not_enter_the_retry_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led, run_id = _ledger(tmp_path)
    session = led.store.session

    def no_loop(*_: object, **__: object) -> None:
        pytest.fail("a read on the open connection went through retry()")

    monkeypatch.setattr(session, "retry", no_loop)
    assert led.run(T, run_id).read("implement").record.attempt_number == 1
    led.close()
