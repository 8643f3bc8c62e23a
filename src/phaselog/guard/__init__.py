"""The cron-loop guard: a lock, the loop state and a circuit breaker (``phaselog guard``).

Modules: :mod:`~phaselog.guard.core` (the guard: lock decisions, breaker, recording a pass),
:mod:`~phaselog.guard.liveness` (is a holder's guard or job still running),
:mod:`~phaselog.guard.job` (running the job in its own session, output tails). The guard's
records (loop state, lock holder, names) are plain data in :mod:`phaselog.model.guard`; each
store keeps them behind :class:`phaselog.stores.base.GuardStorage` (files:
:mod:`phaselog.stores.files.guard`; SQL: the lease row, in the SQL store's guard module).
"""

from phaselog.guard.core import (
    DEFAULT_MAX_FAILURES,
    DEFAULT_STALE_AFTER,
    Guard,
    GuardConfig,
    RunResult,
    breaker,
    guard_names,
    outcome_of,
)
from phaselog.guard.job import JobResult
from phaselog.guard.liveness import Environment, group_members, judge_holder, process_start_time
from phaselog.model.errors import Fenced
from phaselog.model.guard import OUTCOMES, Holder, LoopState, PassNotRecorded, validate_name

__all__ = [
    "DEFAULT_MAX_FAILURES",
    "DEFAULT_STALE_AFTER",
    "OUTCOMES",
    "Environment",
    "Fenced",
    "Guard",
    "GuardConfig",
    "Holder",
    "JobResult",
    "LoopState",
    "PassNotRecorded",
    "RunResult",
    "breaker",
    "group_members",
    "guard_names",
    "judge_holder",
    "outcome_of",
    "process_start_time",
    "validate_name",
]
