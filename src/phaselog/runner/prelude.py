"""The inputs of a run the engine settles before it runs a phase: its parameters, its working
directory, and the delay before a retry."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phaselog.model.errors import UsageError
from phaselog.model.execution import Execution
from phaselog.model.params import differences
from phaselog.model.params import resolve as resolve_params
from phaselog.model.pipelines import Pipeline
from phaselog.stores.snapshot import RunSnapshot

MAX_BACKOFF_S = 300.0


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
