"""Ledgers for callers that hold more than one: threads, servers, and "a store or a URL" arguments.

* :func:`ledger_for` — the one way an edge turns what it was given (a Ledger, a Store, a URL or
  path, or None for ``PHASELOG_STORE``) into a Ledger, and whether it must close it.
* :func:`sibling` / :func:`sibling_store` — a second handle on the same store with a connection of
  its own, for another thread (the runner's and the worker's heartbeats): a connection is never
  used by two threads.
* :class:`LedgerPool` — for a threaded server: a read-only ledger per thread, a writable one per action.

A server (the dashboard; later the MCP server) answers requests on worker threads. Reading
through a read-only store means showing a page never writes (no store is created, no schema
migrated); the few requests that change something open a writable ledger for that request only
and close it afterwards, so a writer's connection never outlives the action.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TypeAlias

from phaselog.ledger.facade import Ledger
from phaselog.stores import open_store
from phaselog.stores.base import Store

#: What a caller may hand over for "the store": an open Ledger or Store, a URL or path, or None
#: (``PHASELOG_STORE``, else the files store).
StoreArg: TypeAlias = "Ledger | Store | str | os.PathLike[str] | None"


def ledger_for(store: StoreArg) -> tuple[Ledger, bool]:
    """A Ledger for ``store``, and whether it was opened here (then the caller closes it).

    A Ledger is used as it is and a Store is wrapped (both stay the caller's to close); a URL, a
    path or None is opened (``open_store``: a store that does not exist yet is created on its first write).
    """
    if isinstance(store, Ledger):
        return store, False
    if store is None or isinstance(store, str | os.PathLike):
        return Ledger(open_store(store)), True
    return Ledger(store), False


def sibling_store(store: Store) -> Store:
    """The same store opened again, with a connection of its own (for another thread); the caller closes it."""
    return open_store(store.url)


def sibling(ledger: Ledger) -> Ledger:
    """A Ledger over the same store as ``ledger``, with a connection of its own (for another thread)."""
    return Ledger(sibling_store(ledger.store), pipelines_root=ledger.pipelines_root)


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
