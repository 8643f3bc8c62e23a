"""Pipelines the runner runs: ``phaselog.pipeline(...)`` and the ``@pipe.phase`` decorator.

    pipe = phaselog.pipeline("data-job")                      # a manifest by name or path
    pipe = phaselog.pipeline("data-job", phases=["extract", {"name": "load", "requires_approval": True}])

    @pipe.phase("extract", retries=3, backoff="exponential", timeout="30m")
    def extract(ctx): ...

    result = pipe.run(ticket_id="CHURN-7", run_id="nightly-2026-11-30")

A phase runs its decorated function, or else its manifest ``run:`` command (a shell phase).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from phaselog.ledger.pool import ledger_for
from phaselog.model.errors import PipelineError, UsageError
from phaselog.model.execution import EXECUTION_KEYS, execution_from_dict
from phaselog.model.ids import given_run_name, normalize_run_id, validate_ticket_id
from phaselog.model.logs import DEFAULT_LOG_CAP, parse_log_cap
from phaselog.model.pipelines import (
    Phase,
    Pipeline,
    check_schemas,
    find_pipeline,
    load_manifest,
    pipeline_from_dict,
)
from phaselog.runner.explain import explain
from phaselog.runner.lease import DEFAULT_TTL
from phaselog.runner.outcome import Failure, Success
from phaselog.runner.result import RunResult
from phaselog.stores.files.store import default_root

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger
    from phaselog.ledger.pool import StoreArg
    from phaselog.ledger.resolve import PipelineArg
    from phaselog.runner.console import Console
    from phaselog.runner.context import PhaseContext
    from phaselog.runner.engine import Executor
    from phaselog.runner.explain import Explanation
    from phaselog.runner.signals import SignalGuard


def pipeline(
    name_or_path: str | os.PathLike[str] | Pipeline,
    phases: Sequence[str | Mapping[str, Any]] | None = None,
    *,
    version: str = "1",
    description: str = "",
    order: str = "strict",
) -> PipelineRunner:
    """A runnable pipeline: a manifest (by name or path), a Pipeline, or ``phases=[...]`` in Python.

    ``phases`` items are names or manifest-style dicts (name, description, payload_schema,
    requires_approval, and the runner's keys run/env/timeout/retries/backoff/artifacts/fingerprint).
    """
    if isinstance(name_or_path, Pipeline):
        return PipelineRunner(name_or_path)
    text = os.fspath(name_or_path)
    if phases is not None:
        items = [{"name": p} if isinstance(p, str) else dict(p) for p in phases]
        doc = {"name": text, "version": version, "description": description, "order": order, "phases": items}
        return PipelineRunner(pipeline_from_dict(doc, source=f"<python pipeline {text}>"))
    if text.endswith((".yaml", ".yml", ".json")) or os.sep in text or Path(text).is_file():
        return PipelineRunner(load_manifest(text))

    try:
        return PipelineRunner(find_pipeline(text, default_root()))
    except PipelineError as exc:
        raise PipelineError(
            f"{exc.message}; or define it in Python: phaselog.pipeline({text!r}, phases=[...])", **exc.context
        ) from None


@dataclasses.dataclass
class _Bound:
    fn: Callable[..., Any]
    options: dict[str, Any]


class PipelineRunner:
    """A pipeline and the code of its phases; ``run`` executes it durably (see the module doc)."""

    def __init__(self, base: Pipeline) -> None:

        check_schemas(base)  # a payload_schema that is no JSON Schema is refused now, before any phase runs
        self.base = base
        self._bound: dict[str, _Bound] = {}

    def __repr__(self) -> str:
        return f"PipelineRunner({self.base.name!r}, phases={self.base.phase_names})"

    @property
    def name(self) -> str:
        """The pipeline's name."""
        return self.base.name

    def phase(
        self,
        name: str,
        *,
        retries: int | None = None,
        backoff: str | None = None,
        retry_delay: str | float | None = None,
        timeout: str | float | None = None,
        fingerprint: str | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorate the function that runs phase ``name`` (``def f(ctx)`` or ``async def f(ctx)``).

        ``retries``: attempts after the first; ``backoff``: none, fixed, linear or exponential
        from ``retry_delay`` (default 1 s); ``timeout``: e.g. ``"30m"``; ``fingerprint="code"``:
        skip the phase only while this function's source is unchanged.
        """
        self.base.phase(name)  # UnknownPhase lists the valid ones
        given = {"retries": retries, "backoff": backoff, "retry_delay": retry_delay, "timeout": timeout}
        given["fingerprint"] = fingerprint
        options = {k: v for k, v in given.items() if v is not None}
        execution_from_dict(options, f"pipeline {self.base.name}", f"@phase({name!r})")  # checks every option

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(fn):
                raise UsageError(f"@phase({name!r}) decorates a function", field="phase")
            if name in self._bound:
                raise UsageError(f"phase {name!r} already has a function ({self._bound[name].fn.__name__})")
            self._bound[name] = _Bound(fn, options)
            return fn

        return register

    @property
    def pipeline(self) -> Pipeline:
        """The effective pipeline: the manifest with the decorators' options applied."""
        phases = []
        for ph in self.base.phases:
            bound = self._bound.get(ph.name)
            if bound is None or not bound.options:
                phases.append(ph)
                continue
            merged = {k: v for k, v in ph.execution.to_json().items() if k in EXECUTION_KEYS}
            merged.update(bound.options)
            ex = execution_from_dict(merged, f"pipeline {self.base.name}", f"@phase({ph.name!r})")
            phases.append(dataclasses.replace(ph, execution=ex))
        return dataclasses.replace(self.base, phases=tuple(phases))

    def fingerprints(self) -> dict[str, str]:
        """The current code fingerprint of every ``fingerprint: code`` phase (function source or command)."""
        from phaselog.runner.python_phase import code_fingerprint  # lazy: `phaselog step` runs no phase

        out: dict[str, str] = {}
        for ph in self.pipeline.phases:
            if ph.execution.fingerprint != "code":
                continue  # reading source costs; only the phases that ask for it pay
            bound = self._bound.get(ph.name)
            if bound is not None:
                out[ph.name] = code_fingerprint(bound.fn)
            elif ph.execution.call is not None:
                from phaselog.runner.calls import resolve_call  # lazy: `phaselog step` runs no phase

                out[ph.name] = code_fingerprint(resolve_call(ph))
            elif ph.execution.run is not None:
                out[ph.name] = shell_fingerprint(ph)
        return out

    def _executor_for(
        self,
        ph: Phase,
        *,
        log_dir: Path | None,
        store_url: str,
        out: Console,
        folders: dict[tuple[str, str], Path] | None = None,
        log_cap: int = DEFAULT_LOG_CAP,
    ) -> Executor:
        """The executor of ``ph``; ``folders``: the run's log folder, found once per run and shared by
        its phases' executors."""
        folders = {} if folders is None else folders
        bound = self._bound.get(ph.name)
        if bound is not None or ph.execution.call is not None:
            import inspect  # lazy: `phaselog step` runs no phase

            from phaselog.runner.calls import resolve_call  # lazy: `phaselog step` runs no phase
            from phaselog.runner.console import (  # lazy: `phaselog step` runs no phase
                log_folder,
                log_name,
                logging_to,
            )
            from phaselog.runner.logsink import abandon, finish  # lazy: `phaselog step` runs no phase
            from phaselog.runner.python_phase import run_python  # lazy: `phaselog step` runs no phase

            fn = bound.fn if bound is not None else resolve_call(ph)
            is_async = inspect.iscoroutinefunction(fn)

            def python_phase(phase: Phase, ctx: PhaseContext) -> Success | Failure:
                key = (ctx.ticket_id, ctx.run_id)
                folder = folders.get(key)
                if folder is None:
                    folders.clear()
                    folder = folders[key] = log_folder(ctx.store, ctx.workdir, *key, log_dir)
                log = os.path.join(folder, log_name(phase.ordinal, ctx.phase, ctx.attempt))  # a Path only if used
                sink = ctx.log_sink(phase, log_cap, out.say)
                ctx.log_tick = lambda: sink.tick(force=True)  # a step done: what ctx.logger wrote goes live
                try:
                    with logging_to(ctx, log, out, f"{phase.name} attempt {ctx.attempt}", sink):
                        outcome = run_python(
                            fn, ctx, timeout=phase.execution.timeout, workdir=ctx.workdir, is_async=is_async
                        )
                except BaseException:
                    abandon(sink)
                    raise
                outcome = finish(sink, outcome)  # before the engine records the attempt
                if isinstance(outcome, Failure) and os.path.exists(log):
                    outcome.detail.setdefault("log", log)  # what ctx.logger wrote, as for a shell phase
                return outcome

            return python_phase
        if ph.execution.run is not None:
            from phaselog.runner.shell import ShellPhase  # lazy: `phaselog step` runs no phase

            return ShellPhase(log_dir=log_dir, store_url=store_url, tee=out.shell, log_cap=log_cap)
        raise UsageError(
            f"phase {ph.name} of pipeline {self.base.name} has nothing to run: decorate a function with "
            f"@pipe.phase({ph.name!r}), or give the phase a run: command or a call: function in the manifest",
            field="phase",
            rule="no_implementation",
        )

    def run(
        self,
        ticket_id: str,
        run_id: str | None = None,
        *,
        store: StoreArg = None,
        workdir: str | os.PathLike[str] | None = None,
        wait: float | bool = False,
        ttl: float = DEFAULT_TTL,
        start_event_after: float | None = None,
        handle_signals: bool = True,
        log_dir: str | os.PathLike[str] | None = None,
        quiet: bool = False,
        echo: Callable[[str], None] | None = None,
        shell_output: IO[bytes] | None = None,
        before_phase: Callable[[str], None] | None = None,
        signals: SignalGuard | None = None,
        params: Mapping[str, Any] | None = None,
        log_cap: int | str | None = None,
        max_parallel: int = 1,
        fail_fast: bool = False,
    ) -> RunResult:
        """Run (or resume) the pipeline for ``ticket_id``; return what each phase did.

        ``run_id``: the run to start or resume (default: a new one). ``store``: a Ledger, a
        Store, a URL or path (default: ``PHASELOG_STORE``, else the files store). ``workdir``:
        where artifacts are (default: the current folder). ``wait``: wait for a runner holding
        the run (True, or seconds) instead of raising RunHeld. The run prints what ``phaselog run``
        prints on stderr — a line per phase skipped, started, completed, failed, retried or
        waiting, and what ``ctx.logger`` logs (which also goes to the attempt's log) — unless
        ``quiet=True``. ``echo``: a callable that gets those lines instead of stderr (then
        ``quiet`` does not matter). ``shell_output``: where shell phases' output is echoed as it
        comes (default: stderr when the lines go there; it always goes to their log). ``before_phase``: called with a
        phase's name before it runs (a worker notes it, and may raise to stop between phases);
        ``signals``: a SignalGuard of the caller's (a worker finishing the phase on SIGTERM).
        ``params``: the run's parameters, checked against the manifest's ``params`` schema (defaults
        applied) before anything runs; phases see them as ``ctx.params``. None: a rerun reuses the
        recorded ones; a rerun with other ones is refused (UsageError naming the differences).
        ``log_cap``: how much of each attempt's output the store keeps, its tail (bytes, or ``"512KiB"``;
        default 1 MiB; 0: none) — read it with ``phaselog logs`` or :meth:`phaselog.Run.logs`.
        ``max_parallel``: how many phases whose needs are met run side by side (on threads; default 1,
        one at a time as a chain runs); ``fail_fast``: a failure interrupts the phases still running
        (else they finish, and nothing new starts). See docs/runner.md.

        Raises RunHeld (another runner holds the run), PhaseFailed (a phase failed after its
        retries; chained to its last exception; ``exc.result`` holds the RunResult),
        RunInterrupted (SIGINT/SIGTERM; the attempt is recorded as interrupted) and
        RecordingFailed (the store kept failing while a finished phase was being recorded).
        """

        from phaselog.runner.console import console  # lazy: `phaselog step` runs no phase
        from phaselog.runner.engine import Engine  # lazy: `phaselog step` runs no phase
        from phaselog.runner.heartbeat import DEFAULT_START_EVENT_AFTER  # lazy: `phaselog step` runs no phase
        from phaselog.runner.prelude import default_workdir  # lazy: `phaselog step` runs no phase

        ledger, owned = ledger_for(store)
        try:
            rid = normalize_run_id(run_id) if run_id is not None else str(uuid.uuid4())
            pl = self.pipeline
            folder = default_workdir(workdir)
            logs = Path(log_dir).absolute() if log_dir is not None else None
            url = ledger.store.url
            out = console(echo=echo, quiet=quiet, shell_output=shell_output)
            folders: dict[tuple[str, str], Path] = {}
            cap = parse_log_cap(log_cap)
            executors = {
                ph.name: self._executor_for(ph, log_dir=logs, store_url=url, out=out, folders=folders, log_cap=cap)
                for ph in pl.phases
            }
            engine = Engine(
                ledger=ledger,
                pipeline=pl,
                ticket_id=validate_ticket_id(ticket_id),
                run_id=rid,
                run_name=given_run_name(run_id),
                executor_for=lambda ph: executors[ph.name],
                fingerprints=self.fingerprints(),
                workdir=folder,
                wait=wait,
                ttl=ttl,
                start_event_after=DEFAULT_START_EVENT_AFTER if start_event_after is None else start_event_after,
                handle_signals=handle_signals,
                echo=out.say,
                before_phase=before_phase,
                signals=signals,
                params=params,
                max_parallel=max_parallel,
                fail_fast=fail_fast,
            )
            return engine.run()
        finally:
            if owned:
                ledger.close()

    def explain(
        self,
        ticket_id: str,
        run_id: str,
        *,
        store: StoreArg = None,
        workdir: str | os.PathLike[str] | None = None,
    ) -> Explanation:
        """What ``run`` would do with this run now, phase by phase (an Explanation)."""

        ledger, owned = ledger_for(store)
        try:
            return explain(
                ledger,
                ticket_id,
                run_id,
                pipeline=self.pipeline,
                workdir=workdir,
                fingerprints=self.fingerprints(),
            )
        finally:
            if owned:
                ledger.close()


def shell_fingerprint(ph: Phase) -> str:
    """``sha256:<hex>`` of a shell phase's command line and environment."""
    blob = json.dumps({"run": ph.execution.run, "env": dict(ph.execution.env)}, sort_keys=True)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


def explain_for(
    ledger: Ledger, ticket_id: str, run_id: str, *, pipeline: PipelineArg = None, workdir: str | None = None
) -> Explanation:
    """What `phaselog run` would do with a run now, its shell phases fingerprinted as the runner does
    (``phaselog explain`` and the MCP server's ``explain`` tool)."""
    pl = ledger.pipeline_for(ticket_id, run_id, pipeline)
    fingerprints = {p.name: shell_fingerprint(p) for p in pl.phases if p.execution.run is not None}
    return explain(ledger, ticket_id, run_id, pipeline=pl, workdir=workdir, fingerprints=fingerprints)
