"""phaselog: durable, append-only checkpoints for multi-phase pipelines.

    import phaselog
    ledger = phaselog.open()                       # files store at $PHASELOG_HOME or ~/.phaselog
    run = ledger.run("PROJ-1234", "a1b2c3d4")      # the built-in ticket-pipeline
    run.write("implement", {"branch_name": "feat/x", "commit_sha": "a1b2c3d", "files_changed": []})
    run.status().next_phase                        # 'local_review'
"""

from __future__ import annotations

import os

from phaselog.errors import (
    AlreadyExists,
    Conflict,
    Corrupt,
    InvalidIdentifier,
    InvalidRecord,
    NotFound,
    NotMonotonic,
    PhaselogError,
    PipelineError,
    PipelineMismatch,
    StoreError,
    TooLarge,
    UnknownPhase,
    UnsupportedVersion,
    UsageError,
)
from phaselog.ids import normalize_run_id, validate_ticket_id
from phaselog.ledger import Ledger, Page, Run, SkipDecision, VerifyReport, WriteResult
from phaselog.pipelines import Phase, Pipeline, builtin, find_pipeline, load_manifest, pipeline_from_dict
from phaselog.records import SCHEMA_VERSION, BasisEntry, Checkpoint, PipelineRef
from phaselog.state import PhaseState, RunStatus, derive_status
from phaselog.stores import Damaged, Store, Stored, open_store
from phaselog.validation import Issue, Report

__version__ = "0.1.0"

__all__ = [
    "SCHEMA_VERSION",
    "AlreadyExists",
    "BasisEntry",
    "Checkpoint",
    "Conflict",
    "Corrupt",
    "Damaged",
    "InvalidIdentifier",
    "InvalidRecord",
    "Issue",
    "Ledger",
    "NotFound",
    "NotMonotonic",
    "Page",
    "Phase",
    "PhaseState",
    "PhaselogError",
    "Pipeline",
    "PipelineError",
    "PipelineMismatch",
    "PipelineRef",
    "Report",
    "Run",
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
    "find_pipeline",
    "load_manifest",
    "normalize_run_id",
    "open",
    "open_store",
    "pipeline_from_dict",
    "validate_ticket_id",
]


def open(store: str | os.PathLike[str] | Store | None = None) -> Ledger:  # noqa: A001 - like io.open, the obvious name
    """Open a ledger over a store: a Store, a URL (``file:///…``), a path, or None (default)."""
    if store is None or isinstance(store, str | os.PathLike):
        return Ledger(open_store(store))
    return Ledger(store)
