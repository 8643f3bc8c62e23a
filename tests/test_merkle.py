"""RFC 9162 Merkle trees (phaselog.model.merkle): known answers, proofs that verify, and tampering that does not."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st

from phaselog.model import merkle
from phaselog.model.merkle import (
    MerkleBuilder,
    consistency_proof,
    inclusion_proof,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)

SRC = Path(merkle.__file__)


def leaves_of(n: int) -> list[bytes]:
    return [hashlib.sha256(str(i).encode()).digest() for i in range(n)]


def _reference_mth(leaves: list[bytes]) -> bytes:
    # RFC 9162 §2.1.1 written out recursively, to compare the iterative one with.
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _reference_mth(leaves[:k]) + _reference_mth(leaves[k:])).digest()


def test_the_verifier_module_imports_only_the_standard_library() -> None:
    tree = ast.parse(SRC.read_text("utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported == {"__future__", "hashlib", "collections"}, imported


def test_known_answers_from_the_certificate_transparency_test_vectors() -> None:
    # The 8-leaf tree of the CT reference implementations (RFC 6962 test data, same hashing as 9162).
    data = [
        bytes.fromhex(h)
        for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")
    ]
    roots = {
        1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        4: "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        5: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        6: "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    }
    for n, want in roots.items():
        assert tree_hash(data[:n]).hex() == want
    assert tree_hash([]).hex() == hashlib.sha256(b"").hexdigest()


@given(st.integers(min_value=0, max_value=70))
def test_the_tree_hash_is_rfc_9162s_and_the_builder_gives_the_same_root(n: int) -> None:
    leaves = leaves_of(n)
    b = MerkleBuilder()
    for i, leaf in enumerate(leaves):
        b.append(leaf)
        assert b.root() == tree_hash(leaves[: i + 1])
    assert b.size == n
    assert b.root() == _reference_mth(leaves) == tree_hash(leaves)


@given(st.data())
def test_inclusion_proofs_verify_and_tampering_does_not(data: st.DataObject) -> None:
    n = data.draw(st.integers(min_value=1, max_value=70), label="n")
    i = data.draw(st.integers(min_value=0, max_value=n - 1), label="i")
    leaves = leaves_of(n)
    root = tree_hash(leaves)
    path = inclusion_proof(i, leaves)
    assert verify_inclusion(i, n, leaves[i], path, root)
    altered = bytes([leaves[i][0] ^ 1]) + leaves[i][1:]
    assert not verify_inclusion(i, n, altered, path, root)  # an altered leaf
    # (The size alone is not bound by the path of a left-edge leaf: the signed head binds it.)
    if n > 1:
        j = (i + 1) % n
        assert not verify_inclusion(j, n, leaves[i], path, root)  # the wrong place
        assert not verify_inclusion(i, n, leaves[i], path[:-1], root)  # a truncated path
        if i < n - 1:  # the head of a shorter history: its size and root
            assert not verify_inclusion(i, n - 1, leaves[i], path, tree_hash(leaves[: n - 1]))
        swapped = list(leaves)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        assume(swapped[i] != leaves[i])
        assert not verify_inclusion(i, n, leaves[i], path, tree_hash(swapped))  # swapped leaves
    assert not verify_inclusion(i, n, leaves[i], [*path, root], root)  # a path too long


@given(st.data())
def test_consistency_proofs_verify_and_a_rewritten_or_truncated_history_does_not(data: st.DataObject) -> None:
    n = data.draw(st.integers(min_value=0, max_value=70), label="n")
    m = data.draw(st.integers(min_value=0, max_value=n), label="m")
    leaves = leaves_of(n)
    old, new = tree_hash(leaves[:m]), tree_hash(leaves)
    proof = consistency_proof(m, leaves)
    assert verify_consistency(m, n, old, new, proof)
    if m == 0:
        return
    # Any of the old leaves altered: today's tree no longer extends the old head.
    k = data.draw(st.integers(min_value=0, max_value=m - 1), label="k")
    altered = list(leaves)
    altered[k] = hashlib.sha256(b"forged" + altered[k]).digest()
    assert not verify_consistency(m, n, old, tree_hash(altered), consistency_proof(m, altered))
    # One of the old leaves removed (the newest included): the history is shorter than, or differs from, the head.
    removed = leaves[:k] + leaves[k + 1 :]
    if len(removed) >= m:
        assert not verify_consistency(m, len(removed), old, tree_hash(removed), consistency_proof(m, removed))
    # Two leaves swapped.
    if m > 1:
        j = data.draw(st.integers(min_value=0, max_value=n - 1).filter(lambda x: x != k), label="j")
        swapped = list(leaves)
        swapped[k], swapped[j] = swapped[j], swapped[k]
        assert not verify_consistency(m, n, old, tree_hash(swapped), consistency_proof(m, swapped))
    # A wrong old size, and a proof cut short.
    if m < n:
        assert not verify_consistency(m + 1, n, old, new, proof)
        assert not verify_consistency(m, n, old, new, proof[:-1])
    if m > 1:
        assert not verify_consistency(m - 1, n, old, new, proof)


def test_bad_arguments_are_refused_by_the_generators() -> None:
    import pytest

    with pytest.raises(ValueError, match="index"):
        inclusion_proof(3, leaves_of(3))
    with pytest.raises(ValueError, match="old_size"):
        consistency_proof(4, leaves_of(3))
