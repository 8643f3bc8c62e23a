"""Provable history, part 2 (issue 26): the seal order, prunes that keep proofs valid, store witnesses.

Every test runs on files, SQLite and PostgreSQL (all_stores); the store witnesses are files,
SQLite and PostgreSQL stores too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import IMPLEMENT, require_postgres
from helpers import Clock
from phaselog.ledger.facade import Ledger
from phaselog.ledger.leaves import SEAL_KIND, ticket_tree
from phaselog.ledger.proofs import anchor, prove, ticket_leaves, verify_against
from phaselog.ledger.witness import DirectoryWitness, StoreWitness, open_witness
from phaselog.model import merkle
from phaselog.model.heads import load_private_key, load_public_key, make_key_pair
from phaselog.stores.base import Store
from test_tamper_corpus import RUN, R, T, Tamper

pytestmark = pytest.mark.all_stores


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Any, Any]:
    (tmp_path / "keys").mkdir()
    private, public, _ = make_key_pair(tmp_path / "keys" / "anchor.key")
    return load_private_key(private), load_public_key(public.read_bytes(), source="pub")


def _rules(report: dict[str, Any]) -> list[str]:
    return [p["rule"] for p in report["problems"]]


def impl(n: int) -> dict[str, Any]:
    return {**IMPLEMENT, "branch_name": f"feat/attempt-{n}"}


def _attempts_with_events(led: Ledger, clock: Clock, n: int = 4) -> None:
    for i in range(1, n + 1):
        led.progress(T, R, "implement", "start")
        clock.tick(1)
        led.progress(T, R, "implement", "step", step=1)
        clock.tick(1)
        led.write(T, R, "implement", impl(i))
        clock.tick(1)


def test_a_write_stamped_before_anchored_entries_lands_after_them(
    led: Ledger, clock: Clock, tmp_path: Path, keys: Any
) -> None:
    """A lagging clock (or one microsecond for two writes) reorders only the unsealed tail (D320)."""
    witness = DirectoryWitness(tmp_path / "w")
    led.write(T, R, "implement", impl(1))
    clock.tick(10)
    led.write(T, R, "implement", impl(2))
    anchor(led, [T], witness, keys[0])
    clock.tick(-3600)  # the next writer's clock lags an hour
    led.write(T, R, "implement", impl(3))
    led.progress(T, R, "local_review", "start")
    assert verify_against(led, witness, keys[1])["ok"]
    tree = ticket_tree(led, T)
    assert [leaf.attempt_number for leaf in tree.leaves[:2]] == [1, 2]  # sealed first, then the tail
    assert [leaf.attempt_number for leaf in tree.leaves if leaf.kind == "checkpoint"] == [1, 2, 3]
    assert tree.sealed == 2
    anchor(led, [T], witness, keys[0])
    clock.tick(-3600)
    led.write(T, R, "local_review", None, status="failed", error="x")
    report = verify_against(led, witness, keys[1])
    assert report["ok"], report
    assert report["heads_checked"] == 2


def test_a_legitimate_keep_last_prune_passes_and_proofs_still_check(
    led: Ledger, clock: Clock, tmp_path: Path, keys: Any
) -> None:
    witness = DirectoryWitness(tmp_path / "w")
    _attempts_with_events(led, clock)
    (head,) = anchor(led, [T], witness, keys[0])
    report = led.prune(T, keep_last=1)
    assert report.to_json()["removed_count"] > 3  # records and their progress events
    assert led.verify(T).ok
    assert verify_against(led, witness, keys[1])["ok"]
    tree = ticket_tree(led, T)
    assert not tree.missing
    assert {leaf.kind for leaf in tree.leaves if leaf.pruned} == {"checkpoint", "progress"}
    # The kept record still proves against the head anchored before the prune.
    proof = prove(led, T, f"{R}:implement:4", size=head.size)
    assert proof["root"] == head.root
    path = [bytes.fromhex(p) for p in proof["audit_path"]]
    leaf = bytes.fromhex(proof["entry"]["hash"])
    assert merkle.verify_inclusion(proof["leaf_index"], head.size, leaf, path, bytes.fromhex(head.root))
    # Anchoring again (the prune note sealed too) and growing: still every head passes.
    anchor(led, [T], witness, keys[0])
    led.write(T, R, "implement", impl(9))
    anchor(led, [T], witness, keys[0])
    assert verify_against(led, witness, keys[1])["ok"]


def test_a_whole_run_pruned_passes_and_deleting_its_record_fails(
    led: Ledger, clock: Clock, tmp_path: Path, keys: Any
) -> None:
    witness = DirectoryWitness(tmp_path / "w")
    other = str(uuid.uuid4())
    led.write(T, other, "implement", impl(1))
    _attempts_with_events(led, clock, 2)
    anchor(led, [T], witness, keys[0])
    led.prune(T, run_id=other)
    assert other not in led.store.runs(T)
    assert verify_against(led, witness, keys[1])["ok"]
    anchor(led, [T], witness, keys[0])
    (record,) = [n for n, _, body in led.store.entries(SEAL_KIND, T, None) if b'"type":"run_pruned"' in bytes(body)]  # type: ignore[arg-type]
    Tamper(led.store).delete_entry(SEAL_KIND, T, None, record)
    assert _rules(verify_against(led, witness, keys[1])) == ["entries_removed", "entries_removed"]


def test_an_entry_deleted_outside_prune_fails_after_a_prune(
    led: Ledger, clock: Clock, tmp_path: Path, keys: Any
) -> None:
    witness = DirectoryWitness(tmp_path / "w")
    _attempts_with_events(led, clock)
    anchor(led, [T], witness, keys[0])
    led.prune(T, keep_last=2)
    newest = led.store.entry_names("progress", T, RUN)[-1]
    Tamper(led.store).delete_entry("progress", T, RUN, newest)  # kept by the prune, deleted by hand
    assert led.verify(T).ok  # the hash chain alone sees nothing
    report = verify_against(led, witness, keys[1])
    assert _rules(report) == ["not_extended"]
    assert "progress implement attempt 4" in report["problems"][0]["message"]
    assert "no prune accounting for it" in report["problems"][0]["message"]


def test_an_altered_prune_note_fails(led: Ledger, clock: Clock, store: Store, tmp_path: Path, keys: Any) -> None:
    witness = DirectoryWitness(tmp_path / "w")
    _attempts_with_events(led, clock)
    anchor(led, [T], witness, keys[0])
    led.prune(T, keep_last=2)
    assert verify_against(led, witness, keys[1])["ok"]
    (note,) = store.entry_names("pruned", T, RUN)
    # The note no longer lists attempt 1 (content hash recomputed, as a forger would).
    from phaselog.ledger.prune_notes import PruneNote

    (_, _, body) = store.entries("pruned", T, RUN)[0]
    assert isinstance(body, bytes)
    doc = json.loads(body)
    doc.pop("content_hash")
    forged = PruneNote.from_json(doc)
    forged = PruneNote(**{**forged.__dict__, "removed": forged.removed[1:]})
    Tamper(store).delete_entry("pruned", T, RUN, note)
    store.put_entry("pruned", T, RUN, note, forged.body())
    report = verify_against(led, witness, keys[1])
    assert _rules(report) == ["not_extended"]
    assert "implement attempt 1" in report["problems"][0]["message"]


def test_an_edited_seal_fails(led: Ledger, store: Store, tmp_path: Path, keys: Any) -> None:
    witness = DirectoryWitness(tmp_path / "w")
    for i in (1, 2, 3):
        led.write(T, R, "implement", impl(i))
    anchor(led, [T], witness, keys[0])
    (_, _, body) = store.entries(SEAL_KIND, T, None)[0]
    assert isinstance(body, bytes)
    doc = json.loads(body)
    doc["leaves"] = doc["leaves"][::-1]  # the same entries, another order
    Tamper(store).delete_entry(SEAL_KIND, T, None, "000001")
    store.put_entry(SEAL_KIND, T, None, "000001", json.dumps(doc).encode())
    assert _rules(verify_against(led, witness, keys[1])) == ["not_extended"]


@pytest.fixture(params=["file", "sqlite", "postgres"])
def witness_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "file":
        yield f"file://{tmp_path / 'witness-store'}"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'witness.db'}"
    else:
        import psycopg

        base = require_postgres()
        schema = f"w_{uuid.uuid4().hex[:16]}"
        yield f"{base}?schema={schema}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_another_store_is_a_witness(
    led: Ledger, clock: Clock, store: Store, witness_url: str, keys: Any, backend: str
) -> None:
    witness = open_witness(witness_url, field="--to")
    assert isinstance(witness, StoreWitness)
    try:
        _attempts_with_events(led, clock, 2)
        led.init_ticket("VID-9", title="t", pipeline="video-pipeline")
        anchor(led, [T, "VID-9"], witness, keys[0])
        led.write(T, R, "implement", impl(3))
        anchor(led, [T], witness, keys[0])
        report = verify_against(led, witness, None)  # the witness store keeps the key
        assert report["ok"], report
        assert report["heads_checked"] == 3
        assert report["witness"] == witness_url
        Tamper(store).delete_attempt(1, "implement", 3)
        report = verify_against(led, witness, keys[1])
        assert _rules(report) == ["entries_removed"]
        assert report["problems"][0]["line"] == 3
    finally:
        witness.close()


def test_the_cli_anchors_to_and_verifies_against_a_store_url(store: Store, tmp_path: Path) -> None:
    from helpers import cli_env, run_cli

    led = Ledger(store)
    led.write(T, R, "implement", impl(1))
    env = cli_env(tmp_path / "unused-root")
    key = tmp_path / "k.key"
    assert run_cli(None, "keys", "init", "--out", str(key), env=env).rc == 0
    to = f"sqlite:///{tmp_path / 'witness.db'}"
    done = run_cli(None, "anchor", "--store", store.url, "--ticket-id", T, "--to", to, "--key", str(key), env=env)
    assert done.rc == 0, done
    args = ("verify", "--store", store.url, "--against", to, "--key", f"{key}.pub")
    ok = run_cli(None, *args, env=env)
    assert ok.rc == 0, ok
    assert json.loads(ok.out)["heads_checked"] == 1
    Tamper(store).delete_attempt(1, "implement", 1)
    bad = run_cli(None, *args, env=env)
    assert bad.rc == 1
    assert json.loads(bad.out)["problems"][0]["rule"] == "entries_removed"
    missing = run_cli(None, "verify", "--store", store.url, "--against", f"sqlite:///{tmp_path / 'none.db'}", env=env)
    assert missing.rc == 2, missing
    assert "--against" in missing.out + missing.err


def test_the_seal_is_per_anchoring_and_leaves_keep_their_order(
    led: Ledger, clock: Clock, tmp_path: Path, keys: Any
) -> None:
    witness = DirectoryWitness(tmp_path / "w")
    led.write(T, R, "implement", impl(1))
    anchor(led, [T], witness, keys[0])
    anchor(led, [T], witness, keys[0])  # nothing new: no second seal
    assert led.store.entry_names(SEAL_KIND, T, None) == ["000001"]
    before = ticket_leaves(led, T)
    clock.tick(-86400)
    led.write(T, R, "implement", impl(2))
    assert ticket_leaves(led, T)[: len(before)] == before


def test_a_signed_head_that_does_not_extend_the_previous_one_is_reported(
    led: Ledger, store: Store, tmp_path: Path, keys: Any
) -> None:
    """Signed by the right key, but of another history of the same ticket (a forger holding the key
    and another store): the witness's heads must all be prefixes of today's tree."""
    from phaselog.model.heads import sign_head
    from phaselog.stores.files.store import FilesStore

    witness = DirectoryWitness(tmp_path / "w")
    led.write(T, R, "implement", impl(1))
    anchor(led, [T], witness, keys[0])
    elsewhere = FilesStore(tmp_path / "elsewhere")
    try:
        other = Ledger(elsewhere)
        other.write(T, R, "implement", impl(7))
        other.write(T, R, "implement", impl(8))
        anchor(other, [T], witness, keys[0])  # the same key, the same ticket, a history that is not ours
    finally:
        elsewhere.close()
    led.write(T, R, "implement", impl(2))
    (forged,) = [sign_head(keys[0], T, 1, bytes(32), "2026-01-01T00:00:00Z")]
    with witness.heads_file.open("a") as fh:
        fh.write(json.dumps(forged.to_json()) + "\n")
    report = verify_against(led, witness, keys[1])
    assert _rules(report) == ["not_extended", "not_extended"]
    assert [p["line"] for p in report["problems"]] == [2, 3]


def test_a_large_seal_is_split_into_entries_that_follow_each_other(
    led: Ledger, tmp_path: Path, keys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phaselog.ledger import leaves

    monkeypatch.setattr(leaves, "SEAL_CHUNK", 2)
    witness = DirectoryWitness(tmp_path / "w")
    for i in range(1, 6):
        led.write(T, R, "implement", impl(i))
    (head,) = anchor(led, [T], witness, keys[0])
    assert head.size == 5
    assert led.store.entry_names(SEAL_KIND, T, None) == ["000001", "000002", "000003"]
    led.write(T, R, "implement", impl(6))
    anchor(led, [T], witness, keys[0])
    tree = ticket_tree(led, T)
    assert (tree.sealed, tree.broken, tree.unsealed) == (6, [], [])
    assert verify_against(led, witness, keys[1])["ok"]


def test_any_interleaving_of_skewed_writes_anchorings_and_prunes_passes(tmp_path: Path) -> None:
    """The invariant (D320, D321): whatever the writers' clocks say and whenever anchoring and a
    legitimate prune happen, an untampered history passes every head anchored so far (files store:
    the order is decided above the stores, the other stores run the examples above)."""
    from hypothesis import given
    from hypothesis import strategies as st

    from phaselog.stores.files.store import FilesStore

    private, public, _ = make_key_pair(tmp_path / "anchor.key")
    key, pub = load_private_key(private), load_public_key(public.read_bytes(), source="pub")
    step = st.one_of(
        st.tuples(st.just("write"), st.integers(-7200, 7200)),
        st.tuples(st.just("event"), st.integers(-7200, 7200)),
        st.tuples(st.just("anchor"), st.just(0)),
        st.tuples(st.just("prune"), st.integers(1, 2)),
    )
    counter = iter(range(10**6))

    @given(st.lists(step, min_size=1, max_size=12))
    def check(steps: list[tuple[str, int]]) -> None:
        n = next(counter)
        store = FilesStore(tmp_path / f"s{n}")
        try:
            clock = Clock()
            led = Ledger(store, clock=clock)
            witness = DirectoryWitness(tmp_path / f"w{n}")
            anchored = flying = False
            attempts = 0
            for what, arg in steps:
                clock.tick(1)
                if what == "write":
                    clock.tick(arg)  # a writer whose clock is ahead or behind by up to two hours
                    attempts += 1
                    led.write(T, R, "implement", impl(attempts))
                    clock.tick(-arg)
                    flying = False
                elif what == "event":
                    clock.tick(arg)
                    led.progress(T, R, "implement", "step" if flying else "start", step=1)
                    clock.tick(-arg)
                    flying = True
                elif what == "anchor" and attempts:
                    anchor(led, [T], witness, key)
                    anchored = True
                elif what == "prune" and attempts:
                    led.prune(T, keep_last=arg)
            if anchored:
                report = verify_against(led, witness, pub)
                assert report["ok"], report
        finally:
            store.close()

    check()


def test_a_copy_keeps_the_seals_so_heads_of_the_source_pass_on_it(
    led: Ledger, clock: Clock, store: Store, tmp_path: Path, keys: Any
) -> None:
    """D324: export carries the seals; on the copy the order and the pruned leaves are the source's."""
    from phaselog.stores.sql.sqlite import SqliteStore
    from phaselog.transfer.jsonl import export_records, import_records

    witness = DirectoryWitness(tmp_path / "w")
    _attempts_with_events(led, clock)
    anchor(led, [T], witness, keys[0])
    clock.tick(-7200)  # a lagging writer: history order and seal order now differ
    led.write(T, R, "implement", impl(5))
    led.prune(T, keep_last=2)
    anchor(led, [T], witness, keys[0])
    assert verify_against(led, witness, keys[1])["ok"]
    target = SqliteStore(tmp_path / "copy.db")
    try:
        copy = Ledger(target)
        rep = import_records(target, export_records(store), pipelines_root=getattr(store, "root", None))
        assert rep.conflicts == []
        assert target.entry_names(SEAL_KIND, T, None) == store.entry_names(SEAL_KIND, T, None)
        report = verify_against(copy, witness, keys[1])
        assert report["ok"], report
        again = import_records(target, export_records(store), pipelines_root=getattr(store, "root", None))
        assert (again.added, again.conflicts) == (0, [])
        # A target anchored on its own keeps its seals; the source's are refused, named.
        other = SqliteStore(tmp_path / "other.db")
        try:
            mine = Ledger(other)
            mine.write(T, R, "implement", impl(1))
            anchor(mine, [T], DirectoryWitness(tmp_path / "w2"), keys[0])
            refused = import_records(other, export_records(store), pipelines_root=getattr(store, "root", None))
            assert any("seal" in c["message"] for c in refused.conflicts)
        finally:
            other.close()
    finally:
        target.close()
