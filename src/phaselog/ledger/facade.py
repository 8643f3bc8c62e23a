"""The Python API: the Ledger over one store, and the Run facade over one run.

    >>> import phaselog
    >>> ledger = phaselog.open("/tmp/pl-doc")                      # files store at that root
    >>> run = ledger.run("PROJ-1234", "a1b2c3d4")                   # ticket-pipeline by default
    >>> run.write("implement", {"branch_name": "feat/x", "commit_sha": "a1b2c3d",
    ...                          "files_changed": ["src/x.py"]}).record.attempt_number
    1
    >>> run.status().next_phase
    'local_review'

The Ledger holds a store, a clock and a pipeline resolver, and is *composed* of services, each in
its own module and each handed what it needs (the store, the clock, the resolver, the services it
reads through); no service knows the Ledger:

==================  ====================================  ===========================================
attribute           service (module)                      what it does
==================  ====================================  ===========================================
``pipelines``       PipelineResolver (resolve.py)         a run's pipeline: recorded, marker, default
``reads``           Reads (reads.py)                      read, list, run_records, validate
``states``          RunStates (runstate.py)               status, can_skip_to (one snapshot)
``writes``          Writes (writes.py)                    write: one snapshot plus one append
``events``          Progress (progress.py)                progress events, attempts in flight
``gates``           Gates (gates.py)                      approve, reject, approvals
``tickets``         Markers (markers.py)                  the ticket marker (``init``)
``audit``           Audit (audit.py)                      decisions, history, diff
``forks``           Forks (fork.py)                       fork a run through a phase
``verifier``        Verifier (verify.py)                  verify the hash links
``retention``       Pruner (retention.py)                 prune (and finish an interrupted prune)
==================  ====================================  ===========================================

The Ledger's public methods (``write``, ``status``, ``approve`` …) are those services' methods,
bound by :func:`delegate`: same signature, same docstring, one definition. ``Run`` is the facade
a caller of one run needs (write, fail, read, status, progress, approve/reject, history,
in_flight). Import/export (``phaselog.transfer.jsonl``), ``doctor`` and the dashboard's queue
(``phaselog.ledger.gates.approval_queue``) are functions over a Ledger.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from phaselog.model.ids import given_run_name, normalize_run_id, validate_ticket_id
from phaselog.stores import Store, Stored, open_store
from phaselog.stores.base import local_root

if TYPE_CHECKING:
    from phaselog.ledger.audit import Audit
    from phaselog.ledger.derive import RunStatus
    from phaselog.ledger.fork import Forks
    from phaselog.ledger.gates import Gates
    from phaselog.ledger.markers import Markers
    from phaselog.ledger.progress import Flight, Progress
    from phaselog.ledger.reads import Page, Reads
    from phaselog.ledger.resolve import PipelineArg, PipelineResolver
    from phaselog.ledger.retention import Pruner
    from phaselog.ledger.status import RunStates, SkipDecision
    from phaselog.ledger.verify import Verifier, VerifyReport
    from phaselog.ledger.writes import WriteResult, Writes
    from phaselog.model.entries import Approval, ProgressEvent
    from phaselog.model.pipelines import Pipeline
    from phaselog.model.validation import Report


class _Lazy:
    """A name in a module not imported yet: attribute access builds the path, a call imports it.

    The services' modules are imported when a Ledger first uses them, so a command pays only for the
    services it calls (``phaselog read`` never imports writes, gates, audit …; D77).
    """

    __slots__ = ("module", "path")

    def __init__(self, module: str, *path: str) -> None:
        self.module = module
        self.path = path

    def __getattr__(self, name: str) -> _Lazy:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Lazy(self.module, *self.path, name)

    def resolve(self) -> Any:
        """Import the module and return the object the path names."""
        obj: Any = importlib.import_module(self.module)
        for name in self.path:
            obj = getattr(obj, name)
        return obj

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


if not TYPE_CHECKING:  # the names the class bodies below use at run time, imported on first use
    Audit = _Lazy("phaselog.ledger.audit", "Audit")
    Forks = _Lazy("phaselog.ledger.fork", "Forks")
    Gates = _Lazy("phaselog.ledger.gates", "Gates")
    Markers = _Lazy("phaselog.ledger.markers", "Markers")
    Progress = _Lazy("phaselog.ledger.progress", "Progress")
    Pruner = _Lazy("phaselog.ledger.retention", "Pruner")
    Reads = _Lazy("phaselog.ledger.reads", "Reads")
    PipelineResolver = _Lazy("phaselog.ledger.resolve", "PipelineResolver")
    RunStates = _Lazy("phaselog.ledger.status", "RunStates")
    Verifier = _Lazy("phaselog.ledger.verify", "Verifier")
    Writes = _Lazy("phaselog.ledger.writes", "Writes")

#: Names this module re-exports, imported on first access (PEP 562).
_REEXPORTS = {
    "Page": "phaselog.ledger.reads",
    "PipelineArg": "phaselog.ledger.resolve",
    "SkipDecision": "phaselog.ledger.status",
    "WriteResult": "phaselog.ledger.writes",
}


def __getattr__(name: str) -> Any:
    if name in _REEXPORTS:
        value = getattr(importlib.import_module(_REEXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Ledger", "Page", "PipelineArg", "Run", "SkipDecision", "WriteResult", "delegate"]

P = ParamSpec("P")
R = TypeVar("R")


class delegate(Generic[P, R]):
    """A Ledger method that is a service's method: ``write = delegate("writes", Writes.write)``.

    On an instance it returns the service's bound method (its signature and docstring); on the
    class, the service's function (so ``help(Ledger.write)`` shows the service's docstring).
    """

    def __init__(self, service: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.service = service
        self._method = method
        # A method of a service not imported yet (a _Lazy path) is looked up when first needed.
        self.name: str = method.path[-1] if isinstance(method, _Lazy) else method.__name__

    @property
    def method(self) -> Callable[Concatenate[Any, P], R]:
        """The service's function (its module is imported now if it was not yet)."""
        if isinstance(self._method, _Lazy):
            self._method = self._method.resolve()
        return self._method

    @property
    def __doc__(self) -> str | None:  # type: ignore[override]  # the method's docstring, read when asked for
        return self.method.__doc__

    @property
    def __wrapped__(self) -> Callable[Concatenate[Any, P], R]:
        return self.method

    @overload
    def __get__(self, obj: None, owner: type) -> Callable[Concatenate[Any, P], R]: ...

    @overload
    def __get__(self, obj: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type) -> Callable[..., R]:
        if obj is None:
            return self.method
        bound: Callable[P, R] = getattr(getattr(obj, self.service), self.name)
        return bound


T = TypeVar("T")
_UNSET: Any = object()


class service(Generic[T]):
    """A Ledger service, built (and its module imported) on first use, once per Ledger.

    ``build`` gets the Ledger and returns the service, asking the Ledger for the services it needs.
    """

    def __init__(self, build: Callable[[Ledger], T]) -> None:
        self.build = build
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> service[T]: ...

    @overload
    def __get__(self, obj: Ledger, owner: type) -> T: ...

    def __get__(self, obj: Ledger | None, owner: type) -> service[T] | T:
        if obj is None:
            return self
        # Once built, the service sits in the instance's __dict__, found before this descriptor.
        with obj._building:  # reentrant: building one service may build those it needs
            found = obj.__dict__.get(self.name, _UNSET)
            if found is _UNSET:
                found = obj.__dict__[self.name] = self.build(obj)
        return found  # type: ignore[no-any-return]  # the builder's T


class Ledger:
    """The checkpoint ledger over one store, composed of services (see the module docstring)."""

    def __init__(
        self,
        store: Store | None = None,
        *,
        pipelines_root: str | os.PathLike[str] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store: Store = store if store is not None else open_store()
        self.pipelines_root = pipelines_root if pipelines_root is not None else local_root(self.store)
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self._building = threading.RLock()

    # -- the services, each built on first use (D77) ---------------------------------------------
    pipelines = service(lambda lg: PipelineResolver(lg.store, lg.pipelines_root))
    reads = service(lambda lg: Reads(lg.store, lg.clock, lg.pipelines))
    states = service(lambda lg: RunStates(lg.store, lg.clock, lg.pipelines, lg.reads))
    writes = service(lambda lg: Writes(lg.store, lg.clock, lg.pipelines, lg.states))
    events = service(lambda lg: Progress(lg.store, lg.clock, lg.pipelines))
    gates = service(lambda lg: Gates(lg.store, lg.clock, lg.pipelines))
    tickets = service(lambda lg: Markers(lg.store, lg.clock, lg.pipelines.load))
    audit = service(
        lambda lg: Audit(
            lg.store, pipelines=lg.pipelines, reads=lg.reads, events=lg.events, gates=lg.gates, tickets=lg.tickets
        )
    )
    forks = service(lambda lg: Forks(lg.store, pipelines=lg.pipelines, states=lg.states, writes=lg.writes))
    verifier = service(
        lambda lg: Verifier(lg.store, reads=lg.reads, events=lg.events, gates=lg.gates, tickets=lg.tickets)
    )

    def __repr__(self) -> str:
        return f"Ledger({self.store!r})"

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, ticket_id: str, run_id: str, *, pipeline: PipelineArg = None) -> Run:
        """A handle on one run (ticket and run id validated now)."""
        run = Run(self, validate_ticket_id(ticket_id), normalize_run_id(run_id), pipeline)
        run.run_name = given_run_name(run_id)
        return run

    # -- pipelines (resolve.py) -------------------------------------------------------------------
    load_pipeline = delegate("pipelines", PipelineResolver.load)
    recorded_pipeline = delegate("pipelines", PipelineResolver.recorded)
    pipeline_for = delegate("pipelines", PipelineResolver.for_run)

    # -- checkpoints: write (writes.py), read (reads.py), state (runstate.py) -------------------------
    write = delegate("writes", Writes.write)
    read = delegate("reads", Reads.read)
    list = delegate("reads", Reads.list)
    run_records = delegate("reads", Reads.run_records)
    validate = delegate("reads", Reads.validate)
    status = delegate("states", RunStates.status)
    can_skip_to = delegate("states", RunStates.can_skip_to)

    # -- progress events (progress.py) ------------------------------------------------------------
    progress = delegate("events", Progress.progress)
    progress_events = delegate("events", Progress.progress_events)
    progress_latest = delegate("events", Progress.progress_latest)
    progress_event = delegate("events", Progress.progress_event)
    damaged_events = delegate("events", Progress.damaged_events)
    event_index = delegate("events", Progress.event_index)
    in_flight = delegate("events", Progress.in_flight)

    # -- approvals (gates.py) ---------------------------------------------------------------------
    approve = delegate("gates", Gates.approve)
    reject = delegate("gates", Gates.reject)
    approvals = delegate("gates", Gates.approvals)
    damaged_approvals = delegate("gates", Gates.damaged_approvals)

    # -- ticket markers (markers.py) --------------------------------------------------------------
    init_ticket = delegate("tickets", Markers.init_ticket)
    markers = delegate("tickets", Markers.markers)
    marker = delegate("tickets", Markers.marker)
    damaged_markers = delegate("tickets", Markers.damaged_markers)

    # -- audit trail (audit.py, fork.py, verify.py) -----------------------------------------------
    decisions = delegate("audit", Audit.decisions)
    history = delegate("audit", Audit.history)
    diff = delegate("audit", Audit.diff)
    diff_phase = delegate("audit", Audit.diff_phase)
    phase_diffs = delegate("audit", Audit.phase_diffs)
    fork = delegate("forks", Forks.fork)
    verify = delegate("verifier", Verifier.verify)

    # -- retention (retention.py; most commands never prune) ---------------------------------------
    retention = service(lambda lg: Pruner(lg.store, lg.clock, reads=lg.reads, events=lg.events, gates=lg.gates))
    prune = delegate("retention", Pruner.prune)


class Run:
    """One run of a pipeline for a ticket: the everyday API (a facade over :class:`Ledger`)."""

    def __init__(self, ledger: Ledger, ticket_id: str, run_id: str, pipeline: PipelineArg) -> None:
        self.ledger = ledger
        self.ticket_id = ticket_id
        self.run_id = run_id
        #: The run id as given (``nightly-1``), kept with each checkpoint; None for a UUID.
        self.run_name: str | None = None
        self._pipeline = pipeline

    def __repr__(self) -> str:
        return f"Run({self.ticket_id!r}, {self.run_id!r})"

    @property
    def pipeline(self) -> Pipeline:
        """The run's pipeline."""
        return self.ledger.pipeline_for(self.ticket_id, self.run_id, self._pipeline)

    # -- checkpoints ------------------------------------------------------------------------------
    def write(self, phase: str | int, payload: Mapping[str, Any] | None = None, **kw: Any) -> WriteResult:
        """Record a completed attempt of ``phase`` (keywords as :meth:`Ledger.write`)."""
        rid = self.run_name or self.run_id
        return self.ledger.write(self.ticket_id, rid, phase, payload, pipeline=self._pipeline, **kw)

    def fail(self, phase: str | int, error: str, **kw: Any) -> WriteResult:
        """Record a failed attempt of ``phase``; the next try gets the next attempt number."""
        return self.ledger.write(
            self.ticket_id,
            self.run_name or self.run_id,
            phase,
            kw.pop("payload", None),
            pipeline=self._pipeline,
            status="failed",
            error=error,
            **kw,
        )

    def read(self, phase: str | int, attempt: int | None = None) -> Stored:
        """Read the latest completed checkpoint of ``phase`` (or one attempt)."""
        return self.ledger.read(self.ticket_id, self.run_id, phase, attempt, pipeline=self._pipeline)

    def validate(self, phase: str | int, attempt: int | None = None, **kw: Any) -> tuple[Stored, Report]:
        """Validate a checkpoint of ``phase`` (keywords as :meth:`Ledger.validate`)."""
        return self.ledger.validate(self.ticket_id, self.run_id, phase, attempt, pipeline=self._pipeline, **kw)

    # -- state ------------------------------------------------------------------------------------
    def status(self) -> RunStatus:
        """Derive the run's state (one snapshot of the run)."""
        return self.ledger.status(self.ticket_id, self.run_id, pipeline=self._pipeline)

    def can_skip_to(self, phase: str | int, **kw: Any) -> SkipDecision:
        """May the run skip to ``phase``? (keywords as :meth:`Ledger.can_skip_to`)"""
        return self.ledger.can_skip_to(self.ticket_id, self.run_id, phase, pipeline=self._pipeline, **kw)

    def in_flight(self, *, stale_after: timedelta | None = None) -> dict[str, Flight]:
        """Per phase, the attempt in flight (progress events, no checkpoint yet)."""
        return self.ledger.in_flight(self.ticket_id, self.run_id, stale_after=stale_after)

    # -- progress events --------------------------------------------------------------------------
    def progress(self, phase: str | int, event: str, **kw: Any) -> ProgressEvent:
        """Append a progress event to ``phase``'s attempt in flight (``"start"`` opens one;
        keywords as :meth:`Ledger.progress`: step, output, tokens, provider, status, pid …)."""
        return self.ledger.progress(self.ticket_id, self.run_id, phase, event, pipeline=self._pipeline, **kw)

    def progress_events(self, phase: str | int, attempt: int | None = None) -> list[ProgressEvent]:
        """Every event of an attempt of ``phase`` (default: the attempt in flight), oldest first."""
        return self.ledger.progress_events(self.ticket_id, self.run_id, phase, attempt, pipeline=self._pipeline)

    # -- approvals --------------------------------------------------------------------------------
    def approve(self, phase: str | int, *, by: str, **kw: Any) -> tuple[Approval, list[str]]:
        """Record that ``by`` approves ``phase``'s latest completed checkpoint (or ``attempt=``;
        keywords as :meth:`Ledger.approve`: comment, attempt, checkpoint_hash)."""
        return self.ledger.approve(self.ticket_id, self.run_id, phase, by=by, pipeline=self._pipeline, **kw)

    def reject(self, phase: str | int, *, by: str, **kw: Any) -> tuple[Approval, list[str]]:
        """Record that ``by`` rejects ``phase``'s latest completed checkpoint (see :meth:`approve`)."""
        return self.ledger.reject(self.ticket_id, self.run_id, phase, by=by, pipeline=self._pipeline, **kw)

    def approvals(self) -> list[Approval]:
        """Every approval and rejection of the run, in the order they were recorded."""
        return self.ledger.approvals(self.ticket_id, self.run_id)

    # -- audit ------------------------------------------------------------------------------------
    def history(self, phase: str | None = None) -> list[dict[str, Any]]:
        """Every record of the run (or of one phase) in time order: events, checkpoints, approvals."""
        return self.ledger.history(self.ticket_id, self.run_id, phase)

    def verify(self) -> VerifyReport:
        """Verify this run's hash links."""
        return self.ledger.verify(self.ticket_id, self.run_id)
