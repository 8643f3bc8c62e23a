"""One writer wins: real processes, started together by a barrier, racing on one phase.

Invariant 2 for the files store: at most one checkpoint per (ticket, run, phase, attempt);
the losers of an explicit attempt get AlreadyExists and the stored file is the winner's; writers
asking for the next attempt get distinct, gap-free numbers and an intact prev_hash chain.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import traceback
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT
from phaselog import AlreadyExists
from phaselog.stores.files.store import FilesStore

pytestmark = pytest.mark.slow

T = "RACE-1"
CTX = mp.get_context("fork")
ROUNDS = 3
BARRIER_TIMEOUT_S = 120


def payload(idx: int) -> dict[str, Any]:
    """A payload that names its writer."""
    return {**IMPLEMENT, "files_changed": [f"src/writer_{idx:03d}.py"]}


def _worker(job: dict[str, Any], barrier: Any, out: Any) -> None:
    root, run, idx, attempt = job["root"], job["run"], job["idx"], job["attempt"]
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.load_pipeline(None)  # warm up before the start line, not after it
    try:
        barrier.wait(BARRIER_TIMEOUT_S)
    except BaseException as exc:
        out.put((idx, "error", f"barrier: {exc!r}"))
        return
    for _ in range(job["writes"]):
        try:
            if job["failed"]:
                res = ledger.write(T, run, "implement", None, attempt=attempt, status="failed", error=f"w{idx}")
            else:
                res = ledger.write(T, run, "implement", payload(idx), attempt=attempt)
            r = res.record
            out.put((idx, "ok", (r.attempt_number, r.content_hash, r.status)))
        except AlreadyExists as exc:
            out.put((idx, "exists", exc.message))
        except BaseException:
            out.put((idx, "error", traceback.format_exc()))


def race(
    root: Path,
    run: str,
    n: int,
    *,
    attempt: int | None,
    failed_every: int = 0,
    writes: int = 1,
) -> list[tuple[int, str, Any]]:
    """Start ``n`` processes at once; return every outcome they reported."""
    barrier = CTX.Barrier(n)
    out = CTX.Queue()
    procs = [
        CTX.Process(
            target=_worker,
            args=(
                {
                    "root": str(root),
                    "run": run,
                    "idx": i,
                    "attempt": attempt,
                    "failed": bool(failed_every) and i % failed_every == 0,
                    "writes": writes,
                },
                barrier,
                out,
            ),
        )
        for i in range(n)
    ]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in range(n * writes):
            results.append(out.get(timeout=BARRIER_TIMEOUT_S))
    except queue.Empty:
        pytest.fail(f"only {len(results)} of {n * writes} outcomes arrived")
    finally:
        for p in procs:
            p.join(BARRIER_TIMEOUT_S)
    assert [p.exitcode for p in procs] == [0] * n
    errors = [r for r in results if r[1] == "error"]
    assert errors == []
    return results


def _run_dir(root: Path, run: str) -> Path:
    return root / "checkpoints" / T / phaselog.normalize_run_id(run)


@pytest.mark.parametrize("n", [8, 32])
def test_racing_the_same_explicit_attempt_one_wins(tmp_path: Path, n: int) -> None:
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    for rnd in range(ROUNDS):
        run = f"explicit-{n}-{rnd}"
        results = race(root, run, n, attempt=1)
        winners = [r for r in results if r[1] == "ok"]
        losers = [r for r in results if r[1] == "exists"]
        assert len(winners) == 1, winners
        assert len(losers) == n - 1
        win_idx, _, (attempt, content_hash, _status) = winners[0]
        assert attempt == 1

        stored = ledger.read(T, run, "implement", 1)
        assert stored.record.content_hash == content_hash
        assert stored.recorded_hash == content_hash
        assert stored.record.phase_payload is not None
        assert stored.record.phase_payload["files_changed"] == [f"src/writer_{win_idx:03d}.py"]
        names = sorted(p.name for p in _run_dir(root, run).iterdir())
        assert names == [".lock", ".meta_1_implement_a1.json", "phase_1_implement_a1.yaml"]
        assert ledger.verify(T, run).ok


@pytest.mark.parametrize("n", [8, 32])
def test_failed_and_completed_writers_of_one_attempt_one_wins(tmp_path: Path, n: int) -> None:
    # A failed record and a checkpoint are different files: the lock must still make the
    # attempt number exclusive across both kinds.
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    for rnd in range(ROUNDS):
        run = f"mixed-{n}-{rnd}"
        ledger.write(T, run, "implement", payload(999))  # attempt 1 exists; race for 2
        results = race(root, run, n, attempt=2, failed_every=2)
        winners = [r for r in results if r[1] == "ok"]
        assert len(winners) == 1, winners
        assert sum(r[1] == "exists" for r in results) == n - 1
        _idx, _, (attempt, content_hash, status) = winners[0]
        assert attempt == 2
        names = {p.name for p in _run_dir(root, run).iterdir()}
        a2 = {x for x in names if "_a2." in x}
        if status == "failed":
            assert a2 == {".failed_1_implement_a2.json"}
        else:
            assert a2 == {".meta_1_implement_a2.json", "phase_1_implement_a2.yaml"}
        assert ledger.read(T, run, "implement", 2).record.content_hash == content_hash
        assert ledger.verify(T, run).ok


@pytest.mark.parametrize("n", [8, 32])
def test_racing_for_the_next_attempt_gives_gap_free_numbers(tmp_path: Path, n: int) -> None:
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    for rnd in range(ROUNDS):
        run = f"auto-{n}-{rnd}"
        results = race(root, run, n, attempt=None, failed_every=5)
        assert all(r[1] == "ok" for r in results), results
        numbers = sorted(r[2][0] for r in results)
        assert numbers == list(range(1, n + 1))
        acked = {r[2][0]: r[2][1] for r in results}

        items = ledger.list(T, run).items
        assert [s.record.attempt_number for s in items] == list(range(1, n + 1))
        prev = None
        for s in items:
            assert s.record.content_hash == acked[s.record.attempt_number]
            assert s.record.prev_hash == prev
            prev = s.record.content_hash
        report = ledger.verify(T, run)
        assert report.ok, report.problems
        assert report.checked == n


def test_many_writes_per_process_stay_gap_free(tmp_path: Path) -> None:
    root = tmp_path / "store"
    n, writes = 8, 5
    results = race(root, "burst", n, attempt=None, writes=writes)
    numbers = sorted(r[2][0] for r in results)
    assert numbers == list(range(1, n * writes + 1))
    ledger = phaselog.Ledger(FilesStore(root))
    assert ledger.verify(T, "burst").ok
    assert ledger.write(T, "burst", "implement", payload(0)).record.attempt_number == n * writes + 1
