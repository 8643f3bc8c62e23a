"""Geometry of the server-drawn SVG charts (no chart library, nothing to download).

The data comes from the library (``phaselog.views.timeline`` spans, ``phaselog.views.graph``'s graph, the
guard's history); this module
only maps times and durations to coordinates. Templates draw the shapes and escape every label.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from phaselog.views.graph import GraphView, Node
from phaselog.views.timeline import Span, bounds

WIDTH = 1000
LABEL_W = 170
RIGHT_PAD = 24
ROW_H = 30
TOP = 30
BAR_H = 18
MIN_BAR_W = 4.0


def _fmt_duration(sec: float | None) -> str:
    if sec is None:
        return "duration unknown (no progress events)"
    if sec < 1:
        return f"{sec * 1000:.0f} ms"
    if sec < 120:
        return f"{sec:.1f} s"
    if sec < 7200:
        return f"{sec / 60:.1f} min"
    return f"{sec / 3600:.1f} h"


def duration(sec: float | None) -> str:
    """A duration for people (``850 ms``, ``12.4 s``, ``3.5 min``, ``2.1 h``)."""
    return _fmt_duration(sec) if sec is not None else "—"


#: Tick steps in seconds, from a millisecond to a week: a step is the smallest that gives at most
#: ``count`` ticks, and every tick is a whole multiple of it.
_STEPS = (
    *(m * 10.0**e for e in (-3, -2, -1) for m in (1, 2, 5)),
    *(1.0, 2.0, 5.0, 10.0, 15.0, 30.0),
    *(60.0 * m for m in (1, 2, 5, 10, 15, 30)),
    *(3600.0 * h for h in (1, 2, 3, 6, 12)),
    *(86400.0 * d for d in (1, 2, 7)),
)


def _tick_label(t: datetime, step: float, same_day: bool) -> str:
    """``t`` at the resolution of ``step``: milliseconds below a second, so ticks never repeat."""
    if step >= 86400:
        return t.strftime("%m-%d")
    day = "" if same_day else t.strftime("%m-%d ")
    if step >= 60:
        return day + t.strftime("%H:%M")
    if step >= 1:
        return day + t.strftime("%H:%M:%S")
    digits = 1 if step >= 0.1 else 2 if step >= 0.01 else 3
    return day + t.strftime("%H:%M:%S") + f"{t.microsecond / 1e6:.{digits}f}"[1:]


def _ticks(t0: datetime, t1: datetime, x_of: Callable[[datetime], float], count: int = 6) -> list[dict[str, Any]]:
    """Ticks at whole multiples of a step between ``t0`` and ``t1``, each label distinct (D88)."""
    span = max((t1 - t0).total_seconds(), 0.001)
    step = next((s for s in _STEPS if span / s <= count), _STEPS[-1])
    same_day = t0.date() == t1.date()
    epoch = datetime(1970, 1, 1, tzinfo=t0.tzinfo)
    micro = round(step * 1_000_000)
    first = -(-int((t0 - epoch) / timedelta(microseconds=1)) // micro) * micro  # the first multiple >= t0
    out: list[dict[str, Any]] = []
    at = first
    while len(out) <= count:
        t = epoch + timedelta(microseconds=at)
        if t > t1:
            break
        out.append({"x": round(x_of(t), 1), "label": _tick_label(t, step, same_day)})
        at += micro
    return out


def timeline(
    items: Sequence[Span],
    phases: Sequence[str],
    link: Callable[[Span], str | None],
) -> dict[str, Any] | None:
    """Rows (one per phase), bars (one per attempt) and time ticks; None when nothing has a time."""
    edges = bounds(items)
    if edges is None:
        return None
    t0, t1 = edges
    if t1 <= t0:
        t1 = t0 + timedelta(seconds=1)
    total = (t1 - t0).total_seconds()
    plot_w = WIDTH - LABEL_W - RIGHT_PAD

    def x_of(t: datetime) -> float:
        return LABEL_W + (t - t0).total_seconds() / total * plot_w

    row_of = {name: i for i, name in enumerate(phases)}
    extra = [s.phase for s in items if s.phase not in row_of]
    for name in extra:
        row_of.setdefault(name, len(row_of))
    rows = [{"label": name, "y": TOP + i * ROW_H, "mid": TOP + i * ROW_H + ROW_H / 2} for name, i in row_of.items()]
    bars = []
    points = []
    for s in items:
        y = TOP + row_of[s.phase] * ROW_H + (ROW_H - BAR_H) / 2
        title = (
            f"{s.phase} attempt {s.attempt}: {s.state}"
            + (f" ({s.approval})" if s.approval else "")
            + f" — {_fmt_duration(s.duration_sec)}"
            + (f" — {s.error}" if s.error else "")
        )
        cls = f"st-{s.state}" + (f" ap-{s.approval}" if s.approval else "")
        if s.started_at is not None and s.ended_at is not None:
            x0, x1 = x_of(s.started_at), x_of(s.ended_at)
            bars.append(
                {
                    "x": round(x0, 1),
                    "y": round(y, 1),
                    "w": round(max(x1 - x0, MIN_BAR_W), 1),
                    "h": BAR_H,
                    "cls": cls,
                    "title": title,
                    "href": link(s),
                    "label": f"a{s.attempt}" if x1 - x0 > 26 else "",
                    "tx": round(x0 + 4, 1),
                    "ty": round(y + BAR_H - 5, 1),
                }
            )
        elif s.ended_at is not None:
            points.append(
                {
                    "cx": round(x_of(s.ended_at), 1),
                    "cy": round(y + BAR_H / 2, 1),
                    "cls": cls,
                    "title": title,
                    "href": link(s),
                }
            )
    height = TOP + len(rows) * ROW_H + 8
    return {
        "width": WIDTH,
        "height": height,
        "label_w": LABEL_W,
        "plot_right": WIDTH - RIGHT_PAD,
        "rows": rows,
        "bars": bars,
        "points": points,
        "ticks": _ticks(t0, t1, x_of),
        "axis_y": TOP - 8,
        "from": t0,
        "to": t1,
    }


def passes(history: Sequence[Mapping[str, Any]], limit: int = 60, width: int = WIDTH) -> dict[str, Any] | None:
    """Bars of the guard's recent passes: height = duration, class = outcome; None without passes."""
    runs = [h for h in history if h.get("kind") == "pass"][-limit:]
    if not runs:
        return None
    height, top, bottom, left = 160, 14, 26, 56
    plot_h = height - top - bottom
    longest: float = max(float(h.get("duration_sec") or 0.0) for h in runs) or 1.0
    slot = (width - left - RIGHT_PAD) / max(len(runs), 1)
    bar_w = min(max(slot * 0.7, 2.0), 36.0)
    bars = []
    for i, h in enumerate(runs):
        dur = float(h.get("duration_sec") or 0.0)
        bar_h = max(plot_h * dur / longest, 2.0)
        outcome = str(h.get("outcome") or "unknown")
        bars.append(
            {
                "x": round(left + i * slot + (slot - bar_w) / 2, 1),
                "y": round(top + plot_h - bar_h, 1),
                "w": round(bar_w, 1),
                "h": round(bar_h, 1),
                "cls": f"out-{outcome}",
                "title": f"pass {h.get('pass')}: {outcome}, {_fmt_duration(dur)}, exit {h.get('exit_code')}, "
                f"{h.get('started_at')}",
            }
        )
    return {
        "width": width,
        "height": height,
        "left": left,
        "top": top,
        "base": top + plot_h,
        "right": width - RIGHT_PAD,
        "bars": bars,
        "max_label": _fmt_duration(longest),
        "first": runs[0].get("pass"),
        "last": runs[-1].get("pass"),
    }


NODE_W, NODE_H = 150, 42
COL_GAP, ROW_GAP, PAD = 56, 18, 12
LABEL_CHARS = 19
LANE = 28  #: the strip above the boxes where an edge that skips a wave runs


def _short(name: str, limit: int = LABEL_CHARS) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def dag(view: GraphView, link: Callable[[Node], str | None]) -> dict[str, Any]:
    """Boxes (one per phase, a column per wave, coloured by state) and curved edges from each need to
    the phase that needs it (docs/ui.md "The graph")."""
    tallest = max((len(level) for level in view.levels), default=1)
    level_of = {n.phase: n.level for n in view.nodes}
    # An edge that skips a wave would cross the boxes between: it runs in a lane above them all.
    skips = any(level_of[e.phase] - level_of[e.need] > 1 for e in view.edges)
    lane = LANE if skips else 0
    height = lane + PAD * 2 + tallest * NODE_H + (tallest - 1) * ROW_GAP
    width = PAD * 2 + len(view.levels) * NODE_W + max(len(view.levels) - 1, 0) * COL_GAP
    at: dict[str, tuple[float, float]] = {}
    for col, level in enumerate(view.levels):
        column_h = len(level) * NODE_H + (len(level) - 1) * ROW_GAP
        top = lane + (height - lane - column_h) / 2  # each wave centred on the others, below the lane
        for row, name in enumerate(level):
            at[name] = (PAD + col * (NODE_W + COL_GAP), top + row * (NODE_H + ROW_GAP))
    nodes = []
    for n in view.nodes:
        x, y = at[n.phase]
        shown = n.shown_state
        state = shown.replace("_", " ") if shown else ""
        sub = state + (f" · a{n.attempt}" if n.attempt else "")
        nodes.append(
            {
                "phase": n.phase,
                "state": shown or "",
                "x": round(x, 1),
                "y": round(y, 1),
                "w": NODE_W,
                "h": NODE_H,
                "tx": round(x + 10, 1),
                "ty": round(y + 17, 1),
                "sy": round(y + 33, 1),
                "label": _short(n.phase),
                "sub": sub,
                "cls": f"st-{shown}" if shown else "st-none",
                "gated": n.requires_approval,
                "title": f"{n.phase}: {sub or 'no run'}"
                + (f" — needs {', '.join(n.needs)}" if n.needs else " — needs nothing")
                + (" — gated" if n.requires_approval else ""),
                "href": link(n),
            }
        )
    edges = []
    for e in view.edges:
        (x1, y1), (x2, y2) = at[e.need], at[e.phase]
        x1, y1, y2 = x1 + NODE_W, y1 + NODE_H / 2, y2 + NODE_H / 2
        if level_of[e.phase] - level_of[e.need] > 1:
            y, g = LANE / 2, COL_GAP / 2  # up into the lane in the gap after the need, down before the phase
            d = (
                f"M {x1:.1f} {y1:.1f} C {x1 + g:.1f} {y1:.1f}, {x1 + g / 2:.1f} {y:.1f}, {x1 + g:.1f} {y:.1f} "
                f"L {x2 - g:.1f} {y:.1f} C {x2 - g / 2:.1f} {y:.1f}, {x2 - g:.1f} {y2:.1f}, {x2 - 4:.1f} {y2:.1f}"
            )
        else:
            bend = (x2 - x1) / 2
            d = f"M {x1:.1f} {y1:.1f} C {x1 + bend:.1f} {y1:.1f}, {x2 - bend:.1f} {y2:.1f}, {x2 - 4:.1f} {y2:.1f}"
        edges.append({"from": e.need, "to": e.phase, "d": d})
    return {"width": width, "height": height, "nodes": nodes, "edges": edges, "shape": view.shape()}
