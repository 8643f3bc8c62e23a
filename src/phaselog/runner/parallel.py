"""Phases side by side: the scheduler of a DAG run with ``max_parallel`` > 1 (issue 25, D290-D293).

The main thread schedules; each phase runs on a thread of its own, started once its needs are
done (``pipeline.graph.ready``, the one readiness rule) while fewer than ``max_parallel`` run. A
phase thread does what the main thread does for a phase in a chain (``Engine._run_phase``: its
attempts, retries and records), with a store connection and a heartbeat of its own; every record
carries the run's lease fence.

* A gate (a phase awaiting approval) holds only the phases that need it; the other branches go on.
* A failure (after its retries) starts nothing new; the running phases finish, then PhaseFailed.
  With ``fail_fast`` the running phases are interrupted, recorded as a signal records them.
* SIGINT/SIGTERM (on the main thread, which only waits here) interrupts every running phase: a
  shell phase's process group gets the signal (SIGKILL after ``KILL_GRACE_S``), a Python phase gets
  :class:`Interrupt` raised in its thread at its next Python instruction (never while its record is
  written); each attempt is recorded as interrupted, then the run stops (RunInterrupted).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from phaselog.ledger.pool import sibling
from phaselog.model.errors import PhaseFailed, UsageError
from phaselog.runner import lease as leasing
from phaselog.runner.explain import BLOCKED, NOT_REACHED, RUN, SKIP, WAIT, Explanation, PhasePlan, held_reason
from phaselog.runner.heartbeat import Heartbeat
from phaselog.runner.outcome import Failure, Success
from phaselog.runner.result import PhaseOutcome
from phaselog.runner.shell import KILL_GRACE_S
from phaselog.runner.signals import Interrupt

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger
    from phaselog.model.pipelines import Pipeline
    from phaselog.runner.lease import Lease
    from phaselog.runner.result import RunResult
    from phaselog.runner.signals import SignalGuard


class Engine(Protocol):
    """What the scheduler uses of the run's :class:`phaselog.runner.engine.Engine`."""

    pipeline: Pipeline
    ledger: Ledger
    lease: Lease | None
    max_parallel: int
    fail_fast: bool
    start_event_after: float
    before_phase: Callable[[str], None] | None
    echo: Callable[[str], None]
    outcomes: list[PhaseOutcome]
    local: threading.local
    signals: SignalGuard

    def _rest(self, plans: Sequence[PhasePlan], reason: str | None = None) -> None: ...
    def _run_phase(self, plan: PhasePlan) -> PhaseOutcome: ...
    def _result(self, waiting: str | None, interrupted: int | None) -> RunResult: ...


def check_threads(pipeline: Pipeline, max_parallel: int) -> None:
    """UsageError for a pipeline that cannot run its phases on threads: a sync Python phase's
    timeout is a SIGALRM, which only the main thread gets (D291)."""
    timed = next((p.name for p in pipeline.phases if p.execution.run is None and p.execution.timeout), None)
    if timed is not None:
        raise UsageError(
            f"phase {timed}: a Python phase's timeout needs the main thread (SIGALRM), and with "
            f"--max-parallel {max_parallel} Python phases run on threads (D291); run it with "
            "--max-parallel 1, or time it out inside the phase",
            field="max_parallel",
            rule="timeout_needs_main_thread",
        )


#: How often the waiting main thread looks again while it stops the run (new process groups).
TICK_S = 0.1


def _interrupt_type(signum: int) -> type[Interrupt]:
    """An Interrupt class raisable without arguments (what ``PyThreadState_SetAsyncExc`` raises)."""

    def init(self: Interrupt) -> None:
        Interrupt.__init__(self, signum)

    return type(f"Interrupt{signal.Signals(signum).name}", (Interrupt,), {"__init__": init})


def _raise_in(thread: threading.Thread, kind: type[BaseException] | None) -> None:
    """Raise ``kind`` in ``thread`` at its next Python instruction (None: drop one not raised yet)."""
    if thread.ident is not None:
        exc = ctypes.py_object(kind) if kind is not None else None  # None: NULL, which clears
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), exc)


class Slot:
    """One running phase: its thread, and whether (and by which signal) it is being stopped."""

    def __init__(self, plan: PhasePlan, python: bool) -> None:
        self.plan = plan
        self.python = python
        self.thread: threading.Thread | None = None
        self.signum: int | None = None
        self._executing = False
        self._lock = threading.Lock()
        self._stop = threading.Event()

    @contextlib.contextmanager
    def executing(self) -> Iterator[None]:
        """The attempt's own work: the only place a Python phase is interrupted."""
        with self._lock:
            self._executing = True
            if self.signum is not None:
                self._executing = False
                raise Interrupt(self.signum)  # stopped before it started: nothing ran, nothing to record
        try:
            yield
        finally:
            with self._lock:
                self._executing = False
                if self.thread is not None and self.python:
                    _raise_in(self.thread, None)  # an interrupt that came too late: dropped

    def interrupt(self, signum: int) -> None:
        """Stop this phase (first signal wins); a Python phase's thread gets an Interrupt now."""
        with self._lock:
            if self.signum is not None:
                return
            self.signum = signum
            self._stop.set()
            if self.python and self._executing and self.thread is not None:
                _raise_in(self.thread, _interrupt_type(signum))

    def pause(self, seconds: float) -> None:
        """Sleep before a retry; Interrupt if the run is stopped meanwhile."""
        if self._stop.wait(seconds) and self.signum is not None:
            raise Interrupt(self.signum)

    def as_interrupted(self, outcome: Success | Failure) -> Success | Failure:
        """A shell phase whose command ended because the run stopped it is an interrupted attempt."""
        if self.signum is None or not isinstance(outcome, Failure) or outcome.rule == "interrupted":
            return outcome
        name = signal.Signals(self.signum).name
        detail = {**outcome.detail, "signal": name}
        return Failure("interrupted", f"interrupted by {name}", detail, signum=self.signum)


class Parallel:
    """Runs the plan of a DAG run with its phases side by side (see the module docstring)."""

    def __init__(self, engine: Engine, plan: Explanation) -> None:
        self.engine = engine
        self.plans = {p.phase: p for p in plan.phases}
        self.order = [p.phase for p in plan.phases]
        self.graph = engine.pipeline.graph
        self.events: queue.Queue[tuple[str, PhaseOutcome | BaseException]] = queue.Queue()
        self.running: dict[str, Slot] = {}
        self.started: set[str] = set()
        self.done: set[str] = set()
        self.held: dict[str, str] = {}  # a phase that stops here -> why the phases that need it wait
        self.gates: set[str] = set()  # the phases the run waits at (for approval)
        self.stopping: str | None = None  # why nothing new starts
        self.signum: int | None = None  # the signal that stops the run
        self.stopped_at: float | None = None  # when the running phases were told to stop
        self.signalled: set[int] = set()  # process groups sent the stop signal
        self.ended_marked = False
        self.failure: PhaseFailed | None = None
        self.error: BaseException | None = None
        self.between: Exception | None = None  # what ``before_phase`` raised (a worker stopping)

    # -- the main thread ------------------------------------------------------------------------
    def run(self) -> str | None:
        """Run every phase the plan runs, side by side as their needs allow; the phase the run waits
        at (None); PhaseFailed, Interrupt or the runner's own error once every phase thread ended."""
        eng = self.engine
        for name in self.order:
            p = self.plans[name]
            if p.action == SKIP:
                eng.echo(f"skip {name}: {p.reason}")
                eng.outcomes.append(PhaseOutcome(name, "skipped", p.reason, attempt=p.attempt))
                self.done.add(name)
            elif p.action in (WAIT, BLOCKED, NOT_REACHED):
                upstream = self._held_upstream(name)
                if upstream is None:
                    eng.echo(f"{p.action} {name}: {p.reason}")
                eng._rest([p], reason=upstream)
                self.held[name] = upstream or held_reason(p)
                if p.action == WAIT and upstream is None:
                    self.gates.add(name)
        while True:
            try:
                with self.engine.signals.critical():  # a signal is handled between steps, never inside one
                    going = self._step()
                if not going:
                    break
            except Interrupt as exc:
                self._stop_all(exc.signum, f"the run was interrupted by {signal.Signals(exc.signum).name}")
            except BaseException as exc:  # the runner's own failure: no phase may outlive the lease
                self.error = self.error or exc
                self._stop_all(signal.SIGTERM, f"the runner failed: {exc!r}", signal_run=False)
        return self._finish()

    def _step(self) -> bool:
        """Start what may start, then handle one phase's end; False when nothing runs any more."""
        if self.stopping is None:
            self._start_ready()
        if not self.running:
            return False
        if self.stopped_at is not None:
            self._forward()
        try:
            name, result = self.events.get(timeout=TICK_S)
        except queue.Empty:
            return True
        self._ended(name, result)
        return True

    def _start_ready(self) -> None:
        eng = self.engine
        for name in self.graph.ready(self.done):
            if len(self.running) >= eng.max_parallel:
                return
            p = self.plans[name]
            if name in self.started or name in self.held or p.action != RUN:
                continue
            if eng.before_phase is not None:
                try:
                    eng.before_phase(name)  # a worker: notes the phase; may stop the run here
                except Exception as exc:
                    self.between = exc
                    self.stopping = "the run was stopped between phases"
                    return
            self._start(p)

    def _start(self, plan: PhasePlan) -> None:
        slot = Slot(plan, self.engine.pipeline.phase(plan.phase).execution.run is None)
        thread = threading.Thread(target=self._body, args=(slot,), name=f"phaselog-phase-{plan.phase}", daemon=True)
        slot.thread = thread
        self.running[plan.phase] = slot
        self.started.add(plan.phase)
        thread.start()

    def _ended(self, name: str, result: PhaseOutcome | BaseException) -> None:
        slot = self.running.pop(name)
        if slot.thread is not None:
            slot.thread.join()
        if isinstance(result, PhaseOutcome):
            self.engine.outcomes.append(result)
            if result.outcome == "waiting":
                self.held[name] = f"the run waits at {name} for approval"
                self.gates.add(name)
            else:
                self.done.add(name)
        elif isinstance(result, Interrupt):  # recorded as interrupted by the thread (a signal, or fail-fast)
            if not any(o.phase == name for o in self.engine.outcomes):
                why = f"stopped: {self.stopping}"
                self.engine.outcomes.append(PhaseOutcome(name, "not_reached", why, attempt=slot.plan.attempt))
        elif isinstance(result, PhaseFailed):
            self.failure = self.failure or result
            if self.stopping is None:
                self.stopping = f"{name} failed"
            if self.engine.fail_fast:
                self._stop_all(signal.SIGTERM, f"{name} failed (--fail-fast)", signal_run=False)
        else:  # the runner's own trouble (fenced, the store gave up): stop the others now
            self.error = self.error or result
            self._stop_all(signal.SIGTERM, f"{name} could not go on: {result}", signal_run=False)

    def _stop_all(self, signum: int, why: str, *, signal_run: bool = True) -> None:
        """Tell every running phase to stop (a second signal: SIGKILL their commands now)."""
        if signal_run and self.signum is None:
            self.signum = signum
        if self.stopped_at is not None and signal_run:
            self.stopped_at = -float("inf")  # a second signal: no more grace
        self.stopping = self.stopping or why
        if self.stopped_at is None:
            self.stopped_at = time.monotonic()
            if self.running:
                self.engine.echo(f"stopping {', '.join(self.running)}: {why}")
        for slot in self.running.values():
            slot.interrupt(signum)
        self._forward()

    def _forward(self) -> None:
        """Pass the stop signal to every running phase command (SIGKILL once the grace is over)."""
        assert self.engine.lease is not None
        late = self.stopped_at is not None and time.monotonic() - self.stopped_at > KILL_GRACE_S
        for pgid in list(self.engine.lease.groups.values()):
            if pgid in self.signalled and not late:
                continue
            signum = (
                signal.SIGKILL
                if late
                else next((s.signum for s in self.running.values() if s.signum is not None), signal.SIGTERM)
            )
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signum)
            self.signalled.add(pgid)
        if late and not self.ended_marked and any(s.python for s in self.running.values()):
            # A Python phase still waiting for a process it started (a call into C holds the
            # interrupt back): end what carries the run's marks, so that call returns (D100).
            self.ended_marked = True
            leasing.end_marked(self.engine.lease)

    def _held_upstream(self, name: str) -> str | None:
        return next((self.held[a] for a in self.graph.ancestors(name) if a in self.held), None)

    def _finish(self) -> str | None:
        eng = self.engine
        for name in self.order:
            if name in self.started or name in self.done or name in self.held:
                continue
            why = self._held_upstream(name) or self.stopping or "not reached"
            eng.outcomes.append(PhaseOutcome(name, "not_reached", why, attempt=self.plans[name].attempt))
        position = {n: i for i, n in enumerate(self.order)}
        eng.outcomes.sort(key=lambda o: position.get(o.phase, len(position)))
        broken = self.failure is not None and self.failure.context.get("rule") == "runner_error"
        if self.error is not None or self.stopped_at is not None or broken:
            assert eng.lease is not None
            leasing.end_marked(eng.lease)  # what a stopped (or broken) Python phase started: marked, D100
        if self.signum is not None:
            raise Interrupt(self.signum)
        if self.error is not None:
            raise self.error
        if self.failure is not None:
            self.failure.result = eng._result(None, None)
            raise self.failure
        if self.between is not None:
            raise self.between
        return next((n for n in self.order if n in self.gates), None)  # the first, in manifest order

    # -- a phase thread -------------------------------------------------------------------------
    def _body(self, slot: Slot) -> None:
        eng = self.engine
        assert eng.lease is not None
        result: PhaseOutcome | BaseException
        led = None
        heartbeat = Heartbeat(eng.lease, lambda: sibling(eng.ledger), start_event_after=eng.start_event_after)
        try:
            led = sibling(eng.ledger)  # a connection of its own: one is never used by two threads (D292)
            eng.local.ledger, eng.local.heartbeat, eng.local.slot = led, heartbeat, slot
            result = eng._run_phase(slot.plan)
        except BaseException as exc:  # reported to the main thread, which decides
            result = exc
        finally:
            heartbeat.stop()
            if led is not None:
                with contextlib.suppress(Exception):
                    led.close()
        self.events.put((slot.plan.phase, result))
