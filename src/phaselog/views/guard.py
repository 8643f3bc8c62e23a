"""The guard's read models and JSON views: what ``phaselog guard …`` prints and the dashboard shows.

A guard lives in a files-store root (a path) or in a store that keeps guards
(``Capability.GUARD_STORAGE``): its *home*. The views here read a guard through its public API
(:class:`phaselog.guard.Guard`: ``status``, ``history``, ``reset``, ``run``) and give every
interface the same shapes: the CLI renders them as JSON or a table, the dashboard as pages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

from phaselog.guard import DEFAULT_STALE_AFTER, Guard, RunResult, guard_names
from phaselog.model.errors import NotFound, PhaselogError

if TYPE_CHECKING:
    from phaselog.stores.base import Store

#: Where a guard lives: a files-store root, or an open store that keeps guards.
GuardHome: TypeAlias = "str | os.PathLike[str] | Store"


@dataclass(frozen=True)
class GuardView:
    """One guard as a page shows it: its status and its history (oldest first), or why they could not be read."""

    name: str
    status: dict[str, Any] | None
    history: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def guard_view(home: GuardHome, name: str) -> GuardView:
    """One guard's status and history; NotFound when the home has no guard of that name."""
    if name not in guard_names(home):
        raise NotFound(f"no guard named {name} in this store", name=name)
    g = Guard(home, name)
    return GuardView(name, g.status(), g.history())


def guard_board(home: GuardHome) -> list[GuardView]:
    """Every guard of a home, each with its status and history; a guard that cannot be read says why
    (one damaged guard does not hide the others)."""
    out = []
    for name in guard_names(home):
        g = Guard(home, name)
        try:
            out.append(GuardView(name, g.status(), g.history()))
        except PhaselogError as exc:
            out.append(GuardView(name, None, [], exc.message))
    return out


def guard_status(
    home: GuardHome,
    name: str,
    *,
    max_failures: int | None = None,
    cooldown: timedelta | None = None,
    stale_after: timedelta | None = None,
) -> dict[str, Any]:
    """``guard status``: loop state, breaker (judged with these settings, else the last pass's) and lock holder."""
    return Guard(home, name).status(
        max_failures=max_failures,
        cooldown=cooldown,
        stale_after=stale_after if stale_after is not None else DEFAULT_STALE_AFTER,
    )


def guard_history(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``guard history``: every pass, takeover and reset, oldest first, and how many."""
    return {"count": len(entries), "history": [dict(e) for e in entries]}


def guard_pass(name: str, result: RunResult) -> dict[str, Any]:
    """What one ``guard run`` did (its JSON summary)."""
    return {"guard": name, **result.to_json()}


def guard_pass_not_recorded(name: str, error: PhaselogError) -> dict[str, Any]:
    """A pass that ran but could not be recorded (the error object, naming the guard)."""
    return {"guard": name, **error.to_dict()}
