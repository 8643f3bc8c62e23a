"""[6] LangGraph: PhaselogSaver on SQLite vs LangGraph's SqliteSaver (and, as info, the async pair).

Each saver has its own SQLite database (WAL, synchronous=FULL on every connection) holding the same
threads of ``checkpoints`` checkpoints of a realistic state (a message list, a draft, a counter),
each with one task's pending writes, filled through each saver's own ``put``/``put_writes`` (on
tmpfs, then copied: the same rows, written faster). Timed in rounds (``run_rounds``), interleaved:

* put:               the next checkpoint of a thread (its parent the newest);
* get_tuple by id:   a checkpoint from the middle of a filled thread, a different one each call;
* list:              a whole filled thread, newest first, with every checkpoint's writes, each
  thread listed once (by an instance that did not write it);
* get_tuple latest:  the newest checkpoint of a filled thread (round robin) that **another saver
  instance** just put (untimed), so every sample reads a record this instance has never seen,
  once, from a thread of ``checkpoints`` to about twice as many.

Goals (issue 22): put <= 1.0x, get_tuple latest <= 1.5x, list <= 1.5x SqliteSaver's time. The
async rows (PhaselogSaver's ``a…`` methods vs AsyncSqliteSaver) are printed without a goal.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._timing import BASELINE, INFO, SUBJECT, Contestant, Section, run_rounds

GOALS = {"put": 1.0, "get_latest": 1.5, "get_id": None, "list": 1.5}
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


def _config(parent_id: str | None, thread: str = THREAD) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if parent_id is not None:
        conf["checkpoint_id"] = parent_id
    return {"configurable": conf}


class _Saver:
    """One saver instance (sync, or async through a loop): put threads, read them back."""

    def __init__(self, saver: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.saver = saver
        self.loop = loop
        self.newest: dict[str, str] = {}

    def call(self, name: str, *args: Any, **kw: Any) -> Any:
        if self.loop is None:
            return getattr(self.saver, name)(*args, **kw)
        return self.loop.run_until_complete(getattr(self.saver, f"a{name}")(*args, **kw))

    def put_next(self, thread: str, cp: dict[str, Any], *, writes: bool = False) -> None:
        """``put`` ``cp`` as the newest checkpoint of ``thread`` (with one task's writes)."""
        parent = self.newest.get(thread)
        md = {"source": "loop", "step": int(cp["channel_values"]["counter"]), "parents": {}, "run_id": "bench-run"}
        self.call("put", _config(parent, thread), cp, md, dict(cp["channel_versions"]))
        self.newest[thread] = cp["id"]
        if writes:
            n = cp["channel_values"]["counter"]
            w = [("messages", [{"role": "tool", "content": f"result {n}"}]), ("counter", n + 1)]
            self.call("put_writes", _config(cp["id"], thread), w, f"task-{n}", "~agent")

    def get(self, config: dict[str, Any]) -> Any:
        return self.call("get_tuple", config)

    def listing(self, thread: str) -> int:
        if self.loop is None:
            return sum(1 for _ in self.saver.list(_config(None, thread)))

        async def go() -> int:
            return len([t async for t in self.saver.alist(_config(None, thread))])

        return self.loop.run_until_complete(go())


_counter = itertools.count(10**6)


def _by_id(checkpoint_id: str, threads: dict[str, str]) -> dict[str, Any]:
    return _config(checkpoint_id, threads[checkpoint_id])


def _fresh() -> dict[str, Any]:
    return _checkpoint(next(_counter), None)


def run(
    workdir: Path,
    *,
    rounds: int,
    checkpoints: int,
    ops: int = 200,
    list_ops: int = 2,
    warmup_ops: int = 10,
    progress: Callable[[str], None] | None = None,
) -> Section:
    """Time PhaselogSaver against LangGraph's savers; return the section with the ratios."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from phaselog.integrations.langgraph import PhaselogSaver

    base = workdir / "langgraph"
    base.mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    stack = contextlib.ExitStack()
    lists = list_ops * rounds + (1 if warmup_ops else 0)  # threads listed per contestant, each once
    list_threads = {kind: [f"{kind}-list-{i}" for i in range(lists)] for kind in ("sync", "async")}
    try:

        def lg_sync(path: Path) -> _Saver:
            conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
            stack.callback(conn.close)
            saver = SqliteSaver(conn)
            saver.setup()
            conn.execute("PRAGMA synchronous=FULL")  # phaselog's store commits with FULL: the same for both
            return _Saver(saver)

        def lg_async(path: Path) -> _Saver:
            cm = AsyncSqliteSaver.from_conn_string(str(path))
            saver = loop.run_until_complete(cm.__aenter__())
            stack.callback(lambda: loop.run_until_complete(cm.__aexit__(None, None, None)))
            loop.run_until_complete(saver.setup())
            loop.run_until_complete(saver.conn.execute("PRAGMA synchronous=FULL"))
            return _Saver(saver, loop)

        def pl(path: Path, *, aio: bool = False) -> _Saver:
            return _Saver(stack.enter_context(PhaselogSaver(f"sqlite:///{path}")), loop if aio else None)

        dbs = {"lg": base / "sqlitesaver.db", "pl": base / "phaselog.db"}
        # Fill every list thread through each saver's own put/put_writes, on tmpfs, then copy.
        shm = Path("/dev/shm")
        tmp = Path(tempfile.mkdtemp(prefix="phaselog-bench-lg-", dir=shm if shm.is_dir() else None))
        try:
            data = {t: [_checkpoint(n, None) for n in range(checkpoints)] for ts in list_threads.values() for t in ts}
            for key, make in (("lg", lg_sync), ("pl", pl)):
                filler = make(tmp / dbs[key].name)
                for thread, cps in data.items():
                    for cp in cps:
                        filler.put_next(thread, cp, writes=True)
                if key == "lg":
                    filler.saver.conn.close()
                else:
                    filler.saver.close()
                for suffix in ("", "-wal"):
                    src = tmp / f"{dbs[key].name}{suffix}"
                    if src.exists():
                        shutil.copyfile(src, f"{dbs[key]}{suffix}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if progress is not None:
            progress(f"{len(data)} threads of {checkpoints} checkpoints in each saver's database")
        conn = sqlite3.connect(dbs["lg"])
        default_sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.close()
        # Timed instances, and the writers that move their threads between samples (untimed).
        timed = {
            "phaselog": (pl(dbs["pl"]), pl(dbs["pl"])),
            "sqlitesaver": (lg_sync(dbs["lg"]), lg_sync(dbs["lg"])),
            "phaselog_async": (pl(dbs["pl"], aio=True), pl(dbs["pl"])),
            "asyncsqlitesaver": (lg_async(dbs["lg"]), lg_sync(dbs["lg"])),
        }
        ids = [cp["id"] for cps in data.values() for cp in cps[len(cps) // 4 : 3 * len(cps) // 4]]
        random.Random(7).shuffle(ids)
        id_threads = {cp["id"]: t for t, cps in data.items() for cp in cps}

        def contestants(op: str) -> list[Contestant]:
            out = []
            for key, label, role in (
                ("phaselog", "PhaselogSaver (SQLite)", SUBJECT),
                ("sqlitesaver", "SqliteSaver", BASELINE),
                ("phaselog_async", "PhaselogSaver, async", INFO),
                ("asyncsqlitesaver", "AsyncSqliteSaver", INFO),
            ):
                reader, writer = timed[key]
                kind = "async" if key.endswith("async") else "sync"
                if op == "put":
                    c = Contestant(
                        f"put_{key}",
                        f"put: {label}",
                        role,
                        lambda cp, r=reader, k=key: r.put_next(f"put-{k}", cp),
                        _fresh,
                    )
                elif op == "get_latest":
                    ring = itertools.cycle(list_threads[kind])

                    def moved(w: _Saver = writer, ring: Any = ring) -> dict[str, Any]:
                        # Another instance moves one of the filled threads (listed already), so the
                        # thread read is ~checkpoints long and its newest record was never read.
                        thread = next(ring)
                        w.put_next(thread, _fresh())
                        return _config(None, thread)

                    c = Contestant(
                        f"get_latest_{key}", f"get_tuple latest, fresh record: {label}", role, reader.get, moved
                    )
                elif op == "get_id":
                    pool = itertools.cycle(ids)
                    c = Contestant(
                        f"get_id_{key}",
                        f"get_tuple by id: {label}",
                        role,
                        reader.get,
                        lambda p=pool: _by_id(next(p), id_threads),
                    )
                else:
                    it = iter(list_threads[kind])
                    c = Contestant(
                        f"list_{key}",
                        f"list {checkpoints}-cp thread, each once: {label}",
                        role,
                        reader.listing,
                        lambda it=it: next(it),
                    )
                out.append(c)
            return out

        section = Section(
            "langgraph",
            f"[6] LangGraph savers on SQLite: threads of {checkpoints} checkpoints with pending writes",
            notes=[
                "each saver has its own SQLite database: WAL, synchronous=FULL on every connection "
                f"(LangGraph's connections default to synchronous={default_sync}; set to FULL here)",
                f"{rounds} rounds x {ops} calls (list: {list_ops}) per contestant, interleaved call by call; "
                "reads by instances that did not write the records, each record (thread) read once "
                "(get_tuple by id: a different checkpoint each call)",
                "ratio = median of per-round ratios PhaselogSaver / SqliteSaver; goals: put <= 1.0, "
                "get_tuple latest <= 1.5, list <= 1.5 (issue 22); async rows: info",
            ],
        )
        for _reader, writer in timed.values():  # the writers append to the filled threads
            writer.newest.update({t: cps[-1]["id"] for t, cps in data.items()})
        for op in ("put", "get_id", "list", "get_latest"):
            n, warm = (list_ops, 1 if warmup_ops else 0) if op == "list" else (ops, warmup_ops)
            section.stats.extend(run_rounds(contestants(op), rounds=rounds, ops=n, warmup_ops=warm, progress=progress))
        for op, goal in GOALS.items():
            section.ratio(f"{op}_phaselog", f"{op}_sqlitesaver", goal=goal)
            section.ratio(f"{op}_phaselog_async", f"{op}_asyncsqlitesaver", note="info")
        return section
    finally:
        stack.close()
        loop.close()
