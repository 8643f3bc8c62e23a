"""What the runner costs per phase on SQLite, counted: statements, flushed commits, Python work.

A no-op phase under the runner is one checkpoint write; the run's start (the pipeline check, the
lease, the plan) and end (the lease freed) are shared out over its phases. The lease's own
commits do not wait for the disk (D176): a run of N phases flushes N commits.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.runner import lease as leasing

PHASES = 5


def _pipe(calls: list[str] | None = None) -> Any:
    names = [f"n{i}" for i in range(1, PHASES + 1)]
    pipe = phaselog.pipeline("cost-noop", phases=names)
    for name in names:
        pipe.phase(name)(lambda ctx, name=name: calls.append(name) if calls is not None else None)
    return pipe


def _traced(ledger: Any) -> list[str]:
    seen: list[str] = []
    ledger.store.conn.raw.set_trace_callback(lambda s: seen.append(" ".join(s.split())))
    return seen


def _flushed_commits(statements: list[str]) -> int:
    """COMMITs that wait for the disk: those not between synchronous=NORMAL and =FULL."""
    relaxed, count = False, 0
    for s in statements:
        if s == "PRAGMA synchronous=NORMAL":
            relaxed = True
        elif s == "PRAGMA synchronous=FULL":
            relaxed = False
        elif s == "COMMIT" and not relaxed:
            count += 1
    return count


def _synchronous(ledger: Any) -> int:
    return int(ledger.store.conn.raw.execute("PRAGMA synchronous").fetchone()[0])


def test_a_run_flushes_one_commit_per_phase_and_reads_the_run_twice_before_its_first_write(tmp_path: Path) -> None:
    ledger = phaselog.open(f"sqlite:///{tmp_path / 'cost.sqlite'}")
    pipe = _pipe()
    try:
        pipe.run("COST", str(uuid.uuid4()), store=ledger, workdir=tmp_path, handle_signals=False, quiet=True)
        seen = _traced(ledger)
        result = pipe.run("COST", str(uuid.uuid4()), store=ledger, workdir=tmp_path, handle_signals=False, quiet=True)
        assert result.done
        assert _flushed_commits(seen) == PHASES  # the checkpoints; the lease's two commits do not flush
        assert seen.count("COMMIT") == PHASES + 2
        first_lease = seen.index("PRAGMA synchronous=NORMAL")
        reads = [s for s in seen[:first_lease] if not s.startswith("PRAGMA")]  # a change stamp costs no I/O
        assert len(reads) <= 2  # the pipeline check: one snapshot (was four statements)
        assert _synchronous(ledger) == 2  # FULL again after the lease's transactions
    finally:
        ledger.close()


def test_a_refused_lease_leaves_the_connection_flushing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'held.sqlite'}"
    mine, other = phaselog.open(url), phaselog.open(url)
    try:
        held = leasing.acquire(mine.store, "COST", "6f1c2d3e-0000-4000-8000-00000000c057")
        with pytest.raises(phaselog.RunHeld):
            leasing.acquire(other.store, "COST", "6f1c2d3e-0000-4000-8000-00000000c057")
        assert _synchronous(other) == 2
        held.release()
        assert _synchronous(mine) == 2
    finally:
        mine.close()
        other.close()


def test_a_phase_that_never_logs_makes_no_logger(tmp_path: Path) -> None:
    made: list[Any] = []
    pipe = phaselog.pipeline("cost-log", phases=["quiet", "loud"])
    pipe.phase("quiet")(lambda ctx: made.append(ctx._logger))
    pipe.phase("loud")(lambda ctx: ctx.logger.info("said once"))
    result = pipe.run("COST", store=tmp_path / "files", workdir=tmp_path, handle_signals=False, quiet=True)
    assert result.done
    assert made == [None]
    logs = sorted(p.name for p in (tmp_path / "files" / "logs").rglob("*.log"))
    assert logs == ["2_loud_a1.log"]  # the log file is made on the first record, as before
