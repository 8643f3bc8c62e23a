"""phaselog: durable, append-only checkpoints for multi-phase pipelines.

import phaselog
ledger = phaselog.open()                       # files store at $PHASELOG_HOME or ~/.phaselog
run = ledger.run("PROJ-1234", "a1b2c3d4")      # the built-in ticket-pipeline
run.write("implement", {"branch_name": "feat/x", "commit_sha": "a1b2c3d", "files_changed": []})
run.status().next_phase                        # 'local_review'
"""

from __future__ import annotations

import builtins
import importlib
import os
from typing import TYPE_CHECKING, Any

# The public names, listed once: type checkers read the imports below; at run time the same lines are
# read as the table of lazy names (PEP 562), because `import phaselog` runs before every command and a
# command must pay only for the modules it touches (tests/test_cli_lazy.py; D135).
if TYPE_CHECKING:  # pragma: no cover - the list itself; each name is imported on first use
    from phaselog.ledger.derive import PhaseState as PhaseState
    from phaselog.ledger.derive import RunStatus as RunStatus
    from phaselog.ledger.derive import derive_status as derive_status
    from phaselog.ledger.facade import Ledger as Ledger
    from phaselog.ledger.facade import Run as Run
    from phaselog.ledger.reads import Page as Page
    from phaselog.ledger.status import SkipDecision as SkipDecision
    from phaselog.ledger.verify import VerifyReport as VerifyReport
    from phaselog.ledger.writes import WriteResult as WriteResult
    from phaselog.model.errors import AlreadyExists as AlreadyExists
    from phaselog.model.errors import Conflict as Conflict
    from phaselog.model.errors import Corrupt as Corrupt
    from phaselog.model.errors import Fenced as Fenced
    from phaselog.model.errors import InvalidIdentifier as InvalidIdentifier
    from phaselog.model.errors import InvalidRecord as InvalidRecord
    from phaselog.model.errors import NotFound as NotFound
    from phaselog.model.errors import NotMonotonic as NotMonotonic
    from phaselog.model.errors import OutcomeUnknown as OutcomeUnknown
    from phaselog.model.errors import PhaseFailed as PhaseFailed
    from phaselog.model.errors import PhaselogError as PhaselogError
    from phaselog.model.errors import PipelineError as PipelineError
    from phaselog.model.errors import PipelineMismatch as PipelineMismatch
    from phaselog.model.errors import RecordingFailed as RecordingFailed
    from phaselog.model.errors import RunHeld as RunHeld
    from phaselog.model.errors import RunInterrupted as RunInterrupted
    from phaselog.model.errors import StoreError as StoreError
    from phaselog.model.errors import TooLarge as TooLarge
    from phaselog.model.errors import UnknownPhase as UnknownPhase
    from phaselog.model.errors import UnsupportedVersion as UnsupportedVersion
    from phaselog.model.errors import UsageError as UsageError
    from phaselog.model.ids import normalize_run_id as normalize_run_id
    from phaselog.model.ids import validate_ticket_id as validate_ticket_id
    from phaselog.model.pipelines import Phase as Phase
    from phaselog.model.pipelines import Pipeline as Pipeline
    from phaselog.model.pipelines import builtin as builtin
    from phaselog.model.pipelines import find_pipeline as find_pipeline
    from phaselog.model.pipelines import load_manifest as load_manifest
    from phaselog.model.pipelines import pipeline_from_dict as pipeline_from_dict
    from phaselog.model.records import SCHEMA_VERSION as SCHEMA_VERSION
    from phaselog.model.records import BasisEntry as BasisEntry
    from phaselog.model.records import Checkpoint as Checkpoint
    from phaselog.model.records import PipelineRef as PipelineRef
    from phaselog.model.validation import Issue as Issue
    from phaselog.model.validation import Report as Report
    from phaselog.runner import Explanation as Explanation
    from phaselog.runner import PhaseContext as PhaseContext
    from phaselog.runner import PipelineRunner as PipelineRunner
    from phaselog.runner import RunResult as RunResult
    from phaselog.runner import pipeline as pipeline
    from phaselog.runner.explain import explain as explain
    from phaselog.stores import Damaged as Damaged
    from phaselog.stores import Store as Store
    from phaselog.stores import Stored as Stored
    from phaselog.stores import open_store as open_store


def _public_names() -> dict[str, str]:
    """Name -> module, read from the ``from M import N as N`` lines of the block above."""
    with builtins.open(__file__, encoding="utf-8") as fh:  # not open() below: this runs before it is defined
        text = fh.read()
    block = text[text.index("if TYPE_CHECKING:") : text.index("\n\n\ndef _public_names")]
    names = {}
    for line in block.splitlines()[1:]:
        words = line.split()
        if len(words) == 6 and words[0] == "from" and words[4] == "as" and words[3] == words[5]:
            names[words[3]] = words[1]
    return names


_NAMES = _public_names()


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'phaselog' has no attribute {name!r}")

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"
__all__ = [*sorted(_NAMES), "open"]  # noqa: PLE0604 - derived from the one list above, not written twice


def open(store: str | os.PathLike[str] | Store | None = None) -> Ledger:
    """Open a ledger over a store: a Store, a URL (``file:///…``), a path, or None (default)."""
    from phaselog.ledger.facade import Ledger  # lazy: `import phaselog` loads no store until used
    from phaselog.stores import open_store  # lazy: `import phaselog` loads no store until used

    if store is None or isinstance(store, str | os.PathLike):
        return Ledger(open_store(store))
    return Ledger(store)
