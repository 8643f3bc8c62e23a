"""RFC 9162 Merkle trees: the tree hash, inclusion and consistency proofs, and their verifiers.

This module is standalone on purpose: it imports only the standard library (``hashlib``) and
nothing else of phaselog (tests/test_merkle.py checks it), so a third party can copy it, or
reimplement it from RFC 9162 (Certificate Transparency v2) §2.1 and docs/anchoring.md:

- leaf hash: ``SHA-256(0x00 || leaf)``; node hash: ``SHA-256(0x01 || left || right)``;
- ``MTH({}) = SHA-256()``; ``MTH({d0}) = leaf_hash(d0)``; for n > 1, with k the largest power of
  two smaller than n: ``MTH(D[n]) = node_hash(MTH(D[0:k]), MTH(D[k:n]))``;
- an inclusion proof of leaf m in a tree of n leaves is RFC 9162 §2.1.3.1 ``PATH(m, D[n])``,
  checked by the §2.1.3.2 algorithm (:func:`verify_inclusion`);
- a consistency proof from size m to size n is §2.1.4.1 ``PROOF(m, D[n])``, checked by the
  §2.1.4.2 algorithm (:func:`verify_consistency`).

Hashes are 32-byte ``bytes``; the verifiers return ``True`` or ``False`` and never raise on a
wrong proof (only on arguments of the wrong type).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = [
    "MerkleBuilder",
    "consistency_proof",
    "empty_root",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root_from_inclusion",
    "tree_hash",
    "verify_consistency",
    "verify_inclusion",
]


def leaf_hash(leaf: bytes) -> bytes:
    """``SHA-256(0x00 || leaf)``: the hash of one leaf (RFC 9162 §2.1.1)."""
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: the hash of an inner node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def empty_root() -> bytes:
    """The tree hash of no leaves: ``SHA-256()`` of the empty string."""
    return hashlib.sha256(b"").digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def _mth(hashes: Sequence[bytes]) -> bytes:
    """MTH over already leaf-hashed entries (iterative: level by level, odd nodes carried up)."""
    if not hashes:
        return empty_root()
    level = list(hashes)
    while len(level) > 1:
        # Pairing left to right and carrying an odd last node up unchanged gives RFC 9162's MTH:
        # the left subtree of every split is a perfect tree of 2^j leaves.
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def tree_hash(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]): the root of the tree over ``leaves`` (raw leaf data, hashed here)."""
    return _mth([leaf_hash(d) for d in leaves])


def _path(m: int, hashes: Sequence[bytes]) -> list[bytes]:
    n = len(hashes)
    if n <= 1:
        return []
    k = _split(n)
    if m < k:
        return [*_path(m, hashes[:k]), _mth(hashes[k:])]
    return [*_path(m - k, hashes[k:]), _mth(hashes[:k])]


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(index, D[n]) of RFC 9162 §2.1.3.1: the audit path of leaf ``index``, bottom up."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"index: must be 0 <= index < {len(leaves)} (the tree size), got {index}")
    return _path(index, [leaf_hash(d) for d in leaves])


def _subproof(m: int, hashes: Sequence[bytes], whole: bool) -> list[bytes]:
    n = len(hashes)
    if m == n:
        return [] if whole else [_mth(hashes)]
    k = _split(n)
    if m <= k:
        return [*_subproof(m, hashes[:k], whole), _mth(hashes[k:])]
    return [*_subproof(m - k, hashes[k:], False), _mth(hashes[:k])]


def consistency_proof(old_size: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(old_size, D[n]) of RFC 9162 §2.1.4.1: that the first ``old_size`` leaves are a prefix.

    Empty when ``old_size`` is 0 or n (nothing to prove).
    """
    n = len(leaves)
    if not 0 <= old_size <= n:
        raise ValueError(f"old_size: must be 0 <= old_size <= {n} (the tree size), got {old_size}")
    if old_size in (0, n):
        return []
    return _subproof(old_size, [leaf_hash(d) for d in leaves], True)


def root_from_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes | None:
    """The root that ``path`` proves for ``leaf`` at ``index`` of ``size``; None if the path cannot fit."""
    if not 0 <= index < size:
        return None
    fn, sn = index, size - 1
    r = leaf_hash(leaf)
    for p in path:
        if sn == 0:  # the path is longer than the tree is deep
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def verify_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2: is ``leaf`` the leaf ``index`` of the tree of ``size`` leaves with ``root``?

    ``leaf`` is the raw leaf data (phaselog: the 32 bytes of an entry's content hash), ``path``
    the audit path bottom up.
    """
    got = root_from_inclusion(index, size, leaf, path)
    return got is not None and got == root


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 §2.1.4.2: is the tree of ``old_size`` leaves (``old_root``) a prefix of the new one?

    Sizes equal: the proof must be empty and the roots equal. ``old_size`` 0: always consistent
    (the empty tree is a prefix of every tree), with an empty proof.
    """
    if not 0 <= old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is the first node of the path
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


class MerkleBuilder:
    """A tree grown one leaf at a time: appending costs O(log n) hashes, the root O(log n).

    It keeps the frontier: the roots of the perfect subtrees that make up the tree (one per set
    bit of n, largest first). Appending a leaf merges equal-sized subtrees as binary addition
    carries; the root folds the frontier right to left, which is RFC 9162's MTH.
    """

    def __init__(self) -> None:
        self._frontier: list[tuple[int, bytes]] = []  # (subtree size, subtree root), sizes decreasing
        self.size = 0

    def append(self, leaf: bytes) -> None:
        """Add one leaf (raw leaf data)."""
        size, h = 1, leaf_hash(leaf)
        while self._frontier and self._frontier[-1][0] == size:
            left_size, left = self._frontier.pop()
            size, h = left_size + size, node_hash(left, h)
        self._frontier.append((size, h))
        self.size += 1

    def root(self) -> bytes:
        """MTH of the leaves appended so far."""
        if not self._frontier:
            return empty_root()
        r = self._frontier[-1][1]
        for _, h in reversed(self._frontier[:-1]):
            r = node_hash(h, r)
        return r
