"""The closing table: every row of issue 22's table, its figures side by side, its goal and verdict.

Each row names the section, subject and baseline that measure it; the figures come from the
sections printed above it (nothing is measured here). A row whose benchmark did not run, or could
not (no PostgreSQL, no LangGraph), is printed all the same, with the reason, so the table always
has every row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from bench._timing import Ratio, Section, fmt_rate, fmt_ratio, fmt_time


@dataclass(frozen=True)
class Row:
    """One line of the issue's table: ``subject`` over ``baseline`` in section ``section``
    (``baseline`` None: an absolute limit on ``subject``)."""

    label: str
    section: str
    subject: tuple[str, ...]
    baseline: str | None
    goal: str


ROWS: tuple[Row, ...] = (
    Row("SQLite write / SqliteSaver.put (WAL, FULL)", "api-sqlite", ("write",), "lg_put", "<= 1.00x"),
    Row("SQLite write / raw INSERT+COMMIT, same JSON", "api-sqlite", ("write",), "raw_insert", "<= 1.20x"),
    Row("SQLite read, fresh Run each / get_tuple", "api-sqlite", ("read",), "lg_get", "<= 1.50x"),
    Row("SQLite status, 5-phase run / get_tuple+list", "api-sqlite", ("status",), "lg_status", "<= 1.00x"),
    Row("files write / raw durable write, same YAML", "api-files", ("write",), "raw_write", "<= 1.50x"),
    Row("files read, fresh Run each (absolute)", "api-files", ("read",), None, "<= 60 µs"),
    Row("files status, 5-phase run (absolute)", "api-files", ("status",), None, "<= 150 µs"),
    Row("PostgreSQL write / PostgresSaver.put", "api-postgres", ("write",), "lg_put", "<= 1.00x"),
    Row("PostgreSQL read / get_tuple", "api-postgres", ("read",), "lg_get", "<= 1.00x"),
    Row("PostgreSQL status / get_tuple+list", "api-postgres", ("status",), "lg_status", "<= 1.00x"),
    Row("8 writer processes (SQLite), ops/s / LangGraph's", "concurrent", ("writers8",), "lg_writers8", ">= 1.50x"),
    Row("PhaselogSaver put / SqliteSaver", "langgraph", ("put_phaselog",), "put_sqlitesaver", "<= 1.00x"),
    Row(
        "PhaselogSaver get_tuple latest / SqliteSaver",
        "langgraph",
        ("get_latest_phaselog",),
        "get_latest_sqlitesaver",
        "<= 1.50x",
    ),
    Row(
        "PhaselogSaver list, 100-cp thread / SqliteSaver",
        "langgraph",
        ("list_phaselog",),
        "list_sqlitesaver",
        "<= 1.50x",
    ),
    Row("runner per no-op phase / DBOS step (SQLite)", "runner", ("runner_sqlite",), "dbos_step", "<= 0.25x"),
    Row("files write, 1,000 attempts / 10", "growth-files", ("write_long",), "write_short", "<= 1.20x"),
    Row("SQLite write, 1,000 attempts / 10", "growth-sqlite", ("write_long",), "write_short", "<= 1.20x"),
    Row("files status, 1,000 attempts / 10", "growth-files", ("status_long",), "status_short", "<= 1.50x"),
    Row("SQLite status, 1,000 attempts / 10", "growth-sqlite", ("status_long",), "status_short", "<= 1.50x"),
    Row(
        "CLI cold start `phaselog read` / import yaml", "start", ("cli_read", "module_read"), "import_yaml", "<= 1.80x"
    ),
)

_W = 50


def _find_ratio(s: Section, row: Row) -> Ratio | None:
    for r in s.ratios:
        if r.subject in row.subject and r.baseline == row.baseline and r.goal is not None:
            return r
    for r in s.ratios:  # skipped sections carry goal-less placeholders
        if r.subject in row.subject and r.baseline == row.baseline:
            return r
    return None


def _figure(s: Section, key: str, rate: bool) -> str:
    try:
        st = s.stat(key)
    except KeyError:
        return "n/a"
    if math.isnan(st.median_ns):
        return "n/a"
    return fmt_rate(st.median_ns) if rate else fmt_time(st.median_ns)


def _line(row: Row, sections: dict[str, Section]) -> tuple[str, str, str, str, str]:
    s = sections.get(row.section)
    if s is None:
        return ("-", "-", "not run", row.goal, f"not run (--only {row.section.split('-')[0]})")
    if row.baseline is None:
        lim = next((lim for lim in s.limits if lim.key in row.subject), None)
        if lim is None:
            return ("n/a", "-", "n/a", row.goal, "skipped")
        return (lim.fmt(lim.value_ns), "(absolute)", "-", row.goal, lim.verdict)
    r = _find_ratio(s, row)
    if r is None:
        return ("n/a", "n/a", "n/a", row.goal, "not measured")
    if r.skipped:
        return ("n/a", "n/a", "n/a", row.goal, f"skipped: {r.skipped}"[:60])
    sub = _figure(s, r.subject, r.at_least)
    base = _figure(s, r.baseline, r.at_least)
    return (sub, base, fmt_ratio(r.value), row.goal, r.verdict or "-")


def table_json(sections: list[Section]) -> list[dict[str, str]]:
    """The table's rows as data (``--json``)."""
    by_key = {s.key: s for s in sections}
    keys = ("phaselog", "baseline", "ratio", "goal", "verdict")
    return [{"row": row.label, **dict(zip(keys, _line(row, by_key), strict=True))} for row in ROWS]


def print_table(sections: list[Section], *, quick: bool = False, out: Callable[[str], None] = print) -> None:
    """Print every row of the issue's table: row, phaselog, baseline, ratio, goal, met?"""
    by_key = {s.key: s for s in sections}
    out("")
    out("== issue 22: every row, side by side. phaselog and baseline: medians of the round medians; ratio:")
    out("   the median of the per-round ratios (each round's subject over the baseline timed beside it), so")
    out("   it need not equal the quotient of the two columns; 8 writers: a throughput ratio, ops/s over ops/s")
    if quick:
        out(
            "   --quick: small counts (growth compares 200 attempts with 10, list reads 30-checkpoint threads): "
            "a smoke test, not figures"
        )
    out(f"   {'row':<{_W}} {'phaselog':>10} {'baseline':>10} {'ratio':>7}  {'goal':<9} met?")
    met = missed = 0
    for row in ROWS:
        sub, base, ratio, goal, verdict = _line(row, by_key)
        met += verdict == "met"
        missed += verdict == "MISSED"
        out(f"   {row.label:<{_W}} {sub:>10} {base:>10} {ratio:>7}  {goal:<9} {verdict}")
    out(f"   {met} met, {missed} missed, {len(ROWS) - met - missed} not measured, of {len(ROWS)} rows")
