"""The event feed: every event a person may care about, derived from what the store holds.

``Ledger.feed`` reads the store — checkpoints, judgements, the queue's dead rows, guard histories —
and derives the events (:mod:`phaselog.ledger.feed_runs`), never from memory: a writer killed
right after its write still has its events here. ``Ledger.follow`` waits for new ones, re-reading
only the runs whose change stamp moved (:mod:`phaselog.stores.stamps`); it waits in the store's
change waiter when it has one (PostgreSQL: LISTEN, D207), else sleeps ``poll`` s.

Order: within a run, the order the records were appended (their times made monotonic per stream);
across runs, by that time, then ticket, run and position — deterministic for a given store.

The cursor is opaque (``v1.`` and compressed JSON): per run, per stream, the last position seen
(D201). Events sort by time, but the cursor does not trust time: an event written later with an
earlier clock still comes, on the next page. See docs/notifications.md, "The event feed".

    >>> import phaselog
    >>> ledger = phaselog.open("/tmp/pl-feed-doc")
    >>> page = ledger.feed(ticket_id="PROJ-1")
    >>> page.events, ledger.feed(ticket_id="PROJ-1", after=page.cursor).events
    ([], [])
"""

from __future__ import annotations

import base64
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, Unpack

from phaselog.ledger.events import run_finishers
from phaselog.ledger.feed_runs import FeedEvent, RunFacts, run_events
from phaselog.ledger.gates import read_approvals
from phaselog.model.errors import PhaselogError, UsageError
from phaselog.model.events import TYPES
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.stores.base import Damaged, change_waiter
from phaselog.stores.stamps import run_stamps

if TYPE_CHECKING:
    from phaselog.ledger.resolve import PipelineResolver
    from phaselog.stores.base import ChangeWaiter, Store

#: A cursor: per "ticket/run" (or "guard:<name>"), per stream, the last (place, index) seen.
Marks = dict[str, dict[str, tuple[int, int]]]
_PREFIX = "v1."
#: How long a follower waits in its store's waiter before it looks at ``stop`` again (s).
_STOP_SLICE = 0.25


class FeedQuery(TypedDict, total=False):
    """The filters of ``Ledger.feed`` and ``Ledger.follow`` (each optional)."""

    ticket_id: str | None
    run_id: str | None
    after: str | None
    types: Iterable[str] | None
    limit: int | None
    base_url: str | None


class FollowQuery(FeedQuery, total=False):
    """The filters of ``Ledger.follow``: the feed's, how often to look (``poll``, s) and when to stop."""

    poll: float
    stop: threading.Event | None


@dataclass(frozen=True)
class FeedPage:
    """Events in the feed's order, and the cursor to pass as ``after=`` for what comes later."""

    events: list[FeedEvent]
    cursor: str


def encode_cursor(marks: Marks) -> str:
    """The opaque form of ``marks``."""
    doc = {key: {s: list(p) for s, p in sorted(streams.items())} for key, streams in sorted(marks.items())}
    raw = zlib.compress(json.dumps(doc, separators=(",", ":")).encode())
    return _PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> Marks:
    """The marks of an opaque cursor (None or "": from the start); UsageError naming ``after`` if it is not one."""
    if not cursor:
        return {}
    bad = UsageError(
        "after: not a cursor this feed gave out (pass the `cursor` of a page or of the last line printed)",
        field="after",
        rule="cursor",
    )
    if not cursor.startswith(_PREFIX):
        raise bad
    try:
        body = cursor[len(_PREFIX) :]
        doc = json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
        marks: Marks = {}
        for key, streams in doc.items():
            marks[str(key)] = {str(s): (int(p[0]), int(p[1])) for s, p in streams.items()}
    except (ValueError, TypeError, AttributeError, IndexError, KeyError, zlib.error) as exc:
        raise bad from exc
    return marks


def advance(cursor: str | None, event: FeedEvent) -> str:
    """The cursor just after ``event`` (a deliverer stores it once the event is handled)."""
    marks = decode_cursor(cursor)
    _mark(marks, event)
    return encode_cursor(marks)


def _mark(marks: Marks, event: FeedEvent) -> None:
    ticket, key, stream, place, sub = event.position
    streams = marks.setdefault(f"{ticket}/{key}", {})
    if (place, sub) > streams.get(stream, (0, -1)):
        streams[stream] = (place, sub)


def _unseen(marks: Marks, event: FeedEvent) -> bool:
    ticket, key, stream, place, sub = event.position
    return (place, sub) > marks.get(f"{ticket}/{key}", {}).get(stream, (0, -1))


def check_types(types: Iterable[str] | None) -> frozenset[str] | None:
    """The event types asked for (None: all); UsageError naming ``types`` for one that does not exist."""
    if types is None:
        return None
    asked = frozenset([types] if isinstance(types, str) else types)
    unknown = sorted(asked - set(TYPES))
    if unknown:
        raise UsageError(
            f"types: unknown event type {', '.join(map(repr, unknown))} (known: {', '.join(TYPES)})",
            field="types",
            rule="event_type",
        )
    return asked


class Feed:
    """The feed over one store; it remembers each run's events with the run's change stamp.

    Extra sources (the queue's dead rows, guard histories) are callables that return events
    already in their streams' order (:mod:`phaselog.ledger.feed_sources`).
    """

    def __init__(
        self,
        store: Store,
        pipelines: PipelineResolver,
        sources: Callable[[Store, str | None, str | None], list[FeedEvent]] | None = None,
    ) -> None:
        self.store = store
        self.pipelines = pipelines
        self.sources = sources
        self._runs: dict[tuple[str, str], tuple[str, str | None, list[FeedEvent]]] = {}
        self._lock = threading.Lock()

    def page(self, **query: Unpack[FeedQuery]) -> FeedPage:
        """What ``Ledger.feed`` returns (the filters of :class:`FeedQuery`)."""
        q = query
        ticket = validate_ticket_id(q["ticket_id"]) if q.get("ticket_id") else None
        run = normalize_run_id(q["run_id"]) if q.get("run_id") else None
        if run is not None and ticket is None:
            raise UsageError("run_id: needs ticket_id (a run id is unique within its ticket)", field="run_id")
        types = check_types(q.get("types"))
        limit = q.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise UsageError(f"limit: must be a whole number ≥ 1, not {limit!r}", field="limit", rule="min")
        marks = decode_cursor(q.get("after"))
        events = self.events(ticket, run, base_url=q.get("base_url"))
        out: list[FeedEvent] = []
        for event in events:
            if limit is not None and len(out) >= limit:
                break
            if not _unseen(marks, event):
                continue
            _mark(marks, event)  # a filtered-out event is passed over too: the cursor moves past it
            if types is None or event.type in types:
                out.append(event)
        return FeedPage(out, encode_cursor(marks))

    def events(self, ticket: str | None, run: str | None, *, base_url: str | None = None) -> list[FeedEvent]:
        """Every event of the store (or of one ticket, or one run), in the feed's order."""
        tickets = [ticket] if ticket is not None else self.store.tickets()
        out: list[FeedEvent] = []
        for t in tickets:
            stamps = run_stamps(self.store, t)
            for r in [run] if run is not None else sorted(stamps):
                out.extend(self._run(t, r, stamps.get(r), base_url))
        if self.sources is not None:
            out.extend(self.sources(self.store, ticket, run))
        out.sort(key=lambda e: e.order)
        return out

    def _run(self, ticket: str, run: str, stamp: str | None, base_url: str | None) -> list[FeedEvent]:
        key = (ticket, run)
        with self._lock:
            got = self._runs.get(key)
        if got is not None and stamp is not None and got[0] == stamp and got[1] == base_url:
            return got[2]
        events = self._read_run(ticket, run, base_url)
        if stamp is not None:
            with self._lock:
                self._runs[key] = (stamp, base_url, events)
        return events

    def _read_run(self, ticket: str, run: str, base_url: str | None) -> list[FeedEvent]:
        records = [s.record for s in self.store.iter_records(ticket, run) if not isinstance(s, Damaged)]
        approvals = read_approvals(self.store, ticket, run)[0]
        return run_events(ticket, run, records, approvals, self._facts(ticket, run), base_url=base_url)

    def _facts(self, ticket: str, run: str) -> RunFacts:
        try:
            pl = self.pipelines.for_run(ticket, run)
        except PhaselogError:  # no pipeline to be found: no gates, no retries, no completion known
            return RunFacts(None, frozenset(), {}, ())
        return RunFacts(
            pl.name,
            frozenset(p.ordinal for p in pl.phases if p.requires_approval),
            {p.ordinal: p.execution.retries for p in pl.phases},
            tuple(p.ordinal for p in pl.phases),
            run_finishers(pl),
        )

    def follow(self, **query: Unpack[FollowQuery]) -> Iterator[FeedEvent]:
        """Yield every event after ``after``, then wait for new ones until ``stop`` is set."""
        q = query
        stop = q.get("stop") or threading.Event()
        poll = q.get("poll", 0.5)
        cursor = q.get("after")
        waiter = change_waiter(self.store)  # listening before the first read: no change falls between
        try:
            while True:
                page = self.page(
                    ticket_id=q.get("ticket_id"),
                    run_id=q.get("run_id"),
                    types=q.get("types"),
                    base_url=q.get("base_url"),
                    after=cursor,
                )
                yield from page.events
                cursor = page.cursor
                if _wait(waiter, stop, poll):
                    return
        finally:
            if waiter is not None:
                waiter.close()


def _wait(waiter: ChangeWaiter | None, stop: threading.Event, poll: float) -> bool:
    """Wait for the next round: ``poll`` s, or less when the store's waiter wakes. True: stop."""
    if waiter is None:
        return stop.wait(poll)
    deadline = time.monotonic() + poll  # the safety net: read again after ``poll`` s even unwoken
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0 or waiter.wait(min(left, _STOP_SLICE)):
            return stop.is_set()
    return True


__all__ = [
    "Feed",
    "FeedEvent",
    "FeedPage",
    "FeedQuery",
    "FollowQuery",
    "advance",
    "check_types",
    "decode_cursor",
    "encode_cursor",
]
