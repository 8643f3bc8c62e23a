"""``ctx``: what a phase function is handed.

@pipe.phase("extract")
def extract(ctx):
    ctx.logger.info("attempt %s of %s", ctx.attempt, ctx.phase)   # the attempt's log and the console
    rows = ctx.payload("fetch")["rows"]          # an earlier phase's payload
    for i in range(ctx.resume_after + 1, 4):     # after the last step an interrupted attempt finished
        ...
        ctx.step_done(i, output=f"chunk {i} done")   # step i is done (a progress event, and a heartbeat)
    return {"rows": rows}, ["out/rows.parquet"]

``ctx.step(n)`` and ``ctx.resume_from_step`` are the old names of ``step_done`` and ``resume_after``
(the same record, the same number; DeprecationWarning): they read as "step n starts" and "start at
step n", while the number is the last step recorded, i.e. done.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import NotFound, UsageError
from phaselog.runner.console import phase_logger

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger, Run
    from phaselog.model.pipelines import Phase, Pipeline
    from phaselog.runner.heartbeat import Heartbeat
    from phaselog.runner.lease import Lease
    from phaselog.runner.logsink import LogSink
    from phaselog.stores.base import Store


class PhaseContext:
    """One attempt of one phase, as its code sees it."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        pipeline: Pipeline,
        ticket_id: str,
        run_id: str,
        phase: str,
        attempt: int,
        workdir: Path,
        resume_from_step: int | None,
        rejection: str | None,
        payloads: dict[str, Mapping[str, Any]],
        heartbeat: Heartbeat,
        lease: Lease,
        started_at: datetime | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.ledger = ledger
        self.pipeline = pipeline
        self.ticket_id = ticket_id
        self.run_id = run_id
        self.phase = phase
        #: This attempt's number (attempts rise; a retry is a new attempt).
        self.attempt = attempt
        #: The runner's working directory: artifact paths are relative to it.
        self.workdir = workdir
        #: The last step an earlier, interrupted attempt of this phase recorded as done with
        #: ``step_done`` (0: none, start at the beginning): resume after it.
        self.resume_after: int = resume_from_step or 0
        self._last_step = resume_from_step
        #: The comment of the rejection that sent this phase back (None: not rejected).
        self.rejection = rejection
        #: When this attempt's work started (UTC): its start event and checkpoint carry it.
        self.started_at = started_at
        #: The run's parameters (``--param``, ``pipe.run(params=...)``), defaults applied; {}: none.
        self.params: dict[str, Any] = dict(params or {})
        # ctx.logger is made on first use (most phases never log): a logger and its two handlers
        # cost more than a no-op phase's whole attempt otherwise.
        self._logger: logging.Logger | None = None
        self._attach: Callable[[logging.Logger], None] | None = None
        self._logger_lock = threading.Lock()
        self._payloads = payloads
        #: Called after each ``step_done``: the runner appends the attempt's waiting log lines (runner/logsink.py).
        self.log_tick: Callable[[], None] | None = None
        self._heartbeat = heartbeat
        #: The runner's lease on the run (one runner per run; its fencing token goes with every
        #: write). A shell phase names its command's process group in it and hands its token to
        #: ``phaselog step``; phase code renews it through ``step_done`` and never releases it.
        self.lease = lease

    def __repr__(self) -> str:
        return f"PhaseContext({self.ticket_id!r}, {self.run_id!r}, {self.phase!r}, attempt={self.attempt})"

    @property
    def logger(self) -> logging.Logger:
        """Writes to the attempt's log and the run's console (see runner/console.py)."""
        logger = self._logger
        if logger is None:
            with self._logger_lock:
                if self._logger is None:
                    made = phase_logger(self.phase)
                    if self._attach is not None:
                        self._attach(made)
                    self._logger = made
                logger = self._logger
        return logger

    def on_logger(self, attach: Callable[[logging.Logger], None] | None) -> None:
        """Have ``attach(logger)`` called once ``ctx.logger`` is made (now, if it is already): the runner
        hangs the attempt's log and the console on it. None: no longer."""
        with self._logger_lock:
            self._attach = attach
            if attach is not None and self._logger is not None:
                attach(self._logger)

    @property
    def store(self) -> Store:
        """The store the run is recorded in."""
        return self.ledger.store

    @property
    def run(self) -> Run:
        """The run's :class:`phaselog.Run` facade (status, read …)."""
        return self.ledger.run(self.ticket_id, self.run_id, pipeline=self.pipeline)

    def payload(self, phase: str) -> Mapping[str, Any]:
        """The payload of an earlier phase's latest completed checkpoint (NotFound if none)."""
        if phase in self._payloads:
            return self._payloads[phase]
        target = self.pipeline.phase(phase)
        mine = self.pipeline.phase(self.phase)
        if target.ordinal >= mine.ordinal:
            raise UsageError(f"ctx.payload({phase!r}): only earlier phases' payloads are available", field="phase")
        try:
            stored = self.ledger.read(self.ticket_id, self.run_id, phase, pipeline=self.pipeline)
        except NotFound:
            raise NotFound(f"phase {phase} has no completed checkpoint in run {self.run_id}", phase=phase) from None
        payload = dict(stored.record.phase_payload or {})
        self._payloads[phase] = payload
        return payload

    @property
    def resume_from_step(self) -> int | None:
        """Deprecated: ``resume_after`` (the last step recorded done; None here when there is none)."""
        warnings.warn(
            "ctx.resume_from_step is deprecated: use ctx.resume_after, the last step recorded done "
            "(resume with step ctx.resume_after + 1)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._last_step

    def log_sink(self, phase: Phase, cap: int, say: Callable[[str], None] | None) -> LogSink:
        """The sink that keeps this attempt's output in the store (shell and Python phases alike)."""
        from phaselog.runner.logsink import LogSink  # lazy: only a phase that runs keeps output

        return LogSink(
            self.store,
            ticket_id=self.ticket_id,
            run_id=self.run_id,
            phase=phase.name,
            ordinal=phase.ordinal,
            attempt=self.attempt,
            cap=cap,
            say=say,
        )

    def step_done(self, step: int, *, output: str | bytes | None = None, tokens: int | None = None) -> None:
        """Record that step ``step`` (1, 2, …) of this attempt is done: a progress event, and a renewal of
        the run's lease. An attempt interrupted after it resumes with ``resume_after == step``."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise UsageError(f"ctx.step_done(step): step must be an integer ≥ 1, got {step!r}", field="step")
        self._record(step, output, tokens)

    def step(self, step: int, *, output: str | bytes | None = None, tokens: int | None = None) -> None:
        """Deprecated: ``step_done`` (the same record: step ``step`` is done)."""
        warnings.warn(
            "ctx.step(n) is deprecated: use ctx.step_done(n) once step n is done (an interrupted attempt "
            "resumes after it, at ctx.resume_after + 1)",
            DeprecationWarning,
            stacklevel=2,
        )
        self._record(step, output, tokens)

    def _record(self, step: int, output: str | bytes | None, tokens: int | None) -> None:
        """Record a progress event (step N of this attempt); also renews the run's lease."""
        if self._heartbeat.fenced is not None:
            raise self._heartbeat.fenced
        self._heartbeat.ensure_started(
            self.ledger, self.ticket_id, self.run_id, self.phase, self.attempt, self.pipeline
        )
        if self.lease.due():
            self.lease.renew()
        self.ledger.progress(
            self.ticket_id,
            self.run_id,
            self.phase,
            "step",
            attempt=self.attempt,
            step=step,
            output=output,
            tokens=tokens,
            pipeline=self.pipeline,
        )
        if self.log_tick is not None:
            self.log_tick()
