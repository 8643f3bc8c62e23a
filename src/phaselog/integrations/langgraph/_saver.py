"""``PhaselogSaver``: a LangGraph checkpoint saver that keeps its checkpoints in a phaselog store.

Every method has its ``a…`` twin; the async ones run the sync ones in a worker thread (the stores
are blocking), one store operation at a time per saver (a lock, as LangGraph's SqliteSaver has).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.base import Checkpoint as LGCheckpoint
from langgraph.checkpoint.serde.base import SerializerProtocol

from phaselog.integrations.langgraph import _admin
from phaselog.integrations.langgraph import _codec as C
from phaselog.integrations.langgraph._threads import Threads
from phaselog.ledger.facade import Ledger
from phaselog.model.entries import ProgressEvent
from phaselog.model.records import Checkpoint
from phaselog.stores import Store, Stored, open_store

log = logging.getLogger("phaselog.langgraph")


class PhaselogSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in a phaselog store: append-only, hash-chained, verifiable.

    ``store`` is a store URL or path (``sqlite://./ledger.db``, ``postgresql://…``, a folder for
    the files store), an open :class:`phaselog.stores.Store`, or None for ``PHASELOG_STORE`` /
    ``PHASELOG_HOME`` as everywhere in phaselog. ``serde`` is LangGraph's serializer protocol
    (default: LangGraph's own ``JsonPlusSerializer``, which never pickles).

        >>> with PhaselogSaver("sqlite://./ledger.db") as saver:          # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store | None = None,
        *,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if store is None or isinstance(store, str | os.PathLike):
            self.store: Store = open_store(store)
            self._owns_store = True
        else:
            self.store = store
            self._owns_store = False
        self.ledger = Ledger(self.store)
        self._threads = Threads(self.store, lambda: self.serde, lambda: datetime.now(UTC))

    def __repr__(self) -> str:
        return f"PhaselogSaver({self.store!r})"

    # -- lifecycle --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the store (if this saver opened it)."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> PhaselogSaver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> PhaselogSaver:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)

    # -- LangGraph's version numbers (as its own savers: sortable strings) ---------------------------
    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: ``<32-digit counter>.<random>``, increasing as strings."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"  # noqa: S311 - a tie-breaker, not a secret

    # -- writing ----------------------------------------------------------------------------------
    def put(
        self,
        config: RunnableConfig,
        checkpoint: LGCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append ``checkpoint`` to its thread namespace; return its config once it is durable."""
        conf = config["configurable"]
        thread = C.thread_ticket(conf.get("thread_id"))
        given = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        md = get_serializable_checkpoint_metadata(config, metadata)
        self._threads.append(
            thread, C.ns_run_id(ns), ns, checkpoint, md, conf.get("checkpoint_id"), given if given != thread else None
        )
        return {
            "configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Record the writes of one task as a progress event of the checkpoint they belong to."""
        conf = config["configurable"]
        thread = C.thread_ticket(conf.get("thread_id"))
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = str(conf["checkpoint_id"])
        indexed = [(WRITES_IDX_MAP.get(ch, i), ch, value) for i, (ch, value) in enumerate(writes)]
        self._threads.add_writes(thread, C.ns_run_id(ns), checkpoint_id, str(task_id), task_path, indexed)

    # -- reading ----------------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (or its namespace's newest), with its pending writes.

        A checkpoint or pending write that was edited or damaged in the store is refused with
        :class:`phaselog.Corrupt`: it is never handed to LangGraph as state.
        """
        conf = config["configurable"]
        thread = C.thread_ticket(conf.get("thread_id"))
        ns = conf.get("checkpoint_ns", "") or ""
        rid = C.ns_run_id(ns)
        checkpoint_id = get_checkpoint_id(config)
        with self._threads.lock:
            if checkpoint_id:
                stored = self._threads.find(thread, rid, str(checkpoint_id))
            else:
                stored = self._threads.latest(thread, rid)
            if stored is None:
                return None
            events = self._threads.events(thread, rid, stored.record.attempt_number)
        return self._tuple(conf["thread_id"], stored.record, events.get(stored.record.attempt_number, []))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id), filtered by thread, namespace and metadata.

        Damaged or edited records are left out (and logged); ``phaselog verify`` names them.
        """
        conf = (config or {}).get("configurable", {})
        before_id = get_checkpoint_id(before) if before else None
        found: list[tuple[str, Any, Checkpoint, list[ProgressEvent]]] = []
        with self._threads.lock:
            threads: builtins.list[tuple[Any, str]]
            if conf.get("thread_id") is not None:
                threads = [(conf["thread_id"], C.thread_ticket(conf["thread_id"]))]
            else:  # every thread, each shown by the id it was given (kept in its records)
                threads = [(None, t) for t in self.store.tickets()]
            for original, thread in threads:
                runs = [C.ns_run_id(conf["checkpoint_ns"])] if "checkpoint_ns" in conf else self.store.runs(thread)
                for rid in runs:
                    found.extend(self._run_matches(original, thread, rid, conf.get("checkpoint_id"), filter, before_id))
        found.sort(key=lambda f: f[0], reverse=True)  # by checkpoint id, newest first
        for n, (_cid, original, record, events) in enumerate(found):
            if limit is not None and n >= limit:
                return
            yield self._tuple(original, record, events)

    def _run_matches(
        self,
        original: Any,
        thread: str,
        rid: str,
        checkpoint_id: str | None,
        flt: dict[str, Any] | None,
        before_id: str | None,
    ) -> builtins.list[tuple[str, Any, Checkpoint, builtins.list[ProgressEvent]]]:
        records, damaged = self._threads.records(thread, rid)
        for d in damaged:
            log.warning("phaselog: skipping damaged checkpoint %s: %s", d.location, d.message)
        if not records:
            return []
        newest: dict[str, Stored] = {}
        for s in records:  # oldest first: a checkpoint id put again is its newest attempt
            newest[str((s.record.phase_payload or {})["checkpoint_id"])] = s
        chosen: builtins.list[tuple[str, Checkpoint]] = []
        for cid, s in newest.items():
            if checkpoint_id is not None and cid != checkpoint_id:
                continue
            if before_id is not None and cid >= str(before_id):
                continue
            if flt:
                md = C.metadata_of(self.serde, s.record.phase_payload or {})
                if any(k not in md or md[k] != v for k, v in flt.items()):
                    continue
            chosen.append((cid, s.record))
        if not chosen:
            return []
        events = self._threads.events(thread, rid)  # Corrupt for an edited write event, as in get_tuple
        return [
            (cid, C.given_thread_id(r) if original is None else original, r, events.get(r.attempt_number, []))
            for cid, r in chosen
        ]

    def _tuple(self, thread_id: Any, record: Checkpoint, events: Sequence[ProgressEvent]) -> CheckpointTuple:
        payload = record.phase_payload or {}
        ns = payload["checkpoint_ns"]
        cid = payload["checkpoint_id"]
        parent = payload.get("parent_checkpoint_id")
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=C.checkpoint_of(self.serde, payload),  # type: ignore[arg-type]
            metadata=C.metadata_of(self.serde, payload),  # type: ignore[arg-type]
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=C.pending_writes(self.serde, events, cid),
        )

    # -- retention and copies ---------------------------------------------------------------------
    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and pending write of a thread (all its namespaces)."""
        _admin.delete_thread(self._threads, self.ledger, C.thread_ticket(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) that the given LangGraph runs created.

        What goes from the middle of a thread leaves a prune note, so ``phaselog verify`` still
        passes.
        """
        _admin.delete_for_runs(self._threads, self.ledger, run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of one thread to another (the whole chain)."""
        target = C.thread_ticket(target_thread_id)
        given = str(target_thread_id)
        _admin.copy_thread(self._threads, C.thread_ticket(source_thread_id), target, given if given != target else None)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint and what resuming from it needs
        (its writes; for delta channels, the ancestors back to their snapshot). ``delete``: remove
        the threads."""
        _admin.prune(self._threads, self.ledger, [C.thread_ticket(t) for t in thread_ids], strategy)

    # -- async twins ------------------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`."""
        items = await asyncio.to_thread(lambda: [*self.list(config, filter=filter, before=before, limit=limit)])
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: LGCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async :meth:`put_writes`."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune`."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
