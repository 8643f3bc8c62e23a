"""Retention: ``prune`` removes old records without breaking resume or ``verify``.

Selectors (exactly one): ``run_id`` (the whole run), ``keep_last`` (per run and phase, keep the
newest N attempts), ``older_than`` (attempts older than that; a run whose every record is older
goes whole). Never removed, unless the whole run goes:

* the newest attempt of each phase, completed or failed (the phase's state and the next attempt
  number depend on it), and the newest completed attempt (resume needs it);
* an approved attempt (its approval names it);
* an attempt that a kept record names in its ``basis``, or that another run was forked from;
* an attempt with progress events in flight.

Each run is decided and pruned under the run's append lock (:meth:`Retention.locked_run`): what
prune reads under the lock is what it removes, and no write lands in between. A partial prune
first appends a prune note (:mod:`phaselog.ledger.prune_notes`) listing every record it will remove with its
hash and ``prev_hash`` and the audit entries that go with them, then deletes exactly those; a crash
in between leaves a note whose records are still there, and ``doctor`` finishes it
(:func:`finish_interrupted`). A whole run is removed atomically by the store (the files store
moves the folder aside, then deletes it). ``dry_run`` reports without deleting. This and
``doctor`` (finishing a prune, ``--quarantine``) are the only operations that delete anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, cast

from phaselog.ledger.prune_notes import PrunedRecord, PruneNote, read_notes
from phaselog.ledger.seals import record_run_pruned
from phaselog.model.errors import NotFound, UsageError
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.model.records import Checkpoint
from phaselog.stores.base import Capability, PruneTarget, Retention
from phaselog.stores.kernel import entry_location
from phaselog.stores.names import approval_name, note_name, parse_event_name, parse_log_name, parse_note_name

if TYPE_CHECKING:
    from phaselog.ledger.gates import Gates
    from phaselog.ledger.progress import Progress
    from phaselog.ledger.reads import Reads
    from phaselog.stores import Store


@dataclass
class PruneReport:
    """What prune removed (or would remove) and kept."""

    dry_run: bool
    removed: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    bytes_freed: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "dry_run": self.dry_run,
            "removed": self.removed,
            "removed_count": len(self.removed),
            "kept": self.kept,
            "bytes_freed": self.bytes_freed,
        }


@dataclass
class _Plan:
    """What prune decided for one run (under its lock)."""

    whole: bool = False
    doomed: list[Checkpoint] = field(default_factory=list)
    entries: list[tuple[str, str]] = field(default_factory=list)
    #: The approvals and rejections removed: (seq, phase, content hash).
    judgements: list[tuple[int, str, str]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)


def _retention(store: Store) -> Retention:
    if Capability.RETENTION not in store.capabilities:
        raise UsageError(f"the store {store.url} does not support prune", field="store")
    return cast(Retention, store)


def _target(c: Checkpoint | PrunedRecord) -> PruneTarget:
    completed = c.status == "completed"
    return PruneTarget(c.phase_ordinal, c.phase, c.attempt_number, completed, c.content_hash)


class Pruner:
    """Prune over one store: ``reads`` gives a run's records, ``events`` its progress events,
    ``gates`` its approvals (what keeps a record), ``clock`` the age cut-off and the note's time."""

    def __init__(
        self, store: Store, clock: Callable[[], datetime], *, reads: Reads, events: Progress, gates: Gates
    ) -> None:
        self.store = store
        self.clock = clock
        self.reads = reads
        self.events = events
        self.gates = gates

    def prune(
        self,
        ticket_id: str | None = None,
        *,
        older_than: timedelta | None = None,
        keep_last: int | None = None,
        run_id: str | None = None,
        dry_run: bool = False,
    ) -> PruneReport:
        """Remove old records (see the module docstring)."""
        chosen = [x for x in (older_than, keep_last, run_id) if x is not None]
        if len(chosen) != 1:
            raise UsageError("give exactly one of --older-than, --keep-last or --run-id", field="selector")
        if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1):
            raise UsageError("--keep-last must be an integer >= 1", field="keep_last")
        if run_id is not None and ticket_id is None:
            raise UsageError("--run-id needs --ticket-id", field="ticket_id")
        store = _retention(self.store)
        tickets = [validate_ticket_id(ticket_id)] if ticket_id is not None else self.store.tickets()
        rep = PruneReport(dry_run=dry_run)
        now = self.clock()
        for tid in tickets:
            runs = [normalize_run_id(run_id)] if run_id is not None else self.store.runs(tid)
            # Forks point across runs: a source record stays while a fork names it.
            fork_sources: set[str] = set()
            for rid in self.store.runs(tid):
                items, _damaged = self.reads.run_records(tid, rid)
                fork_sources.update(
                    str(s.record.forked_from.get("content_hash")) for s in items if s.record.forked_from
                )
            for rid in runs:
                # An anchored ticket records a run's going whole (D321): before, when --run-id says it goes;
                # after the lock (SQLite's is a transaction) when its age decides, a crash between is a false alarm.
                if run_id is not None and not dry_run and rid in self.store.runs(tid):
                    record_run_pruned(self.store, tid, [rid], now)
                with store.locked_run(tid, rid) as handle:
                    if handle is None:
                        if run_id is not None:
                            raise NotFound(f"ticket {tid} has no run {rid}; nothing pruned", ticket_id=tid, run_id=rid)
                        continue  # removed whole by another prune meanwhile
                    plan = self._decide(tid, rid, now, older_than, keep_last, run_id is not None, fork_sources)
                    self._apply(store, handle, tid, rid, plan, rep)
                if plan.whole and run_id is None and not dry_run:
                    record_run_pruned(self.store, tid, [rid], now)
        return rep

    def _decide(
        self,
        tid: str,
        rid: str,
        now: datetime,
        older_than: timedelta | None,
        keep_last: int | None,
        whole: bool,
        fork_sources: set[str],
    ) -> _Plan:
        """Decide what goes from one run, on what is read under the run's lock."""
        store = self.store
        items, damaged = self.reads.run_records(tid, rid)
        records = [s.record for s in items]
        events = self.events.event_index(tid, rid)
        approvals = self.gates.approvals(tid, rid)
        plan = _Plan()
        if older_than is not None and not whole:
            cutoff = now - older_than
            stamps = (
                [r.timestamp_utc for r in records]
                + [e.timestamp for evs in events.values() for e in evs]
                + [a.timestamp for a in approvals]
            )
            # A damaged record's age is unknown: its run does not go whole on age alone.
            whole = bool(stamps) and max(stamps) < cutoff and not damaged
        if whole:
            if any(r.content_hash in fork_sources for r in records):
                plan.kept.append({"run_id": rid, "reason": "another run was forked from this run"})
                return plan
            plan.whole = True
            plan.doomed = records
            plan.entries = [("progress", n) for n in store.entry_names("progress", tid, rid)]
            plan.entries += [("approvals", n) for n in store.entry_names("approvals", tid, rid)]
            return plan
        protected: dict[str, str] = {}
        by_phase: dict[str, list[Checkpoint]] = {}
        for r in records:
            by_phase.setdefault(r.phase, []).append(r)
        newest: dict[int, int] = {}
        for ordinal, attempt in [(r.phase_ordinal, r.attempt_number) for r in records] + [
            (d.phase_ordinal, d.attempt_number) for d in damaged
        ]:
            newest[ordinal] = max(newest.get(ordinal, 0), attempt)
        for lst in by_phase.values():
            lst.sort(key=lambda c: c.attempt_number)
            done = [c for c in lst if c.completed]
            if done:
                protected[done[-1].content_hash] = "latest completed attempt of its phase"
            if lst[-1].attempt_number == newest[lst[-1].phase_ordinal]:
                # The phase's state and its next attempt number come from its newest attempt.
                protected.setdefault(lst[-1].content_hash, "newest attempt of its phase")
        for a in approvals:
            if a.approved:
                protected.setdefault(a.checkpoint_hash, f"approved by {a.by}")
        for r in records:
            for b in (r.basis or {}).values():
                protected.setdefault(b.hash, f"in the basis of {r.phase} attempt {r.attempt_number}")
        for h in fork_sources:
            protected.setdefault(h, "another run was forked from it")
        in_flight = {
            (o, a) for (o, a) in events if not any(r.phase_ordinal == o and r.attempt_number == a for r in records)
        }
        candidates: list[Checkpoint] = []
        for lst in by_phase.values():
            if keep_last is not None:
                candidates.extend(lst[:-keep_last])
            else:
                assert older_than is not None
                candidates.extend(c for c in lst if c.timestamp_utc < now - older_than)
        for c in candidates:
            why = protected.get(c.content_hash)
            if why is None and (c.phase_ordinal, c.attempt_number) in in_flight:
                why = "in flight"
            if why:
                plan.kept.append({"path": store.location(c), "reason": why})
            else:
                plan.doomed.append(c)
        doomed_keys = {(c.phase_ordinal, c.attempt_number) for c in plan.doomed}
        for name in store.entry_names("progress", tid, rid):
            parsed = parse_event_name(name)
            if parsed is not None and (parsed.ordinal, parsed.attempt) in doomed_keys:
                plan.entries.append(("progress", name))
        for name in store.entry_names("logs", tid, rid):  # a pruned attempt's log goes with it
            logged = parse_log_name(name)
            if logged is not None and (logged.ordinal, logged.attempt) in doomed_keys:
                plan.entries.append(("logs", name))
        doomed_hashes = {c.content_hash for c in plan.doomed}
        for a in approvals:
            if a.checkpoint_hash in doomed_hashes:
                plan.entries.append(("approvals", approval_name(a.seq, a.phase_ordinal, a.phase, a.attempt_number)))
                plan.judgements.append((a.seq, a.phase, a.content_hash))
        return plan

    def _apply(self, store: Retention, handle: object, tid: str, rid: str, plan: _Plan, rep: PruneReport) -> None:
        """Report a plan and (unless a dry run) carry it out, still under the run's lock."""
        rep.kept.extend(plan.kept)
        if not plan.doomed and not plan.whole:
            return
        notes = read_notes(self.store, tid, rid)
        if notes.damaged and not plan.whole:
            # The next note must chain to the last one; a damaged note is for a person to look at.
            rep.kept.append({"run_id": rid, "reason": "a prune note of this run is damaged; run `phaselog verify`"})
            return
        for c in plan.doomed:
            rep.removed.append(
                {
                    "path": self.store.location(c),
                    "phase": c.phase,
                    "attempt_number": c.attempt_number,
                    "content_hash": c.content_hash,
                }
            )
        for kind, name in plan.entries:
            rep.removed.append({"path": entry_location(kind, tid, rid, name), "kind": kind})
        if plan.whole:
            rep.removed.append({"path": f"{tid}/{rid}", "kind": "run"})
        if rep.dry_run:
            rep.bytes_freed += sum(len(json.dumps(c.seed_dict())) for c in plan.doomed)
            return
        if plan.whole:
            rep.bytes_freed += store.remove_run(handle)
            return
        seq = max([0, *(s for s in map(parse_note_name, self.store.entry_names("pruned", tid, rid)) if s)]) + 1
        head = notes.head
        note = PruneNote(
            ticket_id=tid,
            run_id=rid,
            seq=seq,
            timestamp=self.clock(),
            removed=tuple(
                PrunedRecord(
                    c.phase,
                    c.phase_ordinal,
                    c.attempt_number,
                    c.status,
                    c.content_hash,
                    c.prev_hash,
                    linked=c.has_metadata,
                )
                for c in plan.doomed
            ),
            entries=tuple(plan.entries),
            prev_hash=head.content_hash if head else None,
            judgements=tuple(plan.judgements),
        )
        # The note first: a crash after it leaves records that doctor removes; never the reverse.
        store.put_note(handle, note_name(seq), note.body())
        _count, freed = store.delete_records(handle, [_target(c) for c in plan.doomed], plan.entries)
        rep.bytes_freed += freed

    def finish_interrupted(self, ticket_id: str) -> list[dict[str, Any]]:
        """Finish the prunes of a ticket that a crash interrupted (``doctor``); one entry per run.

        A whole-run removal is finished by the store; a partial prune by deleting what its note lists
        that is still there — a record only while it still has the hash the note recorded.
        """
        if Capability.RETENTION not in self.store.capabilities:
            return []  # a store without prune has no prune to finish
        store = cast(Retention, self.store)
        done: list[dict[str, Any]] = list(store.finish_removals(ticket_id))
        for rid in self.store.runs(ticket_id):
            if not self.store.entry_names("pruned", ticket_id, rid):
                continue
            with store.locked_run(ticket_id, rid) as handle:
                if handle is None:
                    continue
                notes = read_notes(self.store, ticket_id, rid)
                items, damaged = self.reads.run_records(ticket_id, rid)
                stored = {(s.record.phase, s.record.attempt_number): s.record.content_hash for s in items}
                broken = {(d.phase, d.attempt_number) for d in damaged}
                targets: list[PruneTarget] = []
                entries: list[tuple[str, str]] = []
                for n in notes.notes:
                    if n.legacy:
                        continue  # written before notes came first; nothing to finish
                    entries.extend(n.entries)
                    for r in n.removed:
                        key = (r.phase, r.attempt_number)
                        if key in broken or stored.get(key, r.content_hash) != r.content_hash:
                            continue  # not the record the note names: verify reports it
                        targets.append(_target(r))
                count, freed = store.delete_records(handle, targets, entries)
                if count:
                    done.append(
                        {
                            "kind": "interrupted_prune",
                            "path": f"{ticket_id}/{rid}",
                            "message": f"finished an interrupted prune: removed {count} record(s) and entries its "
                            f"note lists ({freed} bytes)",
                        }
                    )
        return done

    def prune_chosen(
        self,
        tid: str,
        rid: str,
        choose: Callable[[list[Checkpoint], bool], tuple[list[Checkpoint], bool]],
        rep: PruneReport,
    ) -> None:
        """Remove what ``choose`` picks from one run, as ``prune`` does: under the run's lock, with
        the removed records' progress events and approvals, a prune note first, or the whole run.

        ``choose(records, damaged)`` gets the run's intact records (read under the lock) and whether
        any record is damaged, and returns (the records to remove, whether the whole run goes). The
        LangGraph saver's ``prune``, ``delete_for_runs`` and ``delete_thread`` use it, so their
        removals are ones ``verify`` and ``doctor`` understand.
        """
        store = _retention(self.store)
        with store.locked_run(tid, rid) as handle:
            if handle is None:
                return  # removed whole meanwhile
            items, damaged = self.reads.run_records(tid, rid)
            doomed, whole = choose([s.record for s in items], bool(damaged))
            plan = _Plan(whole=whole, doomed=list(doomed))
            if whole:
                plan.entries = [("progress", n) for n in self.store.entry_names("progress", tid, rid)]
                plan.entries += [("approvals", n) for n in self.store.entry_names("approvals", tid, rid)]
            elif plan.doomed:
                keys = {(c.phase_ordinal, c.attempt_number) for c in plan.doomed}
                for name in self.store.entry_names("progress", tid, rid):
                    parsed = parse_event_name(name)
                    if parsed is not None and (parsed.ordinal, parsed.attempt) in keys:
                        plan.entries.append(("progress", name))
                hashes = {c.content_hash for c in plan.doomed}
                for a in self.gates.approvals(tid, rid):
                    if a.checkpoint_hash in hashes:
                        plan.entries.append(
                            ("approvals", approval_name(a.seq, a.phase_ordinal, a.phase, a.attempt_number))
                        )
                        plan.judgements.append((a.seq, a.phase, a.content_hash))
            self._apply(store, handle, tid, rid, plan, rep)


# The functions callers used before the Ledger had a Pruner (``ledger.prune`` is the same call).
class Ledger(Protocol):
    """What the functions below need of a :class:`phaselog.ledger.facade.Ledger`: its Pruner."""

    @property
    def retention(self) -> Pruner:
        """The Ledger's Pruner."""


def prune(
    ledger: Ledger,
    ticket_id: str | None = None,
    *,
    older_than: timedelta | None = None,
    keep_last: int | None = None,
    run_id: str | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """Remove old records (see the module docstring): :meth:`Pruner.prune` of ``ledger``."""
    return ledger.retention.prune(ticket_id, older_than=older_than, keep_last=keep_last, run_id=run_id, dry_run=dry_run)


def finish_interrupted(ledger: Ledger, ticket_id: str) -> list[dict[str, Any]]:
    """:meth:`Pruner.finish_interrupted` of ``ledger`` (``doctor``)."""
    return ledger.retention.finish_interrupted(ticket_id)


def prune_chosen(
    ledger: Ledger,
    tid: str,
    rid: str,
    choose: Callable[[list[Checkpoint], bool], tuple[list[Checkpoint], bool]],
    rep: PruneReport,
) -> None:
    """:meth:`Pruner.prune_chosen` of ``ledger`` (the LangGraph saver's deletions)."""
    ledger.retention.prune_chosen(tid, rid, choose, rep)
