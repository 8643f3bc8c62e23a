"""[6] LangGraph: PhaselogSaver on SQLite vs LangGraph's SqliteSaver and AsyncSqliteSaver.

Each saver gets its own SQLite database (WAL; both commit every write durably) holding the same
thread: ``checkpoints`` checkpoints of a realistic state (a message list, a draft, a counter),
each with one task's pending writes. Timed, interleaved in one run:

* put:        the next checkpoint of the thread (its parent the newest), sync and async;
* get_tuple:  a checkpoint by id (from the middle of the thread) and the latest one, with writes;
* list:       the whole thread, newest first, with every checkpoint's writes.

Goal (issue 14): PhaselogSaver at least as fast as LangGraph's own saver on each, ratio <= 1.0.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._timing import BASELINE, SUBJECT, Contestant, Section, run_interleaved

GOAL = 1.0
_VOCAB = """
    the of and to in is was for on that with as by at from his an were are which this be or had not but
    all their have one new more been can its also after first two other into may some time would when
    checkpoint graph state node agent tool message review draft publish resume thread run step value
    otter river stone water light market signal model token reason answer question plan search result
"""
_WORDS = tuple(re.findall(r"\w+", _VOCAB))
THREAD = "bench-thread"


def _checkpoint(n: int, parent: dict[str, Any] | None) -> dict[str, Any]:
    from langgraph.checkpoint.base.id import uuid6

    rnd = random.Random(n)  # text that compresses like prose (about 2-3x), not like "lorem ipsum" * 8

    def text(words: int) -> str:
        return " ".join(rnd.choice(_WORDS) for _ in range(words))

    messages = [
        {"role": "user" if i % 2 else "assistant", "content": f"message {i} of step {n}: " + text(16)} for i in range(6)
    ]
    versions = {"messages": f"{n + 1:032}.0", "draft": f"{n + 1:032}.0", "counter": f"{n + 1:032}.0"}
    return {
        "v": 4,
        "id": str(uuid6(clock_seq=n)),
        "ts": datetime.now(UTC).isoformat(),
        "channel_values": {"messages": messages, "draft": text(80), "counter": n},
        "channel_versions": versions,
        "versions_seen": {"agent": dict(versions), "tools": dict(versions)},
        "updated_channels": ["messages", "draft", "counter"],
    }


def _config(parent_id: str | None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": THREAD, "checkpoint_ns": ""}
    if parent_id is not None:
        conf["checkpoint_id"] = parent_id
    return {"configurable": conf}


class _Thread:
    """One saver's copy of the bench thread: fill it, then time put/get_tuple/list against it."""

    def __init__(self, saver: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.saver = saver
        self.loop = loop
        self.ids: list[str] = []

    def call(self, name: str, *args: Any, **kw: Any) -> Any:
        if self.loop is None:
            return getattr(self.saver, name)(*args, **kw)
        return self.loop.run_until_complete(getattr(self.saver, f"a{name}")(*args, **kw))

    def put_next(self, cp: dict[str, Any]) -> None:
        parent = self.ids[-1] if self.ids else None
        md = {"source": "loop", "step": len(self.ids), "parents": {}, "run_id": "bench-run"}
        self.call("put", _config(parent), cp, md, dict(cp["channel_versions"]))
        self.ids.append(cp["id"])

    def fill(self, checkpoints: list[dict[str, Any]]) -> None:
        for n, cp in enumerate(checkpoints):
            self.put_next(cp)
            writes = [("messages", [{"role": "tool", "content": f"result {n}"}]), ("counter", n + 1)]
            self.call("put_writes", _config(cp["id"]), writes, f"task-{n}", "~agent")

    def get(self, checkpoint_id: str | None) -> Any:
        conf = _config(checkpoint_id)
        if self.loop is None:
            return self.saver.get_tuple(conf)
        return self.loop.run_until_complete(self.saver.aget_tuple(conf))

    def listing(self) -> int:
        if self.loop is None:
            return sum(1 for _ in self.saver.list(_config(None)))

        async def go() -> int:
            return len([t async for t in self.saver.alist(_config(None))])

        return self.loop.run_until_complete(go())


def run(
    workdir: Path,
    *,
    rounds: int,
    checkpoints: int,
    progress: Callable[[str], None] | None = None,
) -> Section:
    """Time the three savers; return the section with ratios against LangGraph's savers."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from phaselog.integrations.langgraph import PhaselogSaver

    base = workdir / "langgraph"
    base.mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    stack = contextlib.ExitStack()
    try:
        conn = sqlite3.connect(base / "sqlitesaver.db", check_same_thread=False)
        stack.callback(conn.close)
        lg_saver = SqliteSaver(conn)
        lg_saver.setup()
        default_sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        # The same durability for every saver: phaselog's SQLite store commits with
        # synchronous=FULL; LangGraph's savers use the connection's default, which may be lower.
        conn.execute("PRAGMA synchronous=FULL")
        lg = _Thread(lg_saver)
        pl = _Thread(stack.enter_context(PhaselogSaver(f"sqlite:///{base / 'phaselog.db'}")))
        alg_cm = AsyncSqliteSaver.from_conn_string(str(base / "asyncsqlitesaver.db"))
        alg_saver = loop.run_until_complete(alg_cm.__aenter__())
        stack.callback(lambda: loop.run_until_complete(alg_cm.__aexit__(None, None, None)))
        loop.run_until_complete(alg_saver.setup())
        loop.run_until_complete(alg_saver.conn.execute("PRAGMA synchronous=FULL"))
        alg = _Thread(alg_saver, loop)
        apl = _Thread(stack.enter_context(PhaselogSaver(f"sqlite:///{base / 'phaselog-async.db'}")), loop)
        data = [_checkpoint(n, None) for n in range(checkpoints)]
        for t in (lg, pl, alg, apl):
            t.fill(data)
        if progress is not None:
            progress(f"{checkpoints} checkpoints in each saver's thread")
        middle = data[len(data) // 2]["id"]
        extra = iter(range(checkpoints, 10**9))

        def contestants(op: str) -> list[Contestant]:
            out = []
            for key, label, role, t in (
                ("phaselog", "PhaselogSaver (SQLite)", SUBJECT, pl),
                ("sqlitesaver", "SqliteSaver", BASELINE, lg),
                ("phaselog_async", "PhaselogSaver, async", SUBJECT, apl),
                ("asyncsqlitesaver", "AsyncSqliteSaver", BASELINE, alg),
            ):
                if op == "put":
                    c = Contestant(
                        f"put_{key}", f"put: {label}", role, t.put_next, lambda: _checkpoint(next(extra), None)
                    )
                elif op == "get_id":
                    c = Contestant(f"get_id_{key}", f"get_tuple by id: {label}", role, t.get, lambda: middle, inner=5)
                elif op == "get_latest":
                    c = Contestant(
                        f"get_latest_{key}", f"get_tuple latest: {label}", role, t.get, lambda: None, inner=5
                    )
                else:
                    c = Contestant(f"list_{key}", f"list {checkpoints}: {label}", role, lambda _a, t=t: t.listing())
                out.append(c)
            return out

        section = Section(
            "langgraph",
            f"LangGraph savers on SQLite: a thread of {checkpoints} checkpoints with pending writes",
            notes=[
                "each saver has its own SQLite database: WAL, synchronous=FULL on every connection "
                f"(LangGraph's connections default to synchronous={default_sync}; set to FULL here)",
                "ratio = median(PhaselogSaver) / median(LangGraph's saver); goal <= 1.0",
            ],
        )
        for op, n in (("put", rounds), ("get_id", rounds), ("get_latest", rounds), ("list", max(5, rounds // 10))):
            section.stats.extend(run_interleaved(contestants(op), n, progress=progress))
        for op in ("put", "get_id", "get_latest", "list"):
            section.ratio(f"{op}_phaselog", f"{op}_sqlitesaver", goal=GOAL)
            section.ratio(f"{op}_phaselog_async", f"{op}_asyncsqlitesaver", goal=GOAL)
        return section
    finally:
        stack.close()
        loop.close()
