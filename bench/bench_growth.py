"""[6] Growth with history: a write and a status must cost O(phases), not O(attempts).

Two runs of the same store side by side: one whose phase has a short history (10 attempts) and
one with a long history (1,000 attempts). The ratio long / short is the growth; the goal is
"no growth" (issue 22: write <= 1.2x, status <= 1.5x). Measured on the files store and on SQLite,
in rounds (``run_rounds``). Writes go through one ledger (the process that keeps writing); every
status sample opens a fresh ledger first (untimed), so no memo of an earlier status carries it.
The other calls that read a run before they record something (approve, a progress ``start``,
``can_skip_to``) are timed the same way on a gated phase with 1,000 vs 10 attempts (no goal in
the issue: printed for the record).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import phaselog
from bench import _data
from bench._timing import BASELINE, SUBJECT, Contestant, Section, run_rounds
from bench.bench_api import FreshLedger, on_tmpfs
from phaselog.ledger.facade import Ledger

TICKET = "BENCH-6"
GATED = "BENCH-6G"
RESEARCH = {"summary": "s", "sources": ["https://x.test/a"]}
PROPOSAL = {"title": "T", "concept": "C"}
GOAL_WRITE = 1.2
GOAL_STATUS = 1.5


def _build_phase(ledger: Ledger, run: str, attempts: int) -> None:
    for _ in range(attempts):
        _data.write_phase(ledger, TICKET, run, "implement")


def run(
    workdir: Path,
    *,
    rounds: int,
    ops: int,
    warmup_ops: int = 2,
    short: int = 10,
    long: int = 1000,
    progress: Any = None,
) -> list[Section]:
    """Time write/status on a short and a long history, per store kind."""
    sections = []
    n_short = max(4, (rounds * ops + warmup_ops) // 8)
    for kind in ("files", "sqlite"):
        target: Any
        if kind == "files":
            target = workdir / "growth-files"
            with _data.no_fsync(), phaselog.open(target) as ledger:
                runs = _build(kind, ledger, short=short, long=long, n_short=n_short)
        else:
            db = workdir / "growth.db"
            target = f"sqlite:///{db}"
            with on_tmpfs(db) as (tmp_db,), phaselog.open(f"sqlite:///{tmp_db}") as ledger:
                runs = _build(kind, ledger, short=short, long=long, n_short=n_short)
        if progress is not None:
            progress(f"{kind}: built")
        with phaselog.open(target) as ledger:
            sections.append(
                _one(
                    kind,
                    ledger,
                    target,
                    runs,
                    rounds=rounds,
                    ops=ops,
                    warmup_ops=warmup_ops,
                    short=short,
                    long=long,
                    progress=progress,
                )
            )
    return sections


def _build(kind: str, ledger: Ledger, *, short: int, long: int, n_short: int) -> dict[str, Any]:
    # Writes: many short runs (each grows by a few attempts over the benchmark) and one long run.
    short_runs = [_data.run_id(f"growth-{kind}-short-{i}") for i in range(n_short)]
    long_run = _data.run_id(f"growth-{kind}-long")
    for r in short_runs:
        _build_phase(ledger, r, short)
    _build_phase(ledger, long_run, long)
    # Status: the attempts spread over the five phases, as a retried pipeline leaves them.
    st_short = _data.run_id(f"growth-{kind}-status-short")
    st_long = _data.run_id(f"growth-{kind}-status-long")
    _data.build_run(ledger, TICKET, st_short, short)
    _data.build_run(ledger, TICKET, st_long, long)
    # A gated phase (video-pipeline's proposal) with a short and a long history.
    gated = {n: _data.run_id(f"growth-{kind}-gated-{n}") for n in (short, long)}
    for n, run_ in gated.items():
        ledger.write(GATED, run_, "research", RESEARCH, pipeline="video-pipeline")
        for _ in range(n):
            ledger.write(GATED, run_, "proposal", PROPOSAL)
    return {"short_runs": short_runs, "long_run": long_run, "st_short": st_short, "st_long": st_long, "gated": gated}


def _one(
    kind: str,
    ledger: Ledger,
    target: Any,
    runs: dict[str, Any],
    *,
    rounds: int,
    ops: int,
    warmup_ops: int,
    short: int,
    long: int,
    progress: Any,
) -> Section:
    short_runs, long_run, gated = runs["short_runs"], runs["long_run"], runs["gated"]
    st_short, st_long = runs["st_short"], runs["st_long"]
    n_short = len(short_runs)
    fresh_long, fresh_short = FreshLedger(target), FreshLedger(target)
    cycle = itertools.cycle(short_runs)
    contestants = [
        Contestant(
            "write_long",
            f"Ledger.write, phase with {long:,}+ earlier attempts",
            SUBJECT,
            lambda _: _data.write_phase(ledger, TICKET, long_run, "implement"),
        ),
        Contestant(
            "write_short",
            f"Ledger.write, phase with ~{short} earlier attempts",
            BASELINE,
            lambda _: _data.write_phase(ledger, TICKET, next(cycle), "implement"),
        ),
        Contestant(
            "status_long",
            f"Run.status, run of {long:,} attempts (fresh ledger)",
            SUBJECT,
            lambda fresh: fresh.run(TICKET, st_long).status(),
            fresh_long,
        ),
        Contestant(
            "status_short",
            f"Run.status, run of {short} attempts (fresh ledger)",
            BASELINE,
            lambda fresh: fresh.run(TICKET, st_short).status(),
            fresh_short,
        ),
    ]
    for n, role, tag in ((long, SUBJECT, "long"), (short, BASELINE, "short")):
        run_ = gated[n]
        contestants += [
            Contestant(
                f"approve_{tag}",
                f"Ledger.approve, gated phase with {n:,} attempts",
                role,
                lambda _, r=run_: ledger.approve(GATED, r, "proposal", by="bench"),
            ),
            Contestant(
                f"start_{tag}",
                f"Ledger.progress start, phase with {n:,} attempts (closed untimed)",
                role,
                lambda _, r=run_: ledger.progress(GATED, r, "proposal", "start"),
                # the attempt the previous sample started gets its checkpoint (untimed)
                prepare=lambda r=run_: ledger.write(GATED, r, "proposal", PROPOSAL),
            ),
            Contestant(
                f"skip_{tag}",
                f"Ledger.can_skip_to, after a phase with {n:,} attempts",
                role,
                lambda _, r=run_: ledger.can_skip_to(GATED, r, "script"),
            ),
        ]
    section = Section(
        f"growth-{kind}",
        f"[6] growth with history ({kind} store): write and status on {long:,} vs {short} attempts",
        [
            f"store {ledger.store!r}; durable writes (fsync / synchronous=FULL); built with durability off",
            f"{rounds} rounds x {ops} calls, interleaved call by call; short writes cycle over {n_short} runs "
            f"of ~{short} attempts; each status sample on a ledger opened just before (untimed)",
        ],
    )
    try:
        section.stats = run_rounds(contestants, rounds=rounds, ops=ops, warmup_ops=warmup_ops, progress=progress)
    finally:
        fresh_long.close()
        fresh_short.close()
    section.ratio("write_long", "write_short", goal=GOAL_WRITE, note="no growth with history")
    section.ratio("status_long", "status_short", goal=GOAL_STATUS, note="grows with phases, not attempts")
    for op in ("approve", "start", "skip"):
        section.ratio(f"{op}_long", f"{op}_short", note="no goal in the issue; for the record")
    return section
