"""Durations on the command line: ``90s``, ``45m``, ``1h30m``, ``30d``, ``2w``, ``500ms``.

A bare number means seconds. Twenty lines of regex instead of a dependency: the grammar is this
small, and the error must name the option and show the accepted forms.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from phaselog.model.errors import UsageError

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: The longest duration accepted: a hundred years is "never" for every option that takes one, and
#: anything longer would overflow date arithmetic (``99999999999d`` is past year 9999).
MAX_DAYS = 36500
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str, *, field: str = "duration") -> timedelta:
    """Parse ``text`` into a timedelta; UsageError naming ``field`` if it is not a duration (rule
    ``duration``) or is longer than MAX_DAYS (rule ``duration_max``)."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", s):
        return _bounded(float(s), text, field)
    pos, total, parts = 0, 0.0, 0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos, parts = m.end(), parts + 1
    if not s or pos != len(s) or parts == 0:
        raise UsageError(
            f"{field}: {_shown(text)} is not a duration; use e.g. 90s, 45m, 1h30m, 30d, 2w",
            field=field,
            rule="duration",
        )
    return _bounded(total, text, field)


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:40]) + "…"


def _bounded(seconds: float, text: str, field: str) -> timedelta:
    return timedelta(seconds=check_seconds(seconds, field=field, text=text))


def check_seconds(seconds: float, *, field: str, text: str | None = None) -> float:
    """``seconds`` as a float if it is at most MAX_DAYS: the one bound of a duration, whether it was
    written ``30d`` or as a number of seconds; UsageError naming ``field`` (rule ``duration_max``)."""
    if not seconds <= MAX_DAYS * 86400:  # also catches inf and nan (compared before float(): no OverflowError)
        shown = _shown(text) if text is not None else _shown(str(seconds))
        raise UsageError(
            f"{field}: {shown} is too long; at most {MAX_DAYS}d (100 years)",
            field=field,
            rule="duration_max",
        )
    return float(seconds)


def aware_utc(given: Any, field: str) -> datetime:
    """``given`` as a UTC datetime; a usage error naming ``field`` if it is naive, not a time, or out of range."""
    if not isinstance(given, datetime) or given.utcoffset() is None:
        raise UsageError(f"{field}: must be a timezone-aware time", field=field, rule="timezone_aware")
    try:
        return given.astimezone(UTC)
    except OverflowError:
        raise UsageError(f"{field}: {given} is out of range in UTC", field=field) from None
