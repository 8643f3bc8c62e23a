"""The files store's invariants on real files: append-only, numbering, links, modes, damage.

Every test works on a fresh root under tmp_path and inspects the bytes on disk directly, so a
store that only looked right through its own API would still fail here.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import phaselog
from conftest import CREATE_PR, IMPLEMENT, LOCAL_REVIEW
from phaselog import (
    AlreadyExists,
    BasisEntry,
    Corrupt,
    InvalidRecord,
    NotMonotonic,
    TooLarge,
    UsageError,
)
from phaselog.ledger.facade import Ledger
from phaselog.stores.files.io import TEMP_MAX_AGE_S
from phaselog.stores.files.store import FilesStore

T = "PROJ-1234"
RUN = "a1b2c3d4"
RUN_UUID = phaselog.normalize_run_id(RUN)


def run_dir(root: Path, ticket: str = T, run: str = RUN) -> Path:
    """The directory holding one run's files."""
    return root / "checkpoints" / ticket / phaselog.normalize_run_id(run)


def snapshot(root: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every path under ``root``: bytes (None for dirs) and mtime in ns."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes(), p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def impl(n: int) -> dict[str, object]:
    """An implement payload that differs per ``n``."""
    return {**IMPLEMENT, "files_changed": [f"src/f{n}.py"]}


@pytest.fixture
def umask() -> Iterator[None]:
    """Restore the process umask after a test that changes it."""
    old = os.umask(0o022)
    os.umask(old)
    try:
        yield
    finally:
        os.umask(old)


# -- append-only ------------------------------------------------------------------------------
def test_duplicate_attempt_is_refused_and_the_stored_files_are_untouched(root: Path, ledger: Ledger) -> None:
    first = ledger.write(T, RUN, "implement", impl(1), attempt=1)
    d = run_dir(root)
    cp, meta = d / "phase_1_implement_a1.yaml", d / ".meta_1_implement_a1.json"
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in (cp, meta)}
    time.sleep(0.01)  # let a rewrite show in mtime (not a timing assertion)

    with pytest.raises(AlreadyExists) as info:
        ledger.write(T, RUN, "implement", impl(2), attempt=1)
    assert isinstance(info.value, FileExistsError)
    assert info.value.error_code == "already_exists"
    assert info.value.context.get("next_attempt") == 2

    after = {p: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in (cp, meta)}
    assert after == before
    assert ledger.read(T, RUN, "implement").record.content_hash == first.record.content_hash
    assert not list(d.glob(".tmp-*"))


def test_store_append_refuses_a_duplicate_below_the_ledger(root: Path, ledger: Ledger, store: FilesStore) -> None:
    # The store's own check (under the run lock) is what holds across processes; the ledger's
    # pre-check is only a fast path. Bypass it.
    first = ledger.write(T, RUN, "implement", impl(1)).record
    d = run_dir(root)
    before = snapshot(d)
    rival = first.evolve(phase_payload=impl(99))
    with pytest.raises(AlreadyExists):
        store.append(rival, expected_latest=1)
    with pytest.raises(AlreadyExists):
        store.append(rival, expected_latest=0)
    assert snapshot(d) == before


def test_failed_attempt_is_not_overwritten_either(root: Path, ledger: Ledger) -> None:
    ledger.run(T, RUN).fail("implement", "tests failed")
    failed = run_dir(root) / ".failed_1_implement_a1.json"
    before = failed.read_bytes()
    with pytest.raises(AlreadyExists):
        ledger.write(T, RUN, "implement", impl(1), attempt=1)
    assert failed.read_bytes() == before
    assert not (run_dir(root) / "phase_1_implement_a1.yaml").exists()


# -- numbering --------------------------------------------------------------------------------
def test_auto_attempts_are_numbered_1_2_3(root: Path, ledger: Ledger) -> None:
    numbers = [ledger.write(T, RUN, "implement", impl(i)).record.attempt_number for i in range(3)]
    assert numbers == [1, 2, 3]
    assert sorted(p.name for p in run_dir(root).glob("phase_*.yaml")) == [
        "phase_1_implement_a1.yaml",
        "phase_1_implement_a2.yaml",
        "phase_1_implement_a3.yaml",
    ]
    # Each phase counts on its own.
    assert ledger.write(T, RUN, "local_review", LOCAL_REVIEW).record.attempt_number == 1
    # A new store object on the same root continues the count (nothing is cached).
    again = phaselog.Ledger(FilesStore(root))
    assert again.write(T, RUN, "implement", impl(9)).record.attempt_number == 4


def test_explicit_attempt_below_the_latest_is_not_monotonic(root: Path, ledger: Ledger) -> None:
    ledger.write(T, RUN, "implement", impl(1), attempt=1)
    ledger.write(T, RUN, "implement", impl(3), attempt=3)
    before = snapshot(root)
    with pytest.raises(NotMonotonic) as info:
        ledger.write(T, RUN, "implement", impl(2), attempt=2)
    assert info.value.error_code == "not_monotonic"
    assert info.value.context.get("next_attempt") == 4
    assert snapshot(root) == before
    assert not (run_dir(root) / "phase_1_implement_a2.yaml").exists()


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "2"])
def test_attempt_must_be_a_positive_integer(root: Path, ledger: Ledger, bad: object) -> None:
    with pytest.raises(InvalidRecord):
        ledger.write(T, RUN, "implement", impl(1), attempt=bad)  # type: ignore[arg-type]  # deliberately wrong type
    assert not root.exists() or not list(root.rglob("phase_*"))


def test_failed_attempt_uses_up_its_number_and_writes_no_seed_file(root: Path, ledger: Ledger) -> None:
    run = ledger.run(T, RUN)
    failed = run.fail("implement", "compile error")
    assert failed.record.attempt_number == 1
    assert failed.record.status == "failed"
    d = run_dir(root)
    assert not list(d.glob("phase_*.yaml"))
    assert (d / ".failed_1_implement_a1.json").is_file()
    assert ledger.list(T).completed == []

    ok = run.write("implement", impl(2))
    assert ok.record.attempt_number == 2
    assert [p.name for p in d.glob("phase_*.yaml")] == ["phase_1_implement_a2.yaml"]
    assert ledger.read(T, RUN, "implement").record.attempt_number == 2
    again = ledger.read(T, RUN, "implement", 1).record
    assert (again.status, again.error) == ("failed", "compile error")
    assert [(s.record.attempt_number, s.record.status) for s in ledger.list(T).items] == [
        (1, "failed"),
        (2, "completed"),
    ]


# -- hash links -------------------------------------------------------------------------------
def test_prev_hash_chains_attempts_and_basis_names_latest_completed(root: Path, ledger: Ledger) -> None:
    run = ledger.run(T, RUN)
    a1 = run.write("implement", impl(1)).record
    a2 = run.fail("implement", "flaky").record
    a3 = run.write("implement", impl(3)).record
    lr1 = run.write("local_review", LOCAL_REVIEW).record
    a4 = run.fail("implement", "rebased away").record  # failed: not a basis
    lr2 = run.write("local_review", LOCAL_REVIEW).record
    pr1 = run.write("create_pr", CREATE_PR).record

    # Read back through a fresh store: the links are on disk, not only in the returned objects.
    fresh = phaselog.Ledger(FilesStore(root))
    got = {(s.record.phase, s.record.attempt_number): s.record for s in fresh.list(T).items}
    assert got[("implement", 1)].prev_hash is None
    assert got[("implement", 2)].prev_hash == a1.content_hash
    assert got[("implement", 3)].prev_hash == a2.content_hash
    assert got[("implement", 4)].prev_hash == a3.content_hash
    assert got[("local_review", 1)].prev_hash is None
    assert got[("local_review", 2)].prev_hash == lr1.content_hash

    assert dict(got[("implement", 1)].basis or {}) == {}
    assert dict(got[("local_review", 1)].basis or {}) == {"implement": BasisEntry(3, a3.content_hash)}
    assert dict(got[("local_review", 2)].basis or {}) == {"implement": BasisEntry(3, a3.content_hash)}
    assert dict(got[("create_pr", 1)].basis or {}) == {
        "implement": BasisEntry(3, a3.content_hash),
        "local_review": BasisEntry(2, lr2.content_hash),
    }
    for key, rec in ((("implement", 4), a4), (("create_pr", 1), pr1)):
        assert got[key].content_hash == rec.content_hash
    assert fresh.verify(T).ok


# -- modes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077, 0o277], ids=oct)
@pytest.mark.usefixtures("umask")
def test_dirs_are_0700_and_files_0600_whatever_the_umask(tmp_path: Path, mask: int) -> None:
    root = tmp_path / "store"
    os.umask(mask)
    ledger = phaselog.Ledger(FilesStore(root))
    run = ledger.run(T, RUN)
    run.write("implement", impl(1))
    run.fail("local_review", "reviewer bot down")
    ledger.write("OTHER-1", "r2", "implement", impl(2))
    os.umask(0o022)

    paths = [root, *sorted(root.rglob("*"))]
    dirs = [p for p in paths if p.is_dir()]
    files = [p for p in paths if not p.is_dir()]
    assert {p.name for p in files} >= {
        "phase_1_implement_a1.yaml",
        ".meta_1_implement_a1.json",
        ".failed_2_local_review_a1.json",
        ".lock",
    }
    assert len(dirs) == 8  # root, checkpoints, 2 tickets, 2 runs, manifests, manifests/ticket-pipeline
    bad = {str(p): oct(stat.S_IMODE(p.lstat().st_mode)) for p in dirs if stat.S_IMODE(p.lstat().st_mode) != 0o700}
    bad |= {str(p): oct(stat.S_IMODE(p.lstat().st_mode)) for p in files if stat.S_IMODE(p.lstat().st_mode) != 0o600}
    assert bad == {}
    assert all(stat.S_ISREG(p.lstat().st_mode) for p in files)


# -- temp files -------------------------------------------------------------------------------
def test_old_temp_files_are_removed_by_the_next_writer_and_never_listed(root: Path, ledger: Ledger) -> None:
    first = ledger.write(T, RUN, "implement", impl(1))
    d = run_dir(root)
    body = (d / "phase_1_implement_a1.yaml").read_bytes()  # looks exactly like a checkpoint
    old, young = d / ".tmp-99999-0123456789ab", d / ".tmp-99999-ba9876543210"
    other_run = run_dir(root, run="zz")
    for p in (old, young):
        p.write_bytes(body)
    stale = time.time() - TEMP_MAX_AGE_S - 60
    os.utime(old, (stale, stale))

    # Readers neither list nor remove them.
    page = ledger.list(T)
    assert [s.location for s in page.items] == [first.location]
    assert page.damaged == []
    assert ledger.verify(T).ok
    assert old.exists()
    assert young.exists()

    ledger.write(T, RUN, "local_review", LOCAL_REVIEW)
    assert not old.exists()
    assert young.read_bytes() == body
    assert len(ledger.list(T).items) == 2
    assert not other_run.exists()


def test_a_writer_in_another_run_leaves_temp_files_alone(root: Path, ledger: Ledger) -> None:
    ledger.write(T, RUN, "implement", impl(1))
    old = run_dir(root) / ".tmp-4242-0123456789ab"
    old.write_bytes(b"half a record")
    stale = time.time() - TEMP_MAX_AGE_S - 60
    os.utime(old, (stale, stale))
    ledger.write(T, "other-run", "implement", impl(2))
    assert old.exists()
    ledger.write(T, RUN, "implement", impl(3))
    assert not old.exists()


# -- damage -----------------------------------------------------------------------------------
def _truncate_half(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _truncate_empty(p: Path) -> None:
    p.write_bytes(b"")


def _garble(p: Path) -> None:
    data = bytearray(p.read_bytes())
    mid = len(data) // 3
    data[mid : mid + 24] = b"\x00\xff]]}}: [\n\t!!: &x *y {"
    p.write_bytes(bytes(data))


DAMAGE = {"truncate_half": _truncate_half, "truncate_empty": _truncate_empty, "garble": _garble}


def _three_attempts(ledger: Ledger) -> list[phaselog.Checkpoint]:
    run = ledger.run(T, RUN)
    out = [run.write("implement", impl(1)).record, run.write("implement", impl(2)).record]
    out.append(run.fail("implement", "oops").record)  # a failed attempt is never "intact" for read
    out.append(run.write("implement", impl(4)).record)
    run.write("local_review", LOCAL_REVIEW)
    return out


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("which", ["phase_1_implement_a4.yaml", ".meta_1_implement_a4.json"])
def test_damaged_latest_attempt_is_reported_not_used(root: Path, ledger: Ledger, damage: str, which: str) -> None:
    records = _three_attempts(ledger)
    target = run_dir(root) / which
    DAMAGE[damage](target)
    before = snapshot(root)

    with pytest.raises(Corrupt) as info:
        ledger.read(T, RUN, "implement")
    err = info.value
    assert err.error_code == "corrupt"
    assert which in err.message
    assert err.context["path"].endswith(which)
    assert err.context["newest_intact_attempt"] == 2
    assert "attempt is 2" in err.message
    with pytest.raises(Corrupt):
        ledger.read(T, RUN, "implement", 4)
    # The intact attempts still read, with their original hashes.
    assert ledger.read(T, RUN, "implement", 2).record.content_hash == records[1].content_hash

    page = ledger.list(T)
    assert [(s.record.phase, s.record.attempt_number) for s in page.items] == [
        ("implement", 1),
        ("implement", 2),
        ("implement", 3),
        ("local_review", 1),
    ]
    assert len(page.damaged) == 1
    dmg = page.damaged[0]
    assert (dmg.phase, dmg.attempt_number, dmg.error_code) == ("implement", 4, "corrupt")
    assert dmg.location.endswith(which)

    report = ledger.verify(T)
    assert not report.ok
    assert any(p["path"].endswith(which) for p in report.problems)
    status = ledger.status(T, RUN)
    assert any(which in w for w in status.warnings)
    assert not ledger.can_skip_to(T, RUN, "local_review").allowed
    # A new attempt cannot link to a damaged one: refused, loudly, with nothing written.
    with pytest.raises(Corrupt):
        ledger.write(T, RUN, "implement", impl(5))

    # Nothing was moved, deleted, repaired or added by any of the above.
    assert snapshot(root) == before


def test_two_damaged_attempts_point_to_the_older_intact_one(root: Path, ledger: Ledger) -> None:
    _three_attempts(ledger)
    _garble(run_dir(root) / "phase_1_implement_a4.yaml")
    _truncate_empty(run_dir(root) / ".meta_1_implement_a2.json")
    with pytest.raises(Corrupt) as info:
        ledger.read(T, RUN, "implement")
    assert info.value.context["newest_intact_attempt"] == 1
    assert len(ledger.list(T).damaged) == 2


def test_no_intact_attempt_left_is_said_so(root: Path, ledger: Ledger) -> None:
    ledger.write(T, RUN, "implement", impl(1))
    _truncate_half(run_dir(root) / "phase_1_implement_a1.yaml")
    with pytest.raises(Corrupt) as info:
        ledger.read(T, RUN, "implement")
    assert info.value.context.get("newest_intact_attempt") is None
    assert "no intact attempt" in info.value.message


def test_a_damaged_failed_record_is_reported_too(root: Path, ledger: Ledger) -> None:
    ledger.run(T, RUN).fail("implement", "boom")
    _garble(run_dir(root) / ".failed_1_implement_a1.json")
    with pytest.raises(Corrupt):
        ledger.read(T, RUN, "implement", 1)
    page = ledger.list(T)
    assert page.items == []
    assert [d.attempt_number for d in page.damaged] == [1]
    assert not ledger.verify(T).ok


def test_every_truncation_of_a_checkpoint_is_caught(root: Path, ledger: Ledger) -> None:
    # Whatever prefix of the file survives, no reader may take it for the record as written:
    # read either refuses it (Corrupt) or returns it flagged, and verify is never ok.
    ledger.write(T, RUN, "implement", impl(1))
    written = ledger.write(T, RUN, "implement", impl(2)).record
    cp = run_dir(root) / "phase_1_implement_a2.yaml"
    meta = run_dir(root) / ".meta_1_implement_a2.json"
    for path in (cp, meta):
        original = path.read_bytes()
        outcomes = {"corrupt": 0, "flagged": 0}
        for n in range(len(original)):
            path.write_bytes(original[:n])
            if path == meta and original[:n].rstrip() == original.rstrip():
                # Only the trailing newline is gone: the same JSON, the same record.
                assert ledger.read(T, RUN, "implement", 2).record == written
                continue
            try:
                stored = ledger.read(T, RUN, "implement", 2)
            except Corrupt:
                outcomes["corrupt"] += 1
                page = ledger.list(T)
                assert [d.attempt_number for d in page.damaged] == [2]
            else:
                assert path == cp, f"a truncated sidecar ({n} bytes) was read as a record"
                assert stored.warnings, f"{n} bytes: read silently"
                assert stored.tampered or stored.record.content_hash == written.content_hash
                outcomes["flagged"] += 1
            assert not ledger.verify(T).ok, f"{path.name} cut to {n} bytes passes verify"
        path.write_bytes(original)
        assert outcomes["corrupt"] > 0
    assert ledger.verify(T).ok


def test_a_hand_edited_checkpoint_is_reported_by_verify_and_validate(root: Path, ledger: Ledger) -> None:
    run = ledger.run(T, RUN)
    run.write("implement", impl(1))
    run.write("implement", impl(2))
    path = run_dir(root) / "phase_1_implement_a1.yaml"
    text = path.read_text("utf-8")
    assert "commit_sha: a1b2c3d\n" in text
    path.write_text(text.replace("commit_sha: a1b2c3d\n", "commit_sha: fffffff\n"), "utf-8")

    # Damaged from outside: never used as a record (invariant 4), whatever its YAML says.
    with pytest.raises(Corrupt) as info:
        ledger.validate(T, RUN, "implement", 1)
    assert info.value.context["rule"] == "content_hash"
    assert "phase_1_implement_a1.yaml" in info.value.message
    page = ledger.list(T)
    assert [d.attempt_number for d in page.damaged] == [1]
    assert [s.record.attempt_number for s in page.items] == [2]
    assert ledger.status(T, RUN).phase("implement").state == "completed"  # attempt 2 is intact

    result = ledger.verify(T)
    assert not result.ok
    rules = {(p["path"].rsplit("/", 1)[-1], p["rule"]) for p in result.problems}
    assert ("phase_1_implement_a1.yaml", "content_hash") in rules
    # Attempt 2 names attempt 1's hash as written; the edit breaks that link too.
    assert ("phase_1_implement_a2.yaml", "prev_hash") in rules
    _s2, report2 = ledger.validate(T, RUN, "implement", 2)
    assert any(i.rule == "prev_hash" for i in report2.errors)


def test_an_unedited_store_verifies(root: Path, ledger: Ledger) -> None:
    # The control for the test above: without the edit, the same checks pass.
    run = ledger.run(T, RUN)
    run.write("implement", impl(1))
    run.write("implement", impl(2))
    assert ledger.verify(T).ok
    assert ledger.validate(T, RUN, "implement", 1)[1].is_valid
    assert ledger.validate(T, RUN, "implement", 2)[1].is_valid


# -- size cap ---------------------------------------------------------------------------------
CAP = 4096


def _big_implement(n_files: int) -> dict[str, object]:
    return {**IMPLEMENT, "files_changed": [f"src/module_{i:05d}.py" for i in range(n_files)]}


def test_a_record_over_the_cap_is_not_written(root: Path) -> None:
    capped = phaselog.Ledger(FilesStore(root, max_record_bytes=CAP))
    capped.write(T, RUN, "implement", _big_implement(10))  # under the cap: fine
    with pytest.raises(TooLarge) as info:
        capped.write(T, RUN, "implement", _big_implement(200))
    assert info.value.error_code == "too_large"
    names = sorted(p.name for p in run_dir(root).iterdir())
    assert names == [".lock", ".meta_1_implement_a1.json", "phase_1_implement_a1.yaml"]


def test_a_file_over_the_cap_is_refused_before_parsing(root: Path) -> None:
    big = phaselog.Ledger(FilesStore(root))
    big.write(T, RUN, "implement", impl(1))
    big.write(T, RUN, "implement", _big_implement(200))  # a valid record, over 4096 bytes
    path = run_dir(root) / "phase_1_implement_a2.yaml"
    assert path.stat().st_size > CAP
    assert big.read(T, RUN, "implement", 2).record.attempt_number == 2  # readable uncapped
    capped = phaselog.Ledger(FilesStore(root, max_record_bytes=CAP))
    with pytest.raises(TooLarge) as info:
        capped.read(T, RUN, "implement", 2)
    assert info.value.error_code == "too_large"
    assert path.name in info.value.message
    page = capped.list(T)
    assert [(d.attempt_number, d.error_code) for d in page.damaged] == [(2, "too_large")]
    assert [s.record.attempt_number for s in page.items] == [1]

    # Bytes that would fail to parse give too_large, not a parse error: the cap comes first.
    path.write_bytes(b"{[" * (CAP // 2 + 10))
    with pytest.raises(TooLarge):
        capped.read(T, RUN, "implement", 2)
    with pytest.raises(Corrupt) as parsed:
        big.read(T, RUN, "implement", 2)
    assert parsed.value.error_code == "corrupt"  # the control: uncapped, it is parsed and fails


def test_a_sidecar_over_the_cap_is_refused(root: Path) -> None:
    plain = phaselog.Ledger(FilesStore(root))
    written = plain.write(T, RUN, "implement", impl(1)).record
    meta = run_dir(root) / ".meta_1_implement_a1.json"
    meta.write_bytes(meta.read_bytes() + b" " * CAP)  # still the same JSON document
    assert plain.read(T, RUN, "implement").record == written
    capped = phaselog.Ledger(FilesStore(root, max_record_bytes=CAP))
    with pytest.raises(TooLarge) as info:
        capped.read(T, RUN, "implement")
    assert meta.name in info.value.message
    assert [d.error_code for d in capped.list(T).damaged] == ["too_large"]


# -- pagination -------------------------------------------------------------------------------
def _populate(root: Path, ledger: Ledger) -> None:
    for run_name in ("r-one", "r-two", "r-three"):
        run = ledger.run(T, run_name)
        run.write("implement", impl(1))
        run.fail("implement", "x")
        run.write("implement", impl(3))
        run.write("local_review", LOCAL_REVIEW)
        run.write("create_pr", CREATE_PR)
    _garble(run_dir(root, run="r-two") / "phase_1_implement_a3.yaml")
    ledger.write("ELSEWHERE-1", "r-one", "implement", impl(1))  # another ticket: never listed


def _entries(page: phaselog.Page) -> list[tuple[str, int, int]]:
    keys = [(s.record.run_id, s.record.phase_ordinal, s.record.attempt_number) for s in page.items]
    keys += [(d.run_id, d.phase_ordinal, d.attempt_number) for d in page.damaged]
    return sorted(keys)


@pytest.mark.parametrize("scoped", [False, True])
def test_pagination_walks_every_record_once_in_order(root: Path, ledger: Ledger, scoped: bool) -> None:
    _populate(root, ledger)
    run_id = "r-two" if scoped else None
    full = ledger.list(T, run_id)
    everything = _entries(full)
    assert len(everything) == (5 if scoped else 15)
    assert len(full.damaged) == 1
    item_order = [(s.record.run_id, s.record.phase_ordinal, s.record.attempt_number) for s in full.items]
    assert item_order == sorted(item_order)

    for limit in range(1, len(everything) + 2):
        walked: list[tuple[str, int, int]] = []
        after = None
        for _ in range(len(everything) + 2):
            page = ledger.list(T, run_id, after=after, limit=limit)
            chunk = _entries(page)
            assert 0 < len(chunk) <= limit
            assert not walked or chunk[0] > walked[-1]
            walked += chunk
            after = page.next_after
            if after is None:
                break
        assert walked == everything, f"limit={limit}"


def test_a_malformed_cursor_is_a_usage_error(ledger: Ledger) -> None:
    with pytest.raises(UsageError):
        ledger.list(T, after="not-a-cursor")
    with pytest.raises(UsageError):
        ledger.list(T, limit=0)
