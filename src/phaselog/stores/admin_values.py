"""The store contract's value types that only leases and retention use: a run's fence and lease
state, a lease verdict, a record ``prune`` decided to remove.

Beside :mod:`phaselog.stores.values` rather than in it, so the read path (``phaselog read``, a
``Run.read``) does not build their dataclasses at start (D334); :mod:`phaselog.stores.base`
re-exports them on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunFence:
    """A write guard: the append succeeds only while the run's lease carries ``token``."""

    ticket_id: str
    run_id: str
    token: int
    #: The holder's random id: a lease file removed and made anew restarts its tokens, and the
    #: id still tells the holders apart.
    runner_id: str | None = None


@dataclass(frozen=True)
class LeaseState:
    """A run's lease as stored: the fencing token of the latest holder and who holds it.

    ``holder`` is None when the lease is free (released); times are seconds since the epoch on
    the store's clock (the database's for SQL stores, so machines with skewed clocks agree).
    """

    ticket_id: str
    run_id: str
    token: int
    holder: Mapping[str, Any] | None
    renewed_at: float | None
    expires_at: float | None
    #: The store's clock when this state was read.
    now: float
    #: Files store: whether the operating-system lock was free (the holder's process is gone).
    #: None where there is no such lock (SQL stores judge by liveness and expiry).
    lock_free: bool | None = None
    #: On acquisition: the holder that was displaced, and why (None if the lease was free).
    took_over: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Verdict:
    """Whether a new runner may take a lease, and why (said to people)."""

    take: bool
    reason: str


#: Decides, from the stored state, whether the current holder may be displaced.
Judge = Callable[[LeaseState], Verdict]


@dataclass(frozen=True)
class PruneTarget:
    """A record ``prune`` decided to remove: its key, and the content hash it decided on."""

    phase_ordinal: int
    phase: str
    attempt_number: int
    completed: bool
    content_hash: str
