"""Where a deliverer keeps what must survive it: its lease, its cursors, its dead letters (D215).

All of it lives in the store, in the guard storage every built-in store already keeps
(:class:`phaselog.stores.base.GuardStorage`), under the guard name ``notify.<config name>``:

- **the lease** is the guard's lock: a :class:`~phaselog.model.guard.Holder` taken under the
  storage's mutex when it is free or its holder is judged gone (:func:`phaselog.guard.liveness.judge_holder`:
  a process that is gone on this host at once; one on another host once its heartbeat — the
  holder's ``started_at``, rewritten by :meth:`DeliveryState.renew` — is older than ``stale_after``);
- **each rule's cursor** is a history entry ``{"kind": "notify.cursor", "rule", "cursor", "token"}``,
  appended after the fencing token is checked under the mutex;
- **a dead letter** is a history entry ``{"kind": "notify.dead_letter", "rule", "event", ...}``.

History is append-only, so a resume merges every cursor entry of a rule (each cursor only moves
past events that were handled, so their per-stream maximum is what was handled by anyone).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from phaselog.guard.liveness import Environment, judge_holder
from phaselog.ledger.feed import decode_cursor, encode_cursor
from phaselog.model.errors import Corrupt, Fenced, UsageError
from phaselog.model.guard import Holder
from phaselog.model.records import format_timestamp
from phaselog.stores.base import GuardStorage, Store, guard_keeper

__all__ = ["CURSOR", "DEAD_LETTER", "DeliveryState", "guard_name", "merge_cursors"]

CURSOR = "notify.cursor"
DEAD_LETTER = "notify.dead_letter"


def guard_name(config_name: str) -> str:
    """The guard name a configuration's state is kept under."""
    return f"notify.{config_name}"


def merge_cursors(cursors: list[str]) -> str | None:
    """One cursor past everything any of ``cursors`` is past (per stream, the furthest)."""
    if not cursors:
        return None
    merged: dict[str, dict[str, tuple[int, int]]] = {}
    for c in cursors:
        for key, streams in decode_cursor(c).items():
            mine = merged.setdefault(key, {})
            for stream, pos in streams.items():
                if pos > mine.get(stream, (0, -1)):
                    mine[stream] = pos
    return encode_cursor(merged)


@dataclass
class DeliveryState:
    """The lease, cursors and dead letters of one configuration in one store."""

    store: Store
    config_name: str
    stale_after: float = 60.0
    env: Environment = field(default_factory=Environment)
    holder: Holder | None = None

    def __post_init__(self) -> None:
        keeper = guard_keeper(self.store)
        if keeper is None:
            raise UsageError(
                "--store: this store keeps no guard storage, where a deliverer keeps its cursor and lease",
                field="store",
                rule="capability",
            )
        self.storage: GuardStorage = keeper.guard_storage(guard_name(self.config_name))

    # -- the lease ------------------------------------------------------------------------------------
    def try_acquire(self) -> tuple[bool, str]:
        """Take the lease if it is free or its holder is gone; (taken, why not / whom we displaced)."""
        stale = timedelta(seconds=self.stale_after)
        with self.storage.mutex():
            try:
                current = self.storage.read_lock()
            except Corrupt as exc:
                current, why = None, f"a damaged lock replaced ({exc.message})"
            else:
                why = "free"
            mine = current is not None and current.pid == os.getpid() and current.host == self.env.host
            if current is not None and not mine:
                verdict, why = judge_holder(current, self.env, stale)
                if verdict in ("live", "hung", "remote-live"):
                    return False, why
            pid = os.getpid()
            me = Holder(pid, self.env.host, self.env.start_time_of(pid), self.env.clock(), secrets.token_hex(8))
            self.holder = self.storage.write_lock(me)
            return True, why

    def renew(self) -> None:
        """Rewrite our holder's heartbeat; Fenced if the lease was taken over."""
        me = self._mine()
        beat = Holder(me.pid, me.host, me.process_start, self.env.clock(), me.token)
        with self.storage.mutex():
            self.storage.update_lock(beat)
        self.holder = beat

    def release(self) -> None:
        """Free the lease if we still hold it."""
        if self.holder is not None:
            with self.storage.mutex():
                self.storage.remove_lock(self.holder.token)
            self.holder = None

    def _mine(self) -> Holder:
        if self.holder is None:
            raise Fenced(f"deliverer {self.config_name}: the lease is not held", rule="lease")
        return self.holder

    def check(self) -> None:
        """Fenced unless we still hold the lease."""
        me = self._mine()
        with self.storage.mutex():
            try:
                current = self.storage.read_lock()
            except Corrupt:
                current = None
        if current is None or current.token != me.token:
            self.holder = None
            raise Fenced(f"deliverer {self.config_name}: the lease was taken over", rule="fencing_token")

    # -- cursors and dead letters ---------------------------------------------------------------------
    def history(self) -> list[dict[str, Any]]:
        """Every entry this configuration's state holds, oldest first."""
        return self.storage.history()

    def cursors(self) -> dict[str, str]:
        """Each rule's cursor (merged over every holder that wrote one)."""
        found: dict[str, list[str]] = {}
        for entry in self.history():
            if entry.get("kind") == CURSOR and isinstance(entry.get("cursor"), str):
                found.setdefault(str(entry.get("rule")), []).append(entry["cursor"])
        out: dict[str, str] = {}
        for rule, cs in found.items():
            merged = merge_cursors(cs)
            if merged is not None:
                out[rule] = merged
        return out

    def save_cursor(self, rule: str, cursor: str) -> None:
        """Record ``rule``'s cursor, while we hold the lease (Fenced otherwise)."""
        self.check()
        self.storage.append_history({"kind": CURSOR, "rule": rule, "cursor": cursor, "token": self._mine().token})

    def dead_letter(self, rule: str, event: Mapping[str, Any], attempts: int, error: str) -> None:
        """Record that ``event`` could not be delivered by ``rule`` after ``attempts`` tries."""
        self.storage.append_history(
            {
                "kind": DEAD_LETTER,
                "rule": rule,
                "event_id": event.get("event_id"),
                "event": dict(event),
                "attempts": attempts,
                "error": error,
                "at": format_timestamp(datetime.now(UTC)),
            }
        )

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every dead letter, oldest first."""
        return [e for e in self.history() if e.get("kind") == DEAD_LETTER]

    def lease(self) -> dict[str, Any] | None:
        """The lease as stored (None when free), with its holder judged."""
        try:
            current = self.storage.read_lock()
        except Corrupt as exc:
            return {"damaged": exc.message}
        if current is None:
            return None
        verdict, why = judge_holder(current, self.env, timedelta(seconds=self.stale_after))
        return {**current.to_json(), "verdict": verdict, "reason": why}
