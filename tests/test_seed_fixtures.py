"""The seed tool's own files: phaselog reads them, and the files phaselog writes look like them.

The fixtures (tests/fixtures/seed-tool-files) were written by the seed tool itself. These tests
prove the "keeps the seed's files pure" part of the design for the files store: the same
field values give the same bytes, and nothing phaselog adds can be mistaken for a checkpoint by
the seed tool's ``phase_*.yaml`` globs.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import yaml

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.model.records import SEED_FIELDS, parse_timestamp
from phaselog.stores.files.store import FilesStore

FIXTURES = Path(__file__).parent / "fixtures" / "seed-tool-files" / "checkpoints"
SHORT_RUN = "a1b2c3d4"
RUN_2143 = "4fa2159f-9c61-5f8b-9ae5-28692b46cbd7"
RUN_2144 = "5f0c8e2a-3b1d-4c7e-9a2f-6d8b1e4c7a90"
SEED_GLOB = "phase_*.yaml"
_NAME_RE = re.compile(r"phase_(\d+)_([a-z_]+)_a(\d+)\.yaml")

# (ticket, run uuid, ordinal, phase, attempt) in the order list must give.
EXPECTED_2143 = [
    ("OMN-2143", RUN_2143, 1, "implement", 1),
    ("OMN-2143", RUN_2143, 1, "implement", 2),
    ("OMN-2143", RUN_2143, 2, "local_review", 1),
    ("OMN-2143", RUN_2143, 3, "create_pr", 1),
    ("OMN-2143", RUN_2143, 5, "ready_for_merge", 1),
]
EXPECTED_2144 = [
    ("OMN-2144", RUN_2144, 1, "implement", 1),
    ("OMN-2144", RUN_2144, 2, "local_review", 1),
    ("OMN-2144", RUN_2144, 2, "local_review", 2),
    ("OMN-2144", RUN_2144, 3, "create_pr", 1),
    ("OMN-2144", RUN_2144, 4, "pr_release_ready", 1),
]
FIXTURE_FILES = sorted(FIXTURES.rglob(SEED_GLOB))


def _key(stored: phaselog.Stored) -> tuple[str, str, int, str, int]:
    r = stored.record
    return (r.ticket_id, r.run_id, r.phase_ordinal, r.phase, r.attempt_number)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for directories)."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


@pytest.fixture
def seed_ledger(seed_root: Path) -> Ledger:
    """A ledger over the copy of the seed tool's files."""
    return phaselog.Ledger(FilesStore(seed_root))


def test_fixtures_are_present() -> None:
    # Guards every parametrized test below against silently running over nothing.
    assert len(FIXTURE_FILES) == 10


def test_short_run_id_maps_to_the_seed_tools_uuid() -> None:
    assert phaselog.normalize_run_id(SHORT_RUN) == RUN_2143
    assert (FIXTURES / "OMN-2143" / RUN_2143).is_dir()


@pytest.mark.parametrize(
    ("ticket", "run", "expected"),
    [("OMN-2143", SHORT_RUN, EXPECTED_2143), ("OMN-2144", RUN_2144, EXPECTED_2144)],
)
def test_list_gives_every_fixture_in_run_ordinal_attempt_order(
    seed_ledger: Ledger, ticket: str, run: str, expected: list[tuple[str, str, int, str, int]]
) -> None:
    page = seed_ledger.list(ticket)
    assert page.damaged == []
    assert [_key(s) for s in page.items] == expected
    assert page.next_after is None
    # Scoped to the run (given as the seed's short id for OMN-2143): the same records.
    assert [_key(s) for s in seed_ledger.list(ticket, run).items] == expected
    assert all(s.record.completed and not s.record.has_metadata for s in page.items)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_each_fixture_reads_back_field_for_field(seed_root: Path, seed_ledger: Ledger, path: Path) -> None:
    on_disk = yaml.safe_load(path.read_bytes())
    run = SHORT_RUN if on_disk["ticket_id"] == "OMN-2143" else on_disk["run_id"]
    stored = seed_ledger.read(on_disk["ticket_id"], run, on_disk["phase"], on_disk["attempt_number"])
    assert stored.record.seed_dict() == on_disk
    assert list(stored.record.seed_dict()) == list(on_disk)  # field order too
    assert stored.location == str(path.relative_to(FIXTURES))
    assert stored.recorded_hash is None  # the seed tool records no hash
    assert stored.warnings == ()
    assert (seed_root / "checkpoints" / stored.location).read_bytes() == path.read_bytes()


def test_read_without_attempt_gives_the_latest_attempt(seed_ledger: Ledger) -> None:
    assert seed_ledger.read("OMN-2143", SHORT_RUN, "implement").record.attempt_number == 2
    assert seed_ledger.read("OMN-2144", RUN_2144, "local_review").record.attempt_number == 2
    assert seed_ledger.read("OMN-2144", RUN_2144, "implement").record.attempt_number == 1


@pytest.mark.parametrize(
    ("ticket", "run", "expected"),
    [("OMN-2143", SHORT_RUN, EXPECTED_2143), ("OMN-2144", RUN_2144, EXPECTED_2144)],
)
def test_every_fixture_validates_without_errors(
    seed_ledger: Ledger, ticket: str, run: str, expected: list[tuple[str, str, int, str, int]]
) -> None:
    for _t, _r, _o, phase, attempt in expected:
        stored, report = seed_ledger.validate(ticket, run, phase, attempt)
        assert stored.record.attempt_number == attempt
        assert report.is_valid, [i.text() for i in report.issues]
        assert report.errors == []


def test_status_of_the_fixtures(seed_ledger: Ledger) -> None:
    st_2143 = seed_ledger.status("OMN-2143", SHORT_RUN)
    assert st_2143.next_phase == "pr_release_ready"
    assert st_2143.completed_phases == ["implement", "local_review", "create_pr", "ready_for_merge"]
    st_2144 = seed_ledger.status("OMN-2144", RUN_2144)
    assert st_2144.next_phase == "ready_for_merge"
    assert st_2144.completed_phases == [
        "implement",
        "local_review",
        "create_pr",
        "pr_release_ready",
    ]
    assert st_2143.warnings == ()
    assert st_2144.warnings == ()


def test_resume_decisions_over_the_fixtures(seed_ledger: Ledger) -> None:
    assert seed_ledger.can_skip_to("OMN-2144", RUN_2144, "ready_for_merge").allowed
    assert seed_ledger.can_skip_to("OMN-2143", SHORT_RUN, "pr_release_ready").allowed
    blocked = seed_ledger.can_skip_to("OMN-2143", SHORT_RUN, "ready_for_merge")
    assert not blocked.allowed
    assert [b.phase for b in blocked.blockers] == ["pr_release_ready"]


def test_verify_over_the_fixtures_is_ok(seed_ledger: Ledger) -> None:
    for ticket in ("OMN-2143", "OMN-2144"):
        report = seed_ledger.verify(ticket)
        assert report.ok, report.problems
        assert report.checked == 5


def test_reading_the_fixtures_writes_nothing(seed_root: Path, seed_ledger: Ledger) -> None:
    before = _snapshot(seed_root)
    for ticket, run in (("OMN-2143", SHORT_RUN), ("OMN-2144", RUN_2144)):
        seed_ledger.list(ticket)
        seed_ledger.status(ticket, run)
        seed_ledger.verify(ticket)
        seed_ledger.can_skip_to(ticket, run, "ready_for_merge")
        seed_ledger.validate(ticket, run, "implement")
    assert _snapshot(seed_root) == before


def _write_like(ledger: Ledger, fixture: Path) -> phaselog.WriteResult:
    d = yaml.safe_load(fixture.read_bytes())
    return ledger.write(
        d["ticket_id"],
        d["run_id"],
        d["phase"],
        d["phase_payload"],
        repo_commit_map=d["repo_commit_map"],
        artifact_paths=d["artifact_paths"],
        attempt=d["attempt_number"],
        timestamp=parse_timestamp(d["timestamp_utc"]),
    )


@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_a_file_phaselog_writes_is_byte_identical_to_the_fixture(tmp_path: Path, fixture: Path) -> None:
    root = tmp_path / "fresh"
    result = _write_like(phaselog.Ledger(FilesStore(root)), fixture)
    written = root / "checkpoints" / result.location
    assert result.location == str(fixture.relative_to(FIXTURES))  # same name, same place
    assert written.read_bytes() == fixture.read_bytes()


def test_all_fixtures_written_in_sequence_stay_byte_identical(tmp_path: Path) -> None:
    # Written one after another, later records get prev_hash and basis: none of it may leak
    # into the seed files.
    root = tmp_path / "fresh"
    ledger = phaselog.Ledger(FilesStore(root))
    for fixture in FIXTURE_FILES:
        _write_like(ledger, fixture)
    for fixture in FIXTURE_FILES:
        written = root / "checkpoints" / fixture.relative_to(FIXTURES)
        assert written.read_bytes() == fixture.read_bytes(), fixture.name
    later = ledger.read("OMN-2143", SHORT_RUN, "implement", 2).record
    assert later.prev_hash is not None  # the metadata exists, just not in the seed file


def _seed_view(root: Path) -> list[Path]:
    """What the seed tool's globs see: files named phase_*.yaml anywhere under the root."""
    return sorted(p for p in root.rglob("*") if fnmatch.fnmatchcase(p.name, SEED_GLOB))


def test_only_checkpoint_files_match_the_seed_glob(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    ledger = phaselog.Ledger(FilesStore(root))
    for fixture in FIXTURE_FILES:
        _write_like(ledger, fixture)
    run = ledger.run("OMN-2144", RUN_2144)
    run.fail("ready_for_merge", "label API returned 502")  # a failed attempt: no seed file
    run.fail("ready_for_merge", "label API returned 503")
    run.write("ready_for_merge", {"label_applied_at": "2026-02-09T18:01:58Z"})
    ledger.write(
        "OMN-2145",
        "b2",
        "implement",
        {
            "branch_name": "feat/x",
            "commit_sha": "a1b2c3d",
            "files_changed": [],
        },
    )
    completed = {s.location for t in ("OMN-2143", "OMN-2144", "OMN-2145") for s in ledger.list(t).completed}
    assert len(completed) == 12
    seen = _seed_view(root / "checkpoints")
    assert {str(p.relative_to(root / "checkpoints")) for p in seen} == completed
    assert not any(fnmatch.fnmatchcase(p.name, SEED_GLOB) for p in root.glob("*"))
    for p in seen:
        # Run directory under a ticket directory, and the seed contract's keys exactly, in order.
        assert p.parent.parent.parent == root / "checkpoints"
        doc = yaml.safe_load(p.read_bytes())
        assert tuple(doc) == SEED_FIELDS, p
        m = _NAME_RE.fullmatch(p.name)
        assert m is not None
        assert (doc["phase"], doc["attempt_number"]) == (m.group(2), int(m.group(3)))
        assert doc["phase_payload"]["phase"] == doc["phase"]
    # The failed attempts live only in phaselog's own files.
    run_dir = root / "checkpoints" / "OMN-2144" / RUN_2144
    assert sorted(p.name for p in run_dir.glob("*ready_for_merge*")) == [
        ".failed_5_ready_for_merge_a1.json",
        ".failed_5_ready_for_merge_a2.json",
        ".meta_5_ready_for_merge_a3.json",
        "phase_5_ready_for_merge_a3.yaml",
    ]


def _add_line(path: Path, after_key: str, line: str) -> None:
    text = path.read_text("utf-8")
    marker = f"\n{after_key}"
    head, sep, tail = text.partition(marker)
    assert sep, f"{after_key} not found"
    end = tail.index("\n") + 1
    path.write_text(head + sep + tail[:end] + line + tail[end:], "utf-8")


def test_an_extra_top_level_key_is_a_validation_error(seed_root: Path, seed_ledger: Ledger) -> None:
    path = seed_root / "checkpoints" / "OMN-2144" / RUN_2144 / "phase_3_create_pr_a1.yaml"
    _add_line(path, "attempt_number:", "reviewer: alice\n")
    assert "reviewer: alice" in path.read_text("utf-8")
    stored, report = seed_ledger.validate("OMN-2144", RUN_2144, "create_pr", 1)
    assert not report.is_valid
    unknown = [i for i in report.errors if i.rule == "unknown_field"]
    assert len(unknown) == 1
    assert "reviewer" in unknown[0].field + unknown[0].message
    assert stored.record.unknown_fields == ("reviewer",)
    # The untouched files still validate: the error is about this file only.
    assert seed_ledger.validate("OMN-2144", RUN_2144, "local_review", 2)[1].is_valid


def test_an_extra_payload_key_is_a_validation_error(seed_root: Path, seed_ledger: Ledger) -> None:
    path = seed_root / "checkpoints" / "OMN-2144" / RUN_2144 / "phase_3_create_pr_a1.yaml"
    _add_line(path, "  pr_number:", "  reviewer: alice\n")
    _stored, report = seed_ledger.validate("OMN-2144", RUN_2144, "create_pr", 1)
    assert not report.is_valid
    assert any(i.rule.startswith("payload_schema") and "reviewer" in i.text() for i in report.errors)


def test_fixture_hashes_are_stable(seed_ledger: Ledger) -> None:
    # A seed file has no recorded hash, so its content hash is all that links later phaselog
    # records to it: it must be a pure function of the bytes.
    first = [s.record.content_hash for s in seed_ledger.list("OMN-2143").items]
    again = [s.record.content_hash for s in seed_ledger.list("OMN-2143").items]
    assert first == again
    assert len(set(first)) == 5
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in first)
