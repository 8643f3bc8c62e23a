"""``diff`` streams: every attempt of a phase is diffed in bounded memory, with the bytes it printed
before (the pairwise diffs, as one JSON document), and a diff of two attempts reads just those two.

The bytes are pinned against the pairwise ``Ledger.diff`` on every store; the way records are read
by a counting store proxy (test_streams.Counting); and memory itself by the peak resident set of
real ``phaselog diff`` processes over 1,000 and 10,000 attempts of one phase on SQLite.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW
from helpers import Clock, clean_env
from phaselog.cli import main
from phaselog.cli._render import json_text
from phaselog.ledger.diff import render_text
from phaselog.model.entries import ProgressEvent, entry_bytes
from phaselog.model.ids import normalize_run_id
from phaselog.model.records import Checkpoint
from phaselog.stores.base import Store
from phaselog.stores.kernel import record_document
from phaselog.stores.names import event_name
from phaselog.stores.sql import checkpoints as sql_pages
from phaselog.views import results as views
from test_streams import Counting

T = "DIFF-1"
R = normalize_run_id("diff-run")
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def fill(store: Store, attempts: int = 23) -> phaselog.Ledger:
    """A phase retried ``attempts`` times: failures, progress events on some, another phase between."""
    clock = Clock(T0)
    led = phaselog.Ledger(store, clock=clock)
    for i in range(1, attempts + 1):
        if i % 4 in (1, 2):  # events on some attempts only: blocks with and without events
            led.progress(T, R, "implement", "start", pid=None)
            led.progress(T, R, "implement", "step", step=i, tokens=3 * i, output=f"so far ✓ {i}", pid=None)
        clock.tick()
        if i % 7 == 3:
            led.write(T, R, "implement", None, status="failed", error=f"flaky {i}")
        else:
            files = [f"src/f{j}.py" for j in range(i % 3)]
            led.write(T, R, "implement", {**IMPLEMENT, "commit_sha": f"{i:07x}", "files_changed": files})
        if i % 5 == 0:
            led.write(T, R, "local_review", LOCAL_REVIEW)
    led.progress(T, R, "implement", "start", pid=None)  # an attempt in flight: no record, no diff
    return led


def cli(capsys: pytest.CaptureFixture[str], store: Store, *args: str) -> str:
    """Run ``phaselog`` in this process on ``store``; its stdout (exit 0 required)."""
    where = ["--root", str(store.root)] if store.url.startswith("file") else ["--store", store.url]  # type: ignore[attr-defined]
    with pytest.raises(SystemExit) as exc:
        main([*args, *where])
    out = capsys.readouterr().out
    assert exc.value.code == 0, out
    return out


def without_correlation(text: str) -> str:
    """``text`` with its correlation id (a fresh one per call: diff takes none) blanked."""
    data = json.loads(text)
    data["correlation_id"] = "C"
    return json_text(data)


def pairwise(led: phaselog.Ledger, phase: str) -> list[dict[str, Any]]:
    """What ``diff --phase`` printed before it streamed: ``diff`` of each consecutive pair."""
    nums = sorted(r.attempt_number for r in led.store.attempts(T, R) if r.phase == phase)
    return [led.diff(T, f"{R}:{phase}:{x}", f"{R}:{phase}:{y}") for x, y in itertools.pairwise(nums)]


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQL pages of 3 rows: every page boundary is crossed."""
    monkeypatch.setattr(sql_pages, "PAGE_ROWS", 3)


# -- the same bytes, on every store ----------------------------------------------------------------
@pytest.mark.all_stores
@pytest.mark.usefixtures("small_pages")
def test_a_streamed_phase_diff_prints_the_pairwise_diffs(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    led = fill(store)
    expected = pairwise(led, "implement")
    assert len(expected) == 22
    assert any(c["field"].startswith("progress.") for d in expected for c in d["changes"])  # events counted
    assert led.diff_phase(T, R, "implement") == expected
    args = ("diff", "--ticket-id", T, "--run-id", R, "--phase", "implement")
    out = cli(capsys, store, *args)
    assert without_correlation(out) == json_text({"success": True, **views.diffs(expected), "correlation_id": "C"})
    text = cli(capsys, store, *args, "--format", "text")
    assert text == "\n\n".join(render_text(d) for d in expected) + "\n"
    one = cli(capsys, store, "diff", "--ticket-id", T, "--run-id", R, "--phase", "1", "--format", "text")
    assert one == text  # by ordinal


@pytest.mark.all_stores
def test_a_phase_with_fewer_than_two_attempts_has_no_diffs(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    led = fill(store, attempts=1)
    assert led.diff_phase(T, R, "implement") == []
    args = ("diff", "--ticket-id", T, "--run-id", R, "--phase", "local_review")
    assert json.loads(cli(capsys, store, *args))["diffs"] == []
    assert cli(capsys, store, *args, "--format", "text") == "(fewer than two attempts)\n"


def test_a_damaged_attempt_stops_a_phase_diff_with_the_error_reading_it_gives(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    from phaselog.model.errors import Corrupt

    led = fill(store, attempts=6)
    victim = next(p for p in Path(store.root).rglob("phase_1_implement_a5.yaml"))  # type: ignore[attr-defined]
    victim.write_text(victim.read_text().replace("feat/PROJ-1234", "feat/EDITED"))
    with pytest.raises(Corrupt) as direct:
        led.read(T, R, "implement", 5)
    with pytest.raises(Corrupt) as streamed:
        led.diff_phase(T, R, "implement")
    assert streamed.value.to_dict() == direct.value.to_dict()
    with pytest.raises(SystemExit) as exc:
        main(["diff", "--ticket-id", T, "--run-id", R, "--phase", "implement", "--root", str(store.root)])  # type: ignore[attr-defined]
    out = capsys.readouterr().out
    assert exc.value.code == direct.value.exit_code
    assert json.loads(out)["error_code"] == direct.value.error_code  # the error alone: nothing half-printed
    assert "diffs" not in json.loads(out)


# -- what is read ----------------------------------------------------------------------------------
@pytest.fixture
def counting(store: Store, monkeypatch: pytest.MonkeyPatch) -> Counting:
    """The store the CLI opens is ``store`` behind a Counting proxy."""
    import phaselog.stores

    proxy = Counting(store)
    monkeypatch.setattr(phaselog.stores, "open_store", lambda *a, **kw: proxy)
    return proxy


@pytest.mark.all_stores
@pytest.mark.usefixtures("small_pages")
def test_a_phase_diff_reads_through_the_iterator_and_events_a_block_at_a_time(
    store: Store, counting: Counting, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store, attempts=31)
    entries: list[tuple[Any, ...]] = []
    real_entries = store.entries

    def spy(kind: str, ticket_id: str, run_id: str | None, prefix: str = "") -> Any:
        entries.append((kind, prefix))
        return real_entries(kind, ticket_id, run_id, prefix)

    monkeypatch.setattr(counting, "entries", spy, raising=False)
    out = json.loads(cli(capsys, store, "diff", "--ticket-id", T, "--run-id", R, "--phase", "implement"))
    assert len(out["diffs"]) == 30
    assert counting.calls["iter_records"] == 1
    assert counting.handed_out == 31 + 6  # the phase's records, and local_review's passing by
    assert counting.most_alive <= 3, counting.most_alive  # the previous attempt, this one, the next read
    assert counting.calls["snapshot"] == 1  # the run, read once: its pipeline
    for whole_run in ("attempts", "get", "snapshot(history)", "entry_names"):
        assert counting.calls[whole_run] == 0, counting.calls
    # Never the whole run's events: attempts 1-9, 10-19, 20-29, 30-31, one read per block of ten.
    assert entries == [("progress", f"001_implement_a0000{b}") for b in range(4)]


@pytest.mark.all_stores
def test_a_diff_of_two_attempts_reads_those_two_and_their_events(
    store: Store, counting: Counting, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    led = fill(store, attempts=12)
    entries: list[tuple[str, str]] = []
    real_entries = store.entries

    def spy(kind: str, ticket_id: str, run_id: str | None, prefix: str = "") -> Any:
        entries.append((kind, prefix))
        return real_entries(kind, ticket_id, run_id, prefix)

    monkeypatch.setattr(counting, "entries", spy, raising=False)
    a, b = f"{R}:implement:1", f"{R}:implement:9"
    out = cli(capsys, store, "diff", "--ticket-id", T, a, b)
    assert without_correlation(out) == json_text(
        {"success": True, **views.diffs([led.diff(T, a, b)]), "correlation_id": "C"}
    )
    assert (counting.calls["get"], counting.calls["snapshot"]) == (2, 1)  # the run once, its two records
    for whole_run in ("attempts", "iter_records", "snapshot(history)", "entry_names"):
        assert counting.calls[whole_run] == 0, counting.calls
    assert entries == [("progress", "001_implement_a000001_s"), ("progress", "001_implement_a000009_s")]


# -- memory: flat from 1,000 to 10,000 attempts (SQLite, real processes) ---------------------------
FILES = [f"src/package/module_{j:04d}.py" for j in range(30)]  # ~1 KB records (as the benches write)


def build_long_phase(db: Path, attempts: int) -> None:
    """One run whose ``implement`` has ``attempts`` attempts (every tenth with two progress events),
    written in bulk: two attempts through ``Ledger.write``, the rest clones of the second with
    their own attempt number, commit, time and hash links (as bench/_sqldata.py clones runs)."""
    from phaselog.stores.sql.sqlite import SqliteStore

    store = SqliteStore(db)
    try:
        led = phaselog.Ledger(store, clock=Clock(T0))
        for i in (1, 2):
            led.write(T, R, "implement", {**IMPLEMENT, "commit_sha": f"{i:07x}", "files_changed": FILES})
        template = store.get(T, R, 1, "implement", 2).record
        prev = template.content_hash
    finally:
        store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")  # building only
    conn.execute("BEGIN")
    rows, events = [], []
    for k in range(3, attempts + 1):
        at = T0 + timedelta(seconds=k)
        payload = {**template.phase_payload, "commit_sha": f"{k:07x}"}
        cp: Checkpoint = template.evolve(attempt_number=k, timestamp_utc=at, phase_payload=payload, prev_hash=prev)
        prev = cp.content_hash
        body = record_document(cp, None).decode()
        rows.append((T, R, 1, "implement", k, k - 1, cp.status, cp.content_hash, body))
        if k % 10 == 0:
            start = ProgressEvent(T, R, "implement", 1, k, 1, "start", at - timedelta(seconds=0.5))
            step = ProgressEvent(T, R, "implement", 1, k, 2, "step", at, step=1, tokens=k, prev_hash=start.content_hash)
            for ev in (start, step):
                name = event_name(1, "implement", k, ev.seq)
                events.append(("progress", T, R, name, entry_bytes(ev).decode()))
    conn.executemany(
        "INSERT INTO phaselog_checkpoints (ticket_id, run_id, phase_ordinal, phase, attempt, prev_attempt, status,"
        " content_hash, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.executemany(
        "INSERT INTO phaselog_entries (kind, ticket_id, run_id, name, body) VALUES (?, ?, ?, ?, ?)", events
    )
    conn.execute("COMMIT")
    conn.close()


PEAK = textwrap.dedent(
    """
    import atexit, sys
    from phaselog.cli import main

    def peak():
        with open("/proc/self/status") as fh:
            kib = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
        sys.stderr.write(f"PEAK_KIB={kib}\\n")

    atexit.register(peak)
    main(sys.argv[1:])
    """
)


def peak_mib(db: Path, tmp_path: Path, *args: str) -> tuple[float, str]:
    """Peak resident set (VmHWM, MiB) of a fresh ``phaselog`` process, and its stdout's head."""
    out = tmp_path / f"out-{db.stem}.json"
    with open(out, "w") as fh:
        proc = subprocess.run(
            [sys.executable, "-c", PEAK, *args, "--store", f"sqlite:///{db}"],
            stdout=fh,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(PHASELOG_HOME=str(tmp_path / "home")),
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    kib = int(proc.stderr.rsplit("PEAK_KIB=", 1)[1].split()[0])
    with open(out) as fh:
        head = fh.read(4096)
    os.unlink(out)
    return kib / 1024, head


@pytest.mark.slow
def test_a_phase_diff_of_ten_thousand_attempts_takes_the_memory_of_a_thousand(tmp_path: Path) -> None:
    peaks = {}
    for n in (1_000, 10_000):
        db = tmp_path / f"long-{n}.db"
        build_long_phase(db, n)
        args = ("diff", "--ticket-id", T, "--run-id", R, "--phase", "implement")
        peaks[n], head = peak_mib(db, tmp_path, *args)
        assert head.startswith('{\n  "success": true,\n  "diffs": [')
        a, b = f"{R}:implement:{n - 1}", f"{R}:implement:{n}"
        peaks[(n, "pair")], head = peak_mib(db, tmp_path, "diff", "--ticket-id", T, a, b)
        assert '"phase_payload.commit_sha"' in head
        db.unlink()
    # Holding the 10,000 records would add ~45 MiB. What still grows from 1,000 to 10,000 is bounded
    # and not the diff's: the SQL store's content-hash memo (at most 4,096 bodies, ~5 MiB of these).
    # A diff of two attempts reads one snapshot (per-phase summaries) and two records: flat.
    assert peaks[10_000] - peaks[1_000] < 10, peaks
    assert peaks[(10_000, "pair")] - peaks[(1_000, "pair")] < 4, peaks
