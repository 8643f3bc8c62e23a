"""The run loop: take the lease, plan with ``explain``, run what must run, record every attempt.

A phase runs once its needs are done: one at a time on the main thread (``max_parallel=1``: a chain
runs as it always did), or side by side on threads (:mod:`phaselog.runner.parallel`, D290-D293).
Each runs attempt after attempt (1 + ``retries``, with backoff), recording each — a completed
checkpoint (artifacts hashed, code fingerprint, fenced by the lease) or a failed one — and stops
at a gate (only what needs it), a failure that outlived its retries (PhaseFailed, after recording),
or a signal (the attempt recorded as interrupted; RunInterrupted).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from phaselog.ledger.pool import sibling
from phaselog.model.errors import (
    AlreadyExists,
    Fenced,
    InvalidRecord,
    NotFound,
    PhaseFailed,
    PhaselogError,
    Prerequisite,
    RecordingFailed,
    RunInterrupted,
    StoreError,
    UsageError,
)
from phaselog.model.ids import run_label, run_name_of
from phaselog.model.pipelines import Phase, Pipeline
from phaselog.runner import lease as leasing
from phaselog.runner.context import PhaseContext
from phaselog.runner.explain import BLOCKED, NOT_REACHED, SKIP, WAIT, PhasePlan, held_reason, plan_run
from phaselog.runner.heartbeat import DEFAULT_START_EVENT_AFTER, Heartbeat
from phaselog.runner.outcome import Failure, Success, runner_failure
from phaselog.runner.prelude import backoff_delay, run_params
from phaselog.runner.result import PhaseOutcome, RunResult, after_writes
from phaselog.runner.signals import Interrupt, SignalGuard, in_main_thread
from phaselog.stores.base import Stored
from phaselog.stores.snapshot import RunSnapshot

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger

#: Delays between tries of a checkpoint write that hit a store error (the phase itself succeeded).
RECORD_RETRY_DELAYS = (0.1, 0.3, 1.0, 2.0, 4.0, 8.0)

#: Runs one attempt of a phase: (phase, ctx) -> Success | Failure.
Executor = Callable[[Phase, PhaseContext], Success | Failure]


class Engine:
    """One ``run`` of a pipeline for a ticket (see the module docstring)."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        pipeline: Pipeline,
        ticket_id: str,
        run_id: str,
        run_name: str | None = None,
        executor_for: Callable[[Phase], Executor],
        fingerprints: Mapping[str, str],
        workdir: Path,
        wait: float | bool = False,
        ttl: float = leasing.DEFAULT_TTL,
        start_event_after: float = DEFAULT_START_EVENT_AFTER,
        handle_signals: bool = True,
        echo: Callable[[str], None] | None = None,
        before_phase: Callable[[str], None] | None = None,
        signals: SignalGuard | None = None,
        params: Mapping[str, Any] | None = None,
        max_parallel: int = 1,
        fail_fast: bool = False,
    ) -> None:
        if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
            raise UsageError(f"max_parallel must be a whole number >= 1 (got {max_parallel!r})", field="max_parallel")
        self.ledger = ledger
        self.pipeline = pipeline
        self.ticket_id = ticket_id
        self.run_id = run_id
        #: The run id as the user gave it (``nightly-2026-11-30``): every checkpoint keeps it.
        self.run_name = run_name
        self.executor_for = executor_for
        self.fingerprints = dict(fingerprints)
        self.workdir = workdir
        self.wait = wait
        self.ttl = ttl
        self.start_event_after = start_event_after
        self.signals = signals if signals is not None else SignalGuard(handle_signals)
        self.before_phase = before_phase
        self.echo = echo or (lambda _text: None)
        self.lease: leasing.Lease | None = None
        self.heartbeat: Heartbeat | None = None
        self.outcomes: list[PhaseOutcome] = []
        self.payloads: dict[str, Mapping[str, Any]] = {}
        #: The snapshot the run was planned from, and what this run wrote since (None: unknown,
        #: an answer was lost): together, the run's state after it without reading it again.
        self.snapshot: RunSnapshot | None = None
        self.written: list[Stored] | None = []
        #: The parameters given (None: none given; a rerun reuses the recorded ones), then the run's.
        self.given_params = params
        self.params: dict[str, Any] | None = None
        self.max_parallel = max_parallel
        self.fail_fast = fail_fast
        #: Phases side by side on threads (D290): only a DAG with max_parallel > 1; a chain never.
        self.threaded = max_parallel > 1 and not pipeline.graph.is_chain
        #: A phase thread's own ledger, heartbeat and slot (:mod:`phaselog.runner.parallel`).
        self.local = threading.local()
        self.book = threading.Lock()  # outcomes, written: appended from phase threads

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run the pipeline; see the module docstring for what is raised."""
        pl = self.pipeline
        if any(p.execution.timeout for p in pl.phases) and not in_main_thread():
            raise UsageError(
                "phase timeouts need the main thread (they use SIGALRM); call run() from it", field="timeout"
            )
        if self.threaded:
            from phaselog.runner.parallel import check_threads  # lazy: only a DAG run side by side needs it

            check_threads(pl, self.max_parallel)
        # PipelineMismatch before anything else, decided on one snapshot (the store's two reads of the
        # run, not the four of a lookup without one); the plan reads the run again under the lease.
        seen = self.ledger.store.snapshot(self.ticket_id, self.run_id)
        self.ledger.pipeline_for(self.ticket_id, self.run_id, pl, snapshot=seen)
        self.params = run_params(pl, seen, self.given_params, run_label(self.run_id, self.run_name))
        self.lease = leasing.acquire(
            self.ledger.store,
            self.ticket_id,
            self.run_id,
            ttl=self.ttl,
            wait=self.wait,
            on_wait=lambda exc: self.echo(f"waiting: {exc.message}"),
            marks=any(p.execution.run is None for p in pl.phases),  # Python phases' processes: D100
        )
        if self.lease.took_over:
            self.echo(f"took the run over: {self.lease.took_over.get('reason')}")
        self.heartbeat = Heartbeat(self.lease, self._side_ledger, start_event_after=self.start_event_after)
        interrupted: int | None = None
        waiting: str | None = None
        try:
            with self.signals:
                try:
                    waiting = self._phases()
                except Interrupt as exc:
                    interrupted = exc.signum
        finally:
            self.heartbeat.stop()
            self.lease.release()
        result = self._result(waiting, interrupted)
        if interrupted is not None:
            stop = RunInterrupted(
                f"run {run_label(self.run_id, result.run_name)} was interrupted by signal {interrupted}; the attempt "
                "in progress is recorded as interrupted, and the next run continues from there",
                signum=interrupted,
            )
            stop.result = result
            raise stop
        return result

    def _phases(self) -> str | None:
        plan, self.snapshot = plan_run(
            self.ledger,
            self.ticket_id,
            self.run_id,
            self.pipeline,
            workdir=self.workdir,
            fingerprints=self.fingerprints,
        )
        # Again under the lease: a runner that waited for another may find the run recorded meanwhile.
        self.params = run_params(self.pipeline, self.snapshot, self.given_params, run_label(self.run_id, self.run_name))
        if self.threaded:
            from phaselog.runner.parallel import Parallel  # lazy: only a DAG run side by side needs it

            assert self.lease is not None
            with leasing.marking(self.lease):  # for every Python phase's processes, from the main thread
                return Parallel(self, plan).run()
        graph = self.pipeline.graph
        held: dict[str, str] = {}  # a phase that stops here -> why the phases that need it are not reached
        done: set[str] = set()
        waiting: str | None = None
        for p in plan.phases:  # manifest order: each phase after what it needs
            self.signals.check()
            if p.phase not in graph.ready(done):  # held upstream (a gate, a stop): other branches go on
                stop = next((held[a] for a in graph.ancestors(p.phase) if a in held), p.reason)
                self._rest([p], reason=stop)
                held[p.phase] = stop
                continue
            if p.action == SKIP:
                self.echo(f"skip {p.phase}: {p.reason}")
                self.outcomes.append(PhaseOutcome(p.phase, "skipped", p.reason, attempt=p.attempt))
                done.add(p.phase)
                continue
            if p.action in (WAIT, BLOCKED, NOT_REACHED):
                self.echo(f"{p.action} {p.phase}: {p.reason}")
                self._rest([p])
                held[p.phase] = held_reason(p)
                waiting = waiting or (p.phase if p.action == WAIT else None)
                continue
            if self.before_phase is not None:
                self.before_phase(p.phase)  # a worker: notes the phase; may stop the run here
            outcome = self._run_phase(p)
            self.outcomes.append(outcome)
            if outcome.outcome == "waiting":
                held[p.phase] = f"the run waits at {p.phase} for approval"
                waiting = waiting or p.phase
            else:
                done.add(p.phase)
        return waiting

    def _rest(self, plans: Sequence[PhasePlan], reason: str | None = None) -> None:
        for p in plans:
            outcome = {WAIT: "waiting", BLOCKED: "blocked"}.get(p.action, "not_reached")
            self.outcomes.append(PhaseOutcome(p.phase, outcome, reason or p.reason, attempt=p.attempt))

    # -- what a phase thread has of its own (the main thread: the run's) --------------------------
    @property
    def led(self) -> Ledger:
        """This thread's ledger: a phase thread has a connection of its own (D292)."""
        return cast("Ledger", getattr(self.local, "ledger", None) or self.ledger)

    @property
    def beat(self) -> Heartbeat:
        """The heartbeat of this thread's attempts (a phase thread's own; else the run's)."""
        return cast(Heartbeat, getattr(self.local, "heartbeat", None) or self.heartbeat)

    def _critical(self) -> contextlib.AbstractContextManager[None]:
        """Signals wait while a record is written: on the main thread; a phase thread is never
        interrupted while it writes (:mod:`phaselog.runner.parallel` interrupts only the phase's own work)."""
        return self.signals.critical() if in_main_thread() else contextlib.nullcontext()

    # -- one phase ------------------------------------------------------------------------------
    def _run_phase(self, plan: PhasePlan) -> PhaseOutcome:
        assert self.lease is not None
        assert self.heartbeat is not None
        slot = getattr(self.local, "slot", None)  # a phase thread's (parallel.Slot), None on the main thread
        heartbeat = self.beat
        ph = self.pipeline.phase(plan.phase)
        ex = ph.execution
        executor = self.executor_for(ph)
        attempt = plan.next_attempt
        resume = plan.resume_from_step
        tried: list[int] = []
        failure: Failure | None = None
        self.echo(f"run {ph.name}: {plan.reason}")
        for retry in range(ex.retries + 1):
            if retry:
                delay = backoff_delay(ex, retry)
                self.echo(f"retry {ph.name} in {delay:.1f} s (attempt {attempt})")
                (time.sleep if slot is None else slot.pause)(delay)  # pause: Interrupt if the run stops
            fenced = self.heartbeat.fenced or heartbeat.fenced
            if fenced is not None:
                raise fenced
            started = datetime.now(UTC)  # the attempt's work starts now: its start event and checkpoint say so
            ctx = PhaseContext(
                ledger=self.led,
                pipeline=self.pipeline,
                ticket_id=self.ticket_id,
                run_id=self.run_id,
                phase=ph.name,
                attempt=attempt,
                workdir=self.workdir,
                resume_from_step=resume,
                rejection=plan.rejection,
                payloads=self.payloads,
                heartbeat=heartbeat,
                lease=self.lease,
                started_at=started,
                params=self.params,
            )
            heartbeat.begin(ph.name, attempt, self.pipeline, started)
            try:
                outcome = self._attempt(executor, ph, ctx)
            finally:
                heartbeat.end()
            if slot is not None:
                outcome = slot.as_interrupted(outcome)  # its command was stopped because the run is
            tried.append(attempt)
            if isinstance(outcome, Success):
                try:
                    refused = self._record_success(ph, attempt, outcome, started)
                except Interrupt:  # a signal while it was recorded: the record is durable, say so
                    self.outcomes.append(PhaseOutcome(ph.name, "completed", "", tuple(tried), attempt))
                    raise
                if refused is None:
                    self.payloads[ph.name] = {"phase": ph.name, **outcome.payload}
                    if ph.requires_approval:
                        self.echo(f"wait {ph.name}: attempt {attempt} awaits approval")
                        return PhaseOutcome(ph.name, "waiting", "awaits approval", tuple(tried), attempt)
                    self.echo(f"done {ph.name}: attempt {attempt}")
                    return PhaseOutcome(ph.name, "completed", "", tuple(tried), attempt)
                outcome = refused
            failure = outcome
            stop: Interrupt | None = None
            try:
                self._record_failure(ph, attempt, failure, started, ex.retries - retry if failure.retryable else 0)
            except Interrupt as exc:  # a signal while it was recorded (durably): noted, then the run stops
                stop = exc
            self.echo(f"failed {ph.name} attempt {attempt}: {failure.error}")
            if failure.rule == "interrupted" or stop is not None:
                outcome_name = "interrupted" if failure.rule == "interrupted" else "failed"
                self.outcomes.append(
                    PhaseOutcome(ph.name, outcome_name, failure.error, tuple(tried), error=failure.error)
                )
                raise stop or Interrupt(failure.signum or 15)
            if not failure.retryable:
                if retry < ex.retries:
                    self.echo(f"not retrying {ph.name}: {failure.rule} is not an error another attempt can fix")
                break
            attempt += 1
            resume = None
        assert failure is not None
        why = f"failed after {len(tried)} attempt(s)"
        if failure.rule == "runner_error" and ex.retries:
            why += " (not retried: the runner itself failed)"
        elif not failure.retryable and ex.retries:
            why += f" (not retried: {failure.rule} is permanent)"
        last = PhaseOutcome(ph.name, "failed", why, tuple(tried), error=failure.error)
        self.outcomes.append(last)
        error = PhaseFailed(
            f"phase {ph.name} {why} ({', '.join(map(str, tried))}): {failure.error}",
            phase=ph.name,
            attempts=tried,
            rule=failure.rule,
            retryable=failure.retryable,
        )
        if slot is None:  # side by side, the scheduler says what was not reached once the others end
            self.outcomes.extend(
                PhaseOutcome(p.name, "not_reached", f"{ph.name} failed")
                for p in self.pipeline.phases
                if p.ordinal > ph.ordinal
            )
            error.result = self._result(None, None)
        if failure.cause is not None:
            raise error from failure.cause
        raise error

    def _attempt(self, executor: Executor, ph: Phase, ctx: PhaseContext) -> Success | Failure:
        """One attempt's work. Whatever goes wrong in the runner meanwhile, the processes the attempt
        started are ended before the error goes on (and so before the lease is released); an error of
        the runner's own (not the phase's, which the executor turns into a Failure) is a failed
        attempt, ``runner_error`` (decision D111)."""
        assert self.lease is not None
        slot = getattr(self.local, "slot", None)
        try:
            if slot is not None:
                with slot.executing():  # interruptible only in here
                    return executor(ph, ctx)
            if ph.execution.run is None:
                with leasing.marking(self.lease):
                    return executor(ph, ctx)
            return executor(ph, ctx)
        except Exception as exc:
            if slot is None:  # side by side, others' processes carry the marks too: ended at the run's end
                leasing.end_marked(self.lease)
            if isinstance(exc, Fenced):
                raise  # another runner holds the run: nothing of ours may be written
            return runner_failure(exc)
        except BaseException:
            if slot is None:
                leasing.end_marked(self.lease)
            raise

    # -- recording ------------------------------------------------------------------------------
    def _record_success(self, ph: Phase, attempt: int, ok: Success, started: datetime) -> Failure | None:
        """Write the completed checkpoint; a Failure if the output itself is refused."""
        ts = datetime.now(UTC)
        kwargs: dict[str, Any] = {
            "attempt": attempt,
            "timestamp": ts,
            "started_at": min(started, ts),  # a wall clock stepped back must not refuse the record
            "artifact_paths": ok.artifacts,
            "pipeline": self.pipeline,
            "fence": self.lease.fence if self.lease else None,
            # Planned under the lease with explain: every earlier phase is complete and current.
            "check_prerequisites": False,
        }
        if ok.artifacts:
            kwargs["artifacts_root"] = self.workdir
        if ph.execution.fingerprint == "code" and ph.name in self.fingerprints:
            kwargs["code_fingerprint"] = self.fingerprints[ph.name]
        try:
            self._write(ph, ok.payload, kwargs)
        except InvalidRecord as exc:
            rule = exc.errors[0].get("rule", "invalid") if exc.errors else "invalid"
            rule = "artifact_missing" if str(rule).startswith("artifact") else "invalid"
            return Failure(rule, exc.message, {"errors": exc.errors})
        except Prerequisite as exc:
            return Failure("prerequisite", exc.message, {"blockers": exc.context.get("blockers")})
        except (TypeError, ValueError) as exc:  # a payload that is not JSON
            return Failure("bad_result", f"the payload cannot be stored as JSON: {exc}")
        return None

    def _record_failure(self, ph: Phase, attempt: int, failure: Failure, started: datetime, left: int) -> None:
        ts = datetime.now(UTC)
        kwargs: dict[str, Any] = {
            "attempt": attempt,
            "timestamp": ts,
            "started_at": min(started, ts),
            "status": "failed",
            "error": failure.error,
            "pipeline": self.pipeline,
            "fence": self.lease.fence if self.lease else None,
        }
        payload = failure.payload(ph.name)
        payload["failure"]["retries_left"] = left  # the event feed's "failed for good" (D202)
        self._write(ph, payload, kwargs)

    def _write(self, ph: Phase, payload: Mapping[str, Any], kwargs: dict[str, Any]) -> None:
        """Write a checkpoint durably; store errors are retried, signals wait until it is written."""
        last: PhaselogError | None = None
        if self.params is not None:
            kwargs["params"] = self.params  # every record of the run carries them (D260)
        with self._critical():
            for delay in (*RECORD_RETRY_DELAYS, None):
                try:
                    done = self.led.write(self.ticket_id, self.run_name or self.run_id, ph.name, payload, **kwargs)
                    with self.book:
                        if self.written is not None:
                            self.written.append(done.stored)
                    return
                except Fenced:
                    raise
                except AlreadyExists as exc:
                    if last is not None and self._landed(ph, kwargs):
                        with self.book:
                            self.written = None  # the state after the run is read again
                        return  # an earlier try was stored though its answer was lost
                    raise StoreError(
                        f"attempt {kwargs['attempt']} of {ph.name} was written by someone else while this runner "
                        "held the run's lease (a write outside the runner?); stopping",
                        rule="attempt_taken",
                    ) from exc
                except StoreError as exc:
                    last = exc
                    if delay is None:
                        break
                    sys.stderr.write(f"phaselog runner: recording {ph.name}: {exc.message}; retrying in {delay} s\n")
                    time.sleep(delay)
        raise RecordingFailed(
            f"phase {ph.name} attempt {kwargs['attempt']} finished but its checkpoint could not be recorded after "
            f"{len(RECORD_RETRY_DELAYS) + 1} tries: {last.message if last else 'store error'}",
            phase=ph.name,
            attempt_number=kwargs["attempt"],
            status=kwargs.get("status", "completed"),
            payload=dict(payload),
            artifact_paths=list(kwargs.get("artifact_paths") or []),
        )

    def _landed(self, ph: Phase, kwargs: Mapping[str, Any]) -> bool:
        try:
            stored = self.led.read(self.ticket_id, self.run_id, ph.name, kwargs["attempt"], pipeline=self.pipeline)
        except (NotFound, PhaselogError):
            return False
        rec = stored.record
        return bool(rec.timestamp_utc == kwargs["timestamp"] and rec.status == kwargs.get("status", "completed"))

    # -- helpers --------------------------------------------------------------------------------
    def _side_ledger(self) -> Ledger:

        return sibling(self.ledger)

    def _result(self, waiting: str | None, interrupted: int | None) -> RunResult:
        try:
            if self.snapshot is not None and self.written:
                status = self.ledger.states.status_from(
                    after_writes(self.snapshot, self.written), self.pipeline, artifacts_root=self.workdir
                )
            else:
                status = self.ledger.status(
                    self.ticket_id, self.run_id, pipeline=self.pipeline, artifacts_root=self.workdir
                )
        except PhaselogError:
            status = None
        took = dict(self.lease.took_over) if self.lease and self.lease.took_over else None
        name = run_name_of(self.run_id, status.run_name if status is not None else None, self.run_name)
        return RunResult(
            self.ticket_id,
            self.run_id,
            self.pipeline.name,
            tuple(self.outcomes),
            waiting=waiting,
            status=status,
            took_over=took,
            interrupted=interrupted,
            run_name=name,
        )
