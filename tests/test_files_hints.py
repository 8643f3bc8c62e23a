"""The files store's newest-attempt hint (D185): derived, checked before use, never the truth.

Real files in a real run folder. Each test compares what the store answers through the hint with
what a listing of the folder says, or damages the hint / the folder behind its back and checks that
every answer stays the listing's.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW, PAYLOADS
from phaselog.stores import names as _names
from phaselog.stores.files import hints
from phaselog.stores.files.io import TEMP_MAX_AGE_S
from phaselog.stores.files.store import FilesStore
from phaselog.transfer.jsonl import export_records

T = "HINT-1"
RUN = "hint-run"
RUN_UUID = phaselog.normalize_run_id(RUN)


@pytest.fixture(autouse=True)
def _hint_every_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    # The store lists small folders (cheaper than the hint's checks); these tests' runs are small,
    # so the hint is used for every folder here. test_a_long_run_is_served_by_its_hint keeps the default.
    monkeypatch.setattr(hints, "MIN_FOLDER_BYTES", 0)


def _run_dir(root: Path) -> Path:
    return root / "checkpoints" / T / RUN_UUID


def _hinted(root: Path) -> list[_names.RecordGroup] | None:
    fd = os.open(_run_dir(root), os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = hints.read(fd)
    finally:
        os.close(fd)
    return None if found is None else sorted(found[0])


def _listed(root: Path) -> list[_names.RecordGroup]:
    return sorted(_names.record_groups(os.listdir(_run_dir(root))))


def test_every_append_leaves_a_hint_equal_to_the_listing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    run = ledger.run(T, RUN)
    run.write("implement", IMPLEMENT)
    assert _hinted(root) == _listed(root) == [(1, "implement", 1, 1, 1)]
    run.fail("implement", "flaky")
    run.write("implement", IMPLEMENT)
    run.write("local_review", LOCAL_REVIEW)
    run.fail("local_review", "nope")
    assert _hinted(root) == _listed(root) == [(1, "implement", 3, 3, 3), (2, "local_review", 2, 2, 1)]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["implement", "local_review"]), st.booleans(), st.integers(0, 3)),
        min_size=1,
        max_size=8,
    )
)
def test_the_hint_agrees_with_the_listing_after_any_sequence(tmp_path_factory: object, steps: list) -> None:
    # Completed and failed attempts, next numbers and explicit numbers above the latest (gaps).
    root = Path(tmp_path_factory.mktemp("hints")) / "store"  # type: ignore[attr-defined]
    ledger = phaselog.Ledger(FilesStore(root))
    latest = {"implement": 0, "local_review": 0}
    for phase, completed, gap in steps:
        attempt = latest[phase] + 1 + gap
        if completed:
            ledger.write(T, RUN, phase, PAYLOADS[phase], attempt=attempt, check_prerequisites=False)
        else:
            ledger.write(T, RUN, phase, None, status="failed", error="x", attempt=attempt)
        latest[phase] = attempt
        assert _hinted(root) == _listed(root)
    for phase, top in latest.items():
        if top:
            assert ledger.status(T, RUN) is not None
            assert max(r.attempt_number for r in ledger.store.attempts(T, RUN_UUID) if r.phase == phase) == top


def test_an_attempt_written_behind_the_hint_is_seen(tmp_path: Path) -> None:
    # A writer that does not keep the hint (phaselog before D185, or a restore of the folder's
    # files): the hint still names attempt 1, but the folder's stamp moved and attempt 2 exists.
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.write(T, RUN, "implement", IMPLEMENT)
    lock = _run_dir(root) / ".lock"
    old_hint = lock.read_bytes()
    second = ledger.write(T, RUN, "implement", IMPLEMENT).record
    with open(lock, "r+b") as fh:  # put the old hint back, in place
        fh.write(old_hint)
        fh.truncate(len(old_hint))
    assert _hinted(root) is None
    fresh = phaselog.Ledger(FilesStore(root))
    assert fresh.read(T, RUN, "implement").record.content_hash == second.content_hash
    assert [p.latest_attempt for p in fresh.status(T, RUN).phases][:1] == [2]
    # The next write numbers after it and links to it, and leaves a hint that agrees again.
    nxt = fresh.write(T, RUN, "implement", IMPLEMENT).record
    assert nxt.attempt_number == 3
    assert nxt.prev_hash == second.content_hash
    assert _hinted(root) == _listed(root)


def test_a_seed_tool_run_without_a_hint_reads_and_takes_one_on_the_first_write(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.write(T, RUN, "implement", IMPLEMENT)
    (_run_dir(root) / ".lock").unlink()  # as a run phaselog never wrote to
    assert _hinted(root) is None
    fresh = phaselog.Ledger(FilesStore(root))
    assert fresh.read(T, RUN, "implement").record.attempt_number == 1
    assert fresh.write(T, RUN, "implement", IMPLEMENT).record.attempt_number == 2
    assert _hinted(root) == _listed(root) == [(1, "implement", 2, 2, 2)]


def test_a_hint_whose_stamp_still_matches_but_misses_the_next_attempt_is_not_used(tmp_path: Path) -> None:
    # A kernel with coarse folder timestamps could keep the stamp across a foreign write: the
    # check of the attempt after each group's newest still refuses the hint.
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.write(T, RUN, "implement", IMPLEMENT)
    ledger.write(T, RUN, "implement", IMPLEMENT)
    d = _run_dir(root)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        stale = hints.encode(hints.folder_stamp(fd), [(1, "implement", 1, 1, 1)], temps=False)
        lock = os.open(d / ".lock", os.O_WRONLY)
        try:
            os.pwrite(lock, stale, 0)
            os.ftruncate(lock, len(stale))
        finally:
            os.close(lock)
        assert hints.decode(stale, hints.folder_stamp(fd)) is not None  # the stamp alone would pass
        assert hints.read(fd) is None
    finally:
        os.close(fd)
    fresh = phaselog.Ledger(FilesStore(root))
    assert fresh.read(T, RUN, "implement").record.attempt_number == 2
    assert fresh.write(T, RUN, "implement", IMPLEMENT).record.attempt_number == 3


def test_a_damaged_hint_is_never_used_and_the_next_append_rewrites_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.write(T, RUN, "implement", IMPLEMENT)
    ledger.write(T, RUN, "local_review", LOCAL_REVIEW)
    lock = _run_dir(root) / ".lock"
    good = lock.read_bytes()
    for bad in (
        b"",
        b"garbage\n",
        good[: len(good) // 2],  # torn
        good.replace(b"2 local_review 1 1 1", b"2 local_review 1 0 0"),  # edited: checksum fails
        good + b"1 implement 9 9 9\n",  # a line added: length fails
        b"\xff\xfe" * 40,
    ):
        with open(lock, "r+b") as fh:  # in place: the folder's stamp does not move
            fh.write(bad)
            fh.truncate(len(bad))
        assert _hinted(root) is None, bad
        fresh = phaselog.Ledger(FilesStore(root))
        status = fresh.status(T, RUN)
        assert [(p.phase, p.latest_attempt) for p in status.phases][:2] == [("implement", 1), ("local_review", 1)]
        assert fresh.read(T, RUN, "local_review").record.attempt_number == 1
    fresh.write(T, RUN, "implement", IMPLEMENT)
    assert _hinted(root) == _listed(root) == [(1, "implement", 2, 2, 2), (2, "local_review", 1, 1, 1)]


def test_the_hint_is_never_a_record_and_verify_and_export_ignore_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    written = [
        ledger.write(T, RUN, "implement", IMPLEMENT).location,
        ledger.write(T, RUN, "implement", None, status="failed", error="x").location,
    ]
    assert (_run_dir(root) / ".lock").stat().st_size > 0  # the hint is there
    page = ledger.list(T)
    assert sorted(s.location for s in page.items) == sorted(written)
    assert page.damaged == []
    assert ledger.verify(T).ok
    assert [r.attempt_number for r in ledger.store.attempts(T, RUN_UUID)] == [1, 2]
    assert [d["type"] for d in export_records(ledger.store, T) if d["type"] != "pipeline"] == ["checkpoint"] * 2


def test_a_run_copied_elsewhere_carries_a_hint_that_is_not_used_there(tmp_path: Path) -> None:
    # The stamp names the folder's inode: a copied (or restored) run folder lists.
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.write(T, RUN, "implement", IMPLEMENT)
    other = tmp_path / "copy"
    shutil.copytree(root, other)
    assert _hinted(other) is None
    assert phaselog.Ledger(FilesStore(other)).read(T, RUN, "implement").record.attempt_number == 1


def test_a_read_only_store_writes_no_hint(tmp_path: Path) -> None:
    root = tmp_path / "store"
    phaselog.Ledger(FilesStore(root)).write(T, RUN, "implement", IMPLEMENT)
    lock = _run_dir(root) / ".lock"
    lock.write_bytes(b"")  # no hint
    ro = phaselog.Ledger(FilesStore(root, read_only=True))
    assert ro.read(T, RUN, "implement").record.attempt_number == 1
    ro.status(T, RUN)
    assert lock.read_bytes() == b""


def test_a_long_run_is_served_by_its_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default threshold: a folder of a long history (hundreds of names) is read through its hint.
    monkeypatch.undo()
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    n = 0
    while True:
        ledger.write(T, RUN, "implement", None, status="failed", error="again")
        n += 1
        if (_run_dir(root)).stat().st_size >= hints.MIN_FOLDER_BYTES:
            break
    assert _hinted(root) == _listed(root) == [(1, "implement", n, n, None)]
    (_run_dir(root) / ".lock").write_bytes(b"")  # no hint: the same answers from a listing
    assert _hinted(root) is None
    assert ledger.write(T, RUN, "implement", IMPLEMENT).record.attempt_number == n + 1
    assert _hinted(root) == _listed(root) == [(1, "implement", n + 1, n + 1, n + 1)]


# -- the carried snapshot (D186) ------------------------------------------------------------------
def test_a_record_edited_in_place_is_never_decided_on_from_the_carried_snapshot(tmp_path: Path) -> None:
    # Same names, same folder stamp: only the record file's own stamp moved. The handle that wrote
    # the record must decide the next write on the edited file, as a fresh handle does.
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    first = ledger.write(T, RUN, "implement", IMPLEMENT).record
    seed = _run_dir(root) / "phase_1_implement_a1.yaml"
    text = seed.read_bytes()
    assert b"src/" in text
    with open(seed, "r+b") as fh:  # in place: the folder's names and stamp stay
        edited = text.replace(b"src/", b"lib/", 1)
        fh.write(edited)
        fh.truncate(len(edited))
    shutil.copytree(root, tmp_path / "copy")  # what a fresh handle decides, on the same files

    def outcome(led: phaselog.Ledger) -> object:
        try:
            r = led.write(T, RUN, "implement", IMPLEMENT).record
        except phaselog.PhaselogError as exc:
            return type(exc).__name__, exc.context.get("rule")
        return r.attempt_number, r.prev_hash

    expected = outcome(phaselog.Ledger(FilesStore(tmp_path / "copy")))
    assert outcome(ledger) == expected
    assert expected != (2, first.content_hash)  # not what the carried (unedited) record would give


def test_an_approval_by_another_handle_is_seen_by_the_carrying_handle(tmp_path: Path) -> None:
    # The carried snapshot holds the run's approvals: one recorded elsewhere moves .approvals' stamp.
    root = tmp_path / "store"
    writer = phaselog.Ledger(FilesStore(root))
    writer.write(
        "GATE-1", RUN, "research", {"summary": "s", "sources": ["https://x.test/a"]}, pipeline="video-pipeline"
    )
    writer.write("GATE-1", RUN, "proposal", {"title": "T", "concept": "C"})
    script = {"script_path": "script.md", "word_count": 120}
    with pytest.raises(phaselog.PhaselogError) as refused:
        writer.write("GATE-1", RUN, "script", script)  # the proposal is not approved yet
    assert "approv" in str(refused.value)
    phaselog.Ledger(FilesStore(root)).approve("GATE-1", RUN, "proposal", by="reviewer")
    got = writer.write("GATE-1", RUN, "script", script)
    assert got.record.phase == "script"


def test_a_young_leftover_keeps_appends_listing_until_it_is_old_enough_to_remove(tmp_path: Path) -> None:
    # A hint written by an append that found a young temp file says so: the next appends list the
    # folder (not trusting the hint) so that the leftover is removed once it is old.
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.write(T, RUN, "implement", IMPLEMENT)
    leftover = _run_dir(root) / ".tmp-99999-0123456789ab"
    leftover.write_bytes(b"half a record")
    ledger.write(T, RUN, "implement", IMPLEMENT)  # lists (the folder moved), leaves the leftover
    assert leftover.exists()
    fd = os.open(_run_dir(root), os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = hints.read(fd)
    finally:
        os.close(fd)
    assert found is not None
    assert found[1] is True
    stale = time.time() - TEMP_MAX_AGE_S - 60
    os.utime(leftover, (stale, stale))  # the folder's stamp does not move: only the flag makes it list
    ledger.write(T, RUN, "implement", IMPLEMENT)
    assert not leftover.exists()
    fd = os.open(_run_dir(root), os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = hints.read(fd)
    finally:
        os.close(fd)
    assert found is not None
    assert found[1] is False
