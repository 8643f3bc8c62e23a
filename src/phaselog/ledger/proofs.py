"""Provable history: signed heads over a ticket's Merkle tree, anchoring, proofs (issue 26).

A ticket's leaves and their order are :mod:`phaselog.ledger.leaves` (D271, D320): the sealed
leaves first, seal by seal, then the rest in the history's order; a pruned entry's leaf stays
as its hash when a prune accounts for it (D321). The tree is built with
:class:`phaselog.model.merkle.MerkleBuilder`.

``anchor`` seals each ticket's unsealed leaves, signs its head and appends it to a witness (a
directory, a git repository or another store: :mod:`phaselog.ledger.witness`); ``verify_against``
checks every head of a witness against today's tree (signature, then an RFC 9162 consistency
proof from the head's size to today's); ``prove`` gives an inclusion proof of one entry.
docs/anchoring.md has the formats and the threat model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from phaselog.ledger.diff import parse_ref
from phaselog.ledger.leaves import Leaf, Tree, seal, ticket_tree
from phaselog.ledger.witness import HeadLine
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
    from collections.abc import Iterator

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    from phaselog.ledger.services import Services

__all__ = ["Leaf", "Witness", "anchor", "prove", "ticket_leaves", "tree_of", "verify_against"]


class Witness(Protocol):
    """Where heads are kept: a directory (or git) witness, or another store (witness.py)."""

    @property
    def describe(self) -> str:
        """The witness as a report names it."""
        ...

    def append(self, heads: Iterable[Head]) -> int:
        """Append heads durably; how many."""
        ...

    def keep_key_safely(self, key_id: str, pem: bytes) -> None:
        """Keep a public key (once)."""
        ...

    def key_pem(self, key_id: str) -> bytes | None:
        """A kept public key, or None."""
        ...

    def lines(self) -> Iterator[HeadLine]:
        """Every head, in the order appended."""
        ...


def ticket_leaves(ledger: Services, ticket_id: str) -> list[Leaf]:
    """Every leaf of ``ticket_id``, in tree order (D320)."""
    return ticket_tree(ledger, ticket_id).leaves


def _bytes(leaves: Sequence[Leaf]) -> list[bytes]:
    return [bytes.fromhex(leaf.hash) for leaf in leaves]


def tree_of(leaves: Sequence[Leaf]) -> tuple[int, bytes]:
    """(size, root) of the tree over ``leaves``, built incrementally."""
    builder = merkle.MerkleBuilder()
    for b in _bytes(leaves):
        builder.append(b)
    return builder.size, builder.root()


def anchor(ledger: Services, ticket_ids: Iterable[str], witness: Witness, key: Ed25519PrivateKey) -> list[Head]:
    """Seal each ticket's new leaves, sign its head and append the heads to ``witness``; return them."""
    at = format_timestamp(ledger.clock())
    heads = []
    for ticket in map(validate_ticket_id, ticket_ids):
        size, root = tree_of(seal(ledger, ticket).leaves)
        heads.append(sign_head(key, ticket, size, root, at))
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


def _key_for(witness: Witness, head: Head, cache: dict[str, Ed25519PublicKey | None]) -> Ed25519PublicKey | None:
    if head.key_id not in cache:
        pem = witness.key_pem(head.key_id)
        try:
            cache[head.key_id] = None if pem is None else load_public_key(pem, source=f"key {head.key_id[:16]}")
        except UsageError:
            cache[head.key_id] = None
    return cache[head.key_id]


def _signed(
    hl: HeadLine, public: Ed25519PublicKey | None, witness: Witness, keys: dict[str, Ed25519PublicKey | None]
) -> dict[str, Any] | None:
    """The problem with a head's signature, or None when it checks."""
    head = hl.head
    assert head is not None
    where = f"the head of {head.at} (line {hl.line}, size {head.size})"
    if public is not None and head.key_id != key_id_of(public):
        return _problem(hl.line, head, "wrong_key", f"{where} is signed by key {head.key_id[:16]}…, not by --key")
    key = public if public is not None else _key_for(witness, head, keys)
    if key is None:
        return _problem(hl.line, head, "unknown_key", f"{where}: the witness keeps no key {head.key_id[:16]}…")
    if not signature_ok(head, key):
        return _problem(hl.line, head, "signature", f"{where}: the signature does not check: a forged head")
    return None


def _gone(tree: Tree) -> str:
    """What the seals name that the history lost, for a message."""
    said = ""
    if tree.missing:
        names = "; ".join(leaf.describe() for leaf in tree.missing[:3])
        more = f" and {len(tree.missing) - 3} more" if len(tree.missing) > 3 else ""
        said = f". Gone with no prune accounting for it: {names}{more}"
    if tree.broken:
        said += f". Seals ignored (edited or out of order): {'; '.join(tree.broken[:3])}"
    return said


def verify_against(ledger: Services, witness: Witness, public: Ed25519PublicKey | None) -> dict[str, Any]:
    """Check every head of ``witness`` against today's tree; the report's ``problems`` say what broke.

    With ``public`` every head must be signed by that key; without it, by the key the witness
    keeps under the head's ``key_id`` (trust in the witness's own keys: docs/anchoring.md).
    """
    problems: list[dict[str, Any]] = []
    trees: dict[str, tuple[Tree, list[bytes], bytes]] = {}
    keys: dict[str, Ed25519PublicKey | None] = {}
    checked = 0
    for hl in witness.lines():
        head = hl.head
        if head is None:
            problems.append(_problem(hl.line, None, "head_format", f"line {hl.line}: {hl.error}"))
            continue
        checked += 1
        if (bad := _signed(hl, public, witness, keys)) is not None:
            problems.append(bad)
            continue
        where = f"the head of {head.at} (line {hl.line}, size {head.size})"
        if head.ticket_id not in trees:
            try:
                tree = ticket_tree(ledger, head.ticket_id)
            except UsageError as exc:  # a signed head naming no possible ticket: report it, go on
                problems.append(_problem(hl.line, head, "head_format", f"{where}: {exc.message}"))
                continue
            leaves = _bytes(tree.leaves)
            trees[head.ticket_id] = (tree, leaves, merkle.tree_hash(leaves))
        tree, leaves, root = trees[head.ticket_id]
        n = len(leaves)
        if n < head.size:
            problems.append(
                _problem(
                    hl.line,
                    head,
                    "entries_removed",
                    f"ticket {head.ticket_id}: today's history has {n} entries, fewer than the {head.size} of "
                    f"{where}: entries were removed (the newest ones included){_gone(tree)}",
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
                    f"among its first {head.size} was removed, rewritten or put in its place{_gone(tree)}",
                )
            )
    return {
        "ok": not problems,
        "witness": witness.describe,
        "heads_checked": checked,
        "tickets": sorted(trees),
        "problems": problems,
    }


def _find(ledger: Services, ticket_id: str, leaves: Sequence[Leaf], ref: str) -> int:
    r = parse_ref(ref, field="REF")
    phase = ledger.pipelines.for_run(ticket_id, r.run_id).phase(r.phase).name
    kind = "checkpoint" if r.seq is None else "progress"
    for i, leaf in enumerate(leaves):
        if (
            not leaf.pruned
            and (leaf.kind, leaf.run_id, leaf.phase, leaf.attempt_number) == (kind, r.run_id, phase, r.attempt)
            and (r.seq is None or leaf.seq == r.seq)
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
