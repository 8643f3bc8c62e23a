"""The SQLite writers' gate: an flock on the database's folder, held exactly while a write
transaction is open (stores/sqlite.py, ``_Gates``). A gate left held would stall every other
phaselog writer of that database; one not held would only cost speed, but is checked too."""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import phaselog
from conftest import IMPLEMENT
from phaselog import AlreadyExists
from phaselog.stores.sql.sqlite import SqliteStore

T = "GATE-1"


@contextmanager
def _probe(folder: Path) -> Iterator[int]:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def gate_free(folder: Path) -> bool:
    """Whether another open file description can take the folder's flock right now."""
    with _probe(folder) as fd:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "gate" / "ledger.db"


def test_gate_is_held_inside_a_write_transaction_only(db: Path) -> None:
    store = SqliteStore(db, migrate=True)
    ledger = phaselog.Ledger(store)
    run = str(uuid.uuid4())
    ledger.write(T, run, "implement", IMPLEMENT)
    assert gate_free(db.parent)
    with store.locked_run(T, run):
        assert not gate_free(db.parent)
    assert gate_free(db.parent)
    store.close()
    assert gate_free(db.parent)


def test_gate_is_released_after_a_refused_write(db: Path) -> None:
    ledger = phaselog.Ledger(SqliteStore(db, migrate=True))
    run = str(uuid.uuid4())
    ledger.write(T, run, "implement", IMPLEMENT)
    with pytest.raises(AlreadyExists):
        ledger.write(T, run, "implement", IMPLEMENT, attempt=1)
    with pytest.raises(AlreadyExists):  # the store's own check inside the transaction (rolled back)
        ledger.store.append(ledger.read(T, run, "implement").record, expected_latest=1)
    assert gate_free(db.parent)
    ledger.write(T, run, "implement", IMPLEMENT)  # and the next write goes through
    assert ledger.read(T, run, "implement").record.attempt_number == 2
    ledger.close()


def test_a_thread_holding_the_gate_does_not_wait_for_itself(tmp_path: Path) -> None:
    """A second store on the same database in the same thread (inside the first one's transaction)
    skips the gate and meets SQLite's own lock, as before the gate, instead of waiting forever."""
    from phaselog.stores.sql.sqlite import _GATES

    first = _GATES.enter(str(tmp_path))
    assert first is not None
    assert not gate_free(tmp_path)
    assert _GATES.enter(str(tmp_path)) is None  # returns at once: this thread holds it
    _GATES.leave(first)
    assert gate_free(tmp_path)
    again = _GATES.enter(str(tmp_path))
    assert again is not None
    _GATES.leave(again)
