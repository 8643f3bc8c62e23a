"""Contained (invariant 5) for the files store: identifiers, paths, symlinks, YAML, sizes.

Each hostile input is checked for two things: the typed error, and that nothing was created,
read or executed where it should not be (the whole tmp_path tree is compared before/after).
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW
from phaselog import (
    Checkpoint,
    Corrupt,
    InvalidIdentifier,
    InvalidRecord,
    StoreError,
    TooLarge,
)
from phaselog.ledger.facade import Ledger
from phaselog.stores.files.store import FilesStore

T = "SEC-1"
RUN = "sec-run"
RUN_UUID = phaselog.normalize_run_id(RUN)
BAD_TICKETS = [
    "..",
    "../x",
    "a/b",
    "a\\b",
    "\x00",
    "a\x00b",
    ".hidden",
    "-rf",
    "A" * 65,
    "",
    ".",
    "/etc",
    "x/../..",
    "~root",
    "a b",
    "tab\tid",
]


def tree(base: Path) -> dict[str, bytes | str | None]:
    """Every path under ``base``: file bytes, symlink target, or None for a directory."""
    out: dict[str, bytes | str | None] = {}
    for p in sorted(base.rglob("*")):
        key = str(p.relative_to(base))
        if p.is_symlink():
            out[key] = os.readlink(p)
        elif p.is_dir():
            out[key] = None
        else:
            out[key] = p.read_bytes()
    return out


def run_dir(root: Path, run: str = RUN) -> Path:
    """A run's directory."""
    return root / "checkpoints" / T / phaselog.normalize_run_id(run)


def _checkpoint(ticket: str, run_id: str) -> Checkpoint:
    return Checkpoint(
        ticket_id=ticket,
        run_id=run_id,
        phase="implement",
        phase_ordinal=1,
        attempt_number=1,
        timestamp_utc=datetime(2026, 2, 9, 15, 4, 27, tzinfo=UTC),
        phase_payload={"phase": "implement", **IMPLEMENT},
    )


# -- identifiers ------------------------------------------------------------------------------
@pytest.mark.parametrize("ticket", BAD_TICKETS, ids=repr)
def test_hostile_ticket_ids_are_refused_before_any_path_exists(
    tmp_path: Path, root: Path, ledger: Ledger, store: FilesStore, ticket: str
) -> None:
    before = tree(tmp_path)
    calls = [
        lambda: ledger.write(ticket, RUN, "implement", IMPLEMENT),
        lambda: ledger.write(ticket, RUN, "implement", None, status="failed", error="x"),
        lambda: ledger.read(ticket, RUN, "implement"),
        lambda: ledger.list(ticket),
        lambda: ledger.status(ticket, RUN),
        lambda: ledger.verify(ticket),
        lambda: ledger.validate(ticket, RUN, "implement"),
        lambda: ledger.can_skip_to(ticket, RUN, "local_review"),
        lambda: ledger.run(ticket, RUN),
        lambda: store.append(_checkpoint(ticket, RUN_UUID), expected_latest=0),
        lambda: store.get(ticket, RUN_UUID, 1, "implement", 1),
        lambda: store.attempts(ticket, RUN_UUID),
        lambda: store.runs(ticket),
        lambda: list(store.iter_records(ticket)),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(InvalidIdentifier) as info:
            call()
        assert info.value.error_code == "invalid_id", i
    assert not root.exists()
    assert tree(tmp_path) == before


@pytest.mark.parametrize("ticket", ["..", "../x", "a/b"], ids=repr)
def test_hostile_ticket_ids_leave_an_existing_store_alone(tmp_path: Path, ledger: Ledger, ticket: str) -> None:
    ledger.write(T, RUN, "implement", IMPLEMENT)
    before = tree(tmp_path)
    with pytest.raises(InvalidIdentifier):
        ledger.write(ticket, RUN, "implement", IMPLEMENT)
    assert tree(tmp_path) == before


def test_a_hostile_run_id_becomes_a_uuid_inside_the_root(tmp_path: Path, root: Path, ledger: Ledger) -> None:
    # Run ids are not validated but normalised: any string maps to a UUID v5 directory name.
    result = ledger.write(T, "../../../escape", "implement", IMPLEMENT)
    uuid_dir = phaselog.normalize_run_id("../../../escape")
    assert result.location == f"{T}/{uuid_dir}/phase_1_implement_a1.yaml"
    outside = {p for p in tmp_path.rglob("*") if root not in p.parents and p != root}
    assert outside == set()
    assert (root / "checkpoints" / T / uuid_dir / "phase_1_implement_a1.yaml").is_file()


@pytest.mark.parametrize("run_id", ["../../..", "../OTHER", "..", ".", "", "a/b", "x\x00y"], ids=repr)
def test_the_store_refuses_run_ids_that_are_not_one_segment(
    tmp_path: Path, root: Path, ledger: Ledger, store: FilesStore, run_id: str
) -> None:
    # Below the ledger, store methods take run ids as given: they must still not walk out.
    ledger.write(T, RUN, "implement", IMPLEMENT)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(run_dir(root) / "phase_1_implement_a1.yaml", outside / "phase_1_implement_a1.yaml")
    with pytest.raises((InvalidIdentifier, StoreError)):
        store.get(T, run_id, 1, "implement", 1)
    with pytest.raises((InvalidIdentifier, StoreError)):
        store.attempts(T, run_id)
    with pytest.raises((InvalidIdentifier, StoreError)):
        list(store.iter_records(T, run_id))
    with pytest.raises((InvalidIdentifier, StoreError)):
        store.append(_checkpoint(T, run_id), expected_latest=0)


def test_the_store_does_not_read_a_run_outside_the_root(
    tmp_path: Path, root: Path, ledger: Ledger, store: FilesStore
) -> None:
    # A file outside whose run_id even matches the hostile path: nothing may come back.
    ledger.write(T, RUN, "implement", IMPLEMENT)
    outside = tmp_path / "outside"
    outside.mkdir()
    text = (run_dir(root) / "phase_1_implement_a1.yaml").read_text("utf-8")
    hostile = "../../../outside"
    (outside / "phase_1_implement_a1.yaml").write_text(
        text.replace(f"run_id: {RUN_UUID}", f"run_id: {hostile}"), "utf-8"
    )
    got: list[object] = []
    for call in (
        lambda: got.append(store.get(T, hostile, 1, "implement", 1)),
        lambda: got.extend(store.attempts(T, hostile)),
        lambda: got.extend(store.iter_records(T, hostile)),
    ):
        with pytest.raises(InvalidIdentifier):
            call()
    assert got == []


# -- artifact paths ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "paths",
    [
        ["/etc/passwd"],
        ["../secret.txt"],
        ["docs/../../secret.txt"],
        ["ok.txt", "/abs/after/ok"],
        ["C:\\Windows\\win.ini"],
        ["a\\..\\b"],
        ["docs/./x"],
        [""],
    ],
    ids=repr,
)
def test_artifact_paths_outside_the_tree_are_refused(
    tmp_path: Path, root: Path, ledger: Ledger, paths: list[str]
) -> None:
    before = tree(tmp_path)
    with pytest.raises(InvalidRecord) as info:
        ledger.write(T, RUN, "implement", IMPLEMENT, artifact_paths=paths)
    assert any(e["field"].startswith("artifact_paths[") for e in info.value.errors)
    assert not root.exists()
    assert tree(tmp_path) == before


def test_payload_file_paths_outside_the_tree_are_refused(root: Path, ledger: Ledger) -> None:
    with pytest.raises(InvalidRecord):
        ledger.write(T, RUN, "implement", {**IMPLEMENT, "files_changed": ["/etc/shadow"]})
    with pytest.raises(InvalidRecord):
        ledger.write(T, RUN, "implement", {**IMPLEMENT, "files_changed": ["../../x"]})
    assert not root.exists()


# -- symlinks ---------------------------------------------------------------------------------
@pytest.mark.parametrize("level", ["checkpoints", "ticket", "run"])
def test_a_symlinked_directory_is_not_followed(tmp_path: Path, root: Path, ledger: Ledger, level: str) -> None:
    ledger.write(T, RUN, "implement", IMPLEMENT)
    link = {
        "checkpoints": root / "checkpoints",
        "ticket": root / "checkpoints" / T,
        "run": run_dir(root),
    }[level]
    outside = tmp_path / "outside"
    shutil.move(str(link), str(outside))  # a real, readable store tree lives outside now ...
    link.symlink_to(outside, target_is_directory=True)  # ... and a symlink points at it
    before = tree(outside)

    with pytest.raises(StoreError) as info:
        ledger.write(T, RUN, "local_review", LOCAL_REVIEW)
    assert info.value.context.get("rule") == "no_symlinks"
    if level == "run":  # only that run is a symlink: another run is written normally, inside
        ledger.write(T, "another-run", "implement", IMPLEMENT)
        assert run_dir(root, "another-run").is_dir()
        assert not run_dir(root, "another-run").is_symlink()
    else:
        with pytest.raises(StoreError):
            ledger.write(T, "another-run", "implement", IMPLEMENT)
    with pytest.raises(StoreError):
        ledger.read(T, RUN, "implement")
    with pytest.raises(StoreError):
        ledger.list(T)
    assert tree(outside) == before  # nothing written (or cleaned) outside the root
    assert link.is_symlink()


def test_a_symlinked_checkpoint_file_is_not_read_through(tmp_path: Path, root: Path, ledger: Ledger) -> None:
    run = ledger.run(T, RUN)
    run.write("implement", IMPLEMENT)
    run.write("implement", {**IMPLEMENT, "commit_sha": "b2c3d4e"})
    target = run_dir(root) / "phase_1_implement_a2.yaml"
    outside = tmp_path / "elsewhere.yaml"
    shutil.move(str(target), str(outside))
    target.symlink_to(outside)  # the very bytes phaselog wrote, one hop away

    with pytest.raises(Corrupt) as info:
        ledger.read(T, RUN, "implement", 2)
    assert info.value.context.get("rule") == "no_symlinks"
    with pytest.raises(Corrupt) as latest:
        ledger.read(T, RUN, "implement")
    assert latest.value.context["newest_intact_attempt"] == 1
    page = ledger.list(T)
    assert [s.record.attempt_number for s in page.items] == [1]
    assert [d.attempt_number for d in page.damaged] == [2]
    assert not ledger.verify(T).ok
    assert target.is_symlink()  # reported, not removed


def test_a_symlinked_sidecar_is_not_read_through(tmp_path: Path, root: Path, ledger: Ledger) -> None:
    ledger.write(T, RUN, "implement", IMPLEMENT)
    meta = run_dir(root) / ".meta_1_implement_a1.json"
    outside = tmp_path / "meta.json"
    shutil.move(str(meta), str(outside))
    meta.symlink_to(outside)
    with pytest.raises(Corrupt):
        ledger.read(T, RUN, "implement")
    assert [d.attempt_number for d in ledger.list(T).damaged] == [1]


@pytest.mark.timeout(30)
def test_a_fifo_under_a_record_name_does_not_hang_readers(root: Path, ledger: Ledger) -> None:
    ledger.write(T, RUN, "implement", IMPLEMENT)
    os.mkfifo(run_dir(root) / "phase_1_implement_a2.yaml")
    with pytest.raises(Corrupt):
        ledger.read(T, RUN, "implement", 2)
    page = ledger.list(T)
    assert [d.attempt_number for d in page.damaged] == [2]
    assert not ledger.verify(T).ok


# -- hostile YAML -----------------------------------------------------------------------------
def _canary_payloads(canary: Path) -> dict[str, str]:
    cmd = f"touch {canary}"
    bomb = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        bomb.append(f"{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    return {
        "python_apply": f'  branch_name: !!python/object/apply:os.system ["{cmd}"]\n',
        "python_name": "  branch_name: !!python/name:os.system\n",
        "python_new": (f'  branch_name: !!python/object/new:subprocess.Popen [["sh", "-c", "{cmd}"]]\n'),
        "local_tag": "  branch_name: !custom value\n",
        "explicit_str": "  branch_name: !!str feat/x\n",
        "anchor_alias": "  branch_name: &b feat/x\n  commit_sha: *b\n",
        "alias_bomb": "  bomb:\n" + "".join(f"    {line}\n" for line in bomb),
    }


HOSTILE = list(_canary_payloads(Path("/nonexistent")))


def _hostile_file(base: str, insert: str) -> str:
    head, sep, tail = base.partition("phase_payload:\n")
    assert sep
    return head + sep + insert + tail


@pytest.mark.parametrize("with_sidecar", [True, False], ids=["phaselog_file", "seed_file"])
@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_yaml_is_corrupt_and_runs_nothing(
    tmp_path: Path, root: Path, ledger: Ledger, kind: str, with_sidecar: bool
) -> None:
    canary = tmp_path / "pwned"
    ledger.write(T, RUN, "implement", IMPLEMENT)
    ledger.write(T, RUN, "implement", IMPLEMENT)
    path = run_dir(root) / "phase_1_implement_a2.yaml"
    path.write_text(_hostile_file(path.read_text("utf-8"), _canary_payloads(canary)[kind]), "utf-8")
    if not with_sidecar:
        (run_dir(root) / ".meta_1_implement_a2.json").unlink()  # as the seed tool leaves it
    before = tree(tmp_path)

    with pytest.raises(Corrupt) as info:
        ledger.read(T, RUN, "implement", 2)
    assert info.value.error_code == "corrupt"
    assert info.value.context.get("rule") in {"yaml_tag", "yaml_alias"}
    assert path.name in info.value.message
    page = ledger.list(T)
    assert [(d.attempt_number, d.error_code) for d in page.damaged] == [(2, "corrupt")]
    assert [s.record.attempt_number for s in page.items] == [1]
    assert not ledger.verify(T).ok
    ledger.status(T, RUN)
    assert not canary.exists()
    assert tree(tmp_path) == before


def test_the_canary_would_show_code_execution(tmp_path: Path) -> None:
    # The control: an unsafe loader does run the tag, so the canary above is a real detector.
    import yaml

    canary = tmp_path / "pwned"
    doc = "x" + _canary_payloads(canary)["python_apply"].strip()[len("branch_name") :]
    yaml.unsafe_load(doc)
    assert canary.exists()


# -- sizes and depth --------------------------------------------------------------------------
def test_an_oversized_file_is_refused_without_being_read(root: Path, ledger: Ledger) -> None:
    ledger.write(T, RUN, "implement", IMPLEMENT)
    ledger.write(T, RUN, "implement", IMPLEMENT)
    path = run_dir(root) / "phase_1_implement_a2.yaml"
    with path.open("r+b") as fh:  # 1 GiB, sparse: costs no disk, would cost memory to read
        fh.truncate(1 << 30)
    with pytest.raises(TooLarge) as info:
        ledger.read(T, RUN, "implement", 2)
    assert info.value.context.get("rule") == "max_record_bytes"
    assert [d.error_code for d in ledger.list(T).damaged] == ["too_large"]
    assert not ledger.verify(T).ok


def test_a_payload_over_the_cap_is_refused_on_write(root: Path) -> None:
    capped = phaselog.Ledger(FilesStore(root, max_record_bytes=4096))
    big = {**IMPLEMENT, "branch_name": "b" * 5000}
    with pytest.raises(TooLarge):
        capped.write(T, RUN, "implement", big)
    written = [p.name for p in root.rglob("*") if p.is_file()] if root.exists() else []
    assert [n for n in written if n != ".lock"] == []


def _deep_block(depth: int) -> str:
    lines = []
    for i in range(depth):
        lines.append("  " * (i + 1) + f"k{i}:\n")
    lines.append("  " * (depth + 1) + "leaf: 1\n")
    return "".join(lines)


@pytest.mark.parametrize(
    "nest",
    [
        "  files_changed: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "  files_changed: " + "{a: " * 20_000 + "1" + "}" * 20_000 + "\n",
        "  deep:\n" + _deep_block(3_000),
        "  files_changed:\n" + "".join("  " * i + "- \n" for i in range(1, 2_000)),
    ],
    ids=["flow_seq", "flow_map", "block_map", "block_seq"],
)
@pytest.mark.parametrize("with_sidecar", [True, False], ids=["phaselog_file", "seed_file"])
def test_deep_nesting_is_corrupt_not_a_recursion_error(
    root: Path, ledger: Ledger, nest: str, with_sidecar: bool
) -> None:
    ledger.write(T, RUN, "implement", IMPLEMENT)
    path = run_dir(root) / "phase_1_implement_a1.yaml"
    path.write_text(_hostile_file(path.read_text("utf-8"), nest), "utf-8")
    if not with_sidecar:
        (run_dir(root) / ".meta_1_implement_a1.json").unlink()
    with pytest.raises(Corrupt) as info:
        ledger.read(T, RUN, "implement")
    assert info.value.error_code == "corrupt"
    assert info.value.context.get("rule") in {"max_depth", "yaml_syntax"}
    assert [d.attempt_number for d in ledger.list(T).damaged] == [1]
    assert not ledger.verify(T).ok


def test_deeply_nested_json_in_a_sidecar_is_corrupt(root: Path, ledger: Ledger) -> None:
    ledger.write(T, RUN, "implement", IMPLEMENT)
    meta = run_dir(root) / ".meta_1_implement_a1.json"
    doc = json.loads(meta.read_bytes())
    raw = json.dumps(doc)[:-1] + ', "deep": ' + "[" * 200_000 + "]" * 200_000 + "}"
    meta.write_text(raw, "utf-8")
    with pytest.raises(Corrupt):
        ledger.read(T, RUN, "implement")
    assert [d.attempt_number for d in ledger.list(T).damaged] == [1]
