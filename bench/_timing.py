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
    #: With ``run_rounds``: the samples of each round, in order (``samples_ns`` holds them all).
    rounds_ns: list[list[float]] = field(default_factory=list)


@dataclass(frozen=True)
class Stat:
    """Summary of one contestant's samples."""

    key: str
    label: str
    role: str
    n: int
    median_ns: float
    p90_ns: float
    #: With ``run_rounds``: the median of each timed round (``median_ns`` is their median).
    round_medians: tuple[float, ...] = ()


@dataclass(frozen=True)
class Ratio:
    """Median of a subject over the median of a baseline, with an optional goal (at most).

    With ``at_least`` it is a throughput ratio instead: ops/s of the subject over ops/s of the
    baseline (= median(baseline) / median(subject)), and the goal is a minimum.
    """

    subject: str
    baseline: str
    value: float
    goal: float | None = None
    note: str = ""
    at_least: bool = False
    #: Why the ratio could not be measured (a contestant was skipped), else "".
    skipped: str = ""

    @property
    def verdict(self) -> str:
        """'met', 'MISSED', 'skipped' or '' when there is no goal."""
        if self.skipped:
            return "skipped"
        if self.goal is None:
            return ""
        ok = self.value >= self.goal if self.at_least else self.value <= self.goal
        return "met" if ok else "MISSED"


@dataclass(frozen=True)
class Limit:
    """An absolute goal on a contestant's median (the issue sets a few; most goals are ratios)."""

    key: str
    value_ns: float
    goal_ns: float
    note: str = ""
    #: "ns" for times; another unit (e.g. "MiB") prints the values as plain numbers in it.
    unit: str = "ns"

    def fmt(self, value: float) -> str:
        """A value of this limit, formatted in its unit."""
        return fmt_time(value) if self.unit == "ns" else f"{value:,.1f} {self.unit}"

    @property
    def verdict(self) -> str:
        """'met' or 'MISSED' ('skipped' when there are no samples)."""
        if math.isnan(self.value_ns):
            return "skipped"
        return "met" if self.value_ns <= self.goal_ns else "MISSED"


@dataclass
class Section:
    """The printed result of one benchmark."""

    key: str
    title: str
    notes: list[str] = field(default_factory=list)
    stats: list[Stat] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    limits: list[Limit] = field(default_factory=list)
    #: Print an ops/s column (1 / median) beside median and p90.
    show_rate: bool = False
    #: The unit of the stats: "ns" (times), or another (e.g. "MiB") printed as plain numbers.
    unit: str = "ns"

    def fmt(self, value: float) -> str:
        """A stat value of this section, formatted in its unit."""
        return fmt_time(value) if self.unit == "ns" else f"{value:,.1f} {self.unit}"

    def stat(self, key: str) -> Stat:
        """The summary of the contestant ``key``."""
        for s in self.stats:
            if s.key == key:
                return s
        raise KeyError(key)

    def ratio(self, subject: str, baseline: str, *, goal: float | None = None, note: str = "") -> Ratio:
        """Add (and return) the ratio of two contestants' medians."""
        a, b = self.stat(subject), self.stat(baseline)
        skipped = next((s.label for s in (a, b) if s.n == 0), "")
        value = math.nan if skipped else _per_round(a, b, lambda x, y: x / y)
        r = Ratio(subject, baseline, value, goal, note, skipped=skipped)
        self.ratios.append(r)
        return r

    def speedup(self, subject: str, baseline: str, *, goal: float | None = None, note: str = "") -> Ratio:
        """Add (and return) ops/s(subject) / ops/s(baseline); ``goal`` is a minimum."""
        a, b = self.stat(subject), self.stat(baseline)
        skipped = next((s.label for s in (a, b) if s.n == 0), "")
        value = math.nan if skipped else _per_round(a, b, lambda x, y: y / x)
        r = Ratio(subject, baseline, value, goal, note, at_least=True, skipped=skipped)
        self.ratios.append(r)
        return r

    def limit(self, key: str, goal_ns: float, *, note: str = "") -> Limit:
        """Add (and return) an absolute goal on the median of ``key``."""
        lim = Limit(key, self.stat(key).median_ns, goal_ns, note)
        self.limits.append(lim)
        return lim

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form (``--json``)."""
        return {
            "key": self.key,
            "title": self.title,
            "notes": self.notes,
            "stats": [s.__dict__ for s in self.stats],
            "ratios": [{**r.__dict__, "verdict": r.verdict} for r in self.ratios],
            "limits": [{**lim.__dict__, "verdict": lim.verdict} for lim in self.limits],
        }


def _per_round(a: Stat, b: Stat, f: Callable[[float, float], float]) -> float:
    """``f`` of two contestants timed in the same rounds: the median of the per-round values (so
    each round's subject is compared with the baseline measured beside it); else of the medians."""
    if a.round_medians and len(a.round_medians) == len(b.round_medians):
        return statistics.median(f(x, y) for x, y in zip(a.round_medians, b.round_medians, strict=True))
    return f(a.median_ns, b.median_ns)


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


def run_rounds(
    contestants: list[Contestant],
    *,
    rounds: int,
    ops: int,
    warmup_ops: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[Stat]:
    """Time ``rounds`` rounds of ``ops`` calls of every contestant (after one untimed round of
    ``warmup_ops``), interleaved call by call: within a round each contestant is called once per
    step, in an order rotated by one place per step, so load hits subject and baseline alike.

    A contestant's figure is the median of its per-round medians; ``Section.ratio`` then takes
    the median of the per-round ratios (each round's subject over the baseline timed beside it).
    """
    n = len(contestants)
    clock = time.perf_counter_ns
    plan = ([warmup_ops] if warmup_ops else []) + [ops] * rounds
    for r, count in enumerate(plan):
        timed = r >= len(plan) - rounds
        batch: list[list[float]] = [[] for _ in contestants]
        for i in range(count):
            k = (r + i) % n
            for j in list(range(k, n)) + list(range(k)):
                c = contestants[j]
                arg = c.prepare() if c.prepare is not None else None
                fn, inner = c.fn, c.inner
                t0 = clock()
                for _ in range(inner):
                    fn(arg)
                batch[j].append((clock() - t0) / inner)
        if timed:
            for c, samples in zip(contestants, batch, strict=True):
                c.rounds_ns.append(samples)
                c.samples_ns.extend(samples)
            if progress is not None:
                progress(f"round {len(contestants[0].rounds_ns)}/{rounds} ({count} calls each)")
    return [summarise(c) for c in contestants]


def skipped_stat(key: str, label: str, role: str) -> Stat:
    """A row for a contestant that could not run (its label says why): n = 0, times n/a."""
    return Stat(key, label, role, 0, math.nan, math.nan)


def summarise(c: Contestant) -> Stat:
    """Median and p90 of a contestant's samples (with rounds: the median of the round medians)."""
    if not c.samples_ns:
        return skipped_stat(c.key, c.label, c.role)
    per_round = tuple(statistics.median(r) for r in c.rounds_ns if r)
    return Stat(
        c.key,
        c.label,
        c.role,
        len(c.samples_ns),
        statistics.median(per_round) if per_round else statistics.median(c.samples_ns),
        percentile(c.samples_ns, 0.9),
        per_round,
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
    return "n/a" if math.isnan(x) else f"{x:.2f}x"


def fmt_rate(ns: float) -> str:
    """Operations per second for a median of ``ns`` nanoseconds, like ``1,234/s``."""
    if math.isnan(ns) or ns <= 0:
        return "n/a"
    rate = 1e9 / ns
    return f"{rate:,.0f}/s" if rate >= 10 else f"{rate:.1f}/s"


def _ratio_text(r: Ratio) -> str:
    if r.at_least:
        return f"ops/s {r.subject} / ops/s {r.baseline} = {fmt_ratio(r.value)}"
    return f"{r.subject} / {r.baseline} = {fmt_ratio(r.value)}"


def _goal_text(r: Ratio) -> str:
    if r.goal is None:
        return f"   {r.verdict}" if r.skipped else ""
    return f"   goal {'>=' if r.at_least else '<='} {fmt_ratio(r.goal)}: {r.verdict}"


LABEL_W = 58


def print_section(s: Section, out: Callable[[str], None] = print) -> None:
    """Print one benchmark: notes, one line per contestant, one line per ratio."""
    out("")
    out(f"== {s.title}")
    for note in s.notes:
        out(f"   {note}")
    rate_head = f" {'ops/s':>10}" if s.show_rate else ""
    out(f"   {'role':<10} {'operation':<{LABEL_W}} {'median':>10} {'p90':>10} {'n':>5}{rate_head}")
    for st in s.stats:
        rate = f" {fmt_rate(st.median_ns):>10}" if s.show_rate else ""
        out(f"   {st.role:<10} {st.label:<{LABEL_W}} {s.fmt(st.median_ns):>10} {s.fmt(st.p90_ns):>10} {st.n:>5}{rate}")
    labels = {st.key: st.label for st in s.stats}
    for r in s.ratios:
        note = f"   ({r.note})" if r.note else ""
        out(f"   ratio  {_ratio_text(r)}{_goal_text(r)}{note}")
        if r.subject in labels and r.baseline in labels and not r.skipped:
            out(f"          [{labels[r.subject]}  /  {labels[r.baseline]}]")
    for lim in s.limits:
        note = f"   ({lim.note})" if lim.note else ""
        out(
            f"   limit  {lim.key} median = {lim.fmt(lim.value_ns)}   goal <= "
            f"{lim.fmt(lim.goal_ns)}: {lim.verdict}{note}"
        )


def print_summary(sections: list[Section], out: Callable[[str], None] = print) -> None:
    """One table with every ratio of the run."""
    out("")
    out("== summary: ratio = median(subject) / median(baseline), both measured in this run")
    if any(r.at_least for s in sections for r in s.ratios):
        out("   (ops/s a / ops/s b = median(b) / median(a): a throughput ratio, higher is better)")
    w = max([9, *(len(s.key) for s in sections)])
    out(f"   {'benchmark':<{w}} {'subject / baseline':<46} {'ratio':>8}  goal")
    for s in sections:
        for r in s.ratios:
            if r.goal is not None:
                goal = f"{'>=' if r.at_least else '<='} {fmt_ratio(r.goal)}  {r.verdict}"
            else:
                goal = r.verdict or "-"
            pair = f"ops/s {r.subject} / ops/s {r.baseline}" if r.at_least else f"{r.subject} / {r.baseline}"
            out(f"   {s.key:<{w}} {pair:<46} {fmt_ratio(r.value):>8}  {goal}")
        for lim in s.limits:
            pair = f"{lim.key} median (absolute)"
            out(f"   {s.key:<{w}} {pair:<46} {lim.fmt(lim.value_ns):>8}  <= {lim.fmt(lim.goal_ns)}  {lim.verdict}")
