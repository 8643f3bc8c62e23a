"""The feed's events that do not come from a run's records: the queue's dead rows and guard histories.

* ``run.dead``: a queue row in state ``dead`` (PostgreSQL only: the one store with a queue). The
  row is the record; its claim token names the death (``RunDead``'s id), ``since`` its time. A row
  that was queued again (``phaselog queue retry``) no longer says it died: that death leaves the
  feed (a deliverer that saw it keeps it; one that did not never will — D203).
* ``guard.pass_failed`` / ``guard.breaker_opened``: a guard's history entries (``kind: pass``),
  replayed in ``seq`` order: a failed pass (``failure``, ``halt``, ``unknown``) is
  ``guard.pass_failed``; the one whose run of failures reaches the pass's ``max_failures`` opened
  the breaker (the id the guard raises in process: guard, count, end of the pass). A ``reset``
  entry starts the count again. Guard events have no ticket: they are in the feed of the whole
  store (``ticket_id=None``) only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from phaselog.ledger.feed_runs import FeedEvent, event_data
from phaselog.model.events import BreakerOpened, Event, PassFailed, RunDead
from phaselog.model.records import format_timestamp, parse_timestamp
from phaselog.stores.base import Capability, guard_keeper

if TYPE_CHECKING:
    from phaselog.stores.base import Store

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FAILED = ("failure", "halt", "unknown")
#: How many dead rows of one ticket the feed reads (the queue's own listing limit).
MAX_DEAD_ROWS = 100_000


class OtherEvents:
    """The feed's other sources, remembering each guard's events while its loop state stays the same.

    A guard writes its loop state, then appends the pass to its history: the events are kept only
    once the history holds the pass the state counts (``pass`` = ``pass_count``), so a read between
    the two is read again next time. Reading the state is one small read; the history is every
    entry.
    """

    def __init__(self) -> None:
        self._guards: dict[str, tuple[object, list[FeedEvent]]] = {}

    def __call__(self, store: Store, ticket: str | None, run: str | None) -> list[FeedEvent]:
        """The queue's deaths (of ``ticket``/``run``, or every one) and, for the whole store, the guards' events."""
        out = queue_deaths(store, ticket, run)
        if ticket is None:
            out.extend(self.guards(store))
        return out

    def guards(self, store: Store) -> list[FeedEvent]:
        """Every guard's failed passes and breaker openings (see the module docstring)."""
        keeper = guard_keeper(store)
        if keeper is None:
            return []
        out: list[FeedEvent] = []
        for name in keeper.guard_names():
            storage = keeper.guard_storage(name)
            state = storage.read_state()
            key = (state.pass_count, state.consecutive_failures, state.last_run_at)
            got = self._guards.get(name)
            if got is not None and got[0] == key:
                out.extend(got[1])
                continue
            history = storage.history()
            events = _guard(name, history)
            passes = [h.get("pass") for h in history if h.get("kind") == "pass"]
            # Kept once the history caught up with the state (no pass yet: 0 and 0). A store's other
            # users of guard storage (the notify deliverer's cursor entries) append no passes: kept too.
            if (passes[-1] if passes else 0) == state.pass_count:
                self._guards[name] = (key, events)
            out.extend(events)
        return out


def queue_deaths(store: Store, ticket: str | None, run: str | None) -> list[FeedEvent]:
    """``run.dead`` for each dead row of the queue (none where the store has no queue)."""
    if Capability.QUEUE not in store.capabilities:
        return []
    from phaselog.stores.sql.queue.rows import DEAD, SqlQueue  # lazy: only a PostgreSQL store has a queue

    out: list[FeedEvent] = []
    for row in SqlQueue(store).entries(states=[DEAD], ticket_id=ticket, limit=MAX_DEAD_ROWS):
        if run is not None and row.run_id != run:
            continue
        event = RunDead(row.ticket_id, row.run_id, row.reason or "", row.recoveries, row.claim_token)
        at = datetime.fromtimestamp(row.since, UTC)
        micros = int(row.since * 1_000_000)
        out.append(
            _event(
                event,
                at,
                ticket=row.ticket_id,
                run=row.run_id,
                run_name=row.run_name,
                pipeline=row.pipeline,
                phase=row.phase,
                position=(row.ticket_id, row.run_id, "q", row.claim_token, 0),
                order=(micros, row.ticket_id, row.run_id, 1 << 30, 2, row.claim_token, 0),
            )
        )
    return out


def guard_events(store: Store) -> list[FeedEvent]:
    """Every guard's failed passes and breaker openings, from its history (see the module docstring)."""
    return OtherEvents().guards(store)


def _guard(name: str, history: list[dict[str, Any]]) -> list[FeedEvent]:
    out: list[FeedEvent] = []
    failures = 0
    floor = -(1 << 62)
    for entry in sorted(history, key=lambda h: int(h.get("seq") or 0)):
        kind, seq = entry.get("kind"), int(entry.get("seq") or 0)
        if kind == "reset":
            failures = 0
            continue
        if kind != "pass" or not isinstance(entry.get("ended_at"), str):
            continue
        failed = entry.get("outcome") in _FAILED
        failures = failures + 1 if failed else 0
        if not failed:
            continue
        ended = entry["ended_at"]
        at = parse_timestamp(ended, field="ended_at")
        floor = max(floor, (at - _EPOCH) // _MICRO)  # monotone: a skewed clock cannot reorder the history
        made: list[Event] = [PassFailed(name, seq, ended, str(entry.get("outcome")), failures)]
        if failures == entry.get("max_failures"):
            made.append(BreakerOpened(name, failures, ended))
        for sub, event in enumerate(made):
            key = f"guard:{name}"
            out.append(_event(event, at, position=("", key, "g", seq, sub), order=(floor, "", key, 0, 3, seq, sub)))
    return out


_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - _EPOCH


def _event(
    event: Event,
    at: datetime,
    *,
    ticket: str | None = None,
    run: str | None = None,
    run_name: str | None = None,
    pipeline: str | None = None,
    phase: str | None = None,
    position: tuple[str, str, str, int, int],
    order: tuple[int, str, str, int, int, int, int],
) -> FeedEvent:
    return FeedEvent(
        event_id=event.id,
        type=event.type,
        ticket_id=ticket,
        run_id=run,
        run_name=run_name,
        pipeline=pipeline,
        phase=phase,
        attempt=None,
        at=format_timestamp(at),
        data=event_data(event),
        position=position,
        order=order,
    )
