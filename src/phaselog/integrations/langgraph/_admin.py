"""Retention and copies for LangGraph threads: ``delete_thread``, ``delete_for_runs``, ``prune``,
``copy_thread``.

Deleting goes through :func:`phaselog.ledger.retention.prune_chosen`, as ``phaselog prune`` does: under
the run's lock, a prune note first, so ``phaselog verify`` accepts the ``prev_hash`` links it
breaks. Only runs this integration wrote are touched (a ticket may hold other pipelines' runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from phaselog.integrations.langgraph import _codec as C
from phaselog.integrations.langgraph._threads import Threads
from phaselog.ledger.retention import PruneReport, prune_chosen
from phaselog.model.errors import Conflict, Corrupt, UsageError
from phaselog.model.records import Checkpoint
from phaselog.stores import Stored

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger

STRATEGIES = ("keep_latest", "delete")


def langgraph_runs(threads: Threads, thread: str) -> list[tuple[str, list[Stored], bool]]:
    """(run id, records oldest first, has damage) of every run of ``thread`` this integration wrote."""
    out = []
    for rid in threads.store.runs(thread):
        good, bad = threads.records(thread, rid)
        others = [r for r in threads.store.attempts(thread, rid) if r.phase_ordinal != C.ORDINAL or r.phase != C.PHASE]
        if good and not others:
            out.append((rid, good, bool(bad)))
    return out


def delete_thread(threads: Threads, ledger: Ledger, thread: str) -> PruneReport:
    """Remove every LangGraph run (namespace) of a thread, with its writes."""
    rep = PruneReport(dry_run=False)
    with threads.lock:
        for rid, _records, _damaged in langgraph_runs(threads, thread):
            prune_chosen(ledger, thread, rid, lambda records, _damaged: (records, True), rep)
        threads.forget(thread)
    return rep


def delete_for_runs(threads: Threads, ledger: Ledger, run_ids: Iterable[str]) -> PruneReport:
    """Remove every checkpoint (and its writes) whose metadata names one of ``run_ids``.

    When the newest checkpoint of a namespace goes and older ones stay, the newest survivor is
    first restated as the namespace's next attempt (same payload, same pending writes): the
    thread then resumes from it, as with LangGraph's savers, and the hash chain keeps a head that
    is stored (phaselog never prunes the newest attempt of a phase).
    """
    wanted = {str(r) for r in run_ids}
    rep = PruneReport(dry_run=False)
    if not wanted:
        return rep

    def doomed(records: Sequence[Checkpoint]) -> list[Checkpoint]:
        return [r for r in records if C.metadata_of(threads.serde, r.phase_payload or {}).get("run_id") in wanted]

    with threads.lock:
        for thread in threads.store.tickets():
            for rid, stored, damaged in langgraph_runs(threads, thread):
                records = [s.record for s in stored]
                gone = doomed(records)
                if not gone:
                    continue
                survivors = [r for r in records if r not in gone]
                newest = max(records, key=lambda r: r.attempt_number)
                if survivors and newest in gone:
                    restate(threads, thread, rid, max(survivors, key=lambda r: r.attempt_number))

                def choose(now: list[Checkpoint], damaged: bool) -> tuple[list[Checkpoint], bool]:
                    picked = doomed(now)
                    if len(picked) == len(now) and not damaged:
                        return picked, True
                    top = max(now, key=lambda r: r.attempt_number)
                    return [r for r in picked if r is not top], False  # never the newest (raced)

                prune_chosen(ledger, thread, rid, choose, rep)
                threads.forget(thread)
    return rep


def restate(threads: Threads, thread: str, rid: str, record: Checkpoint) -> Checkpoint:
    """Append ``record``'s checkpoint again as the run's next attempt, with its pending writes."""
    events = threads.events(thread, rid, record.attempt_number).get(record.attempt_number, [])
    st = threads.state(thread, rid, refresh=True)
    for _ in range(100):
        copy = threads.try_append(thread, rid, st, dict(record.phase_payload or {}), record.timestamp_utc)
        if copy is not None:
            for ev in events:
                threads.append_event(thread, rid, copy, ev.output or "{}", timestamp=ev.timestamp)
            return copy
        st = threads.state(thread, rid, refresh=True)
    raise Conflict(f"could not restate a checkpoint of thread {thread}")


def prune(threads: Threads, ledger: Ledger, thread_ids: Sequence[str], strategy: str) -> PruneReport:
    """LangGraph's prune: ``keep_latest`` keeps each namespace's newest checkpoint (and, for delta
    channels, the ancestors it is rebuilt from); ``delete`` removes the threads."""
    if strategy not in STRATEGIES:
        raise UsageError(
            f"strategy: must be one of {', '.join(STRATEGIES)} (got {strategy!r})", field="strategy", rule="enum"
        )
    rep = PruneReport(dry_run=False)

    def choose(records: list[Checkpoint], _damaged: bool) -> tuple[list[Checkpoint], bool]:
        keep = needed_by_latest(threads.serde, records)
        return [r for r in records if r.attempt_number not in keep], False

    for thread in thread_ids:
        if strategy == "delete":
            sub = delete_thread(threads, ledger, thread)
            rep.removed.extend(sub.removed)
            rep.bytes_freed += sub.bytes_freed
            continue
        with threads.lock:
            for rid, _records, _damaged in langgraph_runs(threads, thread):
                prune_chosen(ledger, thread, rid, choose, rep)
            threads.forget(thread)
    return rep


def needed_by_latest(serde: Any, records: Sequence[Checkpoint]) -> set[int]:
    """Attempts a resume from the newest checkpoint needs: the newest itself and, when the graph
    uses delta channels, every ancestor back to the one holding each channel's snapshot (their
    pending writes are the deltas)."""
    if not records:
        return set()
    latest = max(records, key=lambda r: r.attempt_number)
    keep = {latest.attempt_number}
    counters = C.metadata_of(serde, latest.phase_payload or {}).get("counters_since_delta_snapshot") or {}
    missing = {ch for ch, c in counters.items() if list(c) != [0, 0]} if isinstance(counters, dict) else set()
    by_id: dict[str, Checkpoint] = {}
    for r in sorted(records, key=lambda r: r.attempt_number):
        by_id[str((r.phase_payload or {}).get("checkpoint_id"))] = r
    cursor = latest
    while missing:
        parent_id = (cursor.phase_payload or {}).get("parent_checkpoint_id")
        parent = by_id.get(str(parent_id)) if parent_id is not None else None
        if parent is None:
            break
        keep.add(parent.attempt_number)
        missing -= set((parent.phase_payload or {}).get("channels") or ())
        cursor = parent
    return keep


def copy_thread(threads: Threads, source: str, target: str, target_id: str | None = None) -> int:
    """Copy every checkpoint and pending write of ``source`` to ``target``; return how many
    checkpoints were copied (``target_id``: the target thread id as given, when it is not its key).
    The copies are new records of the target thread (their own hashes and chain); a damaged source
    record is refused, never copied."""
    copied = 0
    with threads.lock:
        for rid, records, damaged in langgraph_runs(threads, source):
            if damaged:
                raise Corrupt(
                    f"thread {source} has damaged records in run {rid}; run `phaselog verify --ticket-id {source}` "
                    "(nothing was copied from that run)",
                    rule="damaged",
                )
            events = threads.events(source, rid)
            new_hash: dict[str, str] = {}
            st = threads.state(target, rid)
            for s in records:
                old = s.record
                payload = dict(old.phase_payload or {})
                payload.pop("thread_id", None)
                if target_id is not None:
                    payload["thread_id"] = target_id
                if payload.get("parent_hash") is not None:
                    payload["parent_hash"] = new_hash.get(str(payload["parent_hash"]))
                record = threads.try_append(target, rid, st, payload, old.timestamp_utc)
                for _ in range(100):
                    if record is not None:
                        break
                    st = threads.state(target, rid, refresh=True)  # another writer appended: re-read
                    record = threads.try_append(target, rid, st, payload, old.timestamp_utc)
                if record is None:
                    raise Conflict(f"could not copy a checkpoint into thread {target}")
                new_hash[old.content_hash] = record.content_hash
                for ev in events.get(old.attempt_number, []):
                    threads.append_event(target, rid, record, ev.output or "{}", timestamp=ev.timestamp)
                copied += 1
    return copied
