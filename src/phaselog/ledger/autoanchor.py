"""Automatic anchoring (D323): after every judgement and every completed run, anchor that ticket.

It is a subscriber of the events seam (:mod:`phaselog.model.events`): events are raised after the
record is durable, so the head covers it; a failing anchoring (the witness unreachable, the key
unreadable) becomes a warning on the write's result, never a failed write. Two ways to turn it on:

* the environment, for every process that writes (the runner, the CLI, workers, the dashboard):
  ``PHASELOG_ANCHOR_TO=WITNESS`` (a directory or a store URL, as ``anchor --to``) and
  ``PHASELOG_ANCHOR_KEY=FILE`` (the private key). :func:`from_environment` is asked by
  :func:`phaselog.ledger.events.raise_events` before each emit and subscribes once per setting;
* the library: ``stop = enable(witness, key)``, process-wide until ``stop()``.

The key never lives in the store (D273), which is why the setting is the process's, not the
store's or the manifest's: a manifest is recorded in the store and travels with exports.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phaselog.model.events import Event
    from phaselog.model.heads import Head

__all__ = ["ENV_KEY", "ENV_TO", "Anchorer", "AutoAnchor", "enable", "from_environment", "use"]

#: ``(store, ticket_id, witness, key file) -> heads``: how to anchor (:mod:`phaselog.ledger.anchorer`).
Anchorer = Callable[[Any, str, str, Path], "list[Head]"]
_anchorer: list[Anchorer] = []


def use(anchorer: Anchorer) -> None:
    """Set how to anchor (the ledger's anchorer registers itself; this module imports no services)."""
    _anchorer[:] = [anchorer]


ENV_TO = "PHASELOG_ANCHOR_TO"
ENV_KEY = "PHASELOG_ANCHOR_KEY"

_lock = threading.Lock()
#: The environment's setting and its unsubscribe (one at a time: a changed setting replaces it).
_from_env: dict[tuple[str, str], Callable[[], None]] = {}


class AutoAnchor:
    """The subscriber: anchors the event's ticket in the store the event was recorded in."""

    def __init__(self, to: str, key: str | os.PathLike[str]) -> None:
        self.to = to
        self.key = Path(key)
        self.heads: list[Head] = []  # what it anchored, in order (tests and callers may look)
        self._last: tuple[str, str] | None = None

    def __call__(self, event: Event, origin: object) -> Iterable[str] | None:
        """Anchor after a judgement or a completed run; other events pass."""
        from phaselog.model.events import Judged, RunCompleted  # lazy: the Ledger imports this; a read raises none
        from phaselog.stores.base import Store  # lazy: a Protocol check, only for the events it takes

        if not isinstance(event, Judged | RunCompleted) or not isinstance(origin, Store):
            return None
        source = (event.ticket_id, event.content_hash)
        if source == self._last:
            return None  # the approval that completed the run: anchored once for both events
        if not _anchorer:
            return [f"{ENV_TO}: nothing anchored: import phaselog.ledger.anchorer (every Ledger does)"]
        heads = _anchorer[0](origin, event.ticket_id, self.to, self.key)
        self._last = source
        self.heads.extend(heads)
        return None


def enable(to: str, key: str | os.PathLike[str]) -> Callable[[], None]:
    """Anchor after every judgement and completed run in this process; return the unsubscribe."""
    from phaselog.model.events import subscribe  # lazy: the Ledger imports this; a read raises none

    return subscribe(AutoAnchor(to, key))


def from_environment() -> list[str]:
    """Follow ``PHASELOG_ANCHOR_TO``/``PHASELOG_ANCHOR_KEY``: subscribed while both are set (one
    subscriber, replaced when they change); warnings when only one is."""
    to, key = os.environ.get(ENV_TO, ""), os.environ.get(ENV_KEY, "")
    if not _from_env and not to and not key:
        return []  # the common case: one dict and two environment lookups per write
    setting = (to, key) if to and key else None
    with _lock:
        for old in [s for s in _from_env if s != setting]:
            _from_env.pop(old)()
        if setting is not None and setting not in _from_env:
            _from_env[setting] = enable(*setting)
    if setting is None and (to or key):
        missing = ENV_KEY if to else ENV_TO
        return [f"automatic anchoring needs both {ENV_TO} and {ENV_KEY}; {missing} is not set: nothing anchored"]
    return []
