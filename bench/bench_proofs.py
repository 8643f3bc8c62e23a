"""[proofs] Provable history (docs/anchoring.md): anchoring and `verify --against` of one ticket vs reading it.

A ticket of N entries (checkpoints in 50 runs) on SQLite. Anchoring and verifying read every entry
of the ticket (as ``history`` does) and its seals (the leaf order, D320), and hash them into an
RFC 9162 tree; the baseline is that read (``Ledger.history``), so the ratios say what the seals, the
tree, the signature and the proof add. The first anchoring seals all N leaves (one ``tree`` entry):
its time is a note; later rounds seal nothing new. ``verify --against`` is timed against a directory
witness and against another store (SQLite) as the witness (D322). A write pays nothing for the
tree (it is derived, D272; the order is sealed when anchoring, D320); the last ratio says what
keeping it on every write would cost: a write plus one ``MerkleBuilder.append`` against a write.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench import _data
from bench._timing import BASELINE, SUBJECT, Contestant, Section, run_interleaved
from phaselog.ledger.facade import Ledger
from phaselog.ledger.proofs import anchor, verify_against
from phaselog.ledger.witness import DirectoryWitness, StoreWitness
from phaselog.model.heads import load_private_key, make_key_pair
from phaselog.model.merkle import MerkleBuilder
from phaselog.stores import open_store

TICKET = "BENCH-PROOFS"
RUNS = 50
WRITE_BATCH = 20


def run(workdir: Path, *, rounds: int, entries: int, progress: Any = None) -> Section:
    """Time anchor and verify --against of one ticket of ``entries`` checkpoints against reading it."""
    section = Section(
        "proofs",
        f"[proofs] one ticket of {entries} checkpoints on SQLite: anchor, verify --against vs reading its history",
        [f"{rounds} rounds, interleaved; the witness holds one head per anchoring round (verify checks the first)"],
    )
    store = open_store(f"sqlite:///{workdir / 'proofs.db'}")
    ledger = Ledger(store)
    with _data.no_fsync():
        for i in range(entries):
            _data.write_phase(ledger, TICKET, f"r{i % RUNS}", "implement")
    key_path, _, _ = make_key_pair(workdir / "proofs-anchor.key")
    key = load_private_key(key_path)
    witness = DirectoryWitness(workdir / "proofs-witness")
    check = DirectoryWitness(workdir / "proofs-witness-one")
    started = time.perf_counter()
    anchor(ledger, [TICKET], check, key)  # the first anchoring: it seals every leaf
    first = time.perf_counter() - started
    section.notes.append(f"the first anchoring (sealing all {entries} leaves): {first:.2f} s, once")
    in_store = StoreWitness(f"sqlite:///{workdir / 'proofs-witness.db'}", field="--to")
    anchor(ledger, [TICKET], in_store, key)
    builder = MerkleBuilder()
    n = 0

    def one_write() -> object:
        nonlocal n
        n += 1
        return _data.write_phase(ledger, "BENCH-PROOFS-W", f"w{n % RUNS}", "implement")

    # A round times a batch of writes, so a single write's jitter (a 3 ms fsync) does not swamp a
    # 2 µs append in the per-round ratio.
    def write(_: object) -> None:
        for _ in range(WRITE_BATCH):
            one_write()

    def write_and_append(_: object) -> None:
        for _ in range(WRITE_BATCH):
            builder.append(bytes.fromhex(one_write().record.content_hash))  # type: ignore[attr-defined]

    contestants = [
        Contestant("history", f"history of the ticket ({entries} entries)", BASELINE, lambda _: ledger.history(TICKET)),
        Contestant(
            "anchor", "anchor: read, tree, sign, append", SUBJECT, lambda _: anchor(ledger, [TICKET], witness, key)
        ),
        Contestant("verify", "verify --against: one head", SUBJECT, lambda _: verify_against(ledger, check, None)),
        Contestant(
            "verify_store",
            "verify --against a store witness: one head",
            SUBJECT,
            lambda _: verify_against(ledger, in_store, None),
        ),
    ]
    section.stats += run_interleaved(contestants, rounds, warmup=1, progress=progress)
    section.ratio("anchor", "history", note="the tree, the signature, the append")
    section.ratio("verify", "history", note="the tree, a signature check, a consistency proof")
    section.ratio("verify_store", "history", note="the same, the head read from a SQLite store")
    writes = [
        Contestant("write", f"{WRITE_BATCH} writes", BASELINE, write),
        Contestant("write_tree", f"{WRITE_BATCH} writes, each + MerkleBuilder.append", SUBJECT, write_and_append),
    ]
    section.stats += run_interleaved(writes, rounds * 8, warmup=2, progress=progress)
    section.ratio("write_tree", "write", goal=1.05, note="keeping the tree on every write (not done: D272)")
    in_store.close()
    store.close()
    return section
