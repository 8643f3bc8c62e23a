"""The runner's heartbeat: renews the lease, and records a long attempt's ``start`` event.

A phase that finishes quickly costs one durable write, its checkpoint (which records when the
attempt started). A phase still running after ``start_event_after`` seconds (or that reports a
step first) gets a ``start`` progress event naming this host and process, stamped with the time
the attempt began (D98), so ``status`` shows it ``in_progress`` and a crash leaves it
``abandoned`` with its attempt number used up. On SQL stores the thread also renews the lease
every third of its ttl, so a runner on another machine can tell a live runner from a dead one.

One thread per process serves every run of the process (started the first time a run needs it,
and kept): starting and ending a thread per run cost more than a quick phase. It sleeps until the
earliest moment one of its heartbeats has something to do, and an attempt that begins is
announced to it only when it would otherwise sleep past that attempt's start event. Each
heartbeat works on a store connection of its own (:func:`phaselog.ledger.pool.sibling` of the
run's ledger, opened by the thread when it first writes): the main thread's connection is never
used by two threads.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from phaselog.model.errors import AlreadyExists, Conflict, Fenced, PhaselogError
from phaselog.runner.lease import leases_of

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger
    from phaselog.model.pipelines import Pipeline
    from phaselog.runner.lease import Lease

DEFAULT_START_EVENT_AFTER = 1.0
#: The shortest sleep of the thread between attempts (with start_event_after=0 it would spin).
IDLE_TICK_MIN_S = 0.05


class Heartbeat:
    """A run's heartbeat, served by the process's heartbeat thread; see the module docstring."""

    def __init__(
        self,
        lease: Lease,
        open_side_ledger: Callable[[], Ledger],
        *,
        start_event_after: float = DEFAULT_START_EVENT_AFTER,
    ) -> None:
        self.lease = lease
        self._open_side = open_side_ledger
        self._side: Ledger | None = None
        self.start_event_after = start_event_after
        # Held by whoever writes for this heartbeat (the thread, or ctx.step on the main thread)
        # and by the main thread while it changes the attempt or stops: a start event is never
        # written for an attempt that has ended, nor on a connection that is closed.
        self._write_lock = threading.Lock()
        # phase, attempt, since (monotonic), pipeline, started_at (wall clock, for the start event)
        self._current: tuple[str, int, float, Pipeline, datetime | None] | None = None
        self._started: set[tuple[str, int]] = set()
        self._stopped = False
        self._joined = False
        #: Set when a renewal found the lease taken over; the main thread stops at its next write.
        self.fenced: Fenced | None = None

    # -- main thread ----------------------------------------------------------------------------
    def begin(self, phase: str, attempt: int, pipeline: Pipeline, started_at: datetime | None = None) -> None:
        """An attempt starts now (its work started at ``started_at``: its start event says so)."""
        with self._write_lock:
            self._current = (phase, attempt, time.monotonic(), pipeline, started_at)
        if not self._joined and (self.lease.expires or self.start_event_after >= 0):
            self._joined = True
            _beats().join(self)
        elif self._joined:
            _beats().poke(self._due())

    def end(self) -> None:
        """The attempt ends: no start event may be written for it after this returns."""
        with self._write_lock:
            self._current = None

    def ensure_started(
        self, ledger: Ledger, ticket_id: str, run_id: str, phase: str, attempt: int, pipeline: Pipeline
    ) -> None:
        """Write the attempt's start event now (before its first step), unless it exists."""
        with self._write_lock:
            self._write_start(ledger, ticket_id, run_id, phase, attempt, pipeline)

    def stop(self) -> None:
        """Leave the process's heartbeat thread and close this heartbeat's connection.

        Nothing waits for the thread: once this returns it writes nothing more for this run
        (it checks ``_stopped`` under the write lock).
        """
        with self._write_lock:
            self._stopped = True
            self._current = None
            side, self._side = self._side, None
        if self._joined:
            _beats().leave(self)
        if side is not None:
            with contextlib.suppress(Exception):
                side.close()

    # -- the thread's side ----------------------------------------------------------------------
    def _due(self) -> float | None:
        """The monotonic time at which this heartbeat next has something to do (None: nothing)."""
        if self._stopped or self.fenced is not None:
            return None
        due = math.inf
        if self.lease.expires:
            due = self.lease.last_renewed + self.lease.ttl / 3
        current = self._current
        if self.start_event_after >= 0:
            if current is not None and current[:2] not in self._started:
                due = min(due, current[2] + self.start_event_after)
            elif current is None:
                # Between attempts: look again within start_event_after, so the thread is awake
                # by the time the next attempt's start event is due and begin() need not wake it.
                due = min(due, time.monotonic() + max(self.start_event_after, IDLE_TICK_MIN_S))
        return None if due == math.inf else due

    def _beat(self) -> None:
        """Do what is due (called by the heartbeat thread)."""
        with self._write_lock:
            if self._stopped or self.fenced is not None:
                return
            try:
                current = self._current
                if current is not None and self.start_event_after >= 0:
                    phase, attempt, since, pipeline, _started = current
                    if time.monotonic() - since >= self.start_event_after:
                        side = self._side_ledger()
                        self._write_start(side, self.lease.ticket_id, self.lease.run_id, phase, attempt, pipeline)
                if self.lease.expires and self.lease.due():
                    self.lease.renew(leases_of(self._side_ledger().store))
            except Fenced as exc:
                self.fenced = exc
            except PhaselogError as exc:  # a store hiccup: said once, tried again next beat
                sys.stderr.write(f"phaselog runner: heartbeat: {exc}\n")
            except Exception as exc:
                sys.stderr.write(f"phaselog runner: heartbeat: {type(exc).__name__}: {exc}\n")

    def _side_ledger(self) -> Ledger:
        if self._side is None:
            self._side = self._open_side()
        return self._side

    def _write_start(
        self, ledger: Ledger, ticket_id: str, run_id: str, phase: str, attempt: int, pipeline: Pipeline
    ) -> None:
        if (phase, attempt) in self._started:
            return
        current = self._current
        started = current[4] if current is not None and current[:2] == (phase, attempt) else None
        with contextlib.suppress(AlreadyExists, Conflict):  # written already (by `phaselog step`, say)
            # Stamped with when the attempt's work started, not with when this event is written.
            ledger.progress(ticket_id, run_id, phase, "start", attempt=attempt, pipeline=pipeline, started_at=started)
        self._started.add((phase, attempt))


class _Beats:
    """The process's heartbeat thread and the heartbeats it serves."""

    #: A store error makes a heartbeat retry no sooner than this (it stays due until it succeeds).
    RETRY_S = 0.5

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._members: list[Heartbeat] = []
        self._thread: threading.Thread | None = None
        # When the sleeping thread wakes up by itself (inf: only when told); -inf while it works.
        self._sleeps_until = -math.inf

    def join(self, hb: Heartbeat) -> None:
        with self._cond:
            self._members.append(hb)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="phaselog-heartbeat", daemon=True)
                self._thread.start()
            self._poke(hb._due())

    def leave(self, hb: Heartbeat) -> None:
        with self._cond, contextlib.suppress(ValueError):
            self._members.remove(hb)

    def poke(self, due: float | None) -> None:
        """Wake the thread if it would sleep past ``due``."""
        # Read without the lock first: a thread asleep until before ``due`` needs nothing (it
        # re-reads every heartbeat when it wakes). -inf means it is busy, and may be reading the
        # heartbeats right now: then take the lock, which waits until it sleeps.
        sleeps_until = self._sleeps_until
        if due is not None and (due < sleeps_until or sleeps_until == -math.inf):
            with self._cond:
                self._poke(due)

    def _poke(self, due: float | None) -> None:
        if due is not None and due < self._sleeps_until:
            self._cond.notify()

    def _loop(self) -> None:
        retry_at: dict[Heartbeat, float] = {}  # a heartbeat whose last beat failed: not before then
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    dues = [(d, hb) for hb in self._members if (d := hb._due()) is not None]
                    dues = [(max(d, retry_at.get(hb, d)), hb) for d, hb in dues]
                    wake = min((d for d, _ in dues), default=math.inf)
                    if wake <= now:
                        break
                    self._sleeps_until = wake
                    self._cond.wait(None if wake == math.inf else wake - now)
                    self._sleeps_until = -math.inf
                ready = [hb for d, hb in dues if d <= now]
                retry_at = {hb: t for hb, t in retry_at.items() if hb in self._members}
            for hb in ready:
                hb._beat()
                due = hb._due()
                if due is not None and due <= time.monotonic():  # still due: it failed; not in a tight loop
                    retry_at[hb] = time.monotonic() + self.RETRY_S
                else:
                    retry_at.pop(hb, None)


class _Process:
    """This process's heartbeat thread (None until a run needs it)."""

    lock = threading.Lock()
    beats: _Beats | None = None


def _beats() -> _Beats:
    if _Process.beats is None:
        with _Process.lock:
            if _Process.beats is None:
                _Process.beats = _Beats()
    return _Process.beats


def _forget_after_fork() -> None:
    # A forked child has no heartbeat thread and must not beat for its parent's runs.
    _Process.beats = None
    _Process.lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
