"""Provable history (issue 26): anchored heads catch what `verify` cannot; inclusion proofs check offline."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from conftest import IMPLEMENT, LOCAL_REVIEW
from helpers import cli_env, run_cli
from phaselog.ledger.facade import Ledger
from phaselog.ledger.proofs import anchor, prove, ticket_leaves, tree_of, verify_against
from phaselog.ledger.witness import DirectoryWitness
from phaselog.model import merkle
from phaselog.model.heads import load_private_key, load_public_key, make_key_pair
from phaselog.stores.base import Store
from test_tamper_corpus import RUN, R, T, Tamper, V, ticket_history, video_history

pytestmark = pytest.mark.all_stores


@pytest.fixture
def key_files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "keys").mkdir()
    private, public, _ = make_key_pair(tmp_path / "keys" / "anchor.key")
    return private, public


def _rules(report: dict[str, Any]) -> list[str]:
    return [p["rule"] for p in report["problems"]]


def _gated_and_rejected(ledger: Ledger) -> None:
    ledger.init_ticket(V, title="Launch video", pipeline="video-pipeline")
    ledger.write(V, R, "research", _video("research"))
    ledger.write(V, R, "proposal", _video("proposal"))
    ledger.reject(V, R, "proposal", by="ana", comment="too long")


def _video(phase: str) -> dict[str, Any]:
    from test_tamper_corpus import VIDEO_PAYLOADS

    return dict(VIDEO_PAYLOADS[phase])


def test_a_deleted_rejection_then_an_approval_by_someone_else_is_reported(
    store: Store, tmp_path: Path, key_files: tuple[Path, Path]
) -> None:
    ledger = Ledger(store)  # the real clock: the forger approves after the anchoring
    _gated_and_rejected(ledger)
    witness = DirectoryWitness(tmp_path / "witness")
    key = load_private_key(key_files[0])
    public = load_public_key(key_files[1].read_bytes(), source="pub")
    anchor(ledger, [V], witness, key)
    assert verify_against(ledger, witness, public)["ok"]

    Tamper(store).delete_entry("approvals", V, RUN, store.entry_names("approvals", V, RUN)[-1])
    ledger.approve(V, R, "proposal", by="mallory")
    assert ledger.verify(V).ok  # the hash chain alone sees nothing (docs/guarantees.md)
    report = verify_against(ledger, witness, public)
    assert not report["ok"]
    (problem,) = report["problems"]
    assert problem["ticket_id"] == V
    assert problem["rule"] == "not_extended"
    assert problem["head"]["size"] == 4
    assert problem["line"] == 1
    assert V in problem["message"]


def test_deleting_the_newest_checkpoint_is_reported(store: Store, tmp_path: Path, key_files: tuple[Path, Path]) -> None:
    ledger = Ledger(store)
    ticket_history(ledger)
    witness = DirectoryWitness(tmp_path / "witness")
    key = load_private_key(key_files[0])
    anchor(ledger, [T], witness, key)
    Tamper(store).delete_attempt(2, "local_review", 2)
    assert ledger.verify(T).ok
    report = verify_against(ledger, witness, None)  # the witness's own copy of the key
    assert _rules(report) == ["entries_removed"]
    assert report["problems"][0]["ticket_id"] == T


def test_a_newest_entry_replaced_by_one_of_the_same_count_is_reported(
    store: Store, tmp_path: Path, key_files: tuple[Path, Path]
) -> None:
    ledger = Ledger(store)
    ticket_history(ledger)
    witness = DirectoryWitness(tmp_path / "witness")
    anchor(ledger, [T], witness, load_private_key(key_files[0]))
    Tamper(store).delete_attempt(2, "local_review", 2)
    ledger.write(T, R, "local_review", {**LOCAL_REVIEW, "iteration_count": 7}, attempt=2)
    assert ledger.verify(T).ok
    assert _rules(verify_against(ledger, witness, None)) == ["not_extended"]


def test_an_untouched_history_that_grew_passes_every_head(
    store: Store, tmp_path: Path, key_files: tuple[Path, Path]
) -> None:
    ledger = Ledger(store)
    witness = DirectoryWitness(tmp_path / "witness")
    key = load_private_key(key_files[0])
    public = load_public_key(key_files[1].read_bytes(), source="pub")
    ledger.write(T, R, "implement", IMPLEMENT)
    anchor(ledger, [T], witness, key)
    ledger.progress(T, R, "local_review", "start")
    ledger.write(T, R, "local_review", None, status="failed", error="tests failed")
    anchor(ledger, [T], witness, key)
    _gated_and_rejected(ledger)
    anchor(ledger, [T, V], witness, key)
    report = verify_against(ledger, witness, public)
    assert report["ok"], report
    assert report["heads_checked"] == 4
    assert report["tickets"] == sorted([T, V])
    kinds = [leaf.kind for leaf in ticket_leaves(ledger, T)]
    assert kinds.count("checkpoint") == 2
    assert "progress" in kinds


def test_forged_heads_are_reported(store: Store, tmp_path: Path, key_files: tuple[Path, Path]) -> None:
    ledger = Ledger(store)
    ledger.write(T, R, "implement", IMPLEMENT)
    witness = DirectoryWitness(tmp_path / "witness")
    key = load_private_key(key_files[0])
    public = load_public_key(key_files[1].read_bytes(), source="pub")
    (head,) = anchor(ledger, [T], witness, key)
    # A head whose size was edited (its signature no longer covers it) ...
    edited = {**head.to_json(), "size": head.size + 1}
    # ... one signed by another key (also kept in the witness, as a forger would) ...
    other_private, _, _ = make_key_pair(tmp_path / "keys" / "other.key")
    (other,) = anchor(ledger, [T], DirectoryWitness(tmp_path / "elsewhere"), load_private_key(other_private))
    with witness.heads_file.open("a") as fh:
        fh.write(json.dumps(edited) + "\n")
        fh.write(json.dumps(other.to_json()) + "\n")
        fh.write('{"torn": ')
    report = verify_against(ledger, witness, public)
    assert _rules(report) == ["signature", "wrong_key", "head_format"]
    assert [p["line"] for p in report["problems"]] == [2, 3, 4]
    # Without --key the other key is unknown to the witness (it was kept elsewhere).
    assert _rules(verify_against(ledger, witness, None)) == ["signature", "unknown_key", "head_format"]


def test_inclusion_proofs_verify_standalone_and_fail_for_an_altered_record(
    store: Store, tmp_path: Path, key_files: tuple[Path, Path]
) -> None:
    ledger = Ledger(store)
    recs = ticket_history(ledger)
    proof = prove(ledger, T, f"{R}:implement:2", key=load_private_key(key_files[0]))
    assert proof["entry"]["hash"] == recs["implement2"].content_hash
    leaf, path = bytes.fromhex(proof["entry"]["hash"]), [bytes.fromhex(p) for p in proof["audit_path"]]
    root = bytes.fromhex(proof["head"]["root"])
    assert proof["head"]["size"] == proof["tree_size"] == len(ticket_leaves(ledger, T))
    assert merkle.verify_inclusion(proof["leaf_index"], proof["tree_size"], leaf, path, root)
    # The record altered (its hash recomputed, as a forger would): its leaf is no longer the proven one.
    h = recs["implement2"].content_hash
    altered = ("1" if h[0] == "0" else "0") + h[1:]
    assert altered != proof["entry"]["hash"]
    assert not merkle.verify_inclusion(proof["leaf_index"], proof["tree_size"], bytes.fromhex(altered), path, root)
    # A proof in the tree of an older anchored head: --size.
    witness = DirectoryWitness(tmp_path / "witness")
    (head,) = anchor(ledger, [T], witness, load_private_key(key_files[0]))
    ledger.write(T, R, "implement", IMPLEMENT)
    old = prove(ledger, T, f"{R}:implement:1", size=head.size)
    assert old["root"] == head.root
    assert merkle.verify_inclusion(
        old["leaf_index"],
        head.size,
        bytes.fromhex(old["entry"]["hash"]),
        [bytes.fromhex(p) for p in old["audit_path"]],
        bytes.fromhex(head.root),
    )
    assert tree_of(ticket_leaves(ledger, T))[0] == head.size + 1


def test_the_leaf_order_is_the_same_on_every_read_and_after_a_copy(store: Store, tmp_path: Path) -> None:
    from phaselog.stores.files.store import FilesStore
    from phaselog.transfer.jsonl import export_records, import_records

    ledger = Ledger(store)
    video_history(ledger)
    first = ticket_leaves(ledger, V)
    assert first == ticket_leaves(Ledger(store), V)
    kinds = {leaf.kind for leaf in first}
    assert kinds == {"marker", "checkpoint", "approval"}
    target = FilesStore(tmp_path / "copy")
    try:
        import_records(target, export_records(store), pipelines_root=getattr(store, "root", None))
        assert tree_of(ticket_leaves(Ledger(target), V)) == tree_of(first)
    finally:
        target.close()


def test_the_cli_keys_anchor_verify_against_and_prove(store: Store, tmp_path: Path) -> None:
    ledger = Ledger(store)
    _gated_and_rejected(ledger)
    url = store.url
    env = cli_env(tmp_path / "unused-root")
    key = tmp_path / "k" / "anchor.key"
    key.parent.mkdir()
    made = run_cli(None, "keys", "init", "--out", str(key), env=env)
    assert made.rc == 0, made
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert run_cli(None, "keys", "init", "--out", str(key), env=env).rc == 2  # never overwritten
    wdir = str(tmp_path / "w")
    anchored = run_cli(None, "anchor", "--all", "--to", wdir, "--key", str(key), "--store", url, env=env)
    assert anchored.rc == 0, anchored
    ok = run_cli(None, "verify", "--against", wdir, "--key", f"{key}.pub", "--store", url, env=env)
    assert ok.rc == 0, ok
    assert json.loads(ok.out)["ok"]
    proof = run_cli(None, "prove", "--ticket-id", V, f"{R}:proposal:1", "--store", url, env=env)
    assert proof.rc == 0, proof
    assert json.loads(proof.out)["tree_size"] == 4
    Tamper(store).delete_entry("approvals", V, RUN, store.entry_names("approvals", V, RUN)[-1])
    ledger.approve(V, R, "proposal", by="mallory")
    bad = run_cli(None, "verify", "--against", wdir, "--key", f"{key}.pub", "--store", url, env=env)
    assert bad.rc == 1, bad
    doc = json.loads(bad.out)
    assert doc["error_code"] == "corrupt"
    assert doc["problems"][0]["ticket_id"] == V
    assert run_cli(None, "anchor", "--to", wdir, "--key", str(key), "--store", url, env=env).rc == 2
    assert run_cli(None, "verify", "--store", url, env=env).rc == 2


def test_help_and_read_do_not_load_cryptography(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from phaselog.cli import _main\n"
        "for argv in (['--help'], ['read', '--ticket-id', 'X-1', '--run-id', 'r', '--phase', 'implement']):\n"
        "    try:\n"
        "        _main._main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('cryptography', 'phaselog.ledger.proofs'))))\n"
    )
    import subprocess
    import sys

    env = cli_env(tmp_path / "store")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=False, timeout=60)
    assert out.stdout.decode().strip().splitlines()[-1] == "[]", out


def test_deleting_the_newest_progress_event_is_reported(
    store: Store, tmp_path: Path, key_files: tuple[Path, Path]
) -> None:
    ledger = Ledger(store)
    ledger.write(T, R, "implement", IMPLEMENT)
    ledger.progress(T, R, "local_review", "start")
    ledger.progress(T, R, "local_review", "step", step=1)
    witness = DirectoryWitness(tmp_path / "witness")
    anchor(ledger, [T], witness, load_private_key(key_files[0]))
    Tamper(store).delete_entry("progress", T, RUN, store.entry_names("progress", T, RUN)[-1])
    assert ledger.verify(T).ok  # nothing names the newest event
    assert _rules(verify_against(ledger, witness, None)) == ["entries_removed"]


def test_a_chain_rewritten_with_recomputed_hashes_is_reported(
    store: Store, tmp_path: Path, key_files: tuple[Path, Path]
) -> None:
    ledger = Ledger(store)
    recs = ticket_history(ledger)
    witness = DirectoryWitness(tmp_path / "witness")
    anchor(ledger, [T], witness, load_private_key(key_files[0]))
    # The newest attempt rewritten consistently: new content, its own hash recomputed.
    forged = recs["review2"].evolve(phase_payload={**LOCAL_REVIEW, "phase": "local_review", "iteration_count": 42})
    assert forged.content_hash != recs["review2"].content_hash
    Tamper(store).forge_checkpoint(forged)
    assert ledger.verify(T).ok, ledger.verify(T).problems
    assert _rules(verify_against(ledger, witness, None)) == ["not_extended"]


def test_a_signed_head_naming_an_impossible_ticket_is_reported_not_raised(
    store: Store, tmp_path: Path, key_files: tuple[Path, Path]
) -> None:
    from phaselog.model.heads import sign_head

    ledger = Ledger(store)
    witness = DirectoryWitness(tmp_path / "witness")
    key = load_private_key(key_files[0])
    anchor(ledger, [], witness, key)  # keeps the key, writes no head
    witness.append([sign_head(key, "../../etc", 1, b"\x00" * 32, "2026-12-03T00:00:00Z")])
    report = verify_against(ledger, witness, None)
    assert _rules(report) == ["head_format"]
    assert report["problems"][0]["ticket_id"] == "../../etc"


def test_anchorings_racing_in_processes_never_interleave_their_lines(
    tmp_path: Path, key_files: tuple[Path, Path]
) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from phaselog.ledger.witness import DirectoryWitness\n"
        "from phaselog.model.heads import load_private_key, sign_head\n"
        "key = load_private_key(sys.argv[1])\n"
        "heads = [sign_head(key, f'RACE-{sys.argv[2]}', i, bytes(32), '2026-12-03T00:00:00Z') for i in range(200)]\n"
        "for i in range(0, 200, 20):\n"
        "    DirectoryWitness(sys.argv[3]).append(heads[i:i + 20])\n"
    )
    wdir = tmp_path / "witness"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(key_files[0]), str(n), str(wdir)], env=cli_env())
        for n in range(6)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    lines = list(DirectoryWitness(wdir).lines())
    assert len(lines) == 1200
    assert all(hl.head is not None for hl in lines), [hl.error for hl in lines if hl.head is None][:3]
    # Each process's batches of 20 stay whole and in order.
    by_ticket: dict[str, list[int]] = {}
    for hl in lines:
        assert hl.head is not None
        by_ticket.setdefault(hl.head.ticket_id, []).append(hl.head.size)
    assert all(sizes == list(range(200)) for sizes in by_ticket.values())


def test_a_witness_that_is_a_git_repository_gets_a_commit_per_anchoring(
    tmp_path: Path, key_files: tuple[Path, Path]
) -> None:
    import subprocess

    from phaselog.stores.files.store import FilesStore

    store = FilesStore(tmp_path / "store")
    try:
        ledger = Ledger(store)
        ledger.write(T, R, "implement", IMPLEMENT)
        wdir = tmp_path / "witness"
        subprocess.run(["git", "init", "-q", str(wdir)], check=True)
        witness = DirectoryWitness(wdir)
        key = load_private_key(key_files[0])
        anchor(ledger, [T], witness, key)
        ledger.write(T, R, "local_review", LOCAL_REVIEW)
        anchor(ledger, [T], witness, key)
        log = subprocess.run(["git", "-C", str(wdir), "log", "--format=%s"], capture_output=True, check=True, text=True)
        assert log.stdout.splitlines() == ["phaselog anchor: 1 head(s)"] * 2
        tracked = subprocess.run(["git", "-C", str(wdir), "ls-files"], capture_output=True, check=True, text=True)
        assert "heads.jsonl" in tracked.stdout.split()
        assert verify_against(ledger, witness, None)["heads_checked"] == 2
    finally:
        store.close()


def test_an_unwritable_witness_is_a_store_error_naming_to(tmp_path: Path, key_files: tuple[Path, Path]) -> None:
    from phaselog.model.errors import StoreError
    from phaselog.model.heads import sign_head

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    head = sign_head(load_private_key(key_files[0]), T, 0, bytes(32), "2026-12-03T00:00:00Z")
    with pytest.raises(StoreError) as err:
        DirectoryWitness(blocker / "witness").append([head])  # even root cannot make a directory in a file
    assert err.value.context["field"] == "--to"
    assert "a-file" in err.value.message


def test_the_new_commands_have_table_views(tmp_path: Path) -> None:
    root = tmp_path / "store"
    from phaselog.stores.files.store import FilesStore

    ledger = Ledger(FilesStore(root))
    ledger.write(T, R, "implement", IMPLEMENT)
    env = cli_env(root)
    key = tmp_path / "t.key"
    made = run_cli(None, "keys", "init", "--out", str(key), "--format", "table", env=env)
    assert made.rc == 0, made
    assert "key_id" in made.out
    anchored = run_cli(
        None, "anchor", "--all", "--to", str(tmp_path / "w"), "--key", str(key), "--format", "table", env=env
    )
    assert anchored.rc == 0, anchored
    assert "anchored 1 head(s)" in anchored.out
    assert T in anchored.out
    proved = run_cli(None, "prove", "--ticket-id", T, f"{R}:implement:1", "--format", "table", env=env)
    assert proved.rc == 0, proved
    assert "checkpoint" in proved.out
    checked = run_cli(None, "verify", "--against", str(tmp_path / "w"), "--format", "table", env=env)
    assert checked.rc == 0, checked
    assert "checked 1 head(s): ok" in checked.out
