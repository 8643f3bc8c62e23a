"""A worker process: claim runs from the PostgreSQL queue and run them with the runner.

One worker runs one run at a time, in its main thread (so signals and sync phase timeouts work;
``--concurrency N`` starts N worker processes, :mod:`phaselog.runner.pool`). The loop:

1. claim (:func:`phaselog.stores.sql.queue.claim.claim`): a queued run that is due, or a
   running one whose worker died (heartbeat expired, or a process on this host that is gone);
2. run it with the runner under the run's lease (fenced writes, heartbeats); before each phase
   the worker notes the phase in the queue row and learns whether a cancel was asked;
3. move the row: ``done``; ``awaiting_approval`` at a gate (the worker is free; ``approve``
   re-queues it); ``dead`` with the reason when a phase failed after its retries or the
   pipeline cannot run here; ``cancelled``; back to ``queued`` when the worker stops;
4. idle: block in ``LISTEN`` until a submit notifies, or the poll interval passes.

SIGTERM/SIGINT: finish the phase in progress, release the run at the next phase boundary and
exit 0; past ``grace`` seconds (or at a second signal) the phase is interrupted (recorded as
``interrupted``), the run released, and the worker exits 143/130. Every row transition is
fenced by the claim's token, every checkpoint by the run lease's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from phaselog.ledger.attempts import process_gone
from phaselog.ledger.pool import ledger_for, sibling_store
from phaselog.model.errors import (
    Fenced,
    PhaseFailed,
    PhaselogError,
    PipelineError,
    PipelineMismatch,
    RunHeld,
    RunInterrupted,
    StoreError,
    UsageError,
)
from phaselog.model.ids import run_label
from phaselog.model.pipelines import find_pipeline, load_manifest, pipeline_from_dict
from phaselog.runner.definition import PipelineRunner
from phaselog.runner.lease import process_start_time
from phaselog.runner.signals import SignalGuard
from phaselog.stores.sql.queue import claim as flow
from phaselog.stores.sql.queue.rows import AWAITING, CANCELLED, DEAD, DONE, QUEUED, Claim, QueueEntry, SqlQueue

if TYPE_CHECKING:
    from phaselog.runner.definition import PipelineRunner
    from phaselog.runner.result import RunResult
    from phaselog.stores.base import Store

DEFAULT_POLL = 2.0
DEFAULT_GRACE = 30.0
DEFAULT_MAX_RECOVERIES = 3
#: A run held by another runner (``phaselog run`` by hand, say) is retried after this long.
HELD_RETRY_S = 5.0


def _nothing_ran(claim: Claim, result: RunResult) -> str | None:
    """The reason of a ``done`` row whose claim ran no phase: the run was complete already (D119).

    Decided by the runner's own plan (every phase skipped as complete), not by a second reading.
    """
    if not result.phases or any(p.outcome != "skipped" for p in result.phases):
        return None
    if claim.recovered_from:
        return "every phase was already complete when the run was recovered; nothing ran"
    return (
        "completed outside the queue (`phaselog run`, `write` …): every phase was already complete "
        "when a worker claimed it; nothing ran"
    )


def _label(entry: QueueEntry) -> str:
    """A run in the worker's progress lines: ``ticket/name`` (the UUID when it has no name)."""

    return f"{entry.ticket_id}/{run_label(entry.run_id, entry.run_name)}"


class _Stop(Exception):
    """Raised before a phase: leave the run between phases (reason in ``args[0]``)."""

    def __init__(self, state: str, reason: str) -> None:
        super().__init__(reason)
        self.state = state
        self.reason = reason


class _Wake(BaseException):
    """A signal arrived while the worker was idle."""


@dataclass
class WorkerOptions:
    """How a worker behaves (the ``phaselog worker`` options)."""

    queue: str = "default"
    pipelines: Path | None = None
    workdir: Path | None = None
    log_dir: Path | None = None
    #: What the store keeps of each attempt's output (its tail, bytes; None: the default, 1 MiB).
    log_cap: int | None = None
    ttl: float = 30.0
    grace: float = DEFAULT_GRACE
    max_recoveries: int = DEFAULT_MAX_RECOVERIES
    poll: float = DEFAULT_POLL
    burst: bool = False
    max_runs: int | None = None
    #: Phases of one run side by side (``--max-parallel``; a DAG run; D290).
    max_parallel: int = 1


class DrainGuard(SignalGuard):
    """The runner's signal guard in a worker: the first signal lets the phase finish.

    The worker stops at the next phase boundary; if the phase is still running ``grace``
    seconds later (or another signal comes), it is interrupted as ``phaselog run`` would be.
    """

    def __init__(self, worker: Worker) -> None:
        super().__init__(True)
        self.worker = worker
        self._timer: threading.Timer | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.worker.stopping:
            self.worker.stop_signal(signum)
            self._timer = threading.Timer(self.worker.options.grace, os.kill, (os.getpid(), signum))
            self._timer.daemon = True
            self._timer.start()
            return
        super()._handle(signum, frame)

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        super().__exit__(*exc)


class Worker:
    """One worker process (see the module docstring)."""

    def __init__(self, store_url: str, options: WorkerOptions, *, echo: Callable[[str], None] | None = None) -> None:

        self.url = store_url
        self.options = options
        self.echo = echo or (lambda _text: None)
        self.ledger, _ = ledger_for(store_url)  # opened here: closed when the worker ends
        self.queue = SqlQueue(self.ledger.store)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.process_start = process_start_time(self.pid)
        self.worker_id = f"{self.host}:{self.pid}:{os.urandom(3).hex()}"
        self.stopping = False
        self.stop_signum: int | None = None
        self._idle = False
        self._beat_stop = threading.Event()
        self._beat_thread: threading.Thread | None = None
        self._listener: Any = None
        self.runs = 0
        self.counts: dict[str, int] = {}
        if options.pipelines is not None and str(options.pipelines) not in sys.path:
            sys.path.insert(0, str(options.pipelines))  # call: modules next to the manifests

    # -- signals ----------------------------------------------------------------------------------
    def stop_signal(self, signum: int) -> None:
        """The first SIGTERM/SIGINT: stop taking runs; the current phase may finish."""
        self.stopping = True
        self.stop_signum = signum
        self.echo(
            f"{signal.Signals(signum).name}: finishing the current phase (grace {self.options.grace:g} s), "
            "then releasing the run and exiting"
        )

    def _on_idle_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stopping:
            self.stop_signal(signum)
        if self._idle:
            raise _Wake()

    # -- the loop ---------------------------------------------------------------------------------
    def serve(self) -> int:
        """Claim and run until stopped (or, with ``burst``, until nothing is left); the exit code."""
        old = {s: signal.signal(s, self._on_idle_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        code = 0
        try:
            self._register(self.queue)
            self._start_heartbeat()
            self.echo(f"worker {self.worker_id} serving queue {self.options.queue!r} of {self.ledger.store!r}")
            self.queue.forget_workers(self._dead_local(), expired_for=max(3600.0, 10 * self.options.ttl))
            while not self.stopping:
                if self.options.max_runs is not None and self.runs >= self.options.max_runs:
                    break
                claimed = flow.claim(
                    self.queue,
                    self.worker_id,
                    queue=self.options.queue,
                    dead_local=self._dead_local(),
                    max_recoveries=self.options.max_recoveries,
                )
                if claimed is None:
                    if self.options.burst:
                        break
                    self._wait()
                    continue
                code = self.run_claim(claimed)
                self.runs += 1
        finally:
            self._beat_stop.set()
            self._close_listener()
            with contextlib.suppress(PhaselogError):  # best effort: an expired row is forgotten later
                self.queue.unregister(self.worker_id)
            for s, h in old.items():
                signal.signal(s, h)
            self.ledger.close()
        if self.stop_signum is not None and code == 0:
            return 0  # stopped cleanly between phases
        return code

    def _dead_local(self) -> list[str]:
        """Workers registered from this host whose process is provably gone."""

        return [
            worker_id
            for worker_id, pid, started in self.queue.workers_on(self.host)
            if worker_id != self.worker_id
            and process_gone(self.host, pid, started, here=self.host, start_time_of=process_start_time)
        ]

    # -- one run ----------------------------------------------------------------------------------
    def run_claim(self, claim: Claim) -> int:
        """Run a claimed run and move its row; the worker's exit code if it must stop (else 0)."""
        e = claim.entry
        label = _label(e)
        if claim.recovered_from:
            self.echo(f"recovering {label} (recovery {e.recoveries}): {claim.recovered_from}")
        else:
            self.echo(f"claimed {label} ({e.pipeline})")
        try:
            pipe = self.pipeline_for(claim)
        except (PipelineError, UsageError) as exc:
            return self._end(claim, DEAD, f"the pipeline cannot run on this worker: {exc.message}")

        def before_phase(phase: str) -> None:
            if self.stopping:
                raise _Stop(QUEUED, f"released between phases (before {phase}): its worker was stopping")
            asked = flow.mark_phase(self.queue, claim, phase)
            if asked is None:
                raise _Stop("", "the queue row was taken over (this worker was presumed dead)")
            if asked:
                raise _Stop(CANCELLED, f"cancelled between phases (before {phase})")

        try:
            result = pipe.run(
                e.ticket_id,
                e.run_name or e.run_id,  # by the name it was submitted with: its checkpoints keep it
                store=self.ledger,
                workdir=self.options.workdir,
                # A dead worker's lease may outlive its heartbeat row by a little: wait for it.
                wait=self.options.ttl + 5.0 if claim.recovered_from else False,
                ttl=self.options.ttl,
                log_dir=self.options.log_dir,
                log_cap=self.options.log_cap,
                echo=lambda text: self.echo(f"{label}: {text}"),
                before_phase=before_phase,
                signals=DrainGuard(self),
                params=e.params_doc,  # `submit --param`: checked again here, before anything runs
                max_parallel=self.options.max_parallel,
            )
        except _Stop as stop:
            if not stop.state:
                self.echo(f"{label}: {stop.reason}; left alone")
                return 0
            if stop.state == CANCELLED:
                return self._end(claim, CANCELLED, self._cancel_reason(claim, stop.reason))
            return self._end(claim, QUEUED, stop.reason)
        except PhaseFailed as exc:
            return self._end(claim, DEAD, exc.message)  # "phase P failed after N attempt(s) (…): why"
        except RunInterrupted as exc:
            self._end(claim, QUEUED, f"released: the phase in progress was interrupted ({exc.message})")
            return int(exc.exit_code)
        except RunHeld as exc:
            return self._end(claim, QUEUED, f"held by another runner: {exc.message}", delay=HELD_RETRY_S)
        except Fenced as exc:
            self.echo(f"{label}: fenced: {exc.message}; the run is someone else's now")
            return 0
        except (PipelineMismatch, PipelineError, UsageError) as exc:
            return self._end(claim, DEAD, f"the pipeline cannot run on this worker: {exc.message}")
        except StoreError as exc:  # the database failed us (after the runner's retries): give the run back
            self._end(claim, QUEUED, f"released after a store error: {exc.message}", delay=HELD_RETRY_S)
            return 0
        if result.waiting:
            return self._end(claim, AWAITING, f"waiting for approval of {result.waiting}", phase=result.waiting)
        if result.done:
            return self._end(claim, DONE, _nothing_ran(claim, result))
        blocked = next((p for p in result.phases if p.outcome in ("blocked", "failed")), None)
        why = f"{blocked.phase}: {blocked.reason}" if blocked else "the run did not complete"
        return self._end(claim, DEAD, f"the run cannot go on: {why}")

    def _cancel_reason(self, claim: Claim, where: str) -> str:
        with contextlib.suppress(PhaselogError):
            asked = self.queue.get(claim.entry.ticket_id, claim.entry.run_id).reason
            if asked:
                return f"{asked}; {where}"
        return where

    def _end(self, claim: Claim, state: str, reason: str | None, *, phase: str | None = None, delay: float = 0) -> int:
        label = _label(claim.entry)
        moved = False
        for wait in (0.5, 1, 2, 4, 8, None):
            try:
                moved = flow.finish(self.queue, claim, state, reason=reason, phase=phase, delay=delay)
                break
            except StoreError as exc:
                if wait is None:
                    # Still alive but unable to move the row: exit, so that the row is recovered.
                    self.echo(f"{label}: cannot record {state} ({exc.message}); exiting so that it is recovered")
                    raise
                time.sleep(wait)
        self.counts[state] = self.counts.get(state, 0) + 1
        self.echo(f"{label}: {state}" + (f" ({reason})" if reason else "") if moved else f"{label}: row lost")
        return 0

    def pipeline_for(self, claim: Claim) -> PipelineRunner:
        """The runnable pipeline of a claimed run: the submitted manifest, else found by name."""

        e = claim.entry
        doc = e.manifest_doc
        if doc is not None:
            pl = pipeline_from_dict(doc, source=f"<submitted manifest of {e.pipeline}>")
            if pl.manifest_hash != e.manifest_hash:
                raise PipelineError(f"the submitted manifest of {e.pipeline} does not match its hash", rule="hash")
        else:
            local = self.options.pipelines / f"{e.pipeline}.yaml" if self.options.pipelines else None
            pl = load_manifest(local) if local is not None and local.is_file() else find_pipeline(e.pipeline)
        return PipelineRunner(pl)

    # -- idle: LISTEN/NOTIFY, polling as the fallback ------------------------------------------------
    def _wait(self) -> None:
        self._idle = True
        try:
            if self.stopping:
                return
            listener = self._listen()
            if listener is None:
                time.sleep(self.options.poll)
                return
            try:
                for _ in listener.notifies(timeout=self.options.poll, stop_after=1):
                    break
            except _Wake:
                raise
            except Exception as exc:  # a dropped connection: poll, and listen again next time
                self.echo(f"listen: {type(exc).__name__}: {exc}".strip())
                self._close_listener()
        except _Wake:
            return
        finally:
            self._idle = False

    def _listen(self) -> Any:
        if self._listener is None:
            try:
                conn = self.queue.store.dialect.connect()
                from psycopg import sql  # lazy: the postgres extra may be absent (only a PostgreSQL queue listens)

                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.queue.channel)))
                self._listener = conn
            except Exception as exc:
                self.echo(f"listen: cannot connect ({exc}); polling every {self.options.poll:g} s")
                return None
        return self._listener

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self._listener.close()
            self._listener = None

    def _register(self, q: SqlQueue) -> None:
        q.register(self.worker_id, self.options.queue, self.host, self.pid, self.process_start, self.options.ttl)

    # -- heartbeat of the worker's row --------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        self._beat_thread = threading.Thread(target=self._beat, name="phaselog-worker-heartbeat", daemon=True)
        self._beat_thread.start()

    def _beat(self) -> None:

        store: Store | None = None
        try:
            while not self._beat_stop.wait(self.options.ttl / 3):
                try:
                    if store is None:
                        store = sibling_store(self.ledger.store)  # this thread's own connection
                    q = SqlQueue(store)
                    if not q.beat(self.worker_id, self.options.ttl):
                        # Declared dead and forgotten: come back (our claims are fenced by their tokens).
                        self._register(q)
                except Exception as exc:
                    sys.stderr.write(f"phaselog worker: heartbeat: {type(exc).__name__}: {exc}\n")
                    if store is not None:
                        with contextlib.suppress(Exception):
                            store.close()
                    store = None
        finally:
            if store is not None:
                with contextlib.suppress(Exception):
                    store.close()
