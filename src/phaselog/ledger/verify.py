"""``verify``: recompute a ticket's hash-linked graph and report what is broken.

Checks content hashes against those recorded at write, ``prev_hash`` and ``basis`` links, fork
lineage, approvals bound to stored checkpoints, progress-event chains, ticket-marker revisions,
and damaged files. Nothing is changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phaselog.ledger.gates import pruned_judgements
from phaselog.ledger.prune_notes import check_notes, read_notes
from phaselog.ledger.quarantined import quarantined_attempts
from phaselog.model.errors import Corrupt, NotFound, PhaselogError, UnsupportedVersion
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.model.records import Checkpoint
from phaselog.model.validation import check_links
from phaselog.stores import Stored
from phaselog.stores.kernel import entry_dir_location, entry_location
from phaselog.stores.names import marker_name, parse_approval_name

if TYPE_CHECKING:
    from phaselog.ledger.gates import Gates
    from phaselog.ledger.markers import Markers
    from phaselog.ledger.progress import Progress
    from phaselog.ledger.reads import Reads
    from phaselog.stores import Store


@dataclass
class VerifyReport:
    """Result of recomputing a ticket's (or run's) hash links."""

    checked: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is broken or damaged."""
        return not self.problems

    def add(self, path: str, rule: str, message: str, *, damaged: bool = False) -> None:
        """Record a problem; ``damaged``: the file itself cannot be used (doctor may quarantine it)."""
        self.problems.append({"path": path, "rule": rule, "message": message, "damaged": damaged})


class Verifier:
    """``verify`` over one store, reading through ``reads`` (records), ``events`` (progress events),
    ``gates`` (approvals) and ``tickets`` (markers)."""

    def __init__(self, store: Store, *, reads: Reads, events: Progress, gates: Gates, tickets: Markers) -> None:
        self.store = store
        self.reads = reads
        self.events = events
        self.gates = gates
        self.tickets = tickets

    def verify(self, ticket_id: str, run_id: str | None = None) -> VerifyReport:
        """Recompute every hash and link of a ticket (or one run); report what is broken.

        Checks: content hashes against those recorded at write; ``prev_hash`` and ``basis``
        links; fork lineage; approvals bound to stored checkpoints; progress-event chains;
        ticket-marker revisions; damaged files.
        """
        ticket_id = validate_ticket_id(ticket_id)
        run = normalize_run_id(run_id) if run_id is not None else None
        rep = VerifyReport()
        runs = [run] if run is not None else self.store.runs(ticket_id)
        for rid in runs:
            items, damaged = self.reads.run_records(ticket_id, rid)
            for d in damaged:
                rep.add(d.location, d.rule or d.error_code, d.message, damaged=True)
            by_key = {(s.record.phase, s.record.attempt_number): s.record for s in items}
            per_phase: dict[str, list[Checkpoint]] = {}
            for s in items:
                rep.checked += 1
                per_phase.setdefault(s.record.phase, []).append(s.record)
                if not s.tampered:  # a tampered record is reported once, below, not also as "file changed"
                    for w in s.warnings:
                        if "changed since" in w:
                            rep.add(s.location, "file_changed", w)
                if s.tampered:
                    rep.add(
                        s.location,
                        "content_hash",
                        f"content hashes to {s.record.content_hash[:12]} but "
                        f"{(s.recorded_hash or '')[:12]} was recorded at write: edited after writing",
                    )
                self._verify_lineage(s, rep)

            notes = read_notes(self.store, ticket_id, rid)
            for exc in notes.damaged:
                _damaged(rep, exc, rid)
            rep.checked += len(notes.notes)
            for loc, rule, message in check_notes(notes, by_key, ticket_id=ticket_id, run_id=rid):
                rep.add(loc, rule, message)
            pruned = notes.records

            moved = quarantined_attempts(self.store, ticket_id, rid)
            for lst in per_phase.values():
                lst.sort(key=lambda c: c.attempt_number)
                for i, cp in enumerate(lst):
                    # Every link is checked, also across a pruned gap: the note carries the hash.
                    links = check_links(
                        cp, previous=lst[i - 1] if i else None, lookup=by_key, pruned=pruned, quarantined=moved
                    )
                    loc = self.store.location(cp)
                    for issue in links.errors:
                        rep.add(loc, issue.rule, f"{issue.field}: {issue.message}")
            self._verify_audit(ticket_id, rid, by_key, rep, pruned)
        if run is None:
            for exc in self.tickets.damaged_markers(ticket_id):
                _damaged(rep, exc, ticket_id)
            revs = self.tickets.markers(ticket_id)
            for i, m in enumerate(revs):
                rep.checked += 1
                want = revs[i - 1].content_hash if i else None
                if m.revision != i + 1 or m.prev_hash != want:
                    rep.add(
                        entry_location("markers", ticket_id, None, marker_name(m.revision)),
                        "marker_chain",
                        "ticket marker revisions are not a contiguous hash chain",
                    )
        return rep

    def _verify_lineage(self, s: Stored, rep: VerifyReport) -> None:
        src = s.record.forked_from
        if not src:
            return
        try:
            where = (str(src["ticket_id"]), str(src["run_id"]), str(src["phase"]), int(src["attempt_number"]))
            origin: Any = self.store.get(where[0], where[1], s.record.phase_ordinal, where[2], where[3]).record
        except NotFound:
            # Pruned since the fork? Its run's prune note still carries its hash.

            try:
                origin = read_notes(self.store, where[0], where[1]).records.get((where[2], where[3]))
            except PhaselogError:
                origin = None
        except (KeyError, TypeError, ValueError, Corrupt, UnsupportedVersion, PhaselogError):
            origin = None
        if origin is None:
            rep.add(s.location, "lineage", f"forked from {src}, which is not stored (or damaged)")
            return
        if origin.content_hash != src.get("content_hash"):
            rep.add(s.location, "lineage", "the checkpoint it was forked from changed after the fork")

    def _verify_judgement_chains(self, ticket_id: str, run_id: str, approvals: list[Any], rep: VerifyReport) -> None:
        """Judgements are numbered 1, 2, 3 … per run and chained per phase; a deleted one leaves a hole.

        Judgements that ``prune`` removed are listed, with their hashes, in its notes; they fill
        their place in both. Judgements stored before chaining (no ``prev_hash`` in a whole phase)
        are checked by number only.
        """

        gone = pruned_judgements(self.store, ticket_id, run_id)
        stored = {
            p.seq for n in self.store.entry_names("approvals", ticket_id, run_id) if (p := parse_approval_name(n))
        }
        known = stored | set(gone)
        top = max(known, default=0)
        holes = sorted(set(range(1, top + 1)) - known)
        if holes:
            rep.add(
                entry_dir_location("approvals", ticket_id, run_id),
                "judgement_chain",
                f"judgement(s) {holes} of {top} are missing: an approval or rejection was deleted",
            )
        chains: dict[str, list[tuple[int, str | None, str | None, bool]]] = {}
        for a in approvals:
            chains.setdefault(a.phase, []).append((a.seq, a.content_hash, a.prev_hash, True))
        for seq, (phase, h) in gone.items():
            chains.setdefault(phase, []).append((seq, h, None, False))
        for phase, chain in chains.items():
            chain.sort()
            if not any(prev for _s, _h, prev, _here in chain):
                continue  # judged before judgements were chained
            before: str | None = None
            unknown = False  # the judgement before was pruned by a note that lists no hash
            for seq, h, prev, here in chain:
                if here and prev != before and not unknown:
                    rep.add(
                        f"{entry_dir_location('approvals', ticket_id, run_id)}/{seq:06d}",
                        "judgement_chain",
                        f"judgement {seq} of {phase} does not link to the judgement before it "
                        f"({'none' if before is None else before[:12]}): one was deleted or replaced",
                    )
                before, unknown = h, not here and h is None

    def _verify_audit(
        self,
        ticket_id: str,
        run_id: str,
        by_key: Mapping[tuple[str, int], Checkpoint],
        rep: VerifyReport,
        pruned: Mapping[tuple[str, int], Any],
    ) -> None:
        for exc in [*self.gates.damaged_approvals(ticket_id, run_id), *self.events.damaged_events(ticket_id, run_id)]:
            _damaged(rep, exc, run_id)
        approvals = self.gates.approvals(ticket_id, run_id)
        self._verify_judgement_chains(ticket_id, run_id, approvals, rep)
        for a in approvals:
            rep.checked += 1
            target = by_key.get((a.phase, a.attempt_number)) or pruned.get((a.phase, a.attempt_number))
            if target is None or target.content_hash != a.checkpoint_hash:
                rep.add(
                    f"{entry_dir_location('approvals', ticket_id, run_id)}/{a.seq:06d}",
                    "approval_link",
                    f"{a.decision} by {a.by} judges attempt {a.attempt_number} of {a.phase} with hash "
                    f"{a.checkpoint_hash[:12]}, which is not the stored checkpoint",
                )
        groups = self.events.event_index(ticket_id, run_id)
        for (_ordinal, attempt), events in groups.items():
            prev = None
            for i, ev in enumerate(events, start=1):
                rep.checked += 1
                if ev.seq != i or ev.prev_hash != (prev.content_hash if prev else None):
                    rep.add(
                        f"{entry_dir_location('progress', ticket_id, run_id)}/{ev.phase} a{attempt} s{ev.seq}",
                        "event_chain",
                        f"progress events of {ev.phase} attempt {attempt} are not a contiguous hash chain at {ev.seq}",
                    )
                prev = ev


def _damaged(rep: VerifyReport, exc: Corrupt, where: str) -> None:
    rep.add(str(exc.context.get("path", where)), str(exc.context.get("rule") or "corrupt"), exc.message, damaged=True)
