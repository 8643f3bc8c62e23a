"""The store contract: the narrow seam every backend implements.

A store appends records (refusing duplicates, atomically checking the phase's latest attempt),
gets one record, lists what exists, and iterates records in a stable order, reporting damaged
entries instead of hiding them. It knows nothing of pipelines, validation or state: that lives
above it, in :mod:`phaselog.ledger.facade`, so every backend behaves the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from phaselog.model.errors import Corrupt
from phaselog.model.records import Checkpoint

# The contract's value types live one level down (stores/values.py) and are re-exported here.
from phaselog.stores.values import (
    CAPABILITY_MEMBERS,
    AttemptRef,
    Capability,
    Damaged,
    Stored,
)

if TYPE_CHECKING:
    from phaselog.model.guard import Holder, LoopState
    from phaselog.stores.admin_values import Judge, LeaseState, PruneTarget, RunFence, Verdict
    from phaselog.stores.manifests import ManifestDoc
    from phaselog.stores.snapshot import RunSnapshot


class LocalRooted(Protocol):
    """A store that is a folder on this machine (``Capability.LOCAL_ROOT``)."""

    @property
    def root(self) -> Path:
        """The store's folder."""
        ...


def local_root(store: Store) -> Path | None:
    """The store's folder on this machine, when it is one (``Capability.LOCAL_ROOT``)."""
    if Capability.LOCAL_ROOT in store.capabilities:
        return cast(LocalRooted, store).root  # the capability declares the member
    return None


# -- guard storage: an optional capability (the cron-loop guard keeps its lock and state here) ----
class GuardStorage(Protocol):
    """Where one guard keeps its lock, loop state and history (one per backend family).

    The guard (:mod:`phaselog.guard`) decides; the storage only keeps. Every decision and state
    update happens inside :meth:`mutex`, which serialises them across processes (files: an
    ``flock``; SQL: the lease row's lock, one transaction). Methods raise StoreError for I/O or
    database failures, Corrupt for content that does not parse, Fenced when ``token`` no longer
    holds the lock.
    """

    @property
    def name(self) -> str:
        """The guard's name (checked by :func:`phaselog.model.guard.validate_name`)."""
        ...

    @property
    def state_path(self) -> str | os.PathLike[str]:
        """Where the loop state lives (a path, or a table and key), for messages."""
        ...

    @property
    def lock_path(self) -> str | os.PathLike[str]:
        """Where the lock lives (a path, or a table and key), for messages."""
        ...

    def mutex(self) -> AbstractContextManager[None]:
        """Hold the guard's mutex: no other process decides or writes while the block runs."""
        ...

    def lock_data(self) -> object:
        """The lock's content as parsed (None when free); Corrupt if it does not parse."""
        ...

    def read_lock(self) -> Holder | None:
        """The current holder, or None."""
        ...

    def write_lock(self, holder: Holder) -> Holder:
        """Install ``holder`` (inside the mutex); return it as stored (SQL: with its fencing token)."""
        ...

    def update_lock(self, holder: Holder) -> None:
        """Rewrite our own lock, same token (inside the mutex); Fenced if it was taken over."""
        ...

    def remove_lock(self, token: str) -> bool:
        """Free the lock if ``token`` still holds it (inside the mutex); False otherwise."""
        ...

    def read_state(self) -> LoopState:
        """The loop state (a fresh one if none was written yet)."""
        ...

    def write_state(self, state: LoopState, *, token: str | None = None) -> None:
        """Write the loop state durably; with ``token``, only while it still holds the lock."""
        ...

    def append_history(self, entry: dict[str, Any]) -> None:
        """Append one history entry (a pass, takeover or reset) exactly once; numbered ``seq``."""
        ...

    def history(self) -> list[dict[str, Any]]:
        """Every history entry, oldest first (one that cannot be read as ``kind: damaged``)."""
        ...


class GuardKeeper(Protocol):
    """A store that keeps guards (``Capability.GUARD_STORAGE``)."""

    def guard_storage(self, name: str) -> GuardStorage:
        """The storage of guard ``name`` in this store."""
        ...

    def guard_names(self) -> list[str]:
        """Every guard with state, a lock or history in this store, sorted."""
        ...


def guard_keeper(store: Store) -> GuardKeeper | None:
    """``store`` as a keeper of guards, when it declares ``Capability.GUARD_STORAGE``."""
    if Capability.GUARD_STORAGE in store.capabilities:
        return cast(GuardKeeper, store)  # the capability declares the members
    return None


class CarriesRuns(Protocol):
    """A store that carries the snapshot of the runs it wrote to (``Capability.CARRIED_RUNS``)."""

    def premise_snapshot(self, ticket_id: str, run_id: str) -> tuple[RunSnapshot, bool]:
        """The run as this handle last saw it, for a write, and whether it may be stale (not checked
        now): the append it leads to checks, in its own transaction or statement, that the run did
        not move since (Conflict otherwise)."""
        ...

    def state_snapshot(self, ticket_id: str, run_id: str) -> RunSnapshot:
        """What ``snapshot`` returns, checked as fresh, but the carried records themselves, not
        copies: for a caller that only reads the state from them and hands none out (D192)."""
        ...


def premise_snapshot(store: Store, ticket_id: str, run_id: str) -> tuple[RunSnapshot, bool]:
    """The snapshot a write decides on and whether it may be stale: the carried one where the store
    carries runs, else a fresh read."""
    if Capability.CARRIED_RUNS in store.capabilities:
        return cast(CarriesRuns, store).premise_snapshot(ticket_id, run_id)  # the capability declares it
    return store.snapshot(ticket_id, run_id), False


def state_snapshot(store: Store, ticket_id: str, run_id: str) -> RunSnapshot:
    """The run's snapshot for a caller that derives state from it and hands no record out (status):
    the carried records uncopied where the store carries runs, else ``store.snapshot``."""
    if Capability.CARRIED_RUNS in store.capabilities:
        return cast(CarriesRuns, store).state_snapshot(ticket_id, run_id)  # the capability declares it
    return store.snapshot(ticket_id, run_id)


@runtime_checkable
class Store(Protocol):
    """What every backend provides. Methods raise :mod:`phaselog.model.errors` types."""

    url: str
    #: The optional parts of the contract this store has (see :class:`Capability`).
    capabilities: frozenset[Capability]

    def append(
        self,
        record: Checkpoint,
        *,
        expected_latest: int,
        fence: RunFence | None = None,
        manifest: ManifestDoc | None = None,
    ) -> str:
        """Append ``record`` atomically and durably; return its location.

        Raises AlreadyExists when the attempt exists (the stored record is untouched) and
        Conflict when the phase's latest attempt is not ``expected_latest`` (0: none), which
        tells the caller to re-read and retry. With ``fence``, raises Fenced (nothing written)
        unless the run's lease still carries that fencing token, checked atomically with the
        append. With ``manifest``, records that pipeline manifest too, no later than the record
        (see stores.manifests). Returns only once the record is durable.
        """
        ...

    def attempts(self, ticket_id: str, run_id: str) -> list[AttemptRef]:
        """Every committed attempt of a run, sorted by (phase ordinal, attempt)."""
        ...

    def get(self, ticket_id: str, run_id: str, phase_ordinal: int, phase: str, attempt: int) -> Stored:
        """Read one record; NotFound if absent, Corrupt if damaged."""
        ...

    def snapshot(self, ticket_id: str, run_id: str, *, history: bool = False) -> RunSnapshot:
        """Everything a write or a status needs about a run, in one call (see stores.snapshot).

        ``history=True`` reads every record too. A missing run gives an empty snapshot.
        """
        ...

    def tickets(self) -> list[str]:
        """Every ticket id with at least one run, sorted."""
        ...

    def runs(self, ticket_id: str) -> list[str]:
        """Every run id of a ticket, sorted."""
        ...

    def iter_records(self, ticket_id: str, run_id: str | None = None) -> Iterator[Stored | Damaged]:
        """Yield a ticket's (or one run's) records in (run, phase ordinal, attempt) order."""
        ...

    def location(self, record: Checkpoint) -> str:
        """Where ``record`` lives or would live."""
        ...

    # Audit entries (progress events, approvals, ticket markers): named, immutable JSON documents.
    def put_entry(self, kind: str, ticket_id: str, run_id: str | None, name: str, body: bytes) -> str:
        """Publish an entry durably under a new name; AlreadyExists if the name is taken."""
        ...

    def entry_names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        """Names of a kind's entries, sorted, without reading them."""
        ...

    def entries(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind as (name, location, bytes or the Corrupt error), sorted by name."""
        ...

    def close(self) -> None:
        """Release resources (connections, file handles)."""
        ...


# -- run leases: an optional capability (the runner's "one runner per run") ----------------------
class RunLeases(Protocol):
    """Leases on runs: at most one holder per run, each acquisition with a higher fencing token."""

    def acquire(
        self, ticket_id: str, run_id: str, holder: Mapping[str, Any], *, ttl: float, judge: Judge
    ) -> LeaseState:
        """Take the lease if it is free or ``judge`` lets us displace its holder; RunHeld otherwise."""
        ...

    def renew(
        self, ticket_id: str, run_id: str, token: int, *, ttl: float, holder: Mapping[str, Any] | None = None
    ) -> LeaseState:
        """Extend the lease (and update the holder's details); Fenced if ``token`` no longer holds it."""
        ...

    def release(self, ticket_id: str, run_id: str, token: int) -> bool:
        """Free the lease if ``token`` still holds it; False if it had been taken over."""
        ...

    def read(self, ticket_id: str, run_id: str) -> LeaseState | None:
        """The lease as stored (None: never taken)."""
        ...

    def close(self) -> None:
        """Release resources (a files lease keeps its lock file open while held)."""
        ...


class LeaseCapable(Protocol):
    """A store that can hold run leases (``Capability.LEASES``; every built-in store)."""

    def run_leases(self) -> RunLeases:
        """The store's run-lease service."""


class Retention(Protocol):
    """What ``prune`` (and ``doctor``, finishing an interrupted prune) needs of a store
    (``Capability.RETENTION``).

    Everything happens inside :meth:`locked_run`, which holds the same lock an append of that
    run takes (files: the run folder's ``flock``; SQL: the write transaction), so a prune decides
    on what it reads under the lock and no write lands between the decision and the deletion.
    """

    def locked_run(self, ticket_id: str, run_id: str) -> AbstractContextManager[object | None]:
        """Hold the run's append lock; yield a handle (None when the run does not exist).

        Appends and audit entries of the run wait until the block ends. Every method below takes
        the handle and must be called inside the block. On a SQL store the block is one
        transaction: it commits when the block ends normally and rolls back on an exception.
        """
        ...

    def put_note(self, handle: object, name: str, body: bytes) -> str:
        """Publish a prune note durably (before the deletions it announces)."""
        ...

    def delete_records(
        self, handle: object, records: Sequence[PruneTarget], entries: Sequence[tuple[str, str]]
    ) -> tuple[int, int]:
        """Delete exactly these records and (kind, name) audit entries; what is already gone is
        skipped. The caller decided on them under this same lock (a SQL store also re-checks
        each record's content hash). Returns (records and entries deleted, bytes freed)."""
        ...

    def remove_run(self, handle: object) -> int:
        """Remove the whole run, crash-safe (all or nothing visible); return the bytes freed."""
        ...

    def finish_removals(self, ticket_id: str) -> list[dict[str, object]]:
        """Finish whole-run removals a crash interrupted (doctor); one entry per run finished."""
        ...


# -- the other optional capabilities: a Protocol each, and an accessor that checks the declaration ----
# ``Capability.X in store.capabilities`` is the declaration (tests/test_capabilities.py checks it against
# what each backend implements), so the accessor's cast states a checked fact, never a guess.
class PhaseReader(Protocol):
    """A store that reads a phase's latest checkpoint in one call (``Capability.PHASE_READ``)."""

    def read_phase(self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None = None) -> Stored | None:
        """The latest completed checkpoint of ``phase`` (or attempt ``attempt``); None: go the general way."""
        ...


def phase_reader(store: Store) -> PhaseReader | None:
    """``store`` as a one-call phase reader, when it declares ``Capability.PHASE_READ``."""
    if Capability.PHASE_READ in store.capabilities:
        return cast(PhaseReader, store)  # the capability declares the member
    return None


class Quarantining(Protocol):
    """A store that moves damaged records aside and says what it moved (``Capability.QUARANTINE``)."""

    def quarantine(self, location: str, reason: str) -> list[dict[str, Any]]:
        """Move the damaged record at ``location`` aside; one entry per file or row moved."""
        ...

    def quarantined(self, ticket_id: str, run_id: str) -> dict[tuple[str, int], str | None]:
        """(phase, attempt) → the content hash of every attempt of the run moved aside (None: not known)."""
        ...


def quarantiner(store: Store) -> Quarantining | None:
    """``store`` as one that quarantines, when it declares ``Capability.QUARANTINE``."""
    if Capability.QUARANTINE in store.capabilities:
        return cast(Quarantining, store)  # the capability declares the members
    return None


class LeftoverFinder(Protocol):
    """A store that reports what crashes left behind (``Capability.LEFTOVERS``)."""

    def leftovers(self, ticket_id: str) -> list[dict[str, Any]]:
        """Temp files, orphan sidecars and the like of a ticket: ``kind``, ``path``, ``message``, ``age_sec``."""
        ...


def leftover_finder(store: Store) -> LeftoverFinder | None:
    """``store`` as one that reports leftovers, when it declares ``Capability.LEFTOVERS``."""
    if Capability.LEFTOVERS in store.capabilities:
        return cast(LeftoverFinder, store)  # the capability declares the member
    return None


class Stamping(Protocol):
    """A store that stamps runs and tickets for cheap change detection (``Capability.STAMPS``)."""

    def run_stamps(self, ticket_id: str) -> dict[str, str | None]:
        """Every run of the ticket with its stamp (None: do not remember what was read)."""
        ...

    def ticket_stamp(self, ticket_id: str) -> str | None:
        """A stamp of the ticket's own entries (its marker revisions)."""
        ...


def stamper(store: Store) -> Stamping | None:
    """``store`` as one that stamps, when it declares ``Capability.STAMPS``."""
    if Capability.STAMPS in store.capabilities:
        return cast(Stamping, store)  # the capability declares the members
    return None


class ChangeWaiter(Protocol):
    """Blocks until the store may have changed; closed when the follower is done (D207)."""

    def wait(self, timeout: float) -> bool:
        """True once a run gained a record (a wake-up may be spurious), False after ``timeout`` s."""
        ...

    def close(self) -> None:
        """Let go of what the waiter holds (its connection); idempotent."""
        ...


class WaitsForChanges(Protocol):
    """A store that can wake a follower when a run gains a record (``Capability.CHANGE_WAIT``)."""

    def change_waiter(self) -> ChangeWaiter:
        """A new waiter, listening from now on (a change made after this call wakes it)."""
        ...


def change_waiter(store: Store) -> ChangeWaiter | None:
    """A waiter on ``store`` when it declares ``Capability.CHANGE_WAIT`` (None: poll)."""
    if Capability.CHANGE_WAIT in store.capabilities:
        return cast(WaitsForChanges, store).change_waiter()  # the capability declares the member
    return None


#: Re-exported on first use (PEP 562): only leases and retention need them (D334).
_ADMIN_VALUES = frozenset({"Judge", "LeaseState", "PruneTarget", "RunFence", "Verdict"})


def __getattr__(name: str) -> Any:
    if name in _ADMIN_VALUES:
        from phaselog.stores import admin_values  # lazy: a read never builds these dataclasses (D334)

        return getattr(admin_values, name)
    raise AttributeError(f"module 'phaselog.stores.base' has no attribute {name!r}")


__all__ = [
    "CAPABILITY_MEMBERS",
    "AttemptRef",
    "Capability",
    "ChangeWaiter",
    "Damaged",
    "GuardKeeper",
    "GuardStorage",
    "Judge",
    "LeaseCapable",
    "LeaseState",
    "LeftoverFinder",
    "LocalRooted",
    "PhaseReader",
    "PruneTarget",
    "Quarantining",
    "Retention",
    "RunFence",
    "RunLeases",
    "Stamping",
    "Store",
    "Stored",
    "Verdict",
    "WaitsForChanges",
    "change_waiter",
    "guard_keeper",
    "leftover_finder",
    "local_root",
    "phase_reader",
    "quarantiner",
    "stamper",
]
