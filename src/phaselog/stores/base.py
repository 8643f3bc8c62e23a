"""The store contract: the narrow seam every backend implements.

A store appends records (refusing duplicates, atomically checking the phase's latest attempt),
gets one record, lists what exists, and iterates records in a stable order, reporting damaged
entries instead of hiding them. It knows nothing of pipelines, validation or state: that lives
above it, in :mod:`phaselog.ledger.facade`, so every backend behaves the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from phaselog.model.errors import Corrupt
from phaselog.model.records import Checkpoint

if TYPE_CHECKING:
    from phaselog.model.guard import Holder, LoopState
    from phaselog.stores.manifests import ManifestDoc
    from phaselog.stores.snapshot import RunSnapshot


@dataclass(frozen=True)
class Stored:
    """A record as read back from a store."""

    record: Checkpoint
    #: Where it lives: a path relative to the checkpoints root (files) or a row reference.
    location: str
    #: The content hash recorded when it was appended; None for a checkpoint the seed tool wrote.
    recorded_hash: str | None = None
    #: Read-time warnings (older schema version, file edited by hand ...).
    warnings: tuple[str, ...] = ()

    @property
    def tampered(self) -> bool:
        """True when the content no longer hashes to what was recorded at append time."""
        return self.recorded_hash is not None and self.recorded_hash != self.record.content_hash


@dataclass(frozen=True)
class Damaged:
    """An entry that exists but cannot be read as a record. Never moved or deleted."""

    location: str
    ticket_id: str
    run_id: str
    phase: str
    phase_ordinal: int
    attempt_number: int
    error_code: str
    message: str
    #: The rule that was broken (``yaml_syntax``, ``content_hash``, ``required`` …), when known.
    rule: str | None = None

    def to_json(self) -> dict[str, object]:
        """Return the JSON form used under ``warnings`` / ``damaged``."""
        return {
            "path": self.location,
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "phase": self.phase,
            "attempt_number": self.attempt_number,
            "error_code": self.error_code,
            "rule": self.rule,
            "error": self.message,
        }


@dataclass(frozen=True, order=True)
class AttemptRef:
    """That an attempt exists, known without reading it (a directory listing or an index)."""

    phase_ordinal: int
    attempt_number: int
    phase: str = field(compare=False)
    completed: bool = field(compare=False, default=True)


class Capability(StrEnum):
    """An optional part of the contract. A store declares the ones it has in ``capabilities``;
    callers test ``Capability.X in store.capabilities``, never ``hasattr``."""

    #: ``run_leases()``: one runner per run, with fencing tokens (:class:`RunLeases`).
    LEASES = "leases"
    #: The :class:`Retention` protocol: ``prune`` and finishing an interrupted prune.
    RETENTION = "retention"
    #: ``quarantine(location, reason)``: move a damaged record aside (``doctor --quarantine``).
    QUARANTINE = "quarantine"
    #: ``leftovers(ticket_id)``: what crashes left behind (temp files, orphan sidecars).
    LEFTOVERS = "leftovers"
    #: ``migrate()``, ``schema_version()``, ``migrated``: a versioned schema, upgraded explicitly.
    MIGRATE = "migrate"
    #: ``guard_storage(name)``, ``guard_names()``: guards keep their lock and state in this store.
    GUARD_STORAGE = "guard_storage"
    #: ``run_stamps(ticket_id)``, ``ticket_stamp(ticket_id)``: cheap change detection for readers.
    STAMPS = "stamps"
    #: ``root``: the store is a folder on this machine (logs and pipelines default to beside it).
    LOCAL_ROOT = "local_root"
    #: ``run_queue()``: the queue of runs that workers drain (PostgreSQL; stores/sql/queue/).
    QUEUE = "queue"
    #: ``pipeline_manifests()``, and ``append(..., manifest=…)``: the store keeps the manifest of
    #: every pipeline it has records for (:mod:`phaselog.stores.manifests`).
    MANIFESTS = "manifests"
    #: ``read_phase(ticket_id, run_id, phase, attempt)``: a phase's latest checkpoint (or one
    #: attempt), the phase named by name or ordinal, in one store call (a read without ``attempts``).
    PHASE_READ = "phase_read"


#: What a store that declares each capability provides (``tests/test_capabilities.py`` checks
#: that every backend declares exactly what it implements).
CAPABILITY_MEMBERS: Mapping[Capability, tuple[str, ...]] = {
    Capability.LEASES: ("run_leases",),
    Capability.RETENTION: ("locked_run", "put_note", "delete_records", "remove_run", "finish_removals"),
    Capability.QUARANTINE: ("quarantine", "quarantined"),
    Capability.LEFTOVERS: ("leftovers",),
    Capability.MIGRATE: ("migrate", "schema_version", "migrated"),
    Capability.GUARD_STORAGE: ("guard_storage", "guard_names"),
    Capability.STAMPS: ("run_stamps", "ticket_stamp"),
    Capability.LOCAL_ROOT: ("root",),
    Capability.QUEUE: ("run_queue",),
    Capability.MANIFESTS: ("pipeline_manifests",),
    Capability.PHASE_READ: ("read_phase",),
}


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


@dataclass(frozen=True)
class PruneTarget:
    """A record ``prune`` decided to remove: its key, and the content hash it decided on."""

    phase_ordinal: int
    phase: str
    attempt_number: int
    completed: bool
    content_hash: str


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
