"""The runner's heartbeat: renews the lease, and records a long attempt's ``start`` event.

A phase that finishes quickly costs one durable write, its checkpoint. A phase still running
after ``start_event_after`` seconds (or that reports a step first) gets a ``start`` progress
event naming this host and process, so ``status`` shows it ``in_progress`` and a crash leaves it
``abandoned`` with its attempt number used up. On SQL stores the thread also renews the lease
every third of its ttl, so a runner on another machine can tell a live runner from a dead one.

The thread works on a store connection of its own (a second ``open_store`` of the same URL):
the main thread's connection is never used by two threads.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from phaselog.errors import AlreadyExists, Conflict, Fenced, PhaselogError

DEFAULT_START_EVENT_AFTER = 1.0


class Heartbeat:
    """One thread per runner (started lazily); see the module docstring."""

    def __init__(
        self,
        lease: Any,
        open_side_ledger: Callable[[], Any],
        *,
        start_event_after: float = DEFAULT_START_EVENT_AFTER,
    ) -> None:
        self.lease = lease
        self._open_side = open_side_ledger
        self._side: Any = None
        self.start_event_after = start_event_after
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._current: tuple[str, int, float, Any] | None = None  # phase, attempt, since, pipeline
        self._started: set[tuple[str, int]] = set()
        self._stop = False
        self._thread: threading.Thread | None = None
        #: Set when a renewal found the lease taken over; the main thread stops at its next write.
        self.fenced: Fenced | None = None

    # -- main thread ----------------------------------------------------------------------------
    def begin(self, phase: str, attempt: int, pipeline: Any) -> None:
        """An attempt starts now."""
        with self._cond:
            self._current = (phase, attempt, time.monotonic(), pipeline)
            self._ensure_thread()
            self._cond.notify()

    def end(self) -> None:
        """The attempt ends: no start event may be written for it after this returns."""
        with self._cond:
            self._current = None
        with self._write_lock:  # wait for a start event being written right now
            pass

    def ensure_started(self, ledger: Any, ticket_id: str, run_id: str, phase: str, attempt: int, pipeline: Any) -> None:
        """Write the attempt's start event now (before its first step), unless it exists."""
        with self._write_lock:
            self._write_start(ledger, ticket_id, run_id, phase, attempt, pipeline)

    def stop(self) -> None:
        """End the thread; it closes its own connection on the way out.

        The join is short: waiting for a sleeping thread to be scheduled cost more than a quick
        phase (a thread still ending writes nothing: no attempt is current, and a renewal of a
        released lease changes no row).
        """
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=0.05)
        else:
            self._close_side()

    def _close_side(self) -> None:
        if self._side is not None:
            with contextlib.suppress(Exception):
                self._side.close()
            self._side = None

    # -- the thread -----------------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        needed = self.lease.expires or self.start_event_after >= 0
        if self._thread is None and needed:
            self._thread = threading.Thread(target=self._loop, name="phaselog-heartbeat", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        try:
            self._beat()
        finally:
            self._close_side()

    def _beat(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                timeout = self._next_wake()
                self._cond.wait(timeout)
                if self._stop:
                    return
                current = self._current
            try:
                if current is not None and self.start_event_after >= 0:
                    phase, attempt, since, pipeline = current
                    if time.monotonic() - since >= self.start_event_after:
                        with self._write_lock:
                            if self._current is not None and self._current[:2] == (phase, attempt):
                                side = self._side_ledger()
                                self._write_start(
                                    side, self.lease.ticket_id, self.lease.run_id, phase, attempt, pipeline
                                )
                if self.lease.expires and self.lease.due():
                    self.lease.renew(self._side_ledger().store.run_leases())
            except Fenced as exc:
                self.fenced = exc
                return
            except PhaselogError as exc:  # a store hiccup: said once, tried again next beat
                sys.stderr.write(f"phaselog runner: heartbeat: {exc}\n")
            except Exception as exc:
                sys.stderr.write(f"phaselog runner: heartbeat: {type(exc).__name__}: {exc}\n")

    def _next_wake(self) -> float | None:
        waits = []
        if self.lease.expires:
            waits.append(max(0.05, self.lease.ttl / 3 - (time.monotonic() - self.lease.last_renewed)))
        if self._current is not None and self.start_event_after >= 0:
            phase, attempt, since, _ = self._current
            if (phase, attempt) not in self._started:
                waits.append(max(0.0, self.start_event_after - (time.monotonic() - since)))
        return min(waits) if waits else None

    def _side_ledger(self) -> Any:
        if self._side is None:
            self._side = self._open_side()
        return self._side

    def _write_start(self, ledger: Any, ticket_id: str, run_id: str, phase: str, attempt: int, pipeline: Any) -> None:
        if (phase, attempt) in self._started:
            return
        with contextlib.suppress(AlreadyExists, Conflict):  # written already (by `phaselog step`, say)
            ledger.progress(ticket_id, run_id, phase, "start", attempt=attempt, pipeline=pipeline)
        self._started.add((phase, attempt))
