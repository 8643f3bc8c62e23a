"""The store side of the saver: append checkpoints and writes, find them again, quickly.

Writes go straight through the store contract (``Store.append`` / ``Store.put_entry``) instead of
``Ledger.write``: the payload is built here, so the generic path's pipeline lookup, payload-schema
check and re-reads are not needed on every step. The invariants are the same ones the store
enforces for every writer: ids validated, append-only (a taken attempt or sequence number is
refused), ``prev_hash`` naming the previous attempt, and ``expected_latest`` making a stale
writer re-read (``Conflict``) instead of forking the chain.

A small per-run cache (latest attempt and its hash, checkpoint id → attempt) saves reads; it is
only an accelerator: every answer is checked against what the store returns, and a stale entry
is re-read. A write decides on it (``expected_latest`` makes the store refuse a stale one); a
read never needs it: the newest checkpoint is one ``read_phase`` where the store has it, and a
checkpoint by id is one key lookup once the id is indexed (docs/decisions.md D173).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from phaselog.integrations.langgraph import _codec as C
from phaselog.ledger.prune_notes import read_notes
from phaselog.model.entries import ProgressEvent, entry_bytes, parse_entry
from phaselog.model.errors import AlreadyExists, Conflict, Corrupt, NotFound, UnsupportedVersion
from phaselog.model.pipelines import builtin
from phaselog.model.records import Checkpoint
from phaselog.stores import Damaged, Store, Stored
from phaselog.stores.base import Capability
from phaselog.stores.names import event_name

MAX_RETRIES = 100
#: Writes that arrive before their checkpoint (LangGraph's "async" durability submits both to a
#: thread pool) wait here until the checkpoint is stored; at most this many checkpoints' worth.
MAX_EARLY_WRITES = 1000
PARSED_EVENTS = 4096
#: Indexing more attempts than this reads the run's records in one listing, not one by one.
INDEX_ONE_BY_ONE = 2


@dataclass
class RunState:
    """What this saver knows of one run (thread namespace); re-read whenever it proves stale."""

    #: The newest stored attempt (what ``Store.append`` checks as ``expected_latest``).
    latest: int = 0
    latest_hash: str | None = None
    latest_id: str | None = None
    #: The head of the hash chain: the newest stored or pruned attempt, and its hash.
    head: int = 0
    head_hash: str | None = None
    #: ``latest`` and ``head`` were read from the store for a write (with the run's prune notes);
    #: False while only reads filled this state in (a write then reads the run first).
    loaded: bool = False
    #: checkpoint id -> (attempt, content hash); the newest attempt wins for a repeated id.
    ids: dict[str, tuple[int, str]] = field(default_factory=dict)
    indexed: set[int] = field(default_factory=set)
    #: attempt -> (last sequence number, last event hash) of its pending-write events.
    tails: dict[int, tuple[int, str]] = field(default_factory=dict)

    def keep_only(self, present: set[int]) -> None:
        """Forget what was indexed of attempts that are no longer stored (pruned meanwhile)."""
        self.indexed &= present
        self.ids = {k: v for k, v in self.ids.items() if v[0] in present}
        self.tails = {a: t for a, t in self.tails.items() if a in present}


class Threads:
    """Checkpoints and pending writes of LangGraph threads in one phaselog store."""

    def __init__(self, store: Store, serde: Callable[[], Any], clock: Callable[[], datetime]) -> None:
        self.store = store
        self._serde = serde
        self.clock = clock
        self.pipeline = builtin(C.PIPELINE).ref
        self.lock = threading.RLock()
        self._runs: dict[tuple[str, str], RunState] = {}
        #: A run's newest checkpoint in one statement, where the store can (Capability.PHASE_READ).
        self._phase_read = Capability.PHASE_READ in store.capabilities
        #: Events parsed (and hash-checked) before, by their exact stored bytes: the same bytes
        #: give the same immutable event, so reading a checkpoint again skips the re-hash.
        self._parsed: dict[bytes, ProgressEvent] = {}
        self._early: dict[tuple[str, str, str], list[tuple[str, str, list[tuple[int, str, Any]]]]] = {}

    @property
    def serde(self) -> Any:
        """The saver's serializer as it is now (``saver.serde = X`` after construction counts)."""
        return self._serde()

    # -- run state --------------------------------------------------------------------------------
    def run(self, thread: str, rid: str) -> RunState:
        """What is known of a run (possibly nothing yet); nothing is read."""
        st = self._runs.get((thread, rid))
        if st is None:
            if len(self._runs) > 10_000:
                self._runs.clear()
            st = self._runs[(thread, rid)] = RunState()
        return st

    def state(self, thread: str, rid: str, *, refresh: bool = False) -> RunState:
        """The run's state as a write decides on it: its newest attempt and the chain's head, read
        from the store the first time and on ``refresh`` (after another writer moved the run)."""
        st = self.run(thread, rid)
        if refresh or not st.loaded:
            self._load(thread, rid, st, refresh=refresh)
        return st

    def _load(self, thread: str, rid: str, st: RunState, *, refresh: bool) -> None:
        st.latest, st.latest_hash, st.latest_id, st.head, st.head_hash = 0, None, None, 0, None
        # First read: the newest checkpoint in one statement. A refresh (the run moved) lists the
        # attempts too, to forget what was pruned meanwhile.
        newest = None if refresh else self._newest(thread, rid)
        if newest is None:
            refs = [r for r in self.store.attempts(thread, rid) if r.phase_ordinal == C.ORDINAL]
            st.keep_only({r.attempt_number for r in refs})
            if refs:
                newest = self.store.get(thread, rid, C.ORDINAL, C.PHASE, refs[-1].attempt_number)  # Corrupt: never
        if newest is not None:  # chain onto a damaged record
            self.note(st, newest.record)
        # The chain runs through pruned records too: an attempt after a pruned newest one
        # names the pruned record (the prune note vouches for it).
        for (phase, attempt), pruned in read_notes(self.store, thread, rid).records.items():
            if phase == C.PHASE and attempt > st.head:
                st.head, st.head_hash = attempt, pruned.content_hash
        st.loaded = True

    def _newest(self, thread: str, rid: str) -> Stored | None:
        """The run's newest checkpoint in one store call; None: there is none, or ask the general way
        (it is damaged, or the store cannot answer in one call)."""
        if not self._phase_read:
            return None
        stored: Stored | None = self.store.read_phase(thread, rid, C.PHASE)  # type: ignore[attr-defined]  # declared by Capability.PHASE_READ
        if stored is None or stored.record.phase_ordinal != C.ORDINAL or not C.is_langgraph(stored.record):
            return None
        return stored

    def forget(self, thread: str) -> None:
        """Drop what is cached about a thread (after deleting or pruning it)."""
        for key in [k for k in self._runs if k[0] == thread]:
            del self._runs[key]

    @staticmethod
    def note(st: RunState, record: Checkpoint) -> None:
        """Index a record read or written (checked by the store): its id, and the newest attempt."""
        cid = (record.phase_payload or {}).get("checkpoint_id")
        if isinstance(cid, str):
            prev = st.ids.get(cid)
            if prev is None or prev[0] <= record.attempt_number:
                st.ids[cid] = (record.attempt_number, record.content_hash)
        st.indexed.add(record.attempt_number)
        if record.attempt_number >= st.latest:
            st.latest, st.latest_hash = record.attempt_number, record.content_hash
            st.latest_id = cid if isinstance(cid, str) else None
        if record.attempt_number >= st.head:
            st.head, st.head_hash = record.attempt_number, record.content_hash

    def _saw_newest(self, st: RunState, record: Checkpoint) -> None:
        """Note the run's newest record as read; a newest older than (or other than) the one a write
        would chain onto means attempts were pruned meanwhile: the next write reads the run again."""
        if st.loaded and (
            record.attempt_number < st.latest
            or (record.attempt_number == st.latest and record.content_hash != st.latest_hash)
        ):
            st.loaded = False
        self.note(st, record)

    # -- checkpoints ----------------------------------------------------------------------------
    def append(
        self,
        thread: str,
        rid: str,
        checkpoint_ns: str,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        parent_id: str | None,
        thread_id: str | None = None,
    ) -> Checkpoint:
        """Append one checkpoint as the run's next attempt; return its record once durable.

        ``thread_id``: the thread id as given, when it differs from the ticket key ``thread``."""
        now = self.clock()
        ts = C.parse_ts(checkpoint.get("ts"), now)
        with self.lock:
            st = self.state(thread, rid)
            cid = str(checkpoint["id"])
            known = st.ids.get(cid)
            for _ in range(MAX_RETRIES):
                payload = C.checkpoint_payload(
                    self.serde,
                    checkpoint,
                    metadata,
                    checkpoint_ns=checkpoint_ns,
                    parent_id=parent_id,
                    parent_hash=self._parent_hash(thread, rid, st, parent_id),
                    thread_id=thread_id,
                )
                if known is not None:
                    same = self._same_payload(thread, rid, known[0], payload)
                    if same is not None:
                        return same  # the same checkpoint put again (a retried call): nothing to add
                    known = None
                record = self.try_append(thread, rid, st, payload, ts)
                if record is None:
                    st = self.state(thread, rid, refresh=True)  # another writer appended: re-read, retry
                    continue
                self._flush_early(thread, rid, record)
                return record
        raise Conflict(f"could not append a checkpoint to thread {thread} after {MAX_RETRIES} retries")

    def try_append(
        self, thread: str, rid: str, st: RunState, payload: Mapping[str, Any], ts: datetime
    ) -> Checkpoint | None:
        """Append ``payload`` after the chain's head; None if another writer appended first."""
        record = C.make_record(
            thread, rid, st.head + 1, payload, timestamp=ts, prev_hash=st.head_hash, pipeline=self.pipeline
        )
        try:
            self.store.append(record, expected_latest=st.latest)
        except (Conflict, AlreadyExists):
            return None
        self.note(st, record)
        return record

    def _parent_hash(self, thread: str, rid: str, st: RunState, parent_id: str | None) -> str | None:
        if parent_id is None:
            return None
        if parent_id == st.latest_id:
            return st.latest_hash
        found = self.find(thread, rid, parent_id)
        return found.record.content_hash if found is not None else None

    def _same_payload(self, thread: str, rid: str, attempt: int, payload: Mapping[str, Any]) -> Checkpoint | None:
        try:
            stored = self.store.get(thread, rid, C.ORDINAL, C.PHASE, attempt)
        except (NotFound, Corrupt, UnsupportedVersion):
            return None
        old = dict(stored.record.phase_payload or {})
        return stored.record if old == dict(payload) else None

    def find(self, thread: str, rid: str, checkpoint_id: str) -> Stored | None:
        """The record of a checkpoint id; Corrupt if it was damaged or edited.

        None only when no checkpoint of the run holds the id and every one of them reads: an id
        not among the readable checkpoints while one cannot be read may be that one's (its id
        cannot be read either), so it is Corrupt, never "missing" (D118).
        """
        with self.lock:
            st = self.run(thread, rid)
            damaged: list[Corrupt | UnsupportedVersion] = []
            for round_ in range(2):
                hit = st.ids.get(checkpoint_id)
                if hit is None:
                    if round_:
                        break
                    damaged = self._index(thread, rid, st)
                    continue
                try:
                    stored = self.store.get(thread, rid, C.ORDINAL, C.PHASE, hit[0])
                except NotFound:
                    stored = None
                if stored is not None and (stored.record.phase_payload or {}).get("checkpoint_id") == checkpoint_id:
                    return stored
                # The attempt was pruned or its number reused: re-read the run and look again.
                st.ids.pop(checkpoint_id, None)
                st.loaded = False
                damaged = self._index(thread, rid, st)
            if damaged:
                first = damaged[0]
                raise Corrupt(
                    f"checkpoint {checkpoint_id} is not among the readable checkpoints of thread {thread}, and "
                    f"{len(damaged)} of them cannot be read ({first.message}): it may be that one; "
                    "`phaselog verify` names the damage, `phaselog doctor --quarantine` sets it aside",
                    path=first.context.get("path"),
                    rule=first.context.get("rule"),
                )
            return None

    def _index(self, thread: str, rid: str, st: RunState) -> list[Corrupt | UnsupportedVersion]:
        """Index every attempt of the run not indexed yet; return the damaged ones.

        A few are read one by one; many (a saver new to a long thread) in one listing.
        """
        refs = [r for r in self.store.attempts(thread, rid) if r.phase_ordinal == C.ORDINAL]
        st.keep_only({r.attempt_number for r in refs})
        todo = {r.attempt_number for r in refs if r.completed and r.attempt_number not in st.indexed}
        damaged: list[Corrupt | UnsupportedVersion] = []
        if len(todo) > INDEX_ONE_BY_ONE:
            for entry in self.store.iter_records(thread, rid):
                if isinstance(entry, Damaged):  # never indexed: tried again (and reported) on every miss
                    if entry.phase_ordinal == C.ORDINAL and entry.attempt_number in todo:
                        damaged.append(Corrupt(entry.message, path=entry.location, rule=entry.rule))
                    continue
                rec = entry.record
                if rec.phase_ordinal == C.ORDINAL and rec.attempt_number in todo and rec.phase == C.PHASE:
                    self.note(st, rec)
            return damaged
        for attempt in sorted(todo):
            try:
                stored = self.store.get(thread, rid, C.ORDINAL, C.PHASE, attempt)
            except NotFound:
                continue  # pruned meanwhile
            except (Corrupt, UnsupportedVersion) as exc:
                damaged.append(exc)  # never indexed: tried again (and reported) on every miss
                continue
            self.note(st, stored.record)
        return damaged

    def latest(self, thread: str, rid: str) -> Stored | None:
        """The run's newest checkpoint (None if it has none); Corrupt if it is damaged.

        One statement where the store reads a phase's newest checkpoint at once (SQL). Elsewhere
        it asks for the attempt after the newest one this saver knows and, when there is none,
        for that newest one (two key lookups); only when either answer differs from what is
        cached does it list the run's attempts. New attempts are always ``head + 1`` (this module
        writes them), so an attempt beyond a missing number is never skipped.
        """
        with self.lock:
            st = self.run(thread, rid)
            stored = self._newest(thread, rid)
            if stored is not None:
                self._saw_newest(st, stored.record)
                return stored
            if st.latest and not self._phase_read:
                try:
                    self.store.get(thread, rid, C.ORDINAL, C.PHASE, st.latest + 1)
                except NotFound:
                    try:
                        stored = self.store.get(thread, rid, C.ORDINAL, C.PHASE, st.latest)
                    except NotFound:
                        stored = None
                    if stored is not None and stored.record.content_hash == st.latest_hash:
                        return stored
            refs = [r for r in self.store.attempts(thread, rid) if r.phase_ordinal == C.ORDINAL and r.completed]
            if not refs:
                st.loaded = st.loaded and not st.latest  # every checkpoint went: a write reads the run again
                return None
            stored = self.store.get(thread, rid, C.ORDINAL, C.PHASE, refs[-1].attempt_number)
            self._saw_newest(st, stored.record)
            return stored

    def records(self, thread: str, rid: str) -> tuple[list[Stored], list[Damaged]]:
        """Every record of a run (oldest first) and the damaged entries apart."""
        good: list[Stored] = []
        bad: list[Damaged] = []
        st = self.run(thread, rid)
        for entry in self.store.iter_records(thread, rid):
            if isinstance(entry, Damaged):
                bad.append(entry)
            elif C.is_langgraph(entry.record):
                good.append(entry)
                if entry.record.phase_ordinal == C.ORDINAL:
                    self.note(st, entry.record)  # a listing indexes the ids for later lookups too
        return good, bad

    # -- pending writes -------------------------------------------------------------------------
    def events(self, thread: str, rid: str, attempt: int | None = None) -> dict[int, list[ProgressEvent]]:
        """Pending-write events by attempt (one attempt, or the whole run); Corrupt if one is damaged."""
        prefix = C.attempt_prefix(attempt) if attempt is not None else ""
        out: dict[int, list[ProgressEvent]] = {}
        for name, location, data in self.store.entries("progress", thread, rid, prefix):
            number = C.attempt_of_event_name(name)
            if number is None:
                continue
            if isinstance(data, Corrupt):
                raise data
            ev = self._parsed.get(data)
            if ev is None:
                ev = parse_entry(ProgressEvent, data, location)  # Corrupt if edited after writing
                if len(self._parsed) >= PARSED_EVENTS:
                    self._parsed.clear()
                self._parsed[data] = ev
            out.setdefault(number, []).append(ev)
        for lst in out.values():
            lst.sort(key=lambda e: e.seq)
        return out

    def add_writes(
        self, thread: str, rid: str, checkpoint_id: str, task_id: str, task_path: str, writes: Sequence[Any]
    ) -> None:
        """Record one ``put_writes`` call as a progress event of its checkpoint's attempt."""
        with self.lock:
            stored = self.find(thread, rid, checkpoint_id)
            if stored is None:
                # Its checkpoint is still on its way (LangGraph's async durability): keep them
                # until it is stored. Should the process die first, the checkpoint was never
                # stored either, and a resume starts from its parent, without these writes.
                if len(self._early) >= MAX_EARLY_WRITES:
                    self._early.pop(next(iter(self._early)))
                self._early.setdefault((thread, rid, checkpoint_id), []).append((task_id, task_path, list(writes)))
                return
            self.append_event(
                thread, rid, stored.record, C.writes_output(self.serde, checkpoint_id, task_id, task_path, writes)
            )

    def _flush_early(self, thread: str, rid: str, record: Checkpoint) -> None:
        cid = str((record.phase_payload or {}).get("checkpoint_id"))
        for task_id, task_path, writes in self._early.pop((thread, rid, cid), []):
            self.append_event(thread, rid, record, C.writes_output(self.serde, cid, task_id, task_path, writes))

    def append_event(
        self, thread: str, rid: str, record: Checkpoint, output: str, timestamp: datetime | None = None
    ) -> ProgressEvent:
        st = self.state(thread, rid)
        attempt = record.attempt_number
        tail = st.tails.get(attempt)
        for _ in range(MAX_RETRIES):
            if tail is None:
                evs = self.events(thread, rid, attempt).get(attempt, [])
                tail = (evs[-1].seq, evs[-1].content_hash) if evs else (0, "")
            ev = C.writes_event(
                record, output, seq=tail[0] + 1, prev_hash=tail[1] or None, now=self.clock(), timestamp=timestamp
            )
            try:
                self.store.put_entry(
                    "progress", thread, rid, event_name(C.ORDINAL, C.PHASE, attempt, ev.seq), entry_bytes(ev)
                )
            except AlreadyExists:
                tail = None  # another writer took this number: re-read, retry
                continue
            st.tails[attempt] = (ev.seq, ev.content_hash)
            return ev
        raise Conflict(f"could not append pending writes to thread {thread} after {MAX_RETRIES} retries")
