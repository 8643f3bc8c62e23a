"""The store contract's value types: what a store hands back and what it declares it can do.

Plain data below the contract (:mod:`phaselog.stores.base`, which re-exports every name here), so the
shared rules (kernel, snapshot, manifests) use them without importing the protocol that names them.
The types only leases and retention use live in :mod:`phaselog.stores.admin_values` (D334).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from phaselog.model.records import Checkpoint


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
    #: ``premise_snapshot(ticket_id, run_id)``: the run as this handle last saw it, for a write whose
    #: append checks that the run did not move since (stores/sql/carried.py); it may be stale.
    #: ``state_snapshot(ticket_id, run_id)``: the snapshot a reader of state only (status) gets,
    #: checked fresh as ``snapshot``'s, but not copied (D192).
    CARRIED_RUNS = "carried_runs"
    #: ``change_waiter()``: a waiter that blocks until a run gains a record or a timeout passes
    #: (PostgreSQL: LISTEN on the feed's trigger NOTIFY, D207); ``Ledger.follow`` waits in it.
    CHANGE_WAIT = "change_wait"


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
    Capability.CARRIED_RUNS: ("premise_snapshot", "state_snapshot"),
    Capability.CHANGE_WAIT: ("change_waiter",),
}
