"""phaselog: durable, append-only checkpoints for multi-phase pipelines.

import phaselog
ledger = phaselog.open()                       # files store at $PHASELOG_HOME or ~/.phaselog
run = ledger.run("PROJ-1234", "a1b2c3d4")      # the built-in ticket-pipeline
run.write("implement", {"branch_name": "feat/x", "commit_sha": "a1b2c3d", "files_changed": []})
run.status().next_phase                        # 'local_review'
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

# Names are imported on first use (PEP 562): `import phaselog` and the CLI start fast, and a
# command pays only for the modules it touches.
_LAZY = {
    "AlreadyExists": "phaselog.errors",
    "BasisEntry": "phaselog.records",
    "Checkpoint": "phaselog.records",
    "Conflict": "phaselog.errors",
    "Corrupt": "phaselog.errors",
    "Damaged": "phaselog.stores",
    "Explanation": "phaselog.runner",
    "Fenced": "phaselog.errors",
    "InvalidIdentifier": "phaselog.errors",
    "InvalidRecord": "phaselog.errors",
    "Issue": "phaselog.validation",
    "Ledger": "phaselog.ledger",
    "NotFound": "phaselog.errors",
    "NotMonotonic": "phaselog.errors",
    "OutcomeUnknown": "phaselog.errors",
    "Page": "phaselog.ledger",
    "Phase": "phaselog.pipelines",
    "PhaseContext": "phaselog.runner",
    "PhaseFailed": "phaselog.errors",
    "PhaseState": "phaselog.state",
    "PhaselogError": "phaselog.errors",
    "Pipeline": "phaselog.pipelines",
    "PipelineError": "phaselog.errors",
    "PipelineMismatch": "phaselog.errors",
    "PipelineRef": "phaselog.records",
    "PipelineRunner": "phaselog.runner",
    "RecordingFailed": "phaselog.errors",
    "Report": "phaselog.validation",
    "Run": "phaselog.ledger",
    "RunHeld": "phaselog.errors",
    "RunInterrupted": "phaselog.errors",
    "RunResult": "phaselog.runner",
    "RunStatus": "phaselog.state",
    "SCHEMA_VERSION": "phaselog.records",
    "SkipDecision": "phaselog.ledger",
    "Store": "phaselog.stores",
    "StoreError": "phaselog.errors",
    "Stored": "phaselog.stores",
    "TooLarge": "phaselog.errors",
    "UnknownPhase": "phaselog.errors",
    "UnsupportedVersion": "phaselog.errors",
    "UsageError": "phaselog.errors",
    "VerifyReport": "phaselog.verify",
    "WriteResult": "phaselog.ledger",
    "builtin": "phaselog.pipelines",
    "derive_status": "phaselog.state",
    "explain": "phaselog.runner",
    "find_pipeline": "phaselog.pipelines",
    "load_manifest": "phaselog.pipelines",
    "normalize_run_id": "phaselog.ids",
    "open_store": "phaselog.stores",
    "pipeline": "phaselog.runner",
    "pipeline_from_dict": "phaselog.pipelines",
    "validate_ticket_id": "phaselog.ids",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from phaselog.errors import (
        AlreadyExists,
        Conflict,
        Corrupt,
        Fenced,
        InvalidIdentifier,
        InvalidRecord,
        NotFound,
        NotMonotonic,
        OutcomeUnknown,
        PhaseFailed,
        PhaselogError,
        PipelineError,
        PipelineMismatch,
        RecordingFailed,
        RunHeld,
        RunInterrupted,
        StoreError,
        TooLarge,
        UnknownPhase,
        UnsupportedVersion,
        UsageError,
    )
    from phaselog.ids import normalize_run_id, validate_ticket_id
    from phaselog.ledger import Ledger, Page, Run, SkipDecision, WriteResult
    from phaselog.pipelines import Phase, Pipeline, builtin, find_pipeline, load_manifest, pipeline_from_dict
    from phaselog.records import SCHEMA_VERSION, BasisEntry, Checkpoint, PipelineRef
    from phaselog.runner import Explanation, PhaseContext, PipelineRunner, RunResult, pipeline
    from phaselog.runner.explain import explain
    from phaselog.state import PhaseState, RunStatus, derive_status
    from phaselog.stores import Damaged, Store, Stored, open_store
    from phaselog.validation import Issue, Report
    from phaselog.verify import VerifyReport


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'phaselog' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "SCHEMA_VERSION",
    "AlreadyExists",
    "BasisEntry",
    "Checkpoint",
    "Conflict",
    "Corrupt",
    "Damaged",
    "Explanation",
    "Fenced",
    "InvalidIdentifier",
    "InvalidRecord",
    "Issue",
    "Ledger",
    "NotFound",
    "NotMonotonic",
    "OutcomeUnknown",
    "Page",
    "Phase",
    "PhaseContext",
    "PhaseFailed",
    "PhaseState",
    "PhaselogError",
    "Pipeline",
    "PipelineError",
    "PipelineMismatch",
    "PipelineRef",
    "PipelineRunner",
    "RecordingFailed",
    "Report",
    "Run",
    "RunHeld",
    "RunInterrupted",
    "RunResult",
    "RunStatus",
    "SkipDecision",
    "Store",
    "StoreError",
    "Stored",
    "TooLarge",
    "UnknownPhase",
    "UnsupportedVersion",
    "UsageError",
    "VerifyReport",
    "WriteResult",
    "builtin",
    "derive_status",
    "explain",
    "find_pipeline",
    "load_manifest",
    "normalize_run_id",
    "open",
    "open_store",
    "pipeline",
    "pipeline_from_dict",
    "validate_ticket_id",
]


def open(store: str | os.PathLike[str] | Store | None = None) -> Ledger:
    """Open a ledger over a store: a Store, a URL (``file:///…``), a path, or None (default)."""
    from phaselog.ledger import Ledger
    from phaselog.stores import open_store

    if store is None or isinstance(store, str | os.PathLike):
        return Ledger(open_store(store))
    return Ledger(store)
