"""The run loop: take the lease, plan with ``explain``, run what must run, record every attempt.

For each phase the plan says to run: attempt after attempt (1 + ``retries``, with backoff), call
the phase (Python or shell), record the attempt — a completed checkpoint (artifacts hashed, code
fingerprint, fenced by the lease) or a failed one (the failure in detail) — and stop at a gate
(``awaiting_approval``), at a failure that outlived its retries (PhaseFailed, after recording),
or at a signal (the attempt recorded as interrupted; RunInterrupted).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from phaselog.model.execution import Execution
from phaselog.model.ids import run_label, run_name_of
from phaselog.model.params import differences
from phaselog.model.params import resolve as resolve_params
from phaselog.model.pipelines import Phase, Pipeline
from phaselog.runner import lease as leasing
from phaselog.runner.context import PhaseContext
from phaselog.runner.explain import BLOCKED, NOT_REACHED, SKIP, WAIT, PhasePlan, plan_run
from phaselog.runner.heartbeat import DEFAULT_START_EVENT_AFTER, Heartbeat
from phaselog.runner.outcome import Failure, Success, runner_failure
from phaselog.runner.result import PhaseOutcome, RunResult, after_writes
from phaselog.runner.signals import Interrupt, SignalGuard, in_main_thread
from phaselog.stores.base import Stored
from phaselog.stores.snapshot import RunSnapshot

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger

#: Delays between tries of a checkpoint write that hit a store error (the phase itself succeeded).
RECORD_RETRY_DELAYS = (0.1, 0.3, 1.0, 2.0, 4.0, 8.0)
MAX_BACKOFF_S = 300.0

#: Runs one attempt of a phase: (phase, ctx) -> Success | Failure.
Executor = Callable[[Phase, PhaseContext], Success | Failure]


def backoff_delay(execution: Execution, retry: int) -> float:
    """Seconds to wait before retry number ``retry`` (1-based), with ±10 % jitter."""
    base = execution.retry_delay
    if execution.backoff == "none" or base <= 0:
        return 0.0
    if execution.backoff == "fixed":
        delay = base
    elif execution.backoff == "linear":
        delay = base * retry
    else:
        delay = base * 2 ** (retry - 1)
    return min(delay, MAX_BACKOFF_S) * random.uniform(0.9, 1.1)  # noqa: S311 - jitter, not secrecy


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
    ) -> None:
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

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run the pipeline; see the module docstring for what is raised."""
        pl = self.pipeline
        if any(p.execution.timeout for p in pl.phases) and not in_main_thread():
            raise UsageError(
                "phase timeouts need the main thread (they use SIGALRM); call run() from it", field="timeout"
            )
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
        for i, p in enumerate(plan.phases):
            self.signals.check()
            if p.action == SKIP:
                self.echo(f"skip {p.phase}: {p.reason}")
                self.outcomes.append(PhaseOutcome(p.phase, "skipped", p.reason, attempt=p.attempt))
                continue
            if p.action in (WAIT, BLOCKED, NOT_REACHED):
                self.echo(f"{p.action} {p.phase}: {p.reason}")
                self._rest(plan.phases[i:])
                return p.phase if p.action == WAIT else None
            if self.before_phase is not None:
                self.before_phase(p.phase)  # a worker: notes the phase; may stop the run here
            outcome = self._run_phase(p)
            self.outcomes.append(outcome)
            if outcome.outcome == "waiting":
                self._rest(plan.phases[i + 1 :], reason=f"the run waits at {p.phase} for approval")
                return p.phase
        return None

    def _rest(self, plans: Sequence[PhasePlan], reason: str | None = None) -> None:
        for p in plans:
            outcome = {WAIT: "waiting", BLOCKED: "blocked"}.get(p.action, "not_reached")
            self.outcomes.append(PhaseOutcome(p.phase, outcome, reason or p.reason, attempt=p.attempt))

    # -- one phase ------------------------------------------------------------------------------
    def _run_phase(self, plan: PhasePlan) -> PhaseOutcome:
        assert self.lease is not None
        assert self.heartbeat is not None
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
                time.sleep(delay)
            if self.heartbeat.fenced is not None:
                raise self.heartbeat.fenced
            started = datetime.now(UTC)  # the attempt's work starts now: its start event and checkpoint say so
            ctx = PhaseContext(
                ledger=self.ledger,
                pipeline=self.pipeline,
                ticket_id=self.ticket_id,
                run_id=self.run_id,
                phase=ph.name,
                attempt=attempt,
                workdir=self.workdir,
                resume_from_step=resume,
                rejection=plan.rejection,
                payloads=self.payloads,
                heartbeat=self.heartbeat,
                lease=self.lease,
                started_at=started,
                params=self.params,
            )
            self.heartbeat.begin(ph.name, attempt, self.pipeline, started)
            try:
                outcome = self._attempt(executor, ph, ctx)
            finally:
                self.heartbeat.end()
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
        try:
            if ph.execution.run is None:
                with leasing.marking(self.lease):
                    return executor(ph, ctx)
            return executor(ph, ctx)
        except Exception as exc:
            leasing.end_marked(self.lease)
            if isinstance(exc, Fenced):
                raise  # another runner holds the run: nothing of ours may be written
            return runner_failure(exc)
        except BaseException:
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
        with self.signals.critical():
            for delay in (*RECORD_RETRY_DELAYS, None):
                try:
                    done = self.ledger.write(self.ticket_id, self.run_name or self.run_id, ph.name, payload, **kwargs)
                    if self.written is not None:
                        self.written.append(done.stored)
                    return
                except Fenced:
                    raise
                except AlreadyExists as exc:
                    if last is not None and self._landed(ph, kwargs):
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
            stored = self.ledger.read(self.ticket_id, self.run_id, ph.name, kwargs["attempt"], pipeline=self.pipeline)
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


def run_params(pl: Pipeline, snap: RunSnapshot, given: Mapping[str, Any] | None, label: str) -> dict[str, Any] | None:
    """The run's parameters: those recorded (a rerun that gives none), else ``given`` over the schema's
    defaults, checked (UsageError naming the parameter); a rerun whose parameters differ from the
    recorded ones is refused, naming each difference (D261)."""
    recorded = snap.params()
    if given is None and recorded is not None:
        return recorded
    wanted = resolve_params(pl.params, given)
    if recorded is None:  # a new run (or one whose records carry none, e.g. written by `phaselog write`)
        return wanted
    diff = differences(recorded, wanted)
    if diff:
        raise UsageError(
            f"run {label} was recorded with other parameters ({'; '.join(diff)}); a run keeps its parameters: "
            "rerun it with the recorded ones (or none), or start a new run id to change them",
            field="params",
            rule="params_changed",
            differences=diff,
        )
    return wanted


def default_workdir(workdir: str | os.PathLike[str] | None) -> Path:
    """The runner's working directory (artifacts are relative to it): given, else the current one."""
    path = Path(workdir) if workdir is not None else Path.cwd()
    if not path.is_dir():
        raise UsageError(f"--workdir {path} is not a folder", field="workdir")
    return path.absolute()
