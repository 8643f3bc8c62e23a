"""The SQLite run check (stores/sql/runcheck.py, D180, D330) is exact about the shape of the run's
rows no write decides on, and reads them by index seeks plus one count, never by sorting or
building a string per attempt (a write into a phase of 1,000 attempts must cost what one of 10 does)."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW
from phaselog.stores import open_store
from phaselog.stores.base import premise_snapshot

T = "SHAPE-1"


class _Recording:
    """A transaction that keeps the statement the check sends (and answers it from ``tx``)."""

    def __init__(self, tx: Any) -> None:
        self.tx = tx
        self.sent: list[tuple[str, list[Any]]] = []

    def one(self, text: str, params: Any) -> Any:
        self.sent.append((text, list(params)))
        return self.tx.one(text, params)


def _carried_run(tmp_path: Path) -> tuple[Any, str, Path]:
    db = tmp_path / "shape.db"
    open_store(f"sqlite:///{db}", migrate=True).close()
    led = phaselog.open(f"sqlite:///{db}")
    run_id = str(uuid.uuid4())
    run = led.run(T, run_id)
    for _ in range(4):
        run.write("implement", IMPLEMENT)
    run.write("local_review", LOCAL_REVIEW)
    run.write("local_review", LOCAL_REVIEW)
    premise_snapshot(led.store, T, run_id)
    return led, run_id, db


def _check(led: Any, run_id: str) -> Any:
    check = led.store.checkpoints.carried.check_for((T, run_id))
    assert check is not None
    return check


def test_the_run_check_holds_on_the_unmoved_run_and_reads_by_seeks(tmp_path: Path) -> None:
    led, run_id, _ = _carried_run(tmp_path)
    check = _check(led, run_id)
    assert check.phases == ((1, "implement", 4), (2, "local_review", 2))
    tx = _Recording(led.store.session.current)
    assert check.holds(tx, T, run_id)
    ((text, params),) = tx.sent
    plan = [row[3] for row in led.store.session.current.conn.execute(f"EXPLAIN QUERY PLAN {text}", params)]
    assert not [step for step in plan if "TEMP B-TREE" in step], plan  # nothing sorted or made distinct
    assert not [step for step in plan if step.startswith("SCAN phaselog")], plan  # every read is a SEARCH
    assert "||" not in text  # no string built per row
    led.close()


def _edit(db: Path, run_id: str, statement: str) -> None:
    with contextlib.closing(sqlite3.connect(db)) as raw, raw:
        assert raw.execute(statement, (run_id,)).rowcount == 1


def _moved_attempt(db: Path, run_id: str) -> None:
    _edit(
        db,
        run_id,
        "UPDATE phaselog_checkpoints SET attempt = 99 WHERE run_id = ? AND attempt = 1 AND phase_ordinal = 1",
    )


def _gap_and_stray(db: Path, run_id: str) -> None:
    # The run's row count is kept: attempt 2 of implement moves to an ordinal no phase has.
    _edit(
        db,
        run_id,
        "UPDATE phaselog_checkpoints SET phase_ordinal = 7 WHERE run_id = ? AND attempt = 2 AND phase_ordinal = 1",
    )


def _gap_between(db: Path, run_id: str) -> None:
    _edit(
        db,
        run_id,
        "UPDATE phaselog_checkpoints SET phase_ordinal = 0, prev_attempt = -1 "
        "WHERE run_id = ? AND attempt = 1 AND phase_ordinal = 2",
    )


def _renamed(db: Path, run_id: str) -> None:
    # Same length, so a fingerprint of total name lengths would not see it.
    _edit(
        db,
        run_id,
        "UPDATE phaselog_checkpoints SET phase = 'implemenT' WHERE run_id = ? AND attempt = 1 AND phase_ordinal = 1",
    )


def _deleted(db: Path, run_id: str) -> None:
    _edit(db, run_id, "DELETE FROM phaselog_checkpoints WHERE run_id = ? AND attempt = 2 AND phase_ordinal = 1")


@pytest.mark.parametrize("edit", [_moved_attempt, _gap_and_stray, _gap_between, _renamed, _deleted])
def test_an_edit_of_a_row_no_write_decides_on_fails_the_check(
    tmp_path: Path, edit: Callable[[Path, str], None]
) -> None:
    """Rows the check does not hold byte for byte (older attempts) are still exactly accounted for."""
    led, run_id, db = _carried_run(tmp_path)
    check = _check(led, run_id)
    edit(db, run_id)
    assert not check.holds(led.store.session.current, T, run_id)
    led.close()
