"""The state of one attempt: the one decision every view of an attempt uses (D86).

``status``, ``explain``, the runner, the timeline, the dashboard's attempts table and
``attempts.json``, ``progress show`` and ``doctor`` all ask :func:`attempt_state`; none decides an
attempt's state of its own. An attempt is

* ``damaged``            its record exists but cannot be read;
* ``failed``             its checkpoint says so;
* ``awaiting_approval``  a gated phase's completed checkpoint that nobody judged yet, and no newer
  attempt of the phase exists;
* ``completed``          its checkpoint completed (approved, rejected or superseded: ``approval``
  says which verdict it has);
* ``abandoned``          progress events and no checkpoint, and it can never get one here: its
  process is provably gone (or its pid belongs to another process now), a newer attempt of the
  phase exists (attempts only rise, so its checkpoint can never be written), or its last event
  is older than the stale limit;
* ``in_progress``        progress events and no checkpoint, and none of the above.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from phaselog.model.durations import parse_duration

# The alias re-exports it (mypy strict): progress, the runner and tests import it from here.
from phaselog.model.processes import process_start_time as process_start_time  # noqa: PLC0414

if TYPE_CHECKING:
    from phaselog.model.entries import ProgressEvent

COMPLETED, FAILED, AWAITING_APPROVAL = "completed", "failed", "awaiting_approval"
IN_PROGRESS, ABANDONED, DAMAGED = "in_progress", "abandoned", "damaged"
#: Every state an attempt can be in.
ATTEMPT_STATES = (COMPLETED, AWAITING_APPROVAL, FAILED, IN_PROGRESS, ABANDONED, DAMAGED)
#: An in-flight attempt whose last event is older than this is reported ``abandoned``.
DEFAULT_STALE_AFTER = timedelta(hours=1)
TERMINAL_EVENTS = ("complete", "fail", "skip")


@dataclass(frozen=True)
class AttemptState:
    """What an attempt is (one of :data:`ATTEMPT_STATES`) and why, when that is not obvious."""

    state: str
    reason: str | None = None

    @property
    def abandoned(self) -> bool:
        """True for an attempt that can never be finished here."""
        return self.state == ABANDONED


def process_gone(
    host: str | None,
    pid: int | None,
    process_start: float | None,
    *,
    here: str,
    start_time_of: Callable[[int], float | None] = process_start_time,
) -> str | None:
    """Why the process ``pid`` on ``host`` (started at ``process_start``) is provably gone, or None.

    Provable only on ``here``, this host: no process has that pid, or the pid now belongs to a
    process that started at another time (reused). The one rule for an attempt's process
    (:func:`judge_abandoned`) and a queue worker (``queue list``, the workers' recovery) alike.
    """
    if host != here or pid is None:
        return None
    started = start_time_of(pid)
    if started is None:
        return f"process {pid} on {host} is gone"
    if process_start is not None and abs(started - process_start) > 1.0:
        return f"pid {pid} on {host} now belongs to another process"
    return None


def hostname() -> str:
    """This machine's name, as a ``start`` event records it."""

    return socket.gethostname()


def stale_after_default() -> timedelta:
    """``PHASELOG_PROGRESS_STALE_AFTER``, else :data:`DEFAULT_STALE_AFTER`."""
    raw = os.environ.get("PHASELOG_PROGRESS_STALE_AFTER")
    if raw:
        return parse_duration(raw, field="PHASELOG_PROGRESS_STALE_AFTER")
    return DEFAULT_STALE_AFTER


def judge_abandoned(
    flight_start: ProgressEvent | None,
    last: ProgressEvent,
    *,
    now: datetime,
    stale_after: timedelta,
    host: str,
    start_time_of: Callable[[int], float | None],
) -> str | None:
    """Why an in-flight attempt is abandoned, or None: its process is provably gone on this host
    (no such pid, or the pid now belongs to a process that started at another time), or its last
    event is older than ``stale_after``."""
    if flight_start is not None:
        gone = process_gone(
            flight_start.host, flight_start.pid, flight_start.process_start, here=host, start_time_of=start_time_of
        )
        if gone is not None:
            return gone
    if last.event in TERMINAL_EVENTS:
        return None  # ended; waiting for its checkpoint, not abandoned by age
    age = now - last.timestamp
    if age > stale_after:
        return f"no event for {int(age.total_seconds())} s (limit {int(stale_after.total_seconds())} s)"
    return None


@dataclass(frozen=True)
class Liveness:
    """What judging a process needs: the time, the stale limit, this host, and a pid's start time."""

    now: datetime
    stale_after: timedelta
    host: str
    start_time_of: Callable[[int], float | None] = process_start_time

    @classmethod
    def here(cls, now: datetime, stale_after: timedelta | None = None) -> Liveness:
        """Judged on this machine at ``now`` (the stale limit from the environment by default)."""
        return cls(now, stale_after or stale_after_default(), hostname())


def attempt_state(
    *,
    attempt: int,
    outcome: str | None,
    error: str | None = None,
    events: Sequence[ProgressEvent] = (),
    damaged: bool = False,
    newer: int | None = None,
    gated: bool = False,
    verdict: str | None = None,
    live: Liveness | None = None,
) -> AttemptState | None:
    """The state of one attempt (see the module docstring); None for an attempt with nothing recorded.

    ``outcome``: its checkpoint's status, ``completed`` or ``failed`` (None: no checkpoint), with its
    ``error``; ``events``: its progress events, oldest first;
    ``damaged``: its record exists but cannot be read; ``newer``: the number of a newer attempt of
    the same phase, when one exists (with a record or events); ``gated``/``verdict``: the phase
    requires approval, and the checkpoint's verdict (``approved``/``rejected``/None); ``live``:
    how to judge a process (needed for an attempt without a checkpoint).
    """
    if damaged:
        return AttemptState(DAMAGED, "its record cannot be read; see `phaselog verify`, `phaselog doctor`")
    if outcome is not None:
        if outcome != COMPLETED:
            return AttemptState(FAILED, error)
        if gated and verdict is None and newer is None:
            return AttemptState(AWAITING_APPROVAL, f"attempt {attempt} awaits approval")
        return AttemptState(COMPLETED)
    if not events:
        return None
    start = next((e for e in events if e.event == "start"), None)
    last = events[-1]
    live = live or Liveness.here(last.timestamp)
    why = judge_abandoned(
        start, last, now=live.now, stale_after=live.stale_after, host=live.host, start_time_of=live.start_time_of
    )
    if why is None and newer is not None:
        why = f"attempt {newer} of the phase came after it, so its checkpoint can never be written"
    return AttemptState(ABANDONED, why) if why is not None else AttemptState(IN_PROGRESS)
