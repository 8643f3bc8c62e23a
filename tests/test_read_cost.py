"""What a read and a status cost, counted on real connections and real folders (issue 22).

A read of a phase's newest checkpoint is one statement on SQLite (``sqlite3``'s trace callback)
and one round trip on PostgreSQL (libpq's protocol trace: one Sync per extended-protocol
exchange); on the files store it is one folder listing and the record's own files. A status of a
run whose phase has many attempts opens no older attempt than the decision needs. Counted as a
user's program calls it: ``phaselog.open(url)``, a fresh ``Run`` per run, each record read once.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.stores import Store
from phaselog.stores.files import hints

#: Runs of the data set: each has 2 failed tries of implement, then a completed one, and a local_review.
RUNS = ("r1", "r2", "r3")


def _fill(led: phaselog.Ledger, runs: tuple[str, ...] = RUNS, failed: int = 2) -> None:
    for rid in runs:
        run = led.run("T-1", rid)
        for _ in range(failed):
            run.fail("implement", "flaky")
        run.write("implement", {"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []})
        run.write("local_review", {"iteration_count": 1, "issue_fingerprints": [], "last_clean_sha": "a1b2c3d"})


def _check(got: phaselog.Stored, phase: str = "implement", attempt: int = 3) -> None:
    assert (got.record.phase, got.record.attempt_number, got.record.completed) == (phase, attempt, True)
    assert not got.tampered


# -- SQLite ----------------------------------------------------------------------------------------
@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with phaselog.open(url) as led:
        _fill(led)
    return url


def _sqlite_statements(store: Store, fn: Callable[[], Any]) -> list[str]:
    raw = store.session.conn.raw  # type: ignore[attr-defined]  # the SQLite store's sqlite3 connection
    seen: list[str] = []
    raw.set_trace_callback(seen.append)
    try:
        fn()
    finally:
        raw.set_trace_callback(None)
    return seen


def test_a_sqlite_read_of_the_newest_checkpoint_is_one_statement(sqlite_url: str) -> None:
    with phaselog.open(sqlite_url) as led:
        _check(led.run("T-1", "r1").read("implement"))  # the handle opens (schema version checked once)
        for rid, phase in (("r2", "implement"), ("r3", 1), ("r3", "1")):
            got: list[phaselog.Stored] = []
            seen = _sqlite_statements(led.store, lambda: got.append(led.run("T-1", rid).read(phase)))  # noqa: B023  # called at once
            _check(got[0])
            assert len(seen) == 1, seen
        seen = _sqlite_statements(led.store, lambda: led.run("T-1", "r2").read("implement", attempt=2))
        assert len(seen) == 1, seen


def test_a_sqlite_read_of_a_damaged_newest_checkpoint_still_explains_itself(sqlite_url: str) -> None:
    """The one statement finds damage; the general path then says what is wrong (unchanged)."""
    import sqlite3

    db = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE phaselog_checkpoints SET body = replace(body, '\"b\"', '\"x\"') WHERE run_id = ? AND attempt = 3",
            (phaselog.normalize_run_id("r1"),),
        )
    with phaselog.open(sqlite_url) as led, pytest.raises(phaselog.Corrupt, match=r"newest intact attempt|no intact"):
        led.run("T-1", "r1").read("implement")


# -- PostgreSQL ------------------------------------------------------------------------------------
def _round_trips(store: Store, fn: Callable[[], Any]) -> list[str]:
    """The protocol messages the client sent while ``fn`` ran (libpq's trace of the real connection)."""
    conn = store.session.conn  # type: ignore[attr-defined]  # the PostgreSQL store's psycopg connection
    with tempfile.TemporaryFile("w+") as fh:
        conn.pgconn.trace(fh.fileno())
        try:
            fn()
        finally:
            conn.pgconn.untrace()
        fh.seek(0)
        lines = [line.split("\t") for line in fh.read().splitlines()]
    return [parts[3].split(" ")[0] for parts in lines if len(parts) > 3 and parts[1] == "F"]


def _exchanges(sent: list[str]) -> int:
    """Round trips: each simple Query, and each Sync that closes an extended-protocol exchange."""
    return sum(1 for m in sent if m in ("Query", "Sync"))


def test_a_postgres_read_of_the_newest_checkpoint_is_one_round_trip(pg_schema_url: str) -> None:
    with phaselog.open(pg_schema_url) as led:
        _fill(led)
    with phaselog.open(pg_schema_url) as led:
        _check(led.run("T-1", "r1").read("implement"))  # the connection opens, the schema is checked
        for rid, phase in (("r2", "implement"), ("r3", 1)):
            got: list[phaselog.Stored] = []
            sent = _round_trips(led.store, lambda: got.append(led.run("T-1", rid).read(phase)))  # noqa: B023  # called at once
            _check(got[0])
            assert _exchanges(sent) == 1, sent
        sent = _round_trips(led.store, lambda: led.run("T-1", "r2").read("implement", attempt=2))
        assert _exchanges(sent) == 1, sent


# -- files -----------------------------------------------------------------------------------------
@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every name ``os.open`` and ``os.listdir`` are given while the test runs (listings as ``ls:``)."""
    seen: list[str] = []
    real_open, real_listdir = os.open, os.listdir

    def counting_open(path: Any, *args: Any, **kw: Any) -> int:
        seen.append(os.fsdecode(path))
        return real_open(path, *args, **kw)

    def counting_listdir(path: Any = ".") -> list[str]:
        seen.append(f"ls:{path}")
        return real_listdir(path)

    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(os, "listdir", counting_listdir)
    return seen


def _records_read(seen: list[str]) -> list[str]:
    return [n for n in seen if n.endswith((".yaml", ".json"))]


def test_a_files_read_is_one_listing_and_the_records_own_files(tmp_path: Path, opened: list[str]) -> None:
    root = tmp_path / "store"
    with phaselog.open(root) as led:
        _fill(led)
    with phaselog.open(root) as led:
        for rid, phase in (("r1", "implement"), ("r2", 1), ("r3", "1")):
            opened.clear()
            _check(led.run("T-1", rid).read(phase))
            assert sum(1 for n in opened if n.startswith("ls:")) == 1, opened
            assert _records_read(opened) == ["phase_1_implement_a3.yaml", ".meta_1_implement_a3.json"], opened
        opened.clear()
        assert led.run("T-1", "r1").read("implement", attempt=2).record.status == "failed"
        assert _records_read(opened) == ["phase_1_implement_a2.yaml", ".failed_1_implement_a2.json"], opened


def test_a_files_read_checks_a_newer_failed_attempt(tmp_path: Path, opened: list[str]) -> None:
    """A failed attempt newer than the checkpoint is read too: if it is damaged, the older
    checkpoint is not the latest (the general path says so, as before)."""
    root = tmp_path / "store"
    with phaselog.open(root) as led:
        _fill(led, ("r1",))
        led.run("T-1", "r1").fail("implement", "again")
        opened.clear()
        _check(led.run("T-1", "r1").read("implement"))
        assert ".failed_1_implement_a4.json" in _records_read(opened)
        run_dir = root / "checkpoints" / "T-1" / phaselog.normalize_run_id("r1")
        (run_dir / ".failed_1_implement_a4.json").write_text("{not json")
        with pytest.raises(phaselog.Corrupt, match="newer than attempt 3"):
            led.run("T-1", "r1").read("implement")


@pytest.mark.parametrize("attempts", [10, 300])
def test_a_files_status_reads_no_older_attempt(tmp_path: Path, opened: list[str], attempts: int) -> None:
    """1,000 attempts cost what 10 do: one listing, and per phase only its newest records."""
    root = tmp_path / "store"
    real_fsync = os.fsync
    os.fsync = lambda fd: None  # building the history only; the status below is what is counted
    try:
        with phaselog.open(root) as led:
            _fill(led, ("r1",), failed=attempts - 1)
    finally:
        os.fsync = real_fsync
    with phaselog.open(root) as led:
        opened.clear()
        st = led.run("T-1", "r1").status()
        assert st.phase("implement").attempts == attempts
        assert st.phase("implement").state == "completed"
        read = _records_read(opened)
        assert read == [
            f"phase_1_implement_a{attempts}.yaml",
            f".meta_1_implement_a{attempts}.json",
            "phase_2_local_review_a1.yaml",
            ".meta_2_local_review_a1.json",
        ], read
        # No events, no approvals: one folder, listed — or, for a long history's folder, not even
        # that: its groups come from the newest-attempt hint (D185).
        folder = root / "checkpoints" / "T-1" / phaselog.normalize_run_id("r1")
        listings = 0 if folder.stat().st_size >= hints.MIN_FOLDER_BYTES else 1
        assert listings == (0 if attempts == 300 else 1)
        assert sum(1 for n in opened if n.startswith("ls:")) == listings, opened


# -- a Run given its pipeline ----------------------------------------------------------------------
def test_a_run_given_its_pipeline_resolves_it_once(sqlite_url: str) -> None:
    """The first read resolves and checks the pipeline; every later read of that Run is one statement."""
    with phaselog.open(sqlite_url) as led:
        _check(led.run("T-1", "r1").read("implement"))  # the handle opens
        run = led.run("T-1", "r2", pipeline="ticket-pipeline")
        first = _sqlite_statements(led.store, lambda: _check(run.read("implement")))
        assert len(first) > 1, first  # what the run recorded, its layout, then the read
        for phase, attempt in (("implement", 3), ("local_review", 1), (1, 3)):
            got: list[phaselog.Stored] = []
            seen = _sqlite_statements(led.store, lambda: got.append(run.read(phase)))  # noqa: B023  # called at once
            _check(got[0], "local_review" if phase == "local_review" else "implement", attempt)
            assert len(seen) == 1, seen
        st = run.status()
        assert st.phase("implement").state == "completed"


@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_a_run_that_resolved_its_pipeline_still_refuses_a_run_that_follows_another(tmp_path: Path, kind: str) -> None:
    """Resolved while the run had no record, the Run does not take a record written under another
    pipeline on the strength of it: the general path refuses, as it always did."""
    import dataclasses

    from phaselog.model.pipelines import builtin

    url = str(tmp_path / "store") if kind == "files" else f"sqlite:///{tmp_path / 'ledger.db'}"
    other = dataclasses.replace(builtin("ticket-pipeline"), name="other-pipeline")
    with phaselog.open(url) as led:
        run = led.run("T-1", "x", pipeline="ticket-pipeline")
        with pytest.raises(phaselog.NotFound):
            run.read("implement")  # resolved now: the run has no record, nothing to refuse yet
        led.run("T-1", "x", pipeline=other).write(
            "implement", {"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []}
        )
        with pytest.raises(phaselog.PipelineMismatch, match="follows pipeline 'other-pipeline'"):
            run.read("implement")
        with pytest.raises(phaselog.PipelineMismatch):
            run.status()
