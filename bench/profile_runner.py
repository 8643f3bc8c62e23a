"""``python -m bench --profile-runner``: where a no-op phase's time goes in the runner (SQLite).

Prints the SQL statements and commits per phase (counted on the store's connection), the median
time per phase, and where the time goes: cProfile's own time grouped into buckets (the database
driver — statements and the COMMIT's fsync —, reading earlier checkpoints back, serialising and
hashing the new one, validation, the lease, the heartbeat thread, the rest).
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

PHASES = 10
BUCKETS = (
    ("sqlite3 driver (statements, COMMIT fsync)", ("method 'execute' of 'sqlite3", "method 'fetch")),
    (
        "reading checkpoints back (basis, status)",
        ("records.py:", "sql.py:", "files.py:", "json/decoder", "json/__init__"),
    ),
    ("serialising + hashing the new checkpoint", ("json/encoder", "hashlib", "_sha256")),
    ("validation (records, payload)", ("validation.py", "pipelines.py", "formats.py")),
    ("state derivation (plan, result)", ("state.py", "explain.py")),
    ("lease", ("lease.py",)),
    ("heartbeat thread (start/stop)", ("heartbeat.py", "threading.py", "_thread.lock")),
)


def _pipeline() -> Any:
    import phaselog

    names = [f"n{i}" for i in range(1, PHASES + 1)]
    pipe = phaselog.pipeline("profile-noop", phases=names)
    for name in names:
        pipe.phase(name)(lambda ctx: None)
    return pipe


def run(workdir: Path, *, quick: bool = False) -> None:
    """Profile runs of a fresh 10-phase no-op pipeline on SQLite and print the breakdown."""
    import phaselog

    rounds = 10 if quick else 60
    pipe = _pipeline()
    ledger = phaselog.open(f"sqlite:///{workdir / 'profile-runner.sqlite'}")
    folder = workdir / "profile-runner"
    folder.mkdir()

    def one() -> None:
        pipe.run("PROF", str(uuid.uuid4()), store=ledger, workdir=folder, handle_signals=False)

    for _ in range(3):
        one()
    conn = ledger.store.conn
    counts = {"statements": 0, "commits": 0}
    execute, commit = conn.execute, conn.commit

    def counted_execute(sql: str, params: Any = ()) -> Any:
        counts["statements"] += 1
        return execute(sql, params)

    def counted_commit() -> None:
        counts["commits"] += 1
        commit()

    conn.execute, conn.commit = counted_execute, counted_commit
    one()
    conn.execute, conn.commit = execute, commit
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        one()
        times.append((time.perf_counter() - t0) / PHASES)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(rounds):
        one()
    prof.disable()
    ledger.close()
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    sums = dict.fromkeys([b[0] for b in BUCKETS] + ["the rest (runner, ledger, Python)"], 0.0)
    for (filename, line, name), value in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{filename}:{line}({name})" if filename != "~" else name
        for label, needles in BUCKETS:
            if any(n in where for n in needles):
                sums[label] += value[2]
                break
        else:
            sums["the rest (runner, ledger, Python)"] += value[2]
    print(f"\n== [profile-runner] a no-op phase under the runner, SQLite store ({PHASES}-phase runs)")
    print(f"   median per phase (unprofiled, {rounds} runs): {statistics.median(times) * 1e3:.3f} ms")
    print(
        f"   per phase: {counts['statements'] / PHASES:.1f} SQL statements, {counts['commits'] / PHASES:.1f} commits "
        f"(1 checkpoint + the lease's acquire and release shared out)"
    )
    print(
        f"   cProfile own time per phase, by bucket (total {total / rounds / PHASES * 1e3:.3f} ms, profiler included):"
    )
    for label, value in sorted(sums.items(), key=lambda kv: -kv[1]):
        print(f"     {value / rounds / PHASES * 1e3:7.3f} ms  {value / total:5.1%}  {label}")
    print("   top functions by own time:")
    stats.sort_stats("tottime").print_stats(12)
