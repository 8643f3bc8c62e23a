"""Ledgers for a threaded server: a read-only ledger per thread, a writable one per action.

A server (the dashboard; later the MCP server) answers requests on worker threads. Reading
through a read-only store means showing a page never writes (no store is created, no schema
migrated); the few requests that change something open a writable ledger for that request only
and close it afterwards, so a writer's connection never outlives the action.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from phaselog.ledger.facade import Ledger
from phaselog.stores import open_store


class LedgerPool:
    """Ledgers over one store (URL or path): :meth:`reader` per thread, :meth:`writer` per action."""

    def __init__(self, store: str | None) -> None:
        self.store = store
        self._local = threading.local()
        self._all: list[Ledger] = []
        self._lock = threading.Lock()

    def reader(self) -> Ledger:
        """This thread's read-only ledger (opened on first use, kept until :meth:`close`)."""
        ledger: Ledger | None = getattr(self._local, "ledger", None)
        if ledger is None:
            ledger = Ledger(open_store(self.store, read_only=True))
            self._local.ledger = ledger
            with self._lock:
                self._all.append(ledger)
        return ledger

    @contextlib.contextmanager
    def writer(self) -> Iterator[Ledger]:
        """A writable ledger for one action (the store must exist), closed afterwards."""
        ledger = Ledger(open_store(self.store, create=False))
        try:
            yield ledger
        finally:
            ledger.close()

    def close(self) -> None:
        """Close every reader (a failing close is not the caller's problem)."""
        with self._lock:
            while self._all:
                with contextlib.suppress(Exception):
                    self._all.pop().close()
