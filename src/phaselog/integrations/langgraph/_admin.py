"""Retention and copies for LangGraph threads: ``delete_thread``, ``delete_for_runs``, ``prune``,
``copy_thread``.

Deleting goes through :func:`phaselog.retention.remove_records`, the one place phaselog deletes:
a partial removal leaves a prune note, so ``phaselog verify`` accepts the ``prev_hash`` links it
breaks. Only runs this integration wrote are touched (a ticket may hold other pipelines' runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from phaselog.errors import Corrupt, UsageError
from phaselog.integrations.langgraph import _codec as C
from phaselog.integrations.langgraph._threads import Threads
from phaselog.records import Checkpoint
from phaselog.retention import PruneReport, remove_records
from phaselog.stores import Stored

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


def delete_thread(threads: Threads, ledger: Any, thread: str) -> PruneReport:
    """Remove every LangGraph run (namespace) of a thread, with its writes."""
    rep = PruneReport(dry_run=False)
    with threads.lock:
        for rid, _records, _damaged in langgraph_runs(threads, thread):
            remove_records(ledger, thread, rid, [], whole=True, rep=rep)
        threads.forget(thread)
    return rep


def delete_for_runs(threads: Threads, ledger: Any, run_ids: Iterable[str]) -> PruneReport:
    """Remove every checkpoint (and its writes) whose metadata names one of ``run_ids``."""
    wanted = {str(r) for r in run_ids}
    rep = PruneReport(dry_run=False)
    if not wanted:
        return rep
    with threads.lock:
        for thread in threads.store.tickets():
            for rid, records, damaged in langgraph_runs(threads, thread):
                doomed = [
                    s.record
                    for s in records
                    if C.metadata_of(threads.serde, s.record.phase_payload or {}).get("run_id") in wanted
                ]
                if not doomed:
                    continue
                whole = len(doomed) == len(records) and not damaged
                remove_records(ledger, thread, rid, [] if whole else doomed, whole=whole, rep=rep)
                threads.forget(thread)
    return rep


def prune(threads: Threads, ledger: Any, thread_ids: Sequence[str], strategy: str) -> PruneReport:
    """LangGraph's prune: ``keep_latest`` keeps each namespace's newest checkpoint (and, for delta
    channels, the ancestors it is rebuilt from); ``delete`` removes the threads."""
    if strategy not in STRATEGIES:
        raise UsageError(
            f"strategy: must be one of {', '.join(STRATEGIES)} (got {strategy!r})", field="strategy", rule="enum"
        )
    rep = PruneReport(dry_run=False)
    for thread in thread_ids:
        if strategy == "delete":
            sub = delete_thread(threads, ledger, thread)
            rep.removed.extend(sub.removed)
            rep.bytes_freed += sub.bytes_freed
            continue
        with threads.lock:
            for rid, records, _damaged in langgraph_runs(threads, thread):
                keep = needed_by_latest(threads.serde, [s.record for s in records])
                doomed = [s.record for s in records if s.record.attempt_number not in keep]
                if doomed:
                    remove_records(ledger, thread, rid, doomed, whole=False, rep=rep)
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
        values = (parent.phase_payload or {}).get("checkpoint", {}).get("channel_values", {})
        missing -= set(values)
        cursor = parent
    return keep


def copy_thread(threads: Threads, source: str, target: str) -> int:
    """Copy every checkpoint and pending write of ``source`` to ``target``; return how many
    checkpoints were copied. The copies are new records of the target thread (their own hashes
    and chain); a damaged source record is refused, never copied."""
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
            for s in records:
                old = s.record
                payload = dict(old.phase_payload or {})
                if payload.get("parent_hash") is not None:
                    payload["parent_hash"] = new_hash.get(str(payload["parent_hash"]))
                record = _append_copy(threads, target, rid, old, payload)
                new_hash[old.content_hash] = record.content_hash
                for ev in events.get(old.attempt_number, []):
                    threads.append_event(target, rid, record, ev.output or "{}", timestamp=ev.timestamp)
                copied += 1
    return copied


def _append_copy(threads: Threads, thread: str, rid: str, old: Checkpoint, payload: dict[str, Any]) -> Checkpoint:
    from phaselog.errors import AlreadyExists, Conflict

    st = threads.state(thread, rid)
    for _ in range(100):
        record = C.make_record(
            thread,
            rid,
            st.latest + 1,
            payload,
            timestamp=old.timestamp_utc,
            prev_hash=st.latest_hash,
            pipeline=threads.pipeline,
        )
        try:
            threads.store.append(record, expected_latest=st.latest)
        except (Conflict, AlreadyExists):
            st = threads.state(thread, rid, refresh=True)
            continue
        threads.note(st, record)
        return record
    raise Conflict(f"could not copy a checkpoint into thread {thread}")
