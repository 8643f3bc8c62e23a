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
    "AlreadyExists": "phaselog.model.errors",
    "BasisEntry": "phaselog.model.records",
    "Checkpoint": "phaselog.model.records",
    "Conflict": "phaselog.model.errors",
    "Corrupt": "phaselog.model.errors",
    "Damaged": "phaselog.stores",
    "Explanation": "phaselog.runner",
    "Fenced": "phaselog.model.errors",
    "InvalidIdentifier": "phaselog.model.errors",
    "InvalidRecord": "phaselog.model.errors",
    "Issue": "phaselog.model.validation",
    "Ledger": "phaselog.ledger.facade",
    "NotFound": "phaselog.model.errors",
    "NotMonotonic": "phaselog.model.errors",
    "OutcomeUnknown": "phaselog.model.errors",
    "Page": "phaselog.ledger.facade",
    "Phase": "phaselog.model.pipelines",
    "PhaseContext": "phaselog.runner",
    "PhaseFailed": "phaselog.model.errors",
    "PhaseState": "phaselog.ledger.derive",
    "PhaselogError": "phaselog.model.errors",
    "Pipeline": "phaselog.model.pipelines",
    "PipelineError": "phaselog.model.errors",
    "PipelineMismatch": "phaselog.model.errors",
    "PipelineRef": "phaselog.model.records",
    "PipelineRunner": "phaselog.runner",
    "RecordingFailed": "phaselog.model.errors",
    "Report": "phaselog.model.validation",
    "Run": "phaselog.ledger.facade",
    "RunHeld": "phaselog.model.errors",
    "RunInterrupted": "phaselog.model.errors",
    "RunResult": "phaselog.runner",
    "RunStatus": "phaselog.ledger.derive",
    "SCHEMA_VERSION": "phaselog.model.records",
    "SkipDecision": "phaselog.ledger.facade",
    "Store": "phaselog.stores",
    "StoreError": "phaselog.model.errors",
    "Stored": "phaselog.stores",
    "TooLarge": "phaselog.model.errors",
    "UnknownPhase": "phaselog.model.errors",
    "UnsupportedVersion": "phaselog.model.errors",
    "UsageError": "phaselog.model.errors",
    "VerifyReport": "phaselog.ledger.verify",
    "WriteResult": "phaselog.ledger.facade",
    "builtin": "phaselog.model.pipelines",
    "derive_status": "phaselog.ledger.derive",
    "explain": "phaselog.runner",
    "find_pipeline": "phaselog.model.pipelines",
    "load_manifest": "phaselog.model.pipelines",
    "normalize_run_id": "phaselog.model.ids",
    "open_store": "phaselog.stores",
    "pipeline": "phaselog.runner",
    "pipeline_from_dict": "phaselog.model.pipelines",
    "validate_ticket_id": "phaselog.model.ids",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from phaselog.ledger.derive import PhaseState, RunStatus, derive_status
    from phaselog.ledger.facade import Ledger, Page, Run, SkipDecision, WriteResult
    from phaselog.ledger.verify import VerifyReport
    from phaselog.model.errors import (
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
    from phaselog.model.ids import normalize_run_id, validate_ticket_id
    from phaselog.model.pipelines import Phase, Pipeline, builtin, find_pipeline, load_manifest, pipeline_from_dict
    from phaselog.model.records import SCHEMA_VERSION, BasisEntry, Checkpoint, PipelineRef
    from phaselog.model.validation import Issue, Report
    from phaselog.runner import Explanation, PhaseContext, PipelineRunner, RunResult, pipeline
    from phaselog.runner.explain import explain
    from phaselog.stores import Damaged, Store, Stored, open_store


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
    from phaselog.ledger.facade import Ledger
    from phaselog.stores import open_store

    if store is None or isinstance(store, str | os.PathLike):
        return Ledger(open_store(store))
    return Ledger(store)
