"""Provable history: a ticket's entries as Merkle leaves, signed heads, anchoring, proofs (issue 26).

The leaves of a ticket's tree are the content hashes (32 bytes each) of every entry of its
history: ticket-marker revisions, checkpoints (completed and failed), progress events,
approvals and rejections, and prune notes. Damaged entries have no trustworthy hash and are
left out (``verify`` reports them). The order is the history's (D271): time, then kind, run,
phase ordinal, attempt, sequence — with the content hash last, so the order is total and the
same on every store and every read. The tree is built with
:class:`phaselog.model.merkle.MerkleBuilder` as the entries are read.

``anchor`` signs the current head of each ticket and appends it to a witness; ``verify_against``
checks every head of a witness against today's history (signature, then an RFC 9162
consistency proof from the head's size to today's); ``prove`` gives an inclusion proof of one
entry. docs/anchoring.md has the formats and the threat model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from phaselog.ledger.diff import parse_ref
from phaselog.ledger.history import history_items
from phaselog.ledger.prune_notes import read_notes
from phaselog.ledger.witness import DirectoryWitness
from phaselog.model import merkle
from phaselog.model.errors import NotFound, UsageError
from phaselog.model.heads import (
    Head,
    key_id_of,
    load_public_key,
    public_key_pem,
    sign_head,
    signature_ok,
)
from phaselog.model.ids import validate_ticket_id
from phaselog.model.records import format_timestamp

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    from phaselog.ledger.services import Services

__all__ = ["Leaf", "anchor", "prove", "ticket_leaves", "tree_of", "verify_against"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
#: After the history's own kinds (marker 0, progress 1, checkpoint 2, approval 3).
_NOTE_KIND = 8


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
        }


def ticket_leaves(ledger: Services, ticket_id: str) -> list[Leaf]:
    """Every entry of ``ticket_id`` with a content hash, in the tree's order (D271)."""
    ticket_id = validate_ticket_id(ticket_id)
    keyed: list[tuple[tuple[Any, ...], Leaf]] = []
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
        keyed.append(((*key, leaf.hash), leaf))
    for rid in ledger.store.runs(ticket_id):
        for note in read_notes(ledger.store, ticket_id, rid).notes:
            if note.note is None:  # a note of the format before timestamps: kept first in its run
                at, text = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICRO, ""
            else:
                at, text = (note.note.timestamp - _EPOCH) // _MICRO, format_timestamp(note.note.timestamp)
            leaf = Leaf("pruned", rid, None, None, note.seq, text, note.content_hash)
            keyed.append(((at, _NOTE_KIND, rid, 0, 0, note.seq, leaf.hash), leaf))
    keyed.sort(key=lambda kv: kv[0])
    return [leaf for _, leaf in keyed]


def _bytes(leaves: Sequence[Leaf]) -> list[bytes]:
    return [bytes.fromhex(leaf.hash) for leaf in leaves]


def tree_of(leaves: Sequence[Leaf]) -> tuple[int, bytes]:
    """(size, root) of the tree over ``leaves``, built incrementally."""
    builder = merkle.MerkleBuilder()
    for b in _bytes(leaves):
        builder.append(b)
    return builder.size, builder.root()


def anchor(
    ledger: Services, ticket_ids: Iterable[str], witness: DirectoryWitness, key: Ed25519PrivateKey
) -> list[Head]:
    """Sign the current head of each ticket and append them to ``witness``; return the heads."""
    at = format_timestamp(ledger.clock())
    heads = []
    for ticket in ticket_ids:
        size, root = tree_of(ticket_leaves(ledger, ticket))
        heads.append(sign_head(key, validate_ticket_id(ticket), size, root, at))
    witness.keep_key_safely(key_id_of(key.public_key()), public_key_pem(key.public_key()))
    witness.append(heads)
    return heads


def _problem(line: int, head: Head | None, rule: str, message: str) -> dict[str, Any]:
    return {
        "line": line,
        "ticket_id": head.ticket_id if head else None,
        "head": head.unsigned() if head else None,
        "rule": rule,
        "message": message,
    }


def _key_for(
    witness: DirectoryWitness, head: Head, cache: dict[str, Ed25519PublicKey | None]
) -> Ed25519PublicKey | None:
    if head.key_id not in cache:
        path = witness.key_file(head.key_id)
        try:
            key = load_public_key(path.read_bytes(), source=str(path))
        except (OSError, UsageError):
            key = None
        cache[head.key_id] = key
    return cache[head.key_id]


def verify_against(ledger: Services, witness: DirectoryWitness, public: Ed25519PublicKey | None) -> dict[str, Any]:
    """Check every head of ``witness`` against today's history; the report's ``problems`` say what broke.

    With ``public`` every head must be signed by that key; without it, by the key the witness
    keeps under the head's ``key_id`` (trust in the witness's own keys: docs/anchoring.md).
    """
    problems: list[dict[str, Any]] = []
    trees: dict[str, tuple[list[bytes], bytes]] = {}
    keys: dict[str, Ed25519PublicKey | None] = {}
    checked = 0
    for hl in witness.lines():
        head = hl.head
        if head is None:
            problems.append(_problem(hl.line, None, "head_format", f"line {hl.line}: {hl.error}"))
            continue
        checked += 1
        where = f"the head of {head.at} (line {hl.line}, size {head.size})"
        if public is not None and head.key_id != key_id_of(public):
            problems.append(
                _problem(hl.line, head, "wrong_key", f"{where} is signed by key {head.key_id[:16]}…, not by --key")
            )
            continue
        key = public if public is not None else _key_for(witness, head, keys)
        if key is None:
            problems.append(
                _problem(hl.line, head, "unknown_key", f"{where}: the witness keeps no key {head.key_id[:16]}…")
            )
            continue
        if not signature_ok(head, key):
            problems.append(
                _problem(hl.line, head, "signature", f"{where}: the signature does not check: a forged head")
            )
            continue
        if head.ticket_id not in trees:
            try:
                leaves = _bytes(ticket_leaves(ledger, head.ticket_id))
            except UsageError as exc:  # a signed head naming no possible ticket: report it, go on
                problems.append(_problem(hl.line, head, "head_format", f"{where}: {exc.message}"))
                continue
            trees[head.ticket_id] = (leaves, merkle.tree_hash(leaves))
        leaves, root = trees[head.ticket_id]
        n = len(leaves)
        if n < head.size:
            problems.append(
                _problem(
                    hl.line,
                    head,
                    "entries_removed",
                    f"ticket {head.ticket_id}: today's history has {n} entries, fewer than the {head.size} of "
                    f"{where}: entries were removed (the newest ones included)",
                )
            )
            continue
        proof = merkle.consistency_proof(head.size, leaves)
        if not merkle.verify_consistency(head.size, n, bytes.fromhex(head.root), root, proof):
            problems.append(
                _problem(
                    hl.line,
                    head,
                    "not_extended",
                    f"ticket {head.ticket_id}: today's history ({n} entries) does not extend {where}: an entry "
                    f"among its first {head.size} was removed, rewritten or put in its place",
                )
            )
    return {
        "ok": not problems,
        "witness": str(witness.path),
        "heads_checked": checked,
        "tickets": sorted(trees),
        "problems": problems,
    }


def _find(ledger: Services, ticket_id: str, leaves: Sequence[Leaf], ref: str) -> int:
    r = parse_ref(ref, field="REF")
    phase = ledger.pipelines.for_run(ticket_id, r.run_id).phase(r.phase).name
    kind = "checkpoint" if r.seq is None else "progress"
    for i, leaf in enumerate(leaves):
        if (leaf.kind, leaf.run_id, leaf.phase, leaf.attempt_number) == (kind, r.run_id, phase, r.attempt) and (
            r.seq is None or leaf.seq == r.seq
        ):
            return i
    raise NotFound(f"REF: {ref} is not an entry of ticket {ticket_id}'s history", field="REF", rule="not_found")


def prove(
    ledger: Services, ticket_id: str, ref: str, *, size: int | None = None, key: Ed25519PrivateKey | None = None
) -> dict[str, Any]:
    """An inclusion proof of the checkpoint (or progress event) ``ref`` in the ticket's tree.

    ``size``: prove it in the tree of the first ``size`` entries (an anchored head's size);
    ``key``: add a head of that tree signed with it.
    """
    ticket_id = validate_ticket_id(ticket_id)
    leaves = ticket_leaves(ledger, ticket_id)
    if size is not None:
        if not 1 <= size <= len(leaves):
            raise UsageError(f"--size: must be between 1 and {len(leaves)} (today's size)", field="--size", rule="size")
        leaves = leaves[:size]
    index = _find(ledger, ticket_id, leaves, ref)
    data = _bytes(leaves)
    root = merkle.tree_hash(data)
    head = sign_head(key, ticket_id, len(data), root, format_timestamp(ledger.clock())) if key else None
    return {
        "ticket_id": ticket_id,
        "entry": leaves[index].to_json(),
        "leaf_index": index,
        "tree_size": len(data),
        "root": root.hex(),
        "audit_path": [p.hex() for p in merkle.inclusion_proof(index, data)],
        "algorithm": "RFC 9162 2.1.3.2; leaf = bytes.fromhex(entry.hash); see docs/anchoring.md",
        "head": head.to_json() if head else None,
    }
