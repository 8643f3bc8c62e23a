"""[8] Peak memory of the commands that walk a whole ticket or run: list, history, copy, diff (SQLite).

A ticket of 1k, 10k (and, in the full run, 100k) checkpoints in one SQLite store, built in bulk
from clones of a run written through ``Ledger.write`` (as the ``sql`` benchmark builds its data).
Each command runs in a fresh process (`phaselog list|history|copy|export`); its peak resident set
size is the process's own VmHWM. Goal: flat, <= 48 MiB at 10k and at 100k (a row with the goal for
each command at each scale): the commands stream (docs/decisions.md D67). Each scale's fixture is
built once, straight into SQLite (the store's own INSERT, no fsync while building), cached in the
work folder for every command of that scale, and removed afterwards; 100k builds in ~12 s.
Copying 100k records takes minutes: every record is one durable append on the target.

``diff`` compares every consecutive attempt of one phase (``--run-id R --phase implement``): its
fixture is a store of its own holding one run whose implement phase has that many attempts
(clones of the template's implement attempt, hash-linked), so it does not change what ``copy`` copies.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import _sqldata
from bench._timing import Limit, Section, Stat

GOAL_MIB = 48.0
COMMANDS = ("list", "history", "copy", "export", "diff")


def _insert(conn: sqlite3.Connection, rows: list[Any]) -> list[Any]:
    """Insert a batch of checkpoint rows; return a new, empty batch."""
    conn.executemany(_sqldata.INSERT_SQL, rows)
    return []


def _finish(conn: sqlite3.Connection, rows: list[Any]) -> None:
    """Insert the last batch, commit, fold the WAL into the database and close."""
    if rows:
        _insert(conn, rows)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _build(path: Path, ticket: str, records: int, template: _sqldata.Template) -> None:
    exe = str(Path(sys.executable).parent / "phaselog")
    subprocess.run([exe, "store", "migrate", "--store", f"sqlite:///{path}"], check=True, stdout=subprocess.DEVNULL)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")  # building only; the commands measured open it normally
    rows: list[Any] = []
    runs = -(-records // _sqldata.PER_RUN)
    conn.execute("BEGIN")
    for j in range(runs):
        run = _sqldata.run_uuid(ticket, j)
        rows.extend(r for r, _ in template.clone(ticket, run, _sqldata.RUN_SPACING * j))
        if len(rows) >= 8000:
            rows = _insert(conn, rows)
    _finish(conn, rows)


def _build_long_phase(path: Path, ticket: str, run: str, attempts: int, template: _sqldata.Template) -> None:
    """One run of ``ticket`` whose implement phase has ``attempts`` attempts (for ``diff --phase``)."""
    from datetime import timedelta

    from phaselog.stores.kernel import record_document

    exe = str(Path(sys.executable).parent / "phaselog")
    subprocess.run([exe, "store", "migrate", "--store", f"sqlite:///{path}"], check=True, stdout=subprocess.DEVNULL)
    base = template.records[1]  # implement, attempt 2 (~1 KB)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")  # building only
    conn.execute("BEGIN")
    rows: list[Any] = []
    prev: str | None = None
    for k in range(1, attempts + 1):
        at = base.timestamp_utc + timedelta(seconds=k)
        cp = base.evolve(ticket_id=ticket, run_id=run, attempt_number=k, timestamp_utc=at, prev_hash=prev)
        prev = cp.content_hash
        body = record_document(cp, None).decode()
        rows.append((ticket, run, cp.phase_ordinal, cp.phase, k, k - 1, cp.status, cp.content_hash, body))
        if len(rows) >= 8000:
            rows = _insert(conn, rows)
    _finish(conn, rows)


def _hwm_kib(pid: int) -> int | None:
    """VmHWM (peak RSS) of a live process, in KiB; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return None


def _peak_mib(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``cmd``; return (peak RSS in MiB, wall seconds). Output goes to /dev/null.

    The peak is the process's own VmHWM, polled every 2 ms until it exits (the high-water mark
    only rises, so only growth in the last interval can be missed). ``wait4``'s ru_maxrss would
    not do: across fork and exec it keeps the parent's (this benchmark's) peak.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        hwm = _hwm_kib(proc.pid)
        if hwm is not None:
            peak = max(peak, hwm)
        time.sleep(0.002)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}: {err[-500:]}")
    return peak / 1024, time.perf_counter() - t0


def run(workdir: Path, *, scales: tuple[int, ...] = (1_000, 10_000, 100_000), progress: Any = None) -> Section:
    """Build each scale, run each command once in a fresh process, report its peak RSS."""
    template = _sqldata.Template(workdir)
    exe = str(Path(sys.executable).parent / "phaselog")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env["PHASELOG_HOME"] = str(workdir / "memory-home")
    section = Section(
        "memory",
        "[8] peak memory (RSS) of list / history / copy / export of one ticket and diff of one phase, SQLite store, "
        "fresh process each",
        [
            "ticket built in bulk from clones of a Ledger.write run (8 records per run); output to /dev/null",
            "diff: `diff --run-id R --phase implement` of one run whose implement has that many attempts",
            f"baseline for scale: a bare `phaselog --help` process; goal <= {GOAL_MIB:.0f} MiB at 10k and 100k",
        ],
        unit="MiB",
    )
    base, _ = _peak_mib([exe, "--help"], env)
    section.stats.append(Stat("help", "phaselog --help (interpreter + CLI)", "info", 1, base, base))
    for n in scales:
        label = _sqldata.scale_label(n)
        ticket = f"MEM-{label.upper()}"
        db = workdir / f"memory-{label}.db"
        t0 = time.perf_counter()
        _build(db, ticket, n, template)
        if progress is not None:
            progress(f"built {n:,} records in {time.perf_counter() - t0:.1f} s")
        url = f"sqlite:///{db}"
        long_db = workdir / f"memory-{label}-phase.db"
        long_run = _sqldata.run_uuid(ticket, 0)
        _build_long_phase(long_db, ticket, long_run, n, template)
        for name in COMMANDS:
            if name == "diff":
                cmd = [exe, "diff", "--ticket-id", ticket, "--run-id", long_run, "--phase", "implement"]
                cmd += ["--store", f"sqlite:///{long_db}"]
            elif name == "copy":
                dst = workdir / f"memory-{label}-copy.db"
                cmd = [exe, "copy", "--from", url, "--to", f"sqlite:///{dst}"]
            elif name == "export":
                cmd = [exe, "export", "--ticket-id", ticket, "--store", url]
            else:
                cmd = [exe, name, "--ticket-id", ticket, "--store", url]
            mib, secs = _peak_mib(cmd, env)
            key = f"{name}_{label}"
            section.stats.append(Stat(key, f"phaselog {name}, {n:,} records ({secs:.1f} s)", "subject", 1, mib, mib))
            if n >= 10_000 and name != "export":
                section.limits.append(Limit(key, mib, GOAL_MIB, "MiB, flat with the number of records", unit="MiB"))
            if progress is not None:
                progress(f"{name} at {n:,}: {mib:.0f} MiB in {secs:.1f} s")
        for p in workdir.glob(f"memory-{label}*"):
            p.unlink()
    return section
