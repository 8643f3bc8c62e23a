"""One run's events, derived from what the store holds: its checkpoints and its judgements.

:func:`run_events` reads nothing itself: it is handed a run's records, its approvals and its
pipeline, and returns the run's feed events in the run's order (:mod:`phaselog.ledger.feed` reads
the store and merges the runs). Each event has a *position*: the stream it belongs to (one per
phase's attempts, ``c<ordinal>``; one per phase's judgements, ``a<ordinal>``; the queue's deaths,
``q``, and a guard's history, ``g``, come from :mod:`phaselog.ledger.feed_sources`), its place in
that stream (the attempt number, the judgement's ``seq``, the claim token, the history's ``seq``)
and its index among the events of one record. A stream only ever grows at its end — an append is
refused unless it follows the phase's latest attempt — so a cursor that remembers, per stream, the
last position seen never skips an event, whatever the writers' clocks say (D201).

The run's order is the order of the records' times made monotonic per stream: a record sorts no
earlier than the one before it in its stream, and a judgement no earlier than the checkpoint it
judges (a skewed clock cannot put an attempt before the one it followed). Ties go by phase, then
checkpoints before judgements, then position. What each record means (its events) never depends
on that order: it is decided from the record alone (D206), so reading more records never gives an
old record a new event behind the cursor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import quote

from phaselog.ledger.events import Finisher, checkpoint_events, completes_run, failed_for_good, judgement_events
from phaselog.model.events import Event
from phaselog.model.records import format_timestamp

if TYPE_CHECKING:
    from phaselog.model.entries import Approval
    from phaselog.model.records import BasisEntry, Checkpoint

#: (ticket, run or guard key, stream, place in the stream, index among one record's events).
Position = tuple[str, str, str, int, int]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_KIND_RANK = {"c": 0, "a": 1, "q": 2, "g": 3}


@dataclass(frozen=True)
class FeedEvent:
    """One event of the feed, as a receiver sees it (docs/notifications.md, docs/event.schema.json)."""

    event_id: str
    type: str
    ticket_id: str | None
    run_id: str | None
    run_name: str | None
    pipeline: str | None
    phase: str | None
    attempt: int | None
    at: str
    data: Mapping[str, object]
    url: str | None = None
    #: Where the event sits in its stream (what a cursor remembers); not part of the JSON form.
    position: Position = field(default=("", "", "", 0, 0), compare=False, repr=False)
    #: The sort key of the feed's order (the monotone time first); not part of the JSON form.
    order: tuple[int, str, str, int, int, int, int] = field(default=(0, "", "", 0, 0, 0, 0), compare=False, repr=False)

    def to_json(self) -> dict[str, object]:
        """The JSON form: every field but the position (docs/event.schema.json)."""
        return {
            "event_id": self.event_id,
            "type": self.type,
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "run_name": self.run_name,
            "pipeline": self.pipeline,
            "phase": self.phase,
            "attempt": self.attempt,
            "at": self.at,
            "data": dict(self.data),
            "url": self.url,
        }


@dataclass(frozen=True)
class RunFacts:
    """What the feed needs of one run's pipeline: gated phases, retries, the sinks (None: not known)."""

    pipeline: str | None
    gated: frozenset[int]
    retries: Mapping[int, int]
    ordinals: tuple[int, ...]
    #: Per sink's ordinal, what a run-completing record of it must build on (events.run_finishers).
    finishers: Mapping[int, Finisher] = field(default_factory=dict)


@dataclass
class _Item:
    """One record of the run with the events it raised, before sorting."""

    stream: str
    place: int
    at: datetime
    ordinal: int
    events: list[Event]
    phase: str
    attempt: int
    eff: int = 0


def _micros(ts: datetime) -> int:
    return (ts - _EPOCH) // _ONE_MICRO


_ONE_MICRO = timedelta(microseconds=1)


def event_data(event: Event) -> dict[str, object]:
    """The kind-specific fields of ``event`` (what is not in the common fields)."""
    common = {"ticket_id", "run_id", "phase", "attempt_number", "at"}
    return {k: v for k, v in event.to_json().items() if k not in common and k not in ("id", "kind")}


def run_events(
    ticket_id: str,
    run_id: str,
    checkpoints: Sequence[Checkpoint],
    approvals: Sequence[Approval],
    facts: RunFacts,
    *,
    base_url: str | None = None,
) -> list[FeedEvent]:
    """The run's events in the run's order (see the module docstring).

    ``checkpoints`` are the run's intact Checkpoint records, ``approvals`` its Approval entries
    (the queue's deaths are :mod:`phaselog.ledger.feed_sources`'s).
    """
    items = _items(checkpoints, approvals, facts)
    _monotone(items)
    items.sort(key=_sort_key)
    run_name = next((c.run_name for c in checkpoints if c.run_name), None)
    url = f"{base_url.rstrip('/')}/tickets/{_seg(ticket_id)}/runs/{_seg(run_id)}" if base_url else None
    out: list[FeedEvent] = []
    for item in items:
        for sub, event in enumerate(item.events):
            out.append(
                FeedEvent(
                    event_id=event.id,
                    type=event.type,
                    ticket_id=ticket_id,
                    run_id=run_id,
                    run_name=run_name,
                    pipeline=facts.pipeline,
                    phase=item.phase or None,
                    attempt=item.attempt or None,
                    at=format_timestamp(item.at),
                    data=event_data(event),
                    url=url,
                    position=(ticket_id, run_id, item.stream, item.place, sub),
                    order=(item.eff, ticket_id, run_id, item.ordinal, _KIND_RANK[item.stream[0]], item.place, sub),
                )
            )
    return out


def _seg(value: str) -> str:
    return quote(value, safe="")


def _items(checkpoints: Sequence[Checkpoint], approvals: Sequence[Approval], facts: RunFacts) -> list[_Item]:
    """The run's records with their events: each decided from the record alone (and, for a judgement,
    the checkpoint it judges), never from the order they are read in (D206)."""
    raw: list[_Item] = []
    cps: dict[tuple[str, int], Checkpoint] = {}
    aps: dict[tuple[str, int], Approval] = {}
    for cp in checkpoints:
        item = _Item(
            f"c{cp.phase_ordinal}",
            cp.attempt_number,
            cp.timestamp_utc,
            cp.phase_ordinal,
            [],
            cp.phase,
            cp.attempt_number,
        )
        raw.append(item)
        cps[(item.stream, item.place)] = cp
    for ap in approvals:
        item = _Item(f"a{ap.phase_ordinal}", ap.seq, ap.timestamp, ap.phase_ordinal, [], ap.phase, ap.attempt_number)
        raw.append(item)
        aps[(item.stream, item.place)] = ap
    by_hash = {cp.content_hash: cp for cp in checkpoints}

    def lookup(name: str, entry: BasisEntry) -> Checkpoint | None:
        found = by_hash.get(entry.hash)  # what a basis names, by hash: immutable, whenever it is read
        return found if found is not None and (found.phase, found.attempt_number) == (name, entry.attempt) else None

    for item in raw:
        o = item.ordinal
        if (rec := cps.get((item.stream, item.place))) is not None:
            gated = o in facts.gated
            item.events = checkpoint_events(
                rec,
                gated=gated,
                completes_run=not gated and completes_run(rec, facts.finishers, lookup),
                for_good=failed_for_good(rec, facts.retries.get(o, 0)),
            )
        else:
            ap = aps[(item.stream, item.place)]
            judged = by_hash.get(ap.checkpoint_hash)
            done = judged is not None and completes_run(judged, facts.finishers, lookup)
            item.events = judgement_events(ap, completes_run=done)
    return raw


def _sort_key(item: _Item) -> tuple[int, int, int, int]:
    return (item.eff, item.ordinal, _KIND_RANK[item.stream[0]], item.place)


def _monotone(items: list[_Item]) -> None:
    """Give each item its monotone time: no earlier than its stream's previous item, nor than what it judges."""
    by_stream: dict[str, list[_Item]] = {}
    for item in items:
        by_stream.setdefault(item.stream, []).append(item)
    eff_of: dict[tuple[str, int], int] = {}
    for stream in sorted(by_stream, key=lambda s: _KIND_RANK[s[0]]):  # checkpoints before what judges them
        floor = -(1 << 62)
        for item in sorted(by_stream[stream], key=lambda i: i.place):
            floor = max(floor, _micros(item.at))
            if stream.startswith("a"):
                floor = max(floor, eff_of.get((f"c{item.ordinal}", item.attempt), floor))
            item.eff = floor
            eff_of[(stream, item.place)] = floor
