"""[feed] The event feed: a poll that finds nothing new, and one after a write, vs reading the whole feed.

A follower (``Ledger.follow``, ``phaselog events --follow``, the notify deliverer) polls the feed:
each round asks the store for its runs' change stamps and re-reads only the runs whose stamp moved
(docs/notifications.md). The baseline is the same feed read by a fresh ledger (nothing
remembered): the ratios say what remembering saves. Files, SQLite and PostgreSQL (when reachable).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from bench import _data
from bench._timing import BASELINE, SUBJECT, Contestant, Section, run_interleaved
from phaselog.ledger.facade import Ledger
from phaselog.stores import Store, open_store

TICKET = "BENCH-FEED"
PHASES = ("implement", "local_review", "create_pr")


class _Follower:
    """A ledger that polls the feed from its cursor, as a deliverer does."""

    def __init__(self, store: Store) -> None:
        self.ledger = Ledger(store)
        self.cursor = self.ledger.feed(ticket_id=TICKET).cursor
        self.writer = Ledger(store)
        self.n = 0

    def poll(self, _: object = None) -> int:
        page = self.ledger.feed(ticket_id=TICKET, after=self.cursor)
        self.cursor = page.cursor
        return len(page.events)

    def write(self) -> None:
        self.n += 1
        _data.write_phase(self.writer, TICKET, f"new-{self.n}", "implement")


def _side(section: Section, name: str, store: Store, runs: int, rounds: int, progress: Any) -> None:
    ledger = Ledger(store)
    with _data.no_fsync():
        for i in range(runs):
            for phase in PHASES:
                _data.write_phase(ledger, TICKET, f"r{i}", phase)
    time.sleep(1.1)  # past the files store's racy window (a folder changed within 1 s has no stamp)
    follower = _Follower(store)
    contestants = [
        Contestant(
            f"{name}_full",
            f"{name}: the whole feed, fresh ledger ({runs} runs)",
            BASELINE,
            lambda _: len(Ledger(store).feed(ticket_id=TICKET).events),
        ),
        Contestant(f"{name}_idle", f"{name}: a poll that finds nothing new", SUBJECT, follower.poll),
        Contestant(
            f"{name}_one",
            f"{name}: a poll after one new write (untimed)",
            SUBJECT,
            follower.poll,
            prepare=follower.write,
        ),
    ]
    section.stats += run_interleaved(contestants, rounds, warmup=2, progress=progress)
    section.ratio(f"{name}_idle", f"{name}_full", note="remembered runs, stamps only")
    section.ratio(f"{name}_one", f"{name}_full", note="one run read again")


def run(
    workdir: Path, *, rounds: int, runs: int, pg_url: str | None = None, keep: bool = False, progress: Any = None
) -> Section:
    """Time feed polls against a full read, per store."""
    section = Section(
        "feed",
        f"[feed] following the event feed: a poll vs the whole feed, {runs} runs of {len(PHASES)} checkpoints",
        [f"{rounds} rounds, interleaved; a poll after a write: the write is untimed (prepare)"],
    )
    _side(section, "files", _data.open_ledger(workdir / "feed-store").store, runs, rounds, progress)
    _side(section, "sqlite", open_store(f"sqlite:///{workdir / 'feed.db'}"), runs, rounds, progress)
    if pg_url:
        schema = f"phaselog_bench_feed_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        sep = "&" if "?" in pg_url else "?"
        try:
            store = open_store(f"{pg_url}{sep}schema={schema}", migrate=True)
        except Exception as exc:  # no server, no psycopg: say so, as the sql benchmark does
            section.notes.append(f"PostgreSQL skipped: {exc}")
            return section
        try:
            _side(section, "postgres", store, runs, rounds, progress)
        finally:
            store.close()
            if not keep:
                import psycopg  # lazy: only with a PostgreSQL server

                with psycopg.connect(pg_url, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return section
