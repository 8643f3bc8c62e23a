"""The runner: pipelines that run, checkpoint and resume themselves (Python and shell).

    import phaselog
    pipe = phaselog.pipeline("data-job", phases=["extract", "load"])

    @pipe.phase("extract", retries=3, timeout="30m")
    def extract(ctx):
        return {"rows": 1200}, ["out/rows.parquet"]

    result = pipe.run(ticket_id="CHURN-7", run_id="nightly-2026-11-30")

Modules: ``definition`` (pipeline(), @phase), ``engine`` (the run loop), ``explain`` (what a run
would do and why), ``lease`` (one runner per run), ``heartbeat``, ``context`` (ctx),
``python_phase`` / ``shell`` (one attempt), ``signals``, ``result``. Guide: docs/runner.md.
"""

from __future__ import annotations

from phaselog.model.errors import Fenced, PhaseFailed, RecordingFailed, RunHeld, RunInterrupted
from phaselog.runner.context import PhaseContext
from phaselog.runner.definition import PipelineRunner, pipeline
from phaselog.runner.explain import Explanation, PhasePlan, explain
from phaselog.runner.result import PhaseOutcome, RunResult

__all__ = [
    "Explanation",
    "Fenced",
    "PhaseContext",
    "PhaseFailed",
    "PhaseOutcome",
    "PhasePlan",
    "PipelineRunner",
    "RecordingFailed",
    "RunHeld",
    "RunInterrupted",
    "RunResult",
    "explain",
    "pipeline",
]
