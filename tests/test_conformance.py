"""One contract, three stores: the contract tests of every earlier issue, once per backend.

Every test marked ``all_stores`` (this whole module) runs against the files store, SQLite and
PostgreSQL through the same Ledger API, and must give the same answers: the same records, hashes,
errors, states and JSON. Damage from outside is simulated the way it would happen: for the files
store by editing or garbling the file, for the SQL stores by an ``UPDATE`` of the row's body
through a separate connection, behind the library's back.

Tests without the ``backend`` fixture run once (they build all three stores themselves).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import CREATE_PR, IMPLEMENT, LOCAL_REVIEW, PG_URL, REPO, records_in, require_postgres
from helpers import T0, Clock, decision
from phaselog import (
    AlreadyExists,
    Conflict,
    Corrupt,
    InvalidRecord,
    NotFound,
    NotMonotonic,
    PipelineMismatch,
    TooLarge,
    UsageError,
)
from phaselog.guard import Guard
from phaselog.ledger.doctor import doctor
from phaselog.ledger.facade import Ledger
from phaselog.ledger.gates import GateRefused
from phaselog.ledger.retention import prune
from phaselog.model.errors import Prerequisite
from phaselog.model.ids import normalize_run_id
from phaselog.model.records import Checkpoint
from phaselog.stores import open_store
from phaselog.stores.base import Store
from phaselog.stores.files.store import FilesStore
from phaselog.transfer.jsonl import export_records, import_records

pytestmark = pytest.mark.all_stores

T = "CONF-1"
R1, R2 = "run-a", "run-b"
RUN1, RUN2 = normalize_run_id(R1), normalize_run_id(R2)
VIDEO = {
    "research": {"summary": "Who watches launch videos", "sources": ["https://example.org/a"]},
    "proposal": {"title": "Launch", "concept": "Ninety seconds, one idea"},
    "script": {"script_path": "script.md", "word_count": 180},
}


def impl(i: int) -> dict[str, Any]:
    """An implement payload that names its attempt."""
    return {**IMPLEMENT, "files_changed": [f"src/f{i}.py"]}


# -- damage from outside ---------------------------------------------------------------------------
def _sql_connect(store: Any) -> Any:
    """A separate connection to the store's database (not the library's)."""
    if store.dialect.name == "sqlite":
        return sqlite3.connect(store.path, isolation_level=None)
    import psycopg

    from phaselog.stores.sql.postgres import split_url

    dsn, schema = split_url(store.url)
    con = psycopg.connect(dsn, autocommit=True)
    con.execute(f'SET search_path TO "{schema}"')
    return con


def raw(store: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement behind the library's back; return its rows (if any)."""
    con = _sql_connect(store)
    try:
        if store.dialect.name != "sqlite":
            sql = sql.replace("?", "%s")
        cur = con.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        con.close()


def is_files(store: Store) -> bool:
    return isinstance(store, FilesStore)


def cp_file(store: FilesStore, run: str, ordinal: int, phase: str, attempt: int, *, completed: bool = True) -> Path:
    name = f"phase_{ordinal}_{phase}_a{attempt}.yaml" if completed else f".failed_{ordinal}_{phase}_a{attempt}.json"
    return store.root / "checkpoints" / T / normalize_run_id(run) / name


def garble(store: Store, run: str, ordinal: int, phase: str, attempt: int, *, completed: bool = True) -> None:
    """Make a stored checkpoint unreadable (bytes damaged from outside)."""
    if is_files(store):
        p = cp_file(store, run, ordinal, phase, attempt, completed=completed)  # type: ignore[arg-type]
        p.write_bytes(b"\x00\xff]]}}: [\n\t!!: &x *y {")
        return
    n = raw(
        store,
        "UPDATE phaselog_checkpoints SET body = ? WHERE ticket_id = ? AND run_id = ? AND "
        "phase_ordinal = ? AND attempt = ?",
        ('{"kind": "phaselog.checkp', T, normalize_run_id(run), ordinal, attempt),
    )
    assert n == []


def edit(store: Store, run: str, ordinal: int, phase: str, attempt: int) -> None:
    """Edit a stored completed checkpoint's payload (a plausible, parseable hand edit)."""
    if is_files(store):
        p = cp_file(store, run, ordinal, phase, attempt)  # type: ignore[arg-type]
        text = p.read_text("utf-8")
        assert "feat/PROJ-1234" in text
        p.write_text(text.replace("feat/PROJ-1234", "feat/EVIL-666"), "utf-8")
        return
    key = (T, normalize_run_id(run), ordinal, attempt)
    where = "WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ? AND attempt = ?"
    ((body,),) = raw(store, f"SELECT body FROM phaselog_checkpoints {where}", key)
    doc = json.loads(body)
    assert doc["checkpoint"]["phase_payload"]["branch_name"] == "feat/PROJ-1234"
    doc["checkpoint"]["phase_payload"]["branch_name"] = "feat/EVIL-666"
    raw(store, f"UPDATE phaselog_checkpoints SET body = ? {where}", (json.dumps(doc), *key))


def snapshot(store: Store, ticket: str = T) -> list[tuple[Any, ...]]:
    """Everything a ticket holds, as (kind, key, hash): to prove an operation changed nothing."""
    out: list[tuple[Any, ...]] = []
    for rid in store.runs(ticket):
        for item in store.iter_records(ticket, rid):
            if isinstance(item, phaselog.Damaged):
                out.append(("damaged", item.location))
            else:
                out.append(("cp", item.location, item.record.content_hash))
        for kind in ("progress", "approvals", "pruned"):
            for name, _loc, data in store.entries(kind, ticket, rid):
                out.append((kind, rid, name, hashlib.sha256(bytes(data)).hexdigest()))  # type: ignore[arg-type]
    for name, _loc, data in store.entries("markers", ticket, None):
        out.append(("markers", name, hashlib.sha256(bytes(data)).hexdigest()))  # type: ignore[arg-type]
    return out


def keys(items: list[phaselog.Stored]) -> list[tuple[str, str, int, str]]:
    return [(s.record.run_id, s.record.phase, s.record.attempt_number, s.record.status) for s in items]


# -- write / read / list ---------------------------------------------------------------------------
def test_write_then_read_round_trips_the_record(led: Ledger, store: Store) -> None:
    res = led.write(
        T,
        R1,
        "implement",
        IMPLEMENT,
        repo_commit_map={"app": "a1b2c3d"},
        artifact_paths=["src/foo.py"],
    )
    assert res.record.attempt_number == 1
    assert res.location == f"{T}/{RUN1}/phase_1_implement_a1.yaml"
    got = led.read(T, R1, "implement")
    assert got.record == res.record
    assert got.record.content_hash == res.record.content_hash
    assert got.recorded_hash == res.record.content_hash
    assert got.location == res.location
    assert got.record.phase_payload == {"phase": "implement", **IMPLEMENT}
    assert got.record.repo_commit_map == {"app": "a1b2c3d"}
    assert got.warnings == ()
    assert store.tickets() == [T]
    assert store.runs(T) == [RUN1]
    with pytest.raises(NotFound):
        led.read(T, R1, "local_review")
    with pytest.raises(NotFound):
        led.read(T, R1, "implement", 2)
    with pytest.raises(NotFound):
        led.read(T, R2, "implement")


def test_list_is_ordered_by_run_phase_attempt_and_pages_with_a_cursor(led: Ledger, store: Store, clock: Clock) -> None:
    # Written out of order: later run first, later phase first, a failed attempt among them.
    first, second = sorted([RUN1, RUN2])
    led.write(T, second, "local_review", LOCAL_REVIEW)
    clock.tick()
    led.write(T, second, "implement", impl(1))
    clock.tick()
    led.write(T, first, "create_pr", CREATE_PR)
    clock.tick()
    led.write(T, first, "implement", None, status="failed", error="boom")
    clock.tick()
    led.write(T, first, "implement", impl(2))
    clock.tick()
    led.write(T, second, "implement", impl(3))
    want = [
        (first, "implement", 1, "failed"),
        (first, "implement", 2, "completed"),
        (first, "create_pr", 1, "completed"),
        (second, "implement", 1, "completed"),
        (second, "implement", 2, "completed"),
        (second, "local_review", 1, "completed"),
    ]
    page = led.list(T)
    assert keys(page.items) == want
    assert page.damaged == []
    assert page.next_after is None
    assert keys(page.completed) == [k for k in want if k[3] == "completed"]
    assert keys(page.failed) == [want[0]]
    # Pages of two, following next_after, give the same sequence and then stop.
    seen: list[tuple[str, str, int, str]] = []
    after = None
    pages = 0
    while True:
        p = led.list(T, after=after, limit=2)
        pages += 1
        seen.extend(keys(p.items))
        if p.next_after is None:
            break
        after = p.next_after
    assert seen == want
    assert pages == 3
    assert keys(led.list(T, R2).items) == [k for k in want if k[0] == RUN2]
    assert store.runs(T) == [first, second]
    assert [(r.phase_ordinal, r.attempt_number, r.completed) for r in store.attempts(T, first)] == [
        (1, 1, False),
        (1, 2, True),
        (3, 1, True),
    ]
    with pytest.raises(UsageError):
        led.list(T, after="not-a-cursor")
    with pytest.raises(UsageError):
        led.list(T, limit=0)
    assert led.list("NO-SUCH-1").items == []


def test_tickets_and_runs_count_audit_only_tickets_and_runs(led: Ledger, store: Store) -> None:
    led.init_ticket("ONLY-1", title="a marker and nothing else")
    led.progress(T, R2, "implement", "start")  # a run with events but no checkpoint yet
    led.write(T, R1, "implement", impl(1))
    assert store.tickets() == sorted(["ONLY-1", T])
    assert store.runs("ONLY-1") == []
    assert store.runs(T) == sorted([RUN1, RUN2])
    assert store.attempts(T, RUN2) == []
    assert list(store.iter_records("NOPE-1")) == []
    with pytest.raises(NotFound):
        store.get(T, RUN1, 2, "local_review", 1)
    with pytest.raises(NotFound):
        store.get(T, RUN1, 1, "local_review", 1)  # the key matches, the phase name does not
    with pytest.raises(AlreadyExists):
        store.put_entry("markers", "ONLY-1", None, "rev_000001", b"{}\n")
    assert store.entry_names("markers", "ONLY-1", None) == ["rev_000001"]


def test_a_damaged_record_is_reported_by_read_skipped_by_list_and_caught_by_verify(led: Ledger, store: Store) -> None:
    run = led.run(T, R1)
    hashes = [
        run.write("implement", impl(1)).record.content_hash,
        run.write("implement", impl(2)).record.content_hash,
    ]
    run.fail("implement", "oops")
    run.write("implement", impl(4))
    run.write("local_review", LOCAL_REVIEW)
    garble(store, R1, 1, "implement", 4)

    with pytest.raises(Corrupt) as info:
        led.read(T, R1, "implement")
    assert info.value.error_code == "corrupt"
    assert info.value.context["path"].endswith("phase_1_implement_a4.yaml")
    assert info.value.context["newest_intact_attempt"] == 2
    with pytest.raises(Corrupt):
        led.read(T, R1, "implement", 4)
    assert led.read(T, R1, "implement", 2).record.content_hash == hashes[1]

    page = led.list(T)
    assert [(s.record.phase, s.record.attempt_number) for s in page.items] == [
        ("implement", 1),
        ("implement", 2),
        ("implement", 3),
        ("local_review", 1),
    ]
    assert [(d.phase, d.attempt_number, d.error_code) for d in page.damaged] == [("implement", 4, "corrupt")]
    assert page.damaged[0].location.endswith("phase_1_implement_a4.yaml")
    report = led.verify(T)
    assert not report.ok
    assert any(p["path"].endswith("phase_1_implement_a4.yaml") and p["damaged"] for p in report.problems)
    st = led.status(T, R1)
    assert st.phase("implement").state == "damaged"
    assert any("phase_1_implement_a4.yaml" in w for w in st.warnings)
    assert not led.can_skip_to(T, R1, "local_review").allowed
    before = snapshot(store)
    with pytest.raises(Corrupt):  # a new attempt cannot link to a damaged one
        led.write(T, R1, "implement", impl(5))
    assert snapshot(store) == before


def test_a_damaged_failed_record_is_reported_too(led: Ledger, store: Store) -> None:
    led.run(T, R1).fail("implement", "boom")
    garble(store, R1, 1, "implement", 1, completed=False)
    with pytest.raises(Corrupt):
        led.read(T, R1, "implement", 1)
    page = led.list(T)
    assert page.items == []
    assert [d.attempt_number for d in page.damaged] == [1]
    assert not led.verify(T).ok


def test_a_record_from_a_newer_phaselog_is_refused_with_a_clear_error(led: Ledger, store: Store) -> None:
    led.write(T, R1, "implement", impl(1))
    led.write(T, R1, "implement", impl(2))
    if is_files(store):
        meta = store.root / "checkpoints" / T / RUN1 / ".meta_1_implement_a2.json"  # type: ignore[attr-defined]
        doc = json.loads(meta.read_text("utf-8"))
        doc["schema_version"] = "2.0.0"
        meta.write_text(json.dumps(doc), "utf-8")
    else:
        key = (T, RUN1, 1, 2)
        where = "WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ? AND attempt = ?"
        ((body,),) = raw(store, f"SELECT body FROM phaselog_checkpoints {where}", key)
        doc = json.loads(body)
        doc["schema_version"] = "2.0.0"
        raw(store, f"UPDATE phaselog_checkpoints SET body = ? {where}", (json.dumps(doc), *key))
    with pytest.raises(phaselog.UnsupportedVersion) as info:
        led.read(T, R1, "implement", 2)
    assert "upgrade phaselog" in info.value.message
    page = led.list(T)
    assert [s.record.attempt_number for s in page.items] == [1]
    assert [(d.attempt_number, d.error_code) for d in page.damaged] == [(2, "unsupported_version")]
    assert not led.verify(T).ok


def test_an_edited_record_is_refused_and_verify_names_it(led: Ledger, store: Store) -> None:
    run = led.run(T, R1)
    run.write("implement", impl(1))
    a2 = run.write("implement", impl(2)).record
    assert led.verify(T).ok
    edit(store, R1, 1, "implement", 2)
    with pytest.raises(Corrupt) as info:
        led.read(T, R1, "implement")
    assert info.value.context["rule"] == "content_hash"
    assert a2.content_hash[:12] in info.value.message
    report = led.verify(T)
    assert not report.ok
    assert [p["path"] for p in report.problems if p["damaged"]] == [f"{T}/{RUN1}/phase_1_implement_a2.yaml"]
    assert led.read(T, R1, "implement", 1).record.phase_payload["files_changed"] == ["src/f1.py"]


def test_values_with_sql_metacharacters_are_stored_exactly(led: Ledger, store: Store) -> None:
    # Every value is a bound parameter: text that looks like SQL (or like a placeholder) is data.
    nasty = [
        "'; DROP TABLE phaselog_checkpoints; --",
        "%s %(x)s ? $1 :name",
        'quote"d \\ back\\slash',
        "nul\x00byte",
        "emoji \U0001f600 and \u2028 separator",
    ]
    written = []
    for i, text in enumerate(nasty):
        written.append(led.write(T, R1, "implement", {**impl(i), "branch_name": text}).record)
        led.write(T, R1, "local_review", None, status="failed", error=text)
    led.init_ticket(T, title=nasty[0], meta={"k'ey": nasty[1]})
    for i, rec in enumerate(written, start=1):
        got = led.read(T, R1, "implement", i).record
        assert got == rec
        assert got.phase_payload["branch_name"] == nasty[i - 1]
    assert [led.read(T, R1, "local_review", i).record.error for i in range(1, 6)] == nasty
    assert led.marker(T).title == nasty[0]  # type: ignore[union-attr]
    assert dict(led.marker(T).meta) == {"k'ey": nasty[1]}  # type: ignore[union-attr]
    assert led.verify(T).ok
    assert len(led.list(T).items) == 10


def capped(store: Store, cap: int) -> Store:
    """The same store, opened again with a record size cap of ``cap`` bytes."""
    if is_files(store):
        return FilesStore(store.root, max_record_bytes=cap)  # type: ignore[attr-defined]
    target = store.path if hasattr(store, "path") else store.url  # type: ignore[attr-defined]
    return type(store)(target, max_record_bytes=cap)  # type: ignore[call-arg]


def test_the_record_size_cap_counts_bytes_not_characters(store: Store) -> None:
    small = capped(store, 5000)
    try:
        led = Ledger(small)
        ok = led.write(T, R1, "implement", None, status="failed", error="e" * 3000).record
        # 3000 characters but 6000 bytes of UTF-8: over the cap of 5000 bytes everywhere.
        with pytest.raises(TooLarge) as info:
            led.write(T, R1, "implement", None, status="failed", error="\u00e9" * 3000)
        assert info.value.context["rule"] == "max_record_bytes"
        assert [r.attempt_number for r in small.attempts(T, RUN1)] == [ok.attempt_number]
    finally:
        small.close()


def entry_path(store: FilesStore, kind: str, run: str | None, name: str) -> Path:
    folder = store.root / "checkpoints" / T
    if run is not None:
        folder = folder / normalize_run_id(run)
    return folder / f".{kind}" / f"{name}.json"


def damage_entry(store: Store, kind: str, run: str | None, name: str, *, edit: dict[str, Any] | None = None) -> None:
    """Garble one stored audit entry from outside or, with ``edit``, change fields of its JSON."""

    def change(body: str) -> str:
        if edit is None:
            return '{"kind": "phaselog.'
        doc = json.loads(body)
        doc.update(edit)
        return json.dumps(doc)

    if is_files(store):
        p = entry_path(store, kind, run, name)  # type: ignore[arg-type]
        p.write_text(change(p.read_text("utf-8")), "utf-8")
        return
    where = "WHERE kind = ? AND ticket_id = ? AND name = ?"
    ((body,),) = raw(store, f"SELECT body FROM phaselog_entries {where}", (kind, T, name))
    raw(store, f"UPDATE phaselog_entries SET body = ? {where}", (change(body), kind, T, name))


def test_a_damaged_audit_entry_is_reported_and_never_used(led: Ledger, store: Store) -> None:
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    led.progress(T, R1, "research", "start")
    led.progress(T, R1, "research", "step", step=1)
    led.progress(T, R1, "research", "step", step=2)
    led.write(T, R1, "research", VIDEO["research"])
    led.write(T, R1, "proposal", VIDEO["proposal"])
    led.approve(T, R1, "proposal", by="ana")
    assert led.verify(T).ok
    assert led.status(T, R1).phase("proposal").state == "completed"
    (event,) = [n for n in store.entry_names("progress", T, RUN1) if n.endswith("s000000003")]
    damage_entry(store, "progress", R1, event)  # the latest event: no later link would catch it
    (approval,) = store.entry_names("approvals", T, RUN1)
    damage_entry(store, "approvals", R1, approval, edit={"by": "mallory"})  # parseable, but edited
    # Neither is used: the event is skipped, the approval does not count ...
    assert [e.seq for e in led.progress_events(T, R1, "research", 1)] == [1, 2]
    assert led.approvals(T, R1) == []
    assert led.status(T, R1).phase("proposal").state == "awaiting_approval"
    assert [e.context["path"] for e in led.damaged_events(T, RUN1)] == [f"{T}/{RUN1}/.progress/{event}.json"]
    (bad,) = led.damaged_approvals(T, RUN1)
    assert bad.context["rule"] == "content_hash"
    # ... and verify reports both, at once.
    paths = {p["path"] for p in led.verify(T).problems}
    assert {f"{T}/{RUN1}/.progress/{event}.json", f"{T}/{RUN1}/.approvals/{approval}.json"} <= paths


# -- one writer wins, attempt numbering ------------------------------------------------------------
def test_duplicate_attempt_is_refused_and_the_stored_record_is_unchanged(led: Ledger, store: Store) -> None:
    first = led.write(T, R1, "implement", impl(1), attempt=1).record
    before = snapshot(store)
    with pytest.raises(AlreadyExists) as info:
        led.write(T, R1, "implement", impl(99), attempt=1)
    assert info.value.error_code == "already_exists"
    assert info.value.context["next_attempt"] == 2
    with pytest.raises(AlreadyExists):
        led.write(T, R1, "implement", None, attempt=1, status="failed", error="x")
    # Below the ledger, the store itself refuses a duplicate (a writer that skipped the check).
    dup = Checkpoint(
        ticket_id=T,
        run_id=RUN1,
        phase="implement",
        phase_ordinal=1,
        attempt_number=1,
        timestamp_utc=T0,
        phase_payload={"phase": "implement", **impl(7)},
    )
    with pytest.raises(AlreadyExists):
        store.append(dup, expected_latest=1)
    with pytest.raises(AlreadyExists):
        store.append(dup, expected_latest=0)
    assert snapshot(store) == before
    assert led.read(T, R1, "implement").record.content_hash == first.content_hash


def test_a_failed_attempt_is_not_overwritten_either(led: Ledger, store: Store) -> None:
    failed = led.write(T, R1, "implement", None, status="failed", error="boom").record
    with pytest.raises(AlreadyExists):
        led.write(T, R1, "implement", impl(1), attempt=1)
    got = led.read(T, R1, "implement", 1).record
    assert got.content_hash == failed.content_hash
    assert (got.status, got.error) == ("failed", "boom")


def test_auto_attempts_count_up_and_explicit_ones_only_rise(led: Ledger, store: Store) -> None:
    assert [led.write(T, R1, "implement", impl(i)).record.attempt_number for i in (1, 2, 3)] == [
        1,
        2,
        3,
    ]
    assert led.write(T, R1, "local_review", LOCAL_REVIEW).record.attempt_number == 1  # per phase
    assert led.write(T, R2, "implement", impl(1)).record.attempt_number == 1  # per run
    assert led.write(T, R1, "implement", impl(6), attempt=6).record.attempt_number == 6
    before = snapshot(store)
    with pytest.raises(NotMonotonic) as info:
        led.write(T, R1, "implement", impl(4), attempt=4)
    assert info.value.context["next_attempt"] == 7
    assert snapshot(store) == before
    assert led.write(T, R1, "implement", impl(7)).record.attempt_number == 7
    for bad in (0, -1, True, "2"):
        with pytest.raises(InvalidRecord):
            led.write(T, R1, "implement", impl(8), attempt=bad)  # type: ignore[arg-type]
    # The store's own compare-and-append: a stale "latest" is a Conflict, never a fork.
    stale = Checkpoint(
        ticket_id=T,
        run_id=RUN1,
        phase="implement",
        phase_ordinal=1,
        attempt_number=8,
        timestamp_utc=T0,
        phase_payload={"phase": "implement", **impl(8)},
    )
    with pytest.raises(Conflict):
        store.append(stale, expected_latest=6)
    assert max(r.attempt_number for r in store.attempts(T, RUN1) if r.phase_ordinal == 1) == 7


def test_failed_attempts_use_up_their_number(led: Ledger) -> None:
    run = led.run(T, R1)
    f1 = run.fail("implement", "tests failed").record
    assert (f1.attempt_number, f1.status, f1.error, f1.phase_payload) == (
        1,
        "failed",
        "tests failed",
        None,
    )
    ok = run.write("implement", impl(2)).record
    assert ok.attempt_number == 2
    assert led.read(T, R1, "implement").record.attempt_number == 2
    f3 = run.fail("implement", "flaky").record
    assert f3.attempt_number == 3
    assert led.read(T, R1, "implement").record.attempt_number == 2  # latest *completed*
    assert led.read(T, R1, "implement", 3).record.error == "flaky"
    led.run(T, R2).fail("implement", "x")
    with pytest.raises(NotFound) as info:
        led.read(T, R2, "implement")
    assert "failed attempts: [1]" in info.value.message


def test_prev_hash_chains_attempts_and_basis_names_the_latest_completed(led: Ledger) -> None:
    run = led.run(T, R1)
    a1 = run.write("implement", impl(1)).record
    a2 = run.fail("implement", "x").record
    a3 = run.write("implement", impl(3)).record
    lr = run.write("local_review", LOCAL_REVIEW).record
    assert a1.prev_hash is None
    assert a2.prev_hash == a1.content_hash
    assert a3.prev_hash == a2.content_hash
    assert lr.prev_hash is None
    assert {k: (v.attempt, v.hash) for k, v in (lr.basis or {}).items()} == {"implement": (3, a3.content_hash)}
    stored = led.read(T, R1, "local_review").record
    assert stored.basis == lr.basis
    assert led.verify(T).ok


# -- state, resume ---------------------------------------------------------------------------------
def test_every_phase_state_is_derived_the_same_way(led: Ledger, store: Store) -> None:
    run = led.run(T, R1)
    st = run.status()
    assert {p.state for p in st.phases} == {"pending"}
    assert st.next_phase == "implement"
    run.write("implement", impl(1))
    run.write("local_review", LOCAL_REVIEW)
    run.fail("create_pr", "gh down")
    led.progress(T, R1, "pr_release_ready", "start")
    led.progress(T, R1, "pr_release_ready", "step", step=3)
    st = run.status()
    states = {p.phase: p.state for p in st.phases}
    assert states == {
        "implement": "completed",
        "local_review": "completed",
        "create_pr": "failed",
        "pr_release_ready": "in_progress",
        "ready_for_merge": "pending",
    }
    assert st.next_phase == "create_pr"
    assert st.completed_phases == ["implement", "local_review"]
    assert st.phase("pr_release_ready").in_flight["resume_from_step"] == 3
    run.write("implement", impl(2))  # local_review was built on implement attempt 1
    st = run.status()
    assert st.phase("local_review").state == "stale"
    assert "implement" in (st.phase("local_review").reason or "")
    assert st.next_phase == "local_review"
    run.write("ready_for_merge", {"label_applied_at": "2026-02-09T18:01:58Z"})
    garble(store, R1, 5, "ready_for_merge", 1)
    assert run.status().phase("ready_for_merge").state == "damaged"


def test_gated_states_awaiting_approval_and_rejected(led: Ledger) -> None:
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    led.write(T, R1, "research", VIDEO["research"])
    led.write(T, R1, "proposal", VIDEO["proposal"])
    assert led.status(T, R1).phase("proposal").state == "awaiting_approval"
    led.reject(T, R1, "proposal", by="bo", comment="too long")
    st = led.status(T, R1).phase("proposal")
    assert (st.state, st.approval) == ("rejected", "rejected")
    led.write(T, R1, "proposal", {**VIDEO["proposal"], "concept": "Sixty seconds"})
    assert led.status(T, R1).phase("proposal").state == "awaiting_approval"
    led.approve(T, R1, "proposal", by="ana")
    st = led.status(T, R1).phase("proposal")
    assert (st.state, st.approval, st.completed_attempt) == ("completed", "approved", 2)


def test_can_skip_to_names_every_blocker(led: Ledger) -> None:
    run = led.run(T, R1)
    d = run.can_skip_to("create_pr")
    assert not d.allowed
    assert [(b.phase, b.state) for b in d.blockers] == [
        ("implement", "pending"),
        ("local_review", "pending"),
    ]
    run.write("implement", impl(1))
    run.fail("local_review", "lint")
    d = run.can_skip_to("create_pr")
    assert [(b.phase, b.state) for b in d.blockers] == [("local_review", "failed")]
    assert "lint" in d.blockers[0].reason
    run.write("local_review", LOCAL_REVIEW)
    d = run.can_skip_to("create_pr")
    assert d.allowed
    assert d.to_json()["completed_phases"] == ["implement", "local_review"]
    assert run.can_skip_to("implement").allowed


# -- verify ----------------------------------------------------------------------------------------
def test_verify_recomputes_the_whole_graph(led: Ledger, store: Store, clock: Clock) -> None:
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    clock.tick()
    led.progress(T, R1, "research", "start")
    clock.tick()
    led.progress(T, R1, "research", "step", step=1, output="notes")
    led.write(T, R1, "research", VIDEO["research"])
    led.write(T, R1, "proposal", VIDEO["proposal"])
    led.approve(T, R1, "proposal", by="ana")
    led.write(T, R1, "script", VIDEO["script"])
    led.init_ticket(T, title="Launch film")
    report = led.verify(T)
    assert report.ok, report.problems
    assert report.checked == 3 + 1 + 2 + 2  # checkpoints, approval, events, marker revisions
    assert led.verify(T, R1).ok


# -- progress events -------------------------------------------------------------------------------
def test_progress_events_are_numbered_chained_and_shown(led: Ledger, store: Store, clock: Clock) -> None:
    e1 = led.progress(T, R1, "implement", "start")
    clock.tick(2)
    e2 = led.progress(T, R1, "implement", "step", step=1, tokens=100, output="so far")
    clock.tick(3)
    e3 = led.progress(T, R1, "implement", "step", step=2, tokens=250)
    assert [e.seq for e in (e1, e2, e3)] == [1, 2, 3]
    assert [e.attempt_number for e in (e1, e2, e3)] == [1, 1, 1]
    assert (e1.prev_hash, e2.prev_hash, e3.prev_hash) == (None, e1.content_hash, e2.content_hash)
    assert e2.output_sha256 == hashlib.sha256(b"so far").hexdigest()
    assert (e3.elapsed_sec, e3.tokens) == (5.0, 250)
    assert led.progress_events(T, R1, "implement") == [e1, e2, e3]
    assert led.progress_latest(T, R1, "implement") == e3
    assert led.progress_event(T, R1, "implement", 1, 2) == e2
    flight = led.in_flight(T, R1)["implement"]
    assert (flight.attempt_number, flight.events, flight.last_step) == (1, 3, 2)
    # Oversize output is refused before anything is written.
    names = store.entry_names("progress", T, RUN1)
    with pytest.raises(TooLarge):
        led.progress(T, R1, "implement", "step", step=3, output="x" * 101, max_output_bytes=100)
    assert store.entry_names("progress", T, RUN1) == names
    with pytest.raises(NotFound):
        led.progress(T, R1, "local_review", "step", step=1)  # never started
    # The checkpoint takes the attempt in flight; afterwards nothing is in flight.
    assert led.write(T, R1, "implement", impl(1)).record.attempt_number == 1
    assert led.in_flight(T, R1) == {}
    with pytest.raises(Conflict):
        led.progress(T, R1, "implement", "step", attempt=1, step=9)
    assert led.progress(T, R1, "implement", "start").attempt_number == 2
    assert led.verify(T).ok


# -- approvals and prerequisites -------------------------------------------------------------------
def test_approvals_and_prerequisites_in_a_strict_gated_pipeline(led: Ledger, store: Store) -> None:
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    with pytest.raises(Prerequisite) as info:
        led.write(T, R1, "proposal", VIDEO["proposal"])
    assert [b["phase"] for b in info.value.context["blockers"]] == ["research"]
    led.write(T, R1, "research", VIDEO["research"])
    p1 = led.write(T, R1, "proposal", VIDEO["proposal"]).record
    before = snapshot(store)
    with pytest.raises(Prerequisite) as info:
        led.write(T, R1, "script", VIDEO["script"])
    assert [(b["phase"], b["state"]) for b in info.value.context["blockers"]] == [("proposal", "awaiting_approval")]
    assert snapshot(store) == before  # a refused write leaves no trace
    with pytest.raises(GateRefused):
        led.approve(T, R1, "research", by="ana")  # not gated
    a, warnings = led.approve(T, R1, "proposal", by="  ana ", comment="ship it")
    assert (a.by, a.checkpoint_hash, a.seq, a.attempt_number, warnings) == (
        "ana",
        p1.content_hash,
        1,
        1,
        [],
    )
    led.write(T, R1, "script", VIDEO["script"])
    led.reject(T, R1, "script", by="bo")
    with pytest.raises(GateRefused):
        led.approve(T, R1, "script", by="ana")  # a rejection is final for its attempt
    assert [(x.phase, x.decision, x.seq) for x in led.approvals(T, R1)] == [
        ("proposal", "approve", 1),
        ("script", "reject", 2),
    ]
    # A newer proposal supersedes the approved one: approving the old one does not count.
    led.write(T, R1, "proposal", {**VIDEO["proposal"], "title": "Launch 2"})
    _a, warnings = led.approve(T, R1, "proposal", by="ana", attempt=1)
    assert len(warnings) == 1
    assert "superseded" in warnings[0]
    assert led.status(T, R1).phase("proposal").state == "awaiting_approval"
    with pytest.raises(NotFound):
        led.approve(T, R1, "proposal", by="ana", attempt=9)
    assert led.verify(T).ok


# -- ticket marker, decisions ----------------------------------------------------------------------
def test_ticket_marker_revisions(led: Ledger, clock: Clock) -> None:
    m1, changed = led.init_ticket(T, title="Launch", pipeline="video-pipeline", meta={"team": "video"})
    assert (m1.revision, changed) == (1, True)
    again, changed = led.init_ticket(T, title="Launch", pipeline="video-pipeline")
    assert (again, changed) == (m1, False)
    with pytest.raises(PipelineMismatch):
        led.init_ticket(T, title="Launch", pipeline="ticket-pipeline")
    clock.tick()
    m2, changed = led.init_ticket(T, title="Launch film", meta={"owner": "ana"})
    assert (m2.revision, m2.prev_hash, changed) == (2, m1.content_hash, True)
    assert dict(m2.meta) == {"team": "video", "owner": "ana"}
    assert led.markers(T) == [m1, m2]
    assert led.marker(T) == m2
    assert led.marker("OTHER-1") is None
    # The marker's pipeline is the default for the ticket's runs.
    assert led.write(T, R1, "research", VIDEO["research"]).record.pipeline.name == "video-pipeline"
    assert led.verify(T).ok


def test_decision_log_first_record_wins_and_failed_attempts_do_not_count(led: Ledger, clock: Clock) -> None:
    led.write(T, R1, "implement", impl(1), decisions=[decision("d1"), decision("d2")])
    clock.tick()
    led.write(T, R2, "implement", impl(2), decisions=[decision("d1", selected="b"), decision("d3")])
    clock.tick()
    led.write(T, R1, "local_review", None, status="failed", error="x", decisions=[decision("d9")])
    log = led.decisions(T)
    assert (log["version"], log["ticket"]) == ("1.0", T)
    assert [d["decision_id"] for d in log["decisions"]] == ["d1", "d2", "d3"]
    assert log["decisions"][0]["selected"] == "a"
    assert log["decisions"][0]["source"]["run_id"] == RUN1
    assert log["decisions"][0]["source"]["checkpoint_path"] == f"{T}/{RUN1}/phase_1_implement_a1.yaml"
    assert [(c["decision_id"], c["ignored"]["run_id"]) for c in log["conflicts"]] == [("d1", RUN2)]
    assert led.decisions("NOBODY-1")["decisions"] == []


# -- history, diff, fork ---------------------------------------------------------------------------
def test_history_is_in_time_order_with_every_kind(led: Ledger, clock: Clock) -> None:
    led.init_ticket(T, title="Launch", pipeline="video-pipeline")
    clock.tick()
    led.progress(T, R1, "research", "start")
    clock.tick(0.5)
    led.progress(T, R1, "research", "step", step=1, tokens=10)
    clock.tick(0.5)
    led.write(T, R1, "research", None, status="failed", error="source down")
    clock.tick()
    led.write(T, R1, "research", VIDEO["research"])
    clock.tick()
    led.write(T, R1, "proposal", VIDEO["proposal"])
    clock.tick()
    led.reject(T, R1, "proposal", by="bo", comment="too long")
    clock.tick()
    led.init_ticket(T, title="Launch film")
    h = led.history(T)
    assert [(e["kind"], e["phase"], e["attempt_number"], e["seq"]) for e in h] == [
        ("marker", None, None, None),
        ("progress", "research", 1, 1),
        ("progress", "research", 1, 2),
        ("checkpoint", "research", 1, None),
        ("checkpoint", "research", 2, None),
        ("checkpoint", "proposal", 1, None),
        ("approval", "proposal", 1, 1),
        ("marker", None, None, None),
    ]
    assert h[4]["record"]["checkpoint_path"] == f"{T}/{RUN1}/phase_1_research_a2.yaml"
    assert h[6]["summary"] == "proposal attempt 1 rejected by bo: too long"
    assert [e["kind"] for e in led.history(T, R1, "proposal")] == ["checkpoint", "approval"]


def test_diff_of_two_attempts_and_of_two_events(led: Ledger, clock: Clock) -> None:
    led.progress(T, R1, "implement", "start")
    clock.tick(3)
    led.progress(T, R1, "implement", "step", step=1, tokens=100)
    led.write(
        T,
        R1,
        "implement",
        None,
        status="failed",
        error="tests failed",
        repo_commit_map={"app": "a1b2c3d"},
    )
    clock.tick(60)
    led.write(T, R1, "implement", impl(2), repo_commit_map={"app": "b2c3d4e"})
    d = led.diff(T, f"{R1}:implement:1", f"{R1}:implement:2")
    by = {c["field"]: c for c in d["changes"]}
    assert (d["a"], d["b"], d["identical"]) == (f"{RUN1}:implement:1", f"{RUN1}:implement:2", False)
    assert (by["status"]["a"], by["status"]["b"]) == ("failed", "completed")
    assert by["repo_commit_map.app"]["b"] == "b2c3d4e"
    assert by["progress"]["a"]["tokens"] == 100  # attempt 2 had no progress events
    assert by["progress"]["b"] is None
    assert led.diff(T, f"{R1}:implement:2", f"{R1}:implement:2")["identical"] is True
    ev = led.diff(T, f"{R1}:implement:1:1", f"{R1}:implement:1:2")
    assert {c["field"] for c in ev["changes"]} >= {"event", "step", "tokens"}
    assert len(led.diff_phase(T, R1, "implement")) == 1
    with pytest.raises(NotFound):
        led.diff(T, f"{R1}:implement:9", f"{R1}:implement:1")


def test_fork_reuses_checkpoints_records_lineage_and_carries_approvals(led: Ledger, store: Store) -> None:
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    src = [
        led.write(T, R1, "research", VIDEO["research"]).record,
        led.write(T, R1, "proposal", VIDEO["proposal"]).record,
    ]
    led.approve(T, R1, "proposal", by="ana")
    new_run, written = led.fork(T, R1, through="proposal", new_run_id=R2)
    assert new_run == RUN2
    assert [w.record.phase for w in written] == ["research", "proposal"]
    for w, s in zip(written, src, strict=True):
        assert w.record.forked_from == {
            "ticket_id": T,
            "run_id": RUN1,
            "phase": s.phase,
            "attempt_number": s.attempt_number,
            "content_hash": s.content_hash,
        }
        assert w.record.phase_payload == s.phase_payload
    st = led.status(T, R2)
    assert st.phase("proposal").state == "completed"  # the approval of the source carries over
    assert st.next_phase == "script"
    assert led.verify(T).ok
    with pytest.raises(InvalidRecord):
        led.fork(T, R1, through="proposal", new_run_id=R2)  # not into an existing run
    with pytest.raises(Prerequisite):
        led.fork(T, R1, through="script")
    # Lineage is checked: edit the source after the fork and verify names the fork too.
    if not is_files(store):
        key = (T, RUN1, 1, 1)
        where = "WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ? AND attempt = ?"
        ((body,),) = raw(store, f"SELECT body FROM phaselog_checkpoints {where}", key)
        doc = json.loads(body)
        doc["checkpoint"]["phase_payload"]["summary"] = "edited"
        raw(store, f"UPDATE phaselog_checkpoints SET body = ? {where}", (json.dumps(doc), *key))
    else:
        p = store.root / "checkpoints" / T / RUN1 / "phase_1_research_a1.yaml"  # type: ignore[attr-defined]
        p.write_text(p.read_text("utf-8").replace("Who watches", "Who edits"), "utf-8")
    rules = {(p["path"].split("/")[1], p["rule"]) for p in led.verify(T).problems}
    assert (RUN2, "lineage") in rules
    assert (RUN1, "content_hash") in rules


# -- doctor ----------------------------------------------------------------------------------------
def test_doctor_is_healthy_then_reports_damage(led: Ledger, store: Store) -> None:
    led.write(T, R1, "implement", impl(1))
    led.write(T, R1, "local_review", LOCAL_REVIEW)
    rep = doctor(led)
    assert rep.healthy, rep.findings
    assert (rep.tickets, rep.runs) == (1, 1)
    garble(store, R1, 2, "local_review", 1)
    rep = doctor(led, T)
    assert [(f["kind"], f["path"]) for f in rep.findings] == [("damaged", f"{T}/{RUN1}/phase_2_local_review_a1.yaml")]


def test_doctor_quarantine_sets_damage_aside_on_every_store(led: Ledger, store: Store) -> None:
    # Files: moved into <root>/quarantine/; SQL: the row moved into phaselog_quarantine (D117).
    led.write(T, R1, "implement", impl(1))
    garble(store, R1, 1, "implement", 1)
    rep = doctor(led, T, quarantine=True)
    assert rep.healthy
    assert len(rep.moved) >= 1
    assert led.list(T).damaged == []
    assert led.write(T, R1, "implement", impl(2)).record.attempt_number == 1  # the phase writes again


def test_doctor_reports_leftover_temp_files(led: Ledger, store: Store) -> None:
    led.write(T, R1, "implement", impl(1))
    if not is_files(store):
        # A SQL write is one transaction: there are no temp files, and doctor finds nothing.
        rep = doctor(led, T)
        assert rep.healthy, rep.findings
        assert not hasattr(store, "leftovers")
        return
    tmp = store.root / "checkpoints" / T / RUN1 / ".tmp-1-deadbeef"  # type: ignore[attr-defined]
    tmp.write_bytes(b"half")
    os.utime(tmp, (0, 0))
    assert [f["kind"] for f in doctor(led, T).findings] == ["leftover_temp"]


# -- guard -----------------------------------------------------------------------------------------
def guard_target(store: Store) -> Any:
    """What Guard takes: the root path for the files store, the store object for SQL."""
    return store.root if is_files(store) else store  # type: ignore[attr-defined]


def test_guard_run_status_reset_history(store: Store, tmp_path: Path) -> None:
    g = Guard(guard_target(store), "nightly")
    first = g.run(["true"])
    assert (first.action, first.outcome, first.exit_code, first.state.pass_count) == (
        "ran",
        "success",
        0,
        1,
    )  # type: ignore[union-attr]
    for i in range(3):
        r = g.run(["false"])
        assert (r.action, r.outcome, r.state.consecutive_failures) == ("ran", "failure", i + 1)  # type: ignore[union-attr]
    halted = g.run(["true"])
    assert (halted.action, halted.exit_code) == ("halt", 1)
    assert "phaselog guard reset --name nightly" in halted.message
    st = g.status()
    assert (
        st["breaker"],
        st["lock"],
        st["state"]["pass_count"],
        st["state"]["consecutive_failures"],
    ) == ("open", None, 4, 3)
    assert st["state"]["last_status"] == "failure"
    done = g.reset(by="ana")
    assert done["state"]["consecutive_failures"] == 0
    assert g.status()["breaker"] == "closed"
    assert g.run(["true"]).outcome == "success"
    hist = g.history()
    assert [(h["kind"], h.get("outcome")) for h in hist] == [
        ("pass", "success"),
        ("pass", "failure"),
        ("pass", "failure"),
        ("pass", "failure"),
        ("reset", None),
        ("pass", "success"),
    ]
    assert [h["seq"] for h in hist] == [1, 2, 3, 4, 5, 6]
    assert hist[4]["by"] == "ana"
    # Another guard's state is its own.
    assert Guard(guard_target(store), "other").status()["state"]["pass_count"] == 0


def test_guard_skips_while_a_live_holder_runs(store: Store, tmp_path: Path) -> None:
    # The command of the outer run is a second, real `phaselog guard run` on the same guard:
    # it must see the outer holder (this process, alive) and skip without running its command.
    marker = tmp_path / "inner-ran"
    inner = tmp_path / "inner.txt"
    cmd = [
        "sh",
        "-c",
        f'"{sys.executable}" -m phaselog guard run --store "{store.url}" --name nightly -- '
        f'touch "{marker}" > "{inner}" 2>&1',
    ]
    result = Guard(guard_target(store), "nightly").run(cmd)
    assert result.action == "ran", result.message
    assert result.exit_code == 0
    out = inner.read_text()
    assert "SKIP: previous invocation still running" in out
    assert f"pid {os.getpid()}" in out
    assert not marker.exists()
    assert Guard(guard_target(store), "nightly").status()["state"]["pass_count"] == 1


# -- export / import -------------------------------------------------------------------------------
def populate(led: Ledger, clock: Clock) -> None:
    """Every kind of record: markers, checkpoints (failed too), events, approvals, a fork."""
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    clock.tick()
    led.progress(T, R1, "research", "start", pid=1)
    clock.tick()
    led.progress(T, R1, "research", "step", step=1, output="notes", tokens=5)
    clock.tick()
    led.write(T, R1, "research", None, status="failed", error="source down")
    clock.tick()
    led.write(T, R1, "research", VIDEO["research"], decisions=[decision("d1")])
    clock.tick()
    led.write(T, R1, "proposal", VIDEO["proposal"])
    clock.tick()
    led.approve(T, R1, "proposal", by="ana")
    clock.tick()
    led.fork(T, R1, through="proposal", new_run_id=R2)
    clock.tick()
    led.init_ticket(T, title="Launch film")
    led.write("OTHER-2", R1, "implement", impl(1))


def export_text(store: Store) -> list[str]:
    return [json.dumps(line, sort_keys=True) for line in export_records(store)]


@pytest.fixture
def other_store(backend: str, tmp_path: Path) -> Iterator[Store]:
    """A second, empty store of the same backend."""
    if backend == "files":
        s: Store = FilesStore(tmp_path / "store-2")
    elif backend == "sqlite":
        s = open_store(f"sqlite://{tmp_path}/other.db")
    else:
        base = require_postgres()
        schema = f"t_{uuid.uuid4().hex[:16]}"
        s = open_store(f"{base}{'&' if '?' in base else '?'}schema={schema}")
    yield s
    s.close()
    if backend == "postgres":
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_export_import_round_trip_within_a_backend_is_exact_and_idempotent(
    led: Ledger, store: Store, other_store: Store, clock: Clock
) -> None:
    populate(led, clock)
    lines = list(export_records(store))
    # The records, and the manifest of each pipeline they name (once, before its first record).
    assert {ln["type"] for ln in lines} == {"checkpoint", "entry", "pipeline"}
    assert {ln.get("kind") for ln in lines} >= {"markers", "progress", "approvals", None}
    rep = import_records(other_store, lines)
    assert (rep.added, rep.skipped, rep.conflicts) == (records_in(lines), 0, [])
    assert export_text(other_store) == export_text(store)
    other = Ledger(other_store)
    assert other.verify(T).ok
    assert other.status(T, R2).to_json() == led.status(T, R2).to_json()
    again = import_records(other_store, lines)
    assert (again.added, again.skipped, again.conflicts) == (0, records_in(lines), [])
    assert export_text(other_store) == export_text(store)


def test_import_verifies_every_hash_before_writing(led: Ledger, store: Store, other_store: Store, clock: Clock) -> None:
    populate(led, clock)
    lines = list(export_records(store))
    idx = next(
        i
        for i, ln in enumerate(lines)
        if ln["type"] == "checkpoint" and ln["document"]["checkpoint"].get("phase_payload")
    )
    bad = json.loads(json.dumps(lines))
    bad[idx]["document"]["checkpoint"]["phase_payload"]["summary"] = "forged"
    with pytest.raises(InvalidRecord) as info:
        import_records(other_store, bad)
    assert "content hash mismatch" in info.value.message
    victim = bad[idx]
    phase, ordinal = (
        victim["document"]["checkpoint"]["phase"],
        victim["document"]["phaselog"]["phase_ordinal"],
    )
    attempt = victim["document"]["checkpoint"]["attempt_number"]
    assert not any(
        r.phase_ordinal == ordinal and r.attempt_number == attempt for r in other_store.attempts(T, victim["run_id"])
    ), f"{phase} was written"
    # A forged entry (approval) is refused the same way.
    eidx = next(i for i, ln in enumerate(lines) if ln.get("kind") == "approvals")
    forged = json.loads(json.dumps(lines[eidx]))
    forged["document"]["by"] = "mallory"
    with pytest.raises(InvalidRecord):
        import_records(other_store, [forged])
    assert other_store.entries("approvals", T, forged["run_id"]) == []
    # The intact export then completes the import; nothing is doubled.
    rep = import_records(other_store, lines)
    assert rep.conflicts == []
    assert rep.added + rep.skipped == records_in(lines)
    assert export_text(other_store) == export_text(store)


def test_import_reports_a_different_record_at_the_same_attempt_as_a_conflict(
    led: Ledger, store: Store, other_store: Store
) -> None:
    led.write(T, R1, "implement", impl(1))
    theirs = Ledger(other_store).write(T, R1, "implement", impl(2)).record
    rep = import_records(other_store, export_records(store))
    assert (rep.added, rep.skipped, len(rep.conflicts)) == (0, 0, 1)
    assert other_store.get(T, RUN1, 1, "implement", 1).record.content_hash == theirs.content_hash


def test_round_trip_files_sqlite_postgres_files_keeps_records_and_hashes(tmp_path: Path, pg_schema_url: str) -> None:
    clock = Clock()
    source = FilesStore(tmp_path / "a")
    populate(Ledger(source, clock=clock), clock)
    want = export_text(source)
    chain = [
        source,
        open_store(f"sqlite://{tmp_path}/b.db"),
        open_store(pg_schema_url),
        FilesStore(tmp_path / "d"),
    ]
    try:
        for a, b in itertools.pairwise(chain):
            rep = import_records(b, export_records(a))
            assert (rep.added, rep.conflicts) == (records_in(json.loads(x) for x in want), [])
            assert export_text(b) == want
            assert Ledger(b).verify(T).ok

        # The final files store holds the same files the first one does (seed files byte for byte).
        def tree(root: Path) -> dict[str, bytes]:
            return {
                str(p.relative_to(root)): p.read_bytes()
                for p in sorted(root.rglob("*"))
                if p.is_file() and p.name != ".lock" and not p.name.startswith(".meta_")
            }

        assert tree(tmp_path / "d") == tree(tmp_path / "a")
    finally:
        for s in chain:
            s.close()


def phaselog_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PHASELOG_HOME": "/nonexistent-phaselog-home"},
        check=False,
    )


def test_cli_copy_export_import_across_backends(tmp_path: Path, pg_schema_url: str) -> None:
    clock = Clock()
    source = FilesStore(tmp_path / "a")
    populate(Ledger(source, clock=clock), clock)
    n = records_in(export_records(source))
    n_lines = len(list(export_records(source)))  # the records and their pipelines' manifests
    source.close()
    urls = {
        "files": str(tmp_path / "a"),
        "sqlite": f"sqlite://{tmp_path}/b.db",
        "postgres": pg_schema_url,
    }
    for src, dst in (("files", "sqlite"), ("sqlite", "postgres")):
        for added, skipped in ((n, 0), (0, n)):  # the second copy finds everything present
            proc = phaselog_cli("copy", "--from", urls[src], "--to", urls[dst], "--no-progress")
            assert proc.returncode == 0, proc.stdout + proc.stderr
            out = json.loads(proc.stdout)
            assert (out["records"], out["added"], out["skipped"], out["conflicts"]) == (
                n,
                added,
                skipped,
                [],
            )
    exports = {name: phaselog_cli("export", "--store", url) for name, url in urls.items()}
    assert {p.returncode for p in exports.values()} == {0}
    assert exports["files"].stdout == exports["sqlite"].stdout == exports["postgres"].stdout
    assert len(exports["files"].stdout.splitlines()) == n_lines
    dump = tmp_path / "dump.jsonl"
    dump.write_text(exports["postgres"].stdout)
    target = f"sqlite://{tmp_path}/c.db"
    first = json.loads(phaselog_cli("import", "--input", str(dump), "--store", target).stdout)
    second = json.loads(phaselog_cli("import", "--input", str(dump), "--store", target).stdout)
    assert (first["added"], first["skipped"], second["added"], second["skipped"]) == (n, 0, 0, n)
    # A tampered dump is refused, naming the line.
    lines = dump.read_text().splitlines()
    doc = json.loads(lines[-1])
    doc["document"]["checkpoint"]["phase_payload"]["files_changed"] = ["src/forged.py"]
    lines[-1] = json.dumps(doc)
    dump.write_text("\n".join(lines) + "\n")
    proc = phaselog_cli("import", "--input", str(dump), "--store", f"sqlite://{tmp_path}/d.db")
    assert proc.returncode == 1
    err = json.loads(proc.stdout)
    assert err["error_code"] == "invalid"
    assert f"line {n_lines}" in err["error"]  # the last line, counting the manifests' lines


# -- retention -------------------------------------------------------------------------------------
def test_prune_keep_last_removes_only_unprotected_attempts(led: Ledger, store: Store) -> None:
    run = led.run(T, R1)
    a1 = run.write("implement", impl(1)).record
    run.write("local_review", LOCAL_REVIEW)  # its basis names implement attempt 1
    run.fail("implement", "x")
    run.write("implement", impl(3))
    run.fail("implement", "y")
    a5 = run.write("implement", impl(5)).record
    run.fail("implement", "z")

    def states() -> list[tuple[str, str, int | None, int | None]]:
        return [(p.phase, p.state, p.latest_attempt, p.completed_attempt) for p in led.status(T, R1).phases]

    states_before = states()
    before = snapshot(store)
    dry = prune(led, T, keep_last=1, dry_run=True)
    assert snapshot(store) == before  # a dry run removes nothing
    rep = prune(led, T, keep_last=1)
    removed = sorted((r["phase"], r["attempt_number"]) for r in rep.removed if "attempt_number" in r)
    assert removed == [("implement", 2), ("implement", 3), ("implement", 4)]
    assert dry.removed == rep.removed
    assert rep.bytes_freed > 0
    kept = {k["path"]: k["reason"] for k in rep.kept}
    assert "basis" in kept[f"{T}/{RUN1}/phase_1_implement_a1.yaml"]
    assert "latest completed" in kept[f"{T}/{RUN1}/phase_1_implement_a5.yaml"]
    assert [r.attempt_number for r in store.attempts(T, RUN1) if r.phase_ordinal == 1] == [1, 5, 6]
    assert led.read(T, R1, "implement").record.content_hash == a5.content_hash
    assert led.read(T, R1, "implement", 1).record.content_hash == a1.content_hash
    assert led.verify(T).ok, led.verify(T).problems  # the prune note vouches for a5's prev_hash
    assert states() == states_before  # resume sees the same run
    assert prune(led, T, keep_last=1).removed == []  # nothing more to do


def test_prune_never_removes_an_approved_attempt(led: Ledger) -> None:
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    led.write(T, R1, "research", VIDEO["research"])
    p1 = led.write(T, R1, "proposal", VIDEO["proposal"]).record
    led.approve(T, R1, "proposal", by="ana")
    led.write(T, R1, "proposal", {**VIDEO["proposal"], "title": "v2"})
    led.write(T, R1, "proposal", {**VIDEO["proposal"], "title": "v3"})
    rep = prune(led, T, keep_last=1)
    assert [(r["phase"], r["attempt_number"]) for r in rep.removed if "attempt_number" in r] == [("proposal", 2)]
    assert any(k["path"].endswith("phase_2_proposal_a1.yaml") and "approved by ana" in k["reason"] for k in rep.kept)
    assert led.read(T, R1, "proposal", 1).record.content_hash == p1.content_hash
    assert led.verify(T).ok


def test_prune_older_than_and_whole_runs(led: Ledger, store: Store, clock: Clock) -> None:
    clock.now = T0 + timedelta(days=100)
    old, recent = T0, T0 + timedelta(days=99)
    led.write(T, R1, "implement", impl(1), timestamp=old)
    led.write(T, R1, "implement", None, status="failed", error="x", timestamp=old + timedelta(hours=1))
    led.write(T, R1, "implement", impl(3), timestamp=recent)
    led.write(T, R2, "implement", impl(1), timestamp=old)  # the whole run is old
    led.write(T, R2, "local_review", LOCAL_REVIEW, timestamp=old)
    rep = prune(led, T, older_than=timedelta(days=30))
    paths = [r["path"] for r in rep.removed]
    assert f"{T}/{RUN1}/phase_1_implement_a1.yaml" in paths
    assert f"{T}/{RUN1}/.failed_1_implement_a2.json" in paths
    assert {"path": f"{T}/{RUN2}", "kind": "run"} in rep.removed
    assert store.runs(T) == [RUN1]
    assert [r.attempt_number for r in store.attempts(T, RUN1)] == [3]
    assert rep.bytes_freed > 0
    assert led.verify(T).ok, led.verify(T).problems


def test_prune_run_id_removes_the_whole_run_but_not_a_fork_source(led: Ledger, store: Store) -> None:
    run = led.run(T, R1)
    run.write("implement", impl(1))
    run.write("local_review", LOCAL_REVIEW)
    led.progress(T, R1, "create_pr", "start")
    led.fork(T, R1, through="implement", new_run_id=R2)
    rep = prune(led, T, run_id=R1)
    assert rep.removed == []
    assert rep.kept == [{"run_id": RUN1, "reason": "another run was forked from this run"}]
    assert len(store.attempts(T, RUN1)) == 2
    rep = prune(led, T, run_id=R2)
    assert {"path": f"{T}/{RUN2}", "kind": "run"} in rep.removed
    assert rep.bytes_freed > 0
    rep = prune(led, T, run_id=R1)
    assert {"path": f"{T}/{RUN1}", "kind": "run"} in rep.removed
    assert any(r.get("kind") == "progress" for r in rep.removed)
    assert store.runs(T) == []
    assert store.entry_names("progress", T, RUN1) == []
    assert led.verify(T).ok
    with pytest.raises(UsageError):
        prune(led, T, keep_last=1, run_id=R1)


def test_prune_cli_prints_what_it_removed_and_the_space_freed(led: Ledger, store: Store) -> None:
    run = led.run(T, R1)
    for i in range(3):
        run.write("implement", impl(i))
    out = cli(store, "prune", "--ticket-id", T, "--keep-last", "1")
    assert out["success"] is True
    assert [r["path"] for r in out["removed"] if "attempt_number" in r] == [
        f"{T}/{RUN1}/phase_1_implement_a1.yaml",
        f"{T}/{RUN1}/phase_1_implement_a2.yaml",
    ]
    assert out["removed_count"] == len(out["removed"])
    assert out["bytes_freed"] > 0
    assert cli(store, "verify", "--ticket-id", T)["ok"] is True


# -- the same record, the same hash and the same JSON everywhere -----------------------------------
def cli(store_or_url: Store | str, *args: str, ok: bool = True) -> dict[str, Any]:
    url = store_or_url if isinstance(store_or_url, str) else store_or_url.url
    proc = subprocess.run(
        [sys.executable, "-m", "phaselog", *args, "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PHASELOG_HOME": "/nonexistent-phaselog-home"},
        check=False,
    )
    assert (proc.returncode == 0) == ok, (proc.returncode, proc.stdout, proc.stderr)
    data: dict[str, Any] = json.loads(proc.stdout)
    data.pop("correlation_id", None)
    return data


def write_fixed(led: Ledger) -> list[str]:
    """The same records, timestamps included, into any store; returns their content hashes."""
    out = [
        led.write(T, R1, "implement", None, status="failed", error="boom", timestamp=T0),
        led.write(
            T,
            R1,
            "implement",
            impl(2),
            timestamp=T0 + timedelta(minutes=1),
            repo_commit_map={"app": "a1b2c3d"},
            decisions=[decision("d1")],
        ),
        led.write(T, R1, "local_review", LOCAL_REVIEW, timestamp=T0 + timedelta(minutes=2)),
        led.write(T, R2, "implement", impl(3), timestamp=T0 + timedelta(minutes=3)),
    ]
    return [r.record.content_hash for r in out]


def test_same_record_same_hash_and_same_cli_json_on_every_backend(tmp_path: Path, pg_schema_url: str) -> None:
    stores = {
        "files": FilesStore(tmp_path / "files"),
        "sqlite": open_store(f"sqlite://{tmp_path}/x.db"),
        "postgres": open_store(pg_schema_url),
    }
    try:
        hashes = {name: write_fixed(Ledger(s)) for name, s in stores.items()}
        assert hashes["files"] == hashes["sqlite"] == hashes["postgres"]
        reads = {name: Ledger(s).read(T, R1, "implement").record for name, s in stores.items()}
        assert reads["files"] == reads["sqlite"] == reads["postgres"]
        commands = [
            ("read", "--ticket-id", T, "--run-id", R1, "--phase", "implement"),
            ("read", "--ticket-id", T, "--run-id", R1, "--phase", "implement", "--attempt", "1"),
            ("list", "--ticket-id", T),
            ("list", "--ticket-id", T, "--limit", "2"),
            ("status", "--ticket-id", T, "--run-id", R1),
            ("verify", "--ticket-id", T),
            ("decisions", "--ticket-id", T),
        ]
        for args in commands:
            outs = {name: cli(s, *args) for name, s in stores.items()}
            assert outs["files"] == outs["sqlite"] == outs["postgres"], args
            assert outs["files"]["success"] is True
        # Errors are the same too.
        errs = {
            name: cli(s, "read", "--ticket-id", T, "--run-id", R2, "--phase", "local_review", ok=False)
            for name, s in stores.items()
        }
        assert errs["files"] == errs["sqlite"] == errs["postgres"]
        assert errs["files"]["error_code"] == "not_found"
        dups = {
            name: cli(
                s,
                "write",
                "--ticket-id",
                T,
                "--run-id",
                R1,
                "--phase",
                "implement",
                "--attempt",
                "2",
                "--payload",
                json.dumps(IMPLEMENT),
                ok=False,
            )
            for name, s in stores.items()
        }
        assert dups["files"] == dups["sqlite"] == dups["postgres"]
        assert dups["files"]["error_code"] == "already_exists"
    finally:
        for s in stores.values():
            s.close()
