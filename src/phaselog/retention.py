"""Retention: ``prune`` removes old records without breaking resume or ``verify``.

Selectors (exactly one): ``run_id`` (the whole run), ``keep_last`` (per run and phase, keep the
newest N attempts), ``older_than`` (attempts older than that; a run whose every record is older
goes whole). Never removed, unless the whole run goes:

* the latest completed attempt of each phase (resume needs it);
* an approved attempt (its approval names it);
* an attempt that a kept record names in its ``basis``, or that another run was forked from;
* an attempt with progress events in flight.

Removing attempt k breaks the ``prev_hash`` of attempt k+1, so each run keeps an append-only prune
note (``.pruned`` entries) listing what went, with content hashes; ``verify`` accepts a
``prev_hash`` that names a pruned record. Runs that other runs were forked from are never removed
whole. ``dry_run`` reports without deleting. This and ``doctor --quarantine`` are the only
operations that delete or move anything.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from phaselog.errors import UsageError
from phaselog.ids import normalize_run_id, validate_ticket_id
from phaselog.records import format_timestamp
from phaselog.stores.names import approval_name, parse_event_name


def note_hash(document: Any) -> str:
    """Content hash of a prune note (canonical JSON, as every other record)."""
    blob = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


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


def pruned_hashes(ledger: Any, ticket_id: str, run_id: str) -> dict[tuple[str, int], str]:
    """(phase, attempt) → content hash of every record pruned from a run."""
    out: dict[tuple[str, int], str] = {}
    for _name, _loc, data in ledger.store.entries("pruned", ticket_id, run_id):
        if isinstance(data, Exception):
            continue
        try:
            doc = json.loads(data)
        except ValueError:
            continue
        for r in doc.get("removed", []):
            out[(str(r.get("phase")), int(r.get("attempt_number", 0)))] = str(r.get("content_hash"))
    return out


def prune(
    ledger: Any,
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
    if keep_last is not None and keep_last < 1:
        raise UsageError("--keep-last must be >= 1", field="keep_last")
    if run_id is not None and ticket_id is None:
        raise UsageError("--run-id needs --ticket-id", field="ticket_id")
    store = ledger.store
    tickets = [validate_ticket_id(ticket_id)] if ticket_id is not None else store.tickets()
    rep = PruneReport(dry_run=dry_run)
    now = ledger.clock()
    # Forks point across runs: a source record stays while a fork names it.
    fork_sources: set[str] = set()
    for tid in tickets:
        for rid in store.runs(tid):
            items, _damaged = ledger.run_records(tid, rid)
            fork_sources.update(str(s.record.forked_from.get("content_hash")) for s in items if s.record.forked_from)
    for tid in tickets:
        runs = [normalize_run_id(run_id)] if run_id is not None else store.runs(tid)
        for rid in runs:
            _prune_run(ledger, tid, rid, now, older_than, keep_last, run_id is not None, fork_sources, rep)
    return rep


def _prune_run(
    ledger: Any,
    tid: str,
    rid: str,
    now: datetime,
    older_than: timedelta | None,
    keep_last: int | None,
    whole: bool,
    fork_sources: set[str],
    rep: PruneReport,
) -> None:
    store = ledger.store
    items, _damaged = ledger.run_records(tid, rid)
    records = [s.record for s in items]
    events = ledger.event_index(tid, rid)
    approvals = ledger.approvals(tid, rid)
    if older_than is not None and not whole:
        cutoff = now - older_than
        stamps = (
            [r.timestamp_utc for r in records]
            + [e.timestamp for evs in events.values() for e in evs]
            + [a.timestamp for a in approvals]
        )
        whole = bool(stamps) and max(stamps) < cutoff
    if whole:
        if any(r.content_hash in fork_sources for r in records):
            rep.kept.append({"run_id": rid, "reason": "another run was forked from this run"})
            return
        doomed = records
    else:
        protected: dict[str, str] = {}
        by_phase: dict[str, list[Any]] = {}
        for r in records:
            by_phase.setdefault(r.phase, []).append(r)
        for lst in by_phase.values():
            lst.sort(key=lambda c: c.attempt_number)
            done = [c for c in lst if c.completed]
            if done:
                protected[done[-1].content_hash] = "latest completed attempt of its phase"
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
        candidates = []
        for lst in by_phase.values():
            if keep_last is not None:
                candidates.extend(lst[:-keep_last])
            else:
                assert older_than is not None
                candidates.extend(c for c in lst if c.timestamp_utc < now - older_than)
        doomed = []
        for c in candidates:
            why = protected.get(c.content_hash)
            if why is None and (c.phase_ordinal, c.attempt_number) in in_flight:
                why = "in flight"
            if why:
                rep.kept.append({"path": store.location(c), "reason": why})
            else:
                doomed.append(c)
    if not doomed and not whole:
        return
    doomed_keys = {(c.phase_ordinal, c.attempt_number) for c in doomed}
    entries: list[tuple[str, str, str, str]] = []
    for name in store.entry_names("progress", tid, rid):
        parsed = parse_event_name(name)
        if whole or (parsed is not None and (parsed.ordinal, parsed.attempt) in doomed_keys):
            entries.append(("progress", tid, rid, name))
    doomed_hashes = {c.content_hash for c in doomed}
    judgements = []
    for a in approvals:
        if whole or a.checkpoint_hash in doomed_hashes:
            judgements.append({"seq": a.seq, "phase": a.phase, "content_hash": a.content_hash})
            entries.append(("approvals", tid, rid, approval_name(a.seq, a.phase_ordinal, a.phase, a.attempt_number)))
    for c in doomed:
        rep.removed.append(
            {
                "path": store.location(c),
                "phase": c.phase,
                "attempt_number": c.attempt_number,
                "content_hash": c.content_hash,
            }
        )
    for kind, _t, _r, name in entries:
        rep.removed.append({"path": f"{tid}/{rid}/.{kind}/{name}.json", "kind": kind})
    if whole:
        rep.removed.append({"path": f"{tid}/{rid}", "kind": "run"})
    if rep.dry_run:
        rep.bytes_freed += sum(len(json.dumps(c.seed_dict())) for c in doomed)
        return
    if not whole:
        note = {
            "kind": "phaselog.pruned",
            "at": format_timestamp(ledger.clock()),
            "removed": [
                {
                    "phase": c.phase,
                    "attempt_number": c.attempt_number,
                    "content_hash": c.content_hash,
                    "status": c.status,
                }
                for c in doomed
            ],
            # The judgements removed with them: verify fills their places in the judgement chain.
            "judgements": judgements,
        }
        seq = len(store.entry_names("pruned", tid, rid)) + 1
        store.put_entry("pruned", tid, rid, f"{seq:06d}", (json.dumps(note, ensure_ascii=False) + "\n").encode())
    rep.bytes_freed += store.delete_records(
        [(tid, rid, c.phase_ordinal, c.phase, c.attempt_number, c.completed) for c in doomed],
        entries,
        whole_run=(tid, rid) if whole else None,
    )
