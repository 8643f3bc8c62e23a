"""SIGINT/SIGTERM and timeouts, turned into exceptions the runner records.

While a run is in progress the runner owns SIGINT and SIGTERM (main thread only): a signal
raises :class:`Interrupt` in the phase that is running, so its attempt is recorded as
``interrupted`` and the run exits 130/143. While a checkpoint is being recorded the signal
waits until the record is durable (``critical``), so a stop never tears a write in two.
``Interrupt`` and ``PhaseTimeout`` derive from BaseException: a phase's ``except Exception``
does not swallow them.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any


class Interrupt(BaseException):
    """A SIGINT or SIGTERM arrived."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class PhaseTimeout(BaseException):
    """The phase ran past its timeout."""


def in_main_thread() -> bool:
    """Signals can be handled only in the main thread."""
    return threading.current_thread() is threading.main_thread()


class SignalGuard:
    """Install the handlers for a run (a no-op outside the main thread or when disabled)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and in_main_thread()
        self._old: dict[int, Any] = {}
        self._critical = 0
        self.pending: int | None = None

    def __enter__(self) -> SignalGuard:
        if self.enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self._critical:
            if self.pending is None:
                self.pending = signum
            return  # raised when the record is durable
        raise Interrupt(signum)  # raised once: the runner records it, then stops the run

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """Defer signals until the block ends (then raise the first one, once)."""
        self._critical += 1
        try:
            yield
        finally:
            self._critical -= 1
        if not self._critical:
            self.check()

    def check(self) -> None:
        """Raise a signal that arrived while it was deferred (once: it is then handled)."""
        if self.pending is not None:
            signum, self.pending = self.pending, None
            raise Interrupt(signum)


def runner_owns_sigint() -> bool:
    """Whether a runner's :class:`SignalGuard` handles SIGINT here: then a real SIGINT arrives as
    :class:`Interrupt`, and a ``KeyboardInterrupt`` can only be raised by the phase itself."""
    handler = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
    return isinstance(handler, SignalGuard)


@contextlib.contextmanager
def alarm(seconds: float | None) -> Iterator[None]:
    """Raise PhaseTimeout in the main thread after ``seconds`` (None: no limit)."""
    if seconds is None:
        yield
        return

    def fire(_signum: int, _frame: FrameType | None) -> None:
        raise PhaseTimeout()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
