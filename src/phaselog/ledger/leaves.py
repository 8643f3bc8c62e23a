"""A ticket's Merkle leaves, in the order anchoring sealed them (D320), and what a prune leaves behind (D321).

**The order.** Every entry of a ticket's history that has a content hash is a leaf: ticket-marker
revisions, checkpoints (completed and failed), progress events, approvals and rejections, prune
notes, and the records of runs pruned whole. Any new kind of history entry becomes a leaf the
same way: once :func:`phaselog.ledger.history.history_items` yields it with a ``hash``, it is here
(``_history``), keyed by its ``kind``, ``run_id``, ``phase``, ``attempt_number`` and ``seq``.
(If ``prune`` can remove it, add its rule to :func:`_vouched`.)

The order is not the clock's. Each ``anchor`` *seals* the leaves no earlier anchoring sealed:
it appends one ticket-level entry of kind ``tree`` (``<ticket>/.tree/<seq>`` on files, a row of
``phaselog_entries`` on SQL) listing them, in the history's order, after the leaves of the
seals before it. A ticket's tree is then: the sealed leaves, seal by seal, followed by the
leaves not sealed yet, in the history's order (time, kind, run, phase, attempt, seq, hash). A
head covers only sealed leaves, so a writer whose clock lags, two writes in one microsecond, or
an ``import`` of old records can only reorder the unsealed tail, which no head covers.

**Sealed leaves that are gone.** A sealed leaf whose entry is no longer in the history stays in
the tree (its hash is in the seal) when a prune accounts for it — a prune note of its run lists
the checkpoint's or judgement's content hash or the progress event's name, or the ticket records
its run as pruned whole (:func:`phaselog.ledger.seals.record_run_pruned`, written by ``prune`` before it removes a run
of an anchored ticket). Otherwise it was removed outside ``prune``: it leaves the tree, so every
head that covered it fails its consistency proof, and :attr:`Tree.missing` names it.

The seals are in the store, so a store writer can edit them too; they are trusted for nothing but
the order: a head's root decides, and a seal edited under an anchored head changes the tree.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from phaselog.ledger.history import history_items
from phaselog.ledger.prune_notes import read_notes
from phaselog.ledger.seals import SEAL_KIND, SEAL_VERSION, micros, put_numbered, run_pruned_hash
from phaselog.model.errors import AlreadyExists, Corrupt
from phaselog.model.ids import validate_ticket_id
from phaselog.model.limits import json_loads
from phaselog.model.records import format_timestamp
from phaselog.stores.names import parse_event_name

if TYPE_CHECKING:
    from phaselog.ledger.services import Services
    from phaselog.stores.base import Store

__all__ = ["SEAL_CHUNK", "SEAL_KIND", "Leaf", "Tree", "seal", "ticket_tree"]

#: The most leaves one seal lists (about 150 bytes each: 1.5 MB).
SEAL_CHUNK = 10_000

#: After the history's own kinds (marker 0, progress 1, checkpoint 2, approval 3).
_NOTE_KIND, _RUN_PRUNED_KIND = 8, 9


@dataclass(frozen=True)
class Leaf:
    """One entry of a ticket's history as a leaf: what it is, and its content hash (hex)."""

    kind: str
    run_id: str | None
    phase: str | None
    attempt_number: int | None
    seq: int | None
    at: str
    hash: str
    #: The entry is gone, and a prune accounts for it: the leaf is its hash, kept by the seal.
    pruned: bool = False

    def to_json(self) -> dict[str, Any]:
        """The entry as a proof names it."""
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "phase": self.phase,
            "attempt_number": self.attempt_number,
            "seq": self.seq,
            "at": self.at,
            "hash": self.hash,
            "pruned": self.pruned,
        }

    def sealed(self) -> list[Any]:
        """The leaf as a seal lists it (no time: a pruned leaf has none)."""
        return [self.hash, self.kind, self.run_id, self.phase, self.attempt_number, self.seq]

    def describe(self) -> str:
        """A short name for messages: ``approval proposal attempt 1 of run …``."""
        what = " ".join(str(p) for p in (self.kind, self.phase) if p)
        if self.attempt_number is not None:
            what += f" attempt {self.attempt_number}"
        if self.seq is not None:
            what += f" #{self.seq}"
        return what + (f" of run {self.run_id}" if self.run_id else "") + f" ({self.hash[:12]})"


@dataclass
class Tree:
    """A ticket's leaves in tree order, and what the seals name that the history lost."""

    leaves: list[Leaf]
    #: Sealed leaves whose entries are gone with no prune accounting for them, in seal order.
    missing: list[Leaf] = field(default_factory=list)
    #: How many leaves the seals hold (the next seal's ``start``), and the next seal's number.
    sealed: int = 0
    next_seq: int = 1
    #: Seals that could not be read or do not follow the one before (ignored, with why).
    broken: list[str] = field(default_factory=list)
    #: The leaves not sealed yet (the tail), in the history's order.
    unsealed: list[Leaf] = field(default_factory=list)


@dataclass
class _Pruned:
    """What the prunes of one ticket account for."""

    runs: set[str] = field(default_factory=set)
    hashes: set[tuple[str, str]] = field(default_factory=set)  # (run, content hash)
    events: set[tuple[str, str, int, int]] = field(default_factory=set)  # (run, phase, attempt, seq)


def _history(ledger: Services, ticket_id: str, pruned: _Pruned) -> Iterator[tuple[tuple[Any, ...], Leaf]]:
    items = history_items(
        ledger.store,
        ticket_id,
        markers=ledger.tickets.markers,
        pipeline_for=ledger.pipelines.for_run,
        event_index=ledger.events.event_index,
        approvals=ledger.gates.approvals,
    )
    for key, e in items:
        if e["kind"] == "damaged" or not e["hash"]:
            continue  # no hash to trust: verify reports it, and the tree no longer holds it
        leaf = Leaf(e["kind"], e["run_id"], e["phase"], e["attempt_number"], e["seq"], e["at"], e["hash"])
        yield (*key, leaf.hash), leaf
    for rid in ledger.store.runs(ticket_id):
        for note in read_notes(ledger.store, ticket_id, rid).notes:
            if note.note is None:  # a note of the format before timestamps: kept first in its run
                at, text = micros(datetime.min.replace(tzinfo=UTC)), ""
            else:
                at, text = micros(note.note.timestamp), format_timestamp(note.note.timestamp)
                pruned.hashes.update((rid, h) for _, _, h in note.note.judgements)
            pruned.hashes.update((rid, r.content_hash) for r in note.removed)
            for kind, name in note.entries:
                if kind == "progress" and (ev := parse_event_name(name)) is not None:
                    pruned.events.add((rid, ev.phase, ev.attempt, ev.seq))
            leaf = Leaf("pruned", rid, None, None, note.seq, text, note.content_hash)
            yield (at, _NOTE_KIND, rid, 0, 0, note.seq, leaf.hash), leaf


def _vouched(leaf: Leaf, pruned: _Pruned) -> bool:
    """Does a prune account for this sealed leaf's entry being gone?"""
    run = leaf.run_id or ""
    if run in pruned.runs:
        return True  # the whole run was pruned: every entry of it went
    if leaf.kind in ("checkpoint", "approval"):
        return (run, leaf.hash) in pruned.hashes
    if leaf.kind == "progress":
        return (run, leaf.phase or "", leaf.attempt_number or 0, leaf.seq or 0) in pruned.events
    return False  # markers, prune notes, pruned-run records: prune never removes them


def _read_log(store: Store, ticket_id: str, tree: Tree, pruned: _Pruned) -> tuple[list[Leaf], list[Any]]:
    """The seals' leaves in order, and the pruned-run records (as (key, leaf) pairs)."""
    sealed: list[Leaf] = []
    records: list[Any] = []
    for name, location, data in store.entries(SEAL_KIND, ticket_id, None):
        tree.next_seq = max(tree.next_seq, int(name) + 1 if name.isdigit() else tree.next_seq)
        try:
            if isinstance(data, Corrupt):
                raise data
            doc = json_loads(data)
            if not isinstance(doc, dict) or doc.get("schema_version") != SEAL_VERSION:
                raise ValueError("not a seal of this format")
            if doc.get("type") == "run_pruned":
                run, at = str(doc["run_id"]), str(doc["at"])
                if doc.get("content_hash") != run_pruned_hash(doc):
                    raise ValueError("content changed after it was written")
                pruned.runs.add(run)
                leaf = Leaf("run_pruned", run, None, None, int(name), at, str(doc["content_hash"]))
                records.append(((doc["at_us"], _RUN_PRUNED_KIND, run, 0, 0, int(name), leaf.hash), leaf))
                continue
            if doc.get("start") != len(sealed):
                raise ValueError(f"starts at leaf {doc.get('start')}, but the seals before hold {len(sealed)}")
            for h, kind, run_id, phase, attempt, seq in doc["leaves"]:
                sealed.append(Leaf(str(kind), run_id, phase, attempt, seq, "", str(h)))
        except (ValueError, KeyError, TypeError, Corrupt) as exc:
            reason = exc.message if isinstance(exc, Corrupt) else str(exc)
            tree.broken.append(f"{location}: {reason}")
    return sealed, records


def ticket_tree(ledger: Services, ticket_id: str) -> Tree:
    """Every leaf of ``ticket_id`` in tree order: the sealed ones, then the history's others (D320)."""
    ticket_id = validate_ticket_id(ticket_id)
    tree = Tree([])
    pruned = _Pruned()
    sealed, records = _read_log(ledger.store, ticket_id, tree, pruned)
    keyed = [*_history(ledger, ticket_id, pruned), *records]
    keyed.sort(key=lambda kv: kv[0])
    now = {leaf.hash: leaf for _, leaf in keyed}
    seen: set[str] = set()
    for s in sealed:
        if s.hash in seen:
            continue  # a seal repeating a leaf (an edited seal): the first place counts
        seen.add(s.hash)
        if (leaf := now.get(s.hash)) is not None:
            tree.leaves.append(leaf)
        elif _vouched(s, pruned):
            tree.leaves.append(Leaf(s.kind, s.run_id, s.phase, s.attempt_number, s.seq, "", s.hash, pruned=True))
        else:
            tree.missing.append(s)
    tree.sealed = len(sealed)
    tree.unsealed = [leaf for _, leaf in keyed if leaf.hash not in seen]
    tree.leaves.extend(tree.unsealed)
    return tree


def seal(ledger: Services, ticket_id: str, attempts: int = 20) -> Tree:
    """Seal the ticket's unsealed leaves and return the tree the head covers.

    One ``tree`` entry per :data:`SEAL_CHUNK` leaves (an entry stays far below the entry cap). Two
    anchorings racing for the same seal number: the loser reads again and seals what is left.
    """
    for _ in range(attempts):
        tree = ticket_tree(ledger, ticket_id)
        at, seq, start, raced = format_timestamp(ledger.clock()), tree.next_seq, tree.sealed, False
        for i in range(0, len(tree.unsealed), SEAL_CHUNK):
            chunk = tree.unsealed[i : i + SEAL_CHUNK]
            doc = {
                "schema_version": SEAL_VERSION,
                "kind": "phaselog.tree",
                "type": "seal",
                "ticket_id": ticket_id,
                "start": start,
                "at": at,
                "leaves": [leaf.sealed() for leaf in chunk],
            }
            if not put_numbered(ledger.store, ticket_id, seq, doc):
                raced = True
                break
            seq, start = seq + 1, start + len(chunk)
        if not raced:
            return tree
    raise AlreadyExists(f"ticket {ticket_id}: another anchoring kept sealing first; anchor again")
