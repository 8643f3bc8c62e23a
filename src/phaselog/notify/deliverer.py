"""The deliverer: every event a rule matches, sent at least once and in order per run (D216).

One loop, many lanes: each rule is a lane with its own cursor (a receiver that is down blocks
only its own rule). Each round, a lane reads the feed after its cursor and walks every run's
events in order: an event the rule does not match is passed over; the first one it matches is
sent (on a small thread pool, so a slow receiver holds up only its run), and the run waits until
it is delivered or dead-lettered. The cursor moves past an event only after that, and is written
to the store (fenced by the lease) before the next event of that run goes out. So a deliverer
killed at any moment sends again at most the events that were in flight, each with its own
``event_id``; nothing is ever delivered from memory.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phaselog.ledger.feed import advance
from phaselog.model.errors import Fenced, PhaselogError, StoreError, UsageError
from phaselog.notify.config import Config, Rule, hook_rule
from phaselog.notify.state import DeliveryState
from phaselog.notify.transports import DeliveryFailed, send

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger
    from phaselog.ledger.feed_runs import FeedEvent

__all__ = ["Deliverer", "Stats", "backoff_delay", "status"]

Say = Callable[[str], None]


def backoff_delay(retry_backoff: float, max_backoff: float, failures: int, rnd: random.Random) -> float:
    """The wait after the ``failures``-th failure: ``backoff·2^(failures-1)``, capped, ±20 % jitter."""
    base = min(max_backoff, retry_backoff * float(2 ** max(0, failures - 1)))
    jitter: float = rnd.uniform(0.8, 1.2)
    return base * jitter


@dataclass
class Stats:
    """What a deliverer did (its summary line, and the tests' view)."""

    delivered: int = 0
    failed_attempts: int = 0
    dead_letters: int = 0
    skipped: int = 0


@dataclass
class _Pending:
    """A run's head event in a lane: sent (``future``), or waiting for its next try."""

    event: FeedEvent
    failures: int = 0
    next_at: float = 0.0
    future: Future[None] | None = None
    last_error: str = ""


@dataclass
class _Lane:
    rule: Rule
    cursor: str | None
    pending: dict[tuple[str | None, str | None], _Pending] = field(default_factory=dict)


class Deliverer:
    """Deliver ``config``'s rules from ``ledger``'s feed until ``stop`` is set."""

    def __init__(
        self,
        ledger: Ledger,
        config: Config,
        *,
        say: Say | None = None,
        workers: int = 8,
        seed: int | None = None,
    ) -> None:
        self.ledger = ledger
        self.config = config
        self.state = DeliveryState(ledger.store, config.name, stale_after=config.stale_after)
        self.say = say or (lambda _text: None)
        self.stats = Stats()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="phaselog-notify")
        self._rnd = random.Random(seed)  # noqa: S311  # jitter, not a secret
        self._lanes: list[_Lane] = []
        self._renewed = float("-inf")
        self._saved: dict[str, str] = {}
        self._discovered: str | None = None
        self._runs_seen: set[tuple[str, str]] = set()
        #: Manifest hooks that could not be used (a missing secret, a bad URL), said once each.
        self.hook_errors: list[str] = []

    # -- the lease --------------------------------------------------------------------------------
    def acquire(self, stop: threading.Event) -> bool:
        """Wait (as a standby) until the lease is ours; False if ``stop`` came first."""
        said = ""
        while not stop.is_set():
            taken, why = self.state.try_acquire()
            if taken:
                self._renewed = time.monotonic()
                self.say(f"holding the lease of {self.config.name} ({why})")
                self._start_lanes()
                return True
            if why != said:
                self.say(f"standing by: another deliverer holds {self.config.name}: {why}")
                said = why
            stop.wait(self.config.poll)
        return False

    def _start_lanes(self) -> None:
        saved = self.state.cursors()
        lanes = []
        for rule in self.config.rules:
            cursor = saved.get(rule.name)
            if cursor is None and rule.start == "now":
                cursor = self.ledger.feed(base_url=self.config.base_url).cursor
                self.state.save_cursor(rule.name, cursor)
            lanes.append(_Lane(rule, cursor))
        self._lanes = lanes
        self._saved = saved
        self._discovered = None
        self._runs_seen = set()

    def _discover(self) -> None:
        """New runs in the feed: lanes for their pipelines' ``notify:`` hooks (D219)."""
        if not self.config.manifests:
            return
        page = self.ledger.feed(after=self._discovered)
        self._discovered = page.cursor  # noticing is all this does: no event is passed over for a lane
        known = {lane.rule.name for lane in self._lanes}
        for event in page.events:
            if event.ticket_id is None or event.run_id is None or (event.ticket_id, event.run_id) in self._runs_seen:
                continue
            self._runs_seen.add((event.ticket_id, event.run_id))
            try:
                pl = self.ledger.pipelines.for_run(event.ticket_id, event.run_id)
            except PhaselogError:
                continue  # no pipeline to be found: no hooks
            hooks: list[tuple[str | None, int, Mapping[str, Any]]] = [(None, i, h) for i, h in enumerate(pl.notify)]
            hooks += [(p.name, i, h) for p in pl.phases for i, h in enumerate(p.notify)]
            for phase, i, hook in hooks:
                try:
                    rule = hook_rule(hook, pipeline=pl.name, phase=phase, index=i)
                except UsageError as exc:
                    if exc.message not in self.hook_errors:
                        self.hook_errors.append(exc.message)
                        self.say(f"hook not delivered: {exc.message}")
                    continue
                if rule.name not in known:
                    known.add(rule.name)
                    self._lanes.append(_Lane(rule, self._saved.get(rule.name)))

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, idle_exit: bool = False) -> Stats:
        """Deliver until ``stop`` is set (``idle_exit``: also once nothing is left to do)."""
        try:
            while not stop.is_set():
                try:
                    if self.state.holder is None and not self.acquire(stop):
                        break
                    if time.monotonic() - self._renewed >= self.config.stale_after / 4:
                        self.state.renew()  # the heartbeat: a few per stale_after, not one per round
                        self._renewed = time.monotonic()
                    busy = self.round()
                except Fenced as exc:
                    self.say(f"lost the lease ({exc.message}); standing by")
                    self._drain()
                    self.state.holder = None
                    continue
                except StoreError as exc:  # the store is away for a moment: what was in flight goes again
                    self.say(f"store error ({exc.message}); trying again in {self.config.poll:g}s")
                    self._drain()
                    self._lanes = []
                    self.state.holder = None  # re-taken (or found ours gone) once the store answers
                    stop.wait(self.config.poll)
                    continue
                if idle_exit and not busy:
                    break
                if not busy:
                    stop.wait(self.config.poll)
        finally:
            self._drain()
            self._pool.shutdown(wait=True)
            try:
                self.state.release()
            except PhaselogError as exc:
                self.say(f"could not release the lease: {exc.message}")
        return self.stats

    def _drain(self) -> None:
        for lane in self._lanes:
            for p in lane.pending.values():
                if p.future is not None:
                    p.future.cancel()
            lane.pending.clear()

    def round(self) -> bool:
        """One pass over every lane; True while anything is in flight or waiting."""
        busy = False
        self._discover()
        for lane in self._lanes:
            busy = self._lane_round(lane) or busy
        if busy:
            self._wait_some()
        return busy

    def _wait_some(self) -> None:
        """Wait until an attempt finishes or a retry is due (at most ``poll``: new events may come)."""
        pending = [p for lane in self._lanes for p in lane.pending.values()]
        futures = [p.future for p in pending if p.future is not None]
        due = [p.next_at for p in pending if p.future is None]
        timeout = self.config.poll if not due else max(0.0, min(self.config.poll, min(due) - time.monotonic()))
        if futures:
            wait(futures, timeout=timeout, return_when=FIRST_COMPLETED)
        elif timeout > 0:
            time.sleep(timeout)

    def _lane_round(self, lane: _Lane) -> bool:
        self._settle(lane)
        page = self.ledger.feed(after=lane.cursor, types=lane.rule.events, base_url=self.config.base_url)
        runs: dict[tuple[str | None, str | None], list[FeedEvent]] = {}
        for event in page.events:
            runs.setdefault((event.ticket_id, event.run_id), []).append(event)
        moved = False
        for key, events in runs.items():
            if key in lane.pending:
                continue  # its head is in flight or waiting: the run's later events wait too
            for event in events:
                if lane.rule.matches(event):
                    lane.pending[key] = _Pending(event)
                    break
                lane.cursor = advance(lane.cursor, event)
                self.stats.skipped += 1
                moved = True
        if moved:
            self.state.save_cursor(lane.rule.name, lane.cursor or "")
        now = time.monotonic()
        for p in lane.pending.values():
            if p.future is None and p.next_at <= now:
                p.future = self._pool.submit(send, lane.rule.target, p.event.to_json())
        return bool(lane.pending)

    def _settle(self, lane: _Lane) -> None:
        """Take in the attempts that finished: advance (and save) the cursor, or schedule a retry."""
        retry = lane.rule.target.retry
        for key, p in list(lane.pending.items()):
            if p.future is None or not p.future.done():
                continue
            error = p.future.exception()
            p.future = None
            if error is None:
                lane.cursor = advance(lane.cursor, p.event)
                self.state.save_cursor(lane.rule.name, lane.cursor)
                del lane.pending[key]
                self.stats.delivered += 1
                continue
            p.failures += 1
            self.stats.failed_attempts += 1
            p.last_error = error.message if isinstance(error, DeliveryFailed) else repr(error)
            if p.failures >= retry.max_attempts:
                self.state.check()  # a deliverer that lost the lease leaves the decision to the new holder
                self.state.dead_letter(lane.rule.name, p.event.to_json(), p.failures, p.last_error)
                lane.cursor = advance(lane.cursor, p.event)
                self.state.save_cursor(lane.rule.name, lane.cursor)
                del lane.pending[key]
                self.stats.dead_letters += 1
                self.say(f"dead letter: {p.event.event_id} for rule {lane.rule.name}: {p.last_error}")
                continue
            delay = backoff_delay(retry.backoff, retry.max_backoff, p.failures, self._rnd)
            p.next_at = time.monotonic() + delay
            self.say(f"{p.event.event_id} (rule {lane.rule.name}): {p.last_error}; again in {delay:.2f}s")


def status(ledger: Ledger, config: Config) -> dict[str, Any]:
    """What ``phaselog notify status`` shows: the lease, each rule's position, the dead letters."""
    state = DeliveryState(ledger.store, config.name, stale_after=config.stale_after)
    cursors = state.cursors()
    rules = []
    for rule in config.rules:
        cursor = cursors.get(rule.name)
        behind = len(ledger.feed(after=cursor, types=rule.events).events) if cursor is not None else None
        rules.append({"rule": rule.name, "cursor": cursor, "after_cursor": behind, "started": cursor is not None})
    for name in sorted(set(cursors) - {r.name for r in config.rules}):  # a manifest's hooks (D219)
        rules.append({"rule": name, "cursor": cursors[name], "after_cursor": None, "started": True})
    dead = state.dead_letters()
    return {
        "name": config.name,
        "guard": state.storage.name,
        "lease": state.lease(),
        "rules": rules,
        "dead_letters": [
            {k: d.get(k) for k in ("seq", "rule", "event_id", "attempts", "error", "at", "event")} for d in dead
        ],
    }
