"""``doctor --quarantine`` on SQLite and PostgreSQL: a damaged row is moved aside, never deleted.

Issue 20: after a ``NaN`` was written into a row by hand, ``doctor --quarantine`` was refused
("applies to the files store") and every new write of the phase was refused ("cannot link to
attempt 2"). Now the row moves into ``phaselog_quarantine`` (append-only) with its bytes, its
key columns, where it was and why, and the next write proceeds (D117).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT, make_store
from helpers import cli_env, run_cli
from phaselog.ledger.doctor import doctor
from phaselog.model.errors import Corrupt, StoreError
from phaselog.model.ids import normalize_run_id
from phaselog.stores.base import Capability

T = "PROJ-1"
R = "r1"
RUN = normalize_run_id(R)
A2 = f"{T}/{RUN}/phase_1_implement_a2.yaml"


def impl(i: int) -> dict[str, Any]:
    return {**IMPLEMENT, "files_changed": [f"src/f{i}.py"]}


@pytest.fixture(params=["sqlite", "postgres"])
def sql(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    store = make_store(request.param, tmp_path, request)
    yield store
    store.close()


def raw(store: Any, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One statement on a connection of its own, behind the library's back (damage from outside)."""
    if store.dialect.name == "sqlite":
        con: Any = sqlite3.connect(store.path, isolation_level=None)
    else:
        import psycopg

        from phaselog.stores.sql.postgres import split_url

        dsn, schema = split_url(store.url)
        con = psycopg.connect(dsn, autocommit=True)
        con.execute(f'SET search_path TO "{schema}"')
        text = text.replace("?", "%s")
    try:
        cur = con.execute(text, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        con.close()


def nan_into(store: Any, attempt: int) -> str:
    """Write a NaN into a stored row's JSON text (it then fails its content check); its new body."""
    where = "WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = 1 AND attempt = ?"
    ((body,),) = raw(store, f"SELECT body FROM phaselog_checkpoints {where}", (T, RUN, attempt))
    damaged = body.replace(f'"src/f{attempt}.py"', "NaN")
    assert damaged != body
    raw(store, f"UPDATE phaselog_checkpoints SET body = ? {where}", (damaged, T, RUN, attempt))
    return str(damaged)


def quarantined(store: Any) -> list[tuple[Any, ...]]:
    return raw(store, "SELECT seq, location, origin, row_columns, body, sha256 FROM phaselog_quarantine ORDER BY seq")


def test_a_nan_in_a_row_is_quarantined_and_the_phase_writes_again(sql: Any) -> None:
    led = phaselog.Ledger(sql)
    led.write(T, R, "implement", impl(1))
    led.write(T, R, "implement", impl(2))
    body = nan_into(sql, 2)
    with pytest.raises(Corrupt, match="cannot link to attempt 2"):
        led.write(T, R, "implement", impl(3))
    assert [(f["kind"], f["path"]) for f in doctor(led, T).findings] == [("damaged", A2)]

    rep = doctor(led, T, quarantine=True)
    assert rep.healthy, rep.findings
    assert [(m["from"], m["to"]) for m in rep.moved] == [(A2, "phaselog_quarantine/1")]
    # The row is kept whole, its original bytes with their hash, and where it was.
    [(seq, location, origin, columns, kept, sha)] = quarantined(sql)
    assert (seq, location, origin, kept) == (1, A2, "phaselog_checkpoints", body)
    assert sha == hashlib.sha256(body.encode()).hexdigest()
    assert json.loads(columns) | {"content_hash": None} == {
        "ticket_id": T,
        "run_id": RUN,
        "phase_ordinal": 1,
        "phase": "implement",
        "attempt": 2,
        "prev_attempt": 1,
        "status": "completed",
        "content_hash": None,
    }
    # The next write proceeds, on the freed attempt number (D18), and links to attempt 1.
    res = led.write(T, R, "implement", impl(3))
    assert res.record.attempt_number == 2
    assert res.record.prev_hash == led.read(T, R, "implement", attempt=1).record.content_hash
    assert led.verify(T).ok
    assert doctor(led, T).healthy
    assert led.list(T).damaged == []


def test_the_quarantine_table_is_append_only(sql: Any) -> None:
    # The same attempt damaged, quarantined, written again and damaged again: both rows are kept.
    led = phaselog.Ledger(sql)
    led.write(T, R, "implement", impl(1))
    led.write(T, R, "implement", impl(2))
    first = nan_into(sql, 2)
    doctor(led, T, quarantine=True)
    led.write(T, R, "implement", impl(2))
    second = nan_into(sql, 2)
    assert [m["to"] for m in doctor(led, T, quarantine=True).moved] == ["phaselog_quarantine/2"]
    assert [(r[0], r[4]) for r in quarantined(sql)] == [(1, first), (2, second)]
    assert led.write(T, R, "implement", impl(4)).record.attempt_number == 2


def test_a_damaged_progress_event_row_is_quarantined(sql: Any) -> None:
    led = phaselog.Ledger(sql)
    led.progress(T, R, "implement", "start")
    led.progress(T, R, "implement", "step", step=1)
    *_, (name, body) = raw(sql, "SELECT name, body FROM phaselog_entries WHERE kind = 'progress' ORDER BY name")
    raw(sql, "UPDATE phaselog_entries SET body = ? WHERE name = ?", (body.replace('"step"', "NaN", 1), name))
    [finding] = doctor(led, T).findings
    assert finding["kind"] == "damaged"
    rep = doctor(led, T, quarantine=True)
    assert rep.healthy, rep.findings
    assert [m["from"] for m in rep.moved] == [f"{T}/{RUN}/.progress/{name}.json"]
    [(_seq, _loc, origin, columns, _body, _sha)] = quarantined(sql)
    assert origin == "phaselog_entries"
    assert json.loads(columns) == {"kind": "progress", "ticket_id": T, "run_id": RUN, "name": name}
    led.progress(T, R, "implement", "step", step=2)  # the attempt's events go on
    assert doctor(led, T).healthy


def test_an_intact_record_or_a_bad_location_is_never_moved(sql: Any) -> None:
    led = phaselog.Ledger(sql)
    led.write(T, R, "implement", impl(1))
    loc = f"{T}/{RUN}/phase_1_implement_a1.yaml"
    with pytest.raises(StoreError, match="intact record"):
        sql.quarantine(loc, "test")
    for bad in ("../etc/passwd", f"{T}/{RUN}", f"{T}/not-a-uuid/phase_1_implement_a1.yaml", f"{T}/{RUN}/.x/y.json"):
        with pytest.raises(phaselog.PhaselogError):
            sql.quarantine(bad, "test")
    assert sql.quarantine(f"{T}/{RUN}/phase_9_nothing_a1.yaml", "test") == []  # nothing there, nothing moved
    assert sql.quarantine(f"{T}/{RUN}/phase_1_other_a1.yaml", "test") == []  # another phase's name
    assert quarantined(sql) == []
    assert led.read(T, R, "implement").record.attempt_number == 1


def test_a_read_only_store_refuses_to_quarantine(sql: Any, request: pytest.FixtureRequest) -> None:
    led = phaselog.Ledger(sql)
    led.write(T, R, "implement", impl(1))
    led.write(T, R, "implement", impl(2))
    nan_into(sql, 2)
    assert Capability.QUARANTINE in sql.capabilities
    ro = phaselog.Ledger(phaselog.open_store(sql.url, read_only=True))
    try:
        with pytest.raises(StoreError):
            ro.store.quarantine(A2, "test")  # type: ignore[attr-defined]
    finally:
        ro.close()
    assert [f["kind"] for f in doctor(led, T).findings] == ["damaged"]  # still there


def test_cli_doctor_quarantine_on_sqlite_unbricks_the_phase(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    env = cli_env(tmp_path / "home")
    base = ["--store", url, "--ticket-id", T, "--run-id", R, "--phase", "implement"]
    for i in (1, 2):
        assert run_cli(None, "write", *base, "--payload", json.dumps(impl(i)), env=env).rc == 0
    con = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    con.execute("UPDATE phaselog_checkpoints SET body = replace(body, '\"src/f2.py\"', 'NaN') WHERE attempt = 2")
    con.close()
    refused = run_cli(None, "write", *base, "--payload", json.dumps(impl(3)), env=env)
    assert (refused.rc, refused.json["error_code"]) == (1, "corrupt")
    q = run_cli(None, "doctor", "--store", url, "--quarantine", env=env)
    assert q.rc == 0, q.out
    assert [m["from"] for m in q.json["moved"]] == [A2]
    again = run_cli(None, "write", *base, "--payload", json.dumps(impl(3)), env=env)
    assert again.rc == 0, again.out
    assert run_cli(None, "doctor", "--store", url, env=env).json["healthy"] is True
