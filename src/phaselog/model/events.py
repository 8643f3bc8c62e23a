"""Events: what a person may care about, as typed immutable data, and the one place to subscribe.

An event is raised *after* the record it comes from is durable (a checkpoint, an approval, a queue
row, a guard's loop state) and carries a stable ``id`` derived from that record (its content hash,
or its key and state), so a deliverer that crashes can resume from its cursor and drop repeats.

Subscribers are plain callables ``(event, origin) -> warnings | None`` registered process-wide with
:func:`subscribe`; ``origin`` is where the event was recorded (the ledger's store, the guard's
store). :func:`emit` calls them in the order they subscribed; a subscriber that raises never fails
the write that is already done: its error is logged and becomes a warning. See docs/events.md.

This module is data and a list of callables: it imports nothing above ``phaselog.model``, so the
ledger, the stores' queue and the guard all raise through it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    """Something that happened to a run or a guard, raised once its record is durable."""

    KIND: ClassVar[str] = "event"

    @property
    def source(self) -> str:
        """The record this event comes from (a content hash, or a key and state); each kind names its own."""
        return ""

    @property
    def type(self) -> str:
        """The public type name (``checkpoint.written`` …, docs/notifications.md): the KIND, or the
        outcome where one class covers two types (a judgement)."""
        return self.KIND

    @property
    def id(self) -> str:
        """A stable id: the same record always raises the same id (``type:source``)."""
        return f"{self.type}:{self.source}"

    def to_json(self) -> dict[str, object]:
        """The JSON form: ``id``, ``kind`` (the type) and the fields."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {"id": self.id, "kind": self.type, **fields}


@dataclass(frozen=True)
class RunEvent(Event):
    """Something that happened to one run of a ticket."""

    ticket_id: str
    run_id: str

    @property
    def source(self) -> str:
        """The run (each kind below names its record more precisely)."""
        return f"{self.ticket_id}/{self.run_id}"


@dataclass(frozen=True)
class CheckpointWritten(RunEvent):
    """A checkpoint (completed or failed) was appended."""

    KIND: ClassVar[str] = "checkpoint.written"

    phase: str
    attempt_number: int
    status: str
    content_hash: str

    @property
    def source(self) -> str:
        """The checkpoint's content hash."""
        return self.content_hash


@dataclass(frozen=True)
class PhaseFailed(RunEvent):
    """A phase failed for good: a failed checkpoint with no retry left (D202)."""

    KIND: ClassVar[str] = "phase.failed"

    phase: str
    attempt_number: int
    error: str | None
    content_hash: str

    @property
    def source(self) -> str:
        """The failed checkpoint's content hash."""
        return self.content_hash


@dataclass(frozen=True)
class AwaitingApproval(RunEvent):
    """A completed checkpoint of a gated phase waits for a person's judgement."""

    KIND: ClassVar[str] = "phase.awaiting_approval"

    phase: str
    attempt_number: int
    content_hash: str

    @property
    def source(self) -> str:
        """The waiting checkpoint's content hash."""
        return self.content_hash


@dataclass(frozen=True)
class Judged(RunEvent):
    """A person approved or rejected a checkpoint of a gated phase."""

    KIND: ClassVar[str] = "phase.judged"

    phase: str
    attempt_number: int
    approved: bool
    by: str
    checkpoint_hash: str
    content_hash: str

    @property
    def type(self) -> str:
        """``phase.approved`` or ``phase.rejected``."""
        return "phase.approved" if self.approved else "phase.rejected"

    @property
    def source(self) -> str:
        """The approval's content hash."""
        return self.content_hash


@dataclass(frozen=True)
class RunCompleted(RunEvent):
    """Every phase of the run is complete: the record named last completed it."""

    KIND: ClassVar[str] = "run.completed"

    phase: str
    content_hash: str

    @property
    def source(self) -> str:
        """The content hash of the record (checkpoint or approval) that completed the run."""
        return self.content_hash


@dataclass(frozen=True)
class RunDead(RunEvent):
    """The queue gave up on a run (a poison run, recovered too often)."""

    KIND: ClassVar[str] = "run.dead"

    reason: str
    recoveries: int
    #: The row's claim token when it died: every claim has its own, so each death has its own id.
    claim_token: int

    @property
    def source(self) -> str:
        """The queue row's key and the claim it died under."""
        return f"{self.ticket_id}/{self.run_id}/{self.claim_token}"


@dataclass(frozen=True)
class BreakerOpened(Event):
    """A cron-loop guard's circuit breaker opened: its job failed ``consecutive_failures`` times in a row."""

    KIND: ClassVar[str] = "guard.breaker_opened"

    guard: str
    consecutive_failures: int
    #: When the pass that opened it ended (ISO-8601 UTC).
    at: str

    @property
    def source(self) -> str:
        """The guard, its failure count and when it opened."""
        return f"{self.guard}/{self.consecutive_failures}/{self.at}"


@dataclass(frozen=True)
class PassFailed(Event):
    """A cron-loop guard's pass failed (its job exited non-zero, timed out or could not start)."""

    KIND: ClassVar[str] = "guard.pass_failed"

    guard: str
    #: The pass's number in the guard's history (``seq``).
    seq: int
    #: When the pass ended (ISO-8601 UTC).
    at: str
    outcome: str
    consecutive_failures: int

    @property
    def source(self) -> str:
        """The guard and the history entry's number."""
        return f"{self.guard}/{self.seq}"


#: Every public event type, in the order docs/notifications.md lists them.
TYPES = (
    "checkpoint.written",
    "phase.failed",
    "phase.awaiting_approval",
    "phase.approved",
    "phase.rejected",
    "run.completed",
    "run.dead",
    "guard.breaker_opened",
    "guard.pass_failed",
)

#: ``(event, origin) -> warnings``: ``origin`` is where the event was recorded (a store).
Subscriber = Callable[[Event, object], Iterable[str] | None]

_lock = threading.Lock()
_subscribers: list[Subscriber] = []


def subscribe(subscriber: Subscriber) -> Callable[[], None]:
    """Call ``subscriber`` with every event raised in this process from now on; return the unsubscribe."""
    with _lock:
        _subscribers.append(subscriber)

    def unsubscribe() -> None:
        with _lock:
            if subscriber in _subscribers:
                _subscribers.remove(subscriber)

    return unsubscribe


def subscribers() -> tuple[Subscriber, ...]:
    """The subscribers, in the order they subscribed."""
    with _lock:
        return tuple(_subscribers)


def emit(events: Sequence[Event], origin: object) -> list[str]:
    """Hand each event, in order, to every subscriber; return their warnings.

    Call it only once the events' records are durable. A subscriber that raises is logged and
    reported as a warning; it never stops the others nor undoes the write.
    """
    warnings: list[str] = []
    for event in events:
        for subscriber in subscribers():
            try:
                said = subscriber(event, origin)
            except Exception as exc:
                _log.warning("event subscriber %r failed on %s", subscriber, event.id, exc_info=True)
                warnings.append(f"recorded, but a subscriber failed on {event.type}: {exc}")
                continue
            if said:
                warnings.extend(said)
    return warnings


__all__ = [
    "TYPES",
    "AwaitingApproval",
    "BreakerOpened",
    "CheckpointWritten",
    "Event",
    "Judged",
    "PassFailed",
    "PhaseFailed",
    "RunCompleted",
    "RunDead",
    "RunEvent",
    "Subscriber",
    "emit",
    "subscribe",
    "subscribers",
]
