"""Interleaved timing, statistics and the printed tables.

A benchmark is a list of contestants (the phaselog operation, its baseline, references) timed in
rounds. Each round calls every contestant once, in an order rotated by one place per round, so
that a noisy neighbour or a slow disk moment hits subject and baseline alike and no contestant
always goes first. Only medians and p90s are reported; ratios are ratios of medians.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SUBJECT, BASELINE, REFERENCE, INFO = "subject", "baseline", "reference", "info"


@dataclass
class Contestant:
    """One thing to time. ``fn(prepare())`` is one sample; ``prepare`` is never timed."""

    key: str
    label: str
    role: str
    fn: Callable[[Any], object]
    prepare: Callable[[], Any] | None = None
    #: Calls per sample (the sample is their mean): for operations far below a millisecond.
    inner: int = 1
    samples_ns: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Stat:
    """Summary of one contestant's samples."""

    key: str
    label: str
    role: str
    n: int
    median_ns: float
    p90_ns: float


@dataclass(frozen=True)
class Ratio:
    """Median of a subject over the median of a baseline, with an optional goal (at most)."""

    subject: str
    baseline: str
    value: float
    goal: float | None = None
    note: str = ""

    @property
    def verdict(self) -> str:
        """'met', 'MISSED' or '' when there is no goal."""
        if self.goal is None:
            return ""
        return "met" if self.value <= self.goal else "MISSED"


@dataclass
class Section:
    """The printed result of one benchmark."""

    key: str
    title: str
    notes: list[str] = field(default_factory=list)
    stats: list[Stat] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)

    def stat(self, key: str) -> Stat:
        """The summary of the contestant ``key``."""
        for s in self.stats:
            if s.key == key:
                return s
        raise KeyError(key)

    def ratio(
        self, subject: str, baseline: str, *, goal: float | None = None, note: str = ""
    ) -> Ratio:
        """Add (and return) the ratio of two contestants' medians."""
        r = Ratio(
            subject,
            baseline,
            self.stat(subject).median_ns / self.stat(baseline).median_ns,
            goal,
            note,
        )
        self.ratios.append(r)
        return r

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form (``--json``)."""
        return {
            "key": self.key,
            "title": self.title,
            "notes": self.notes,
            "stats": [s.__dict__ for s in self.stats],
            "ratios": [{**r.__dict__, "verdict": r.verdict} for r in self.ratios],
        }


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation between closest ranks."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def run_interleaved(
    contestants: list[Contestant],
    rounds: int,
    *,
    warmup: int = 2,
    progress: Callable[[str], None] | None = None,
) -> list[Stat]:
    """Time every contestant ``rounds`` times (after ``warmup`` untimed rounds), interleaved."""
    n = len(contestants)
    clock = time.perf_counter_ns
    for r in range(warmup + rounds):
        k = r % n
        for c in contestants[k:] + contestants[:k]:
            arg = c.prepare() if c.prepare is not None else None
            fn, inner = c.fn, c.inner
            t0 = clock()
            for _ in range(inner):
                fn(arg)
            dt = clock() - t0
            if r >= warmup:
                c.samples_ns.append(dt / inner)
        done = r + 1 - warmup
        if progress is not None and rounds >= 20 and done > 0 and done % max(1, rounds // 4) == 0:
            progress(f"round {r + 1 - warmup}/{rounds}")
    return [summarise(c) for c in contestants]


def summarise(c: Contestant) -> Stat:
    """Median and p90 of a contestant's samples."""
    return Stat(
        c.key,
        c.label,
        c.role,
        len(c.samples_ns),
        statistics.median(c.samples_ns),
        percentile(c.samples_ns, 0.9),
    )


# -- formatting -----------------------------------------------------------------------------------
def fmt_time(ns: float) -> str:
    """A duration with a unit chosen for readability (3 significant figures or so)."""
    if math.isnan(ns):
        return "n/a"
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} µs" if ns < 1e5 else f"{ns / 1e3:.0f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.3f} ms" if ns < 1e7 else f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.3f} s"


def fmt_ratio(x: float) -> str:
    """A ratio like ``2.37x``."""
    return f"{x:.2f}x"


LABEL_W = 58


def print_section(s: Section, out: Callable[[str], None] = print) -> None:
    """Print one benchmark: notes, one line per contestant, one line per ratio."""
    out("")
    out(f"== {s.title}")
    for note in s.notes:
        out(f"   {note}")
    out(f"   {'role':<10} {'operation':<{LABEL_W}} {'median':>10} {'p90':>10} {'n':>5}")
    for st in s.stats:
        out(
            f"   {st.role:<10} {st.label:<{LABEL_W}} {fmt_time(st.median_ns):>10} "
            f"{fmt_time(st.p90_ns):>10} {st.n:>5}"
        )
    labels = {st.key: st.label for st in s.stats}
    for r in s.ratios:
        goal = f"   goal <= {fmt_ratio(r.goal)}: {r.verdict}" if r.goal is not None else ""
        note = f"   ({r.note})" if r.note else ""
        out(f"   ratio  {r.subject} / {r.baseline} = {fmt_ratio(r.value)}{goal}{note}")
        if r.subject in labels and r.baseline in labels:
            out(f"          [{labels[r.subject]}  /  {labels[r.baseline]}]")


def print_summary(sections: list[Section], out: Callable[[str], None] = print) -> None:
    """One table with every ratio of the run."""
    out("")
    out("== summary: ratio = median(subject) / median(baseline), both measured in this run")
    out(f"   {'benchmark':<9} {'subject / baseline':<46} {'ratio':>8}  goal")
    for s in sections:
        for r in s.ratios:
            goal = f"<= {fmt_ratio(r.goal)}  {r.verdict}" if r.goal is not None else "-"
            pair = f"{r.subject} / {r.baseline}"
            out(f"   {s.key:<9} {pair:<46} {fmt_ratio(r.value):>8}  {goal}")
