"""Validation rules: severity, field path and rule name for each (phaselog.model.validation)."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from phaselog.model import _yaml
from phaselog.model.decoding import checkpoint_from_seed
from phaselog.model.pipelines import builtin
from phaselog.model.records import BasisEntry, Checkpoint
from phaselog.model.validation import Issue, Report, check_artifacts, check_links, check_record

FIXTURES = Path(__file__).parent / "fixtures" / "seed-tool-files" / "checkpoints"
RUN = "4fa2159f-9c61-5f8b-9ae5-28692b46cbd7"
NOW = datetime(2026, 2, 9, 18, 0, 0, tzinfo=UTC)
T0 = NOW - timedelta(hours=1)
PAYLOADS: dict[str, dict[str, Any]] = {
    "implement": {
        "phase": "implement",
        "branch_name": "feat/x",
        "commit_sha": "a1b2c3d",
        "files_changed": ["src/foo.py"],
    },
    "local_review": {
        "phase": "local_review",
        "iteration_count": 1,
        "issue_fingerprints": [],
        "last_clean_sha": "a1b2c3d",
    },
    "create_pr": {
        "phase": "create_pr",
        "pr_url": "https://github.com/o/r/pull/1",
        "pr_number": 1,
        "head_sha": "a1b2c3d",
    },
    "pr_release_ready": {
        "phase": "pr_release_ready",
        "last_review_sha": "a1b2c3d",
        "issue_fingerprints": [],
    },
    "ready_for_merge": {"phase": "ready_for_merge", "label_applied_at": "2026-02-09T18:01:58Z"},
}
PIPELINE = builtin("ticket-pipeline")


def _cp(phase: str = "implement", **changes: Any) -> Checkpoint:
    cp = Checkpoint(
        ticket_id="OMN-2143",
        run_id=RUN,
        phase=phase,
        phase_ordinal=PIPELINE.phase(phase).ordinal,
        attempt_number=1,
        timestamp_utc=T0,
        repo_commit_map={"omnibase_infra": "9c1f0e7"},
        artifact_paths=("docs/design.md",),
        phase_payload=dict(PAYLOADS[phase]),
    )
    return cp.evolve(**changes)


def _issues(rep: Report) -> list[tuple[str, str, str]]:
    return [(i.severity, i.field, i.rule) for i in rep.issues]


def _check(cp: Checkpoint, now: datetime = NOW) -> list[tuple[str, str, str]]:
    return _issues(check_record(cp, PIPELINE, now=now))


# -- the baseline is clean -----------------------------------------------------------------------
@pytest.mark.parametrize("phase", list(PAYLOADS))
def test_a_good_record_has_no_issues(phase: str) -> None:
    rep = check_record(_cp(phase), PIPELINE, now=NOW)
    assert rep.issues == []
    assert rep.is_valid


@pytest.mark.parametrize(
    "path", sorted(FIXTURES.rglob("phase_*.yaml")), ids=lambda p: f"{p.parent.parent.name}/{p.name}"
)
def test_the_seed_tools_files_validate_cleanly(path: Path) -> None:
    ordinal = int(path.name.split("_")[1])
    cp, _ = checkpoint_from_seed(_yaml.load(path.read_bytes()), phase_ordinal=ordinal)
    assert check_record(cp, PIPELINE, now=NOW + timedelta(days=3)).issues == []


# -- one rule at a time ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"schema_version": "0.9.0"}, [("warning", "schema_version", "schema_version")]),
        ({"schema_version": "1.1.0"}, [("warning", "schema_version", "schema_version")]),
        ({"unknown_fields": ("extra",)}, [("error", "extra", "unknown_field")]),
        (
            {"unknown_fields": ("a", "b")},
            [("error", "a", "unknown_field"), ("error", "b", "unknown_field")],
        ),
        # ticket ids: the issue carries the identifier rule that was broken (phaselog.model.ids)
        ({"ticket_id": "a/b"}, [("error", "ticket_id", "charset")]),
        ({"ticket_id": "../x"}, [("error", "ticket_id", "leading_char")]),
        ({"ticket_id": "a..b"}, [("error", "ticket_id", "traversal")]),
        ({"ticket_id": ""}, [("error", "ticket_id", "non_empty")]),
        ({"ticket_id": "x" * 65}, [("error", "ticket_id", "max_length")]),
        ({"run_id": "a1b2c3d4"}, [("error", "run_id", "run_id")]),
        ({"run_id": RUN.upper()}, [("error", "run_id", "run_id")]),
        ({"run_id": "{" + RUN + "}"}, [("error", "run_id", "run_id")]),
        ({"phase_ordinal": 2}, [("error", "phase", "phase_ordinal")]),
        ({"attempt_number": 0}, [("error", "attempt_number", "attempt_number")]),
        ({"attempt_number": -3}, [("error", "attempt_number", "attempt_number")]),
        (
            {"repo_commit_map": {"omnibase_infra": "XYZ"}},
            [("error", "repo_commit_map.omnibase_infra", "git-sha")],
        ),
        (
            {"repo_commit_map": {"ok": "a1b2c3d", "bad": "a1b2c3"}},
            [("error", "repo_commit_map.bad", "git-sha")],
        ),
        (
            {"repo_commit_map": {"": "a1b2c3d"}},
            [("error", "repo_commit_map", "repo_name")],
        ),
        ({"artifact_paths": ("/etc/passwd",)}, [("error", "artifact_paths[0]", "relative-path")]),
        (
            {"artifact_paths": ("ok.txt", "../up.txt")},
            [("error", "artifact_paths[1]", "relative-path")],
        ),
        ({"artifact_paths": ("a\\b",)}, [("error", "artifact_paths[0]", "relative-path")]),
        ({"artifact_paths": ("C:/x",)}, [("error", "artifact_paths[0]", "relative-path")]),
        (
            {"artifact_paths": ("a.txt", "b.txt", "a.txt")},
            [("warning", "artifact_paths[2]", "duplicate_path")],
        ),
        ({"phase_payload": None}, [("error", "phase_payload", "required")]),
    ],
)
def test_each_rule_reports_severity_field_and_rule(
    changes: dict[str, Any], expected: list[tuple[str, str, str]]
) -> None:
    assert _check(_cp(**changes)) == expected


def test_unknown_phase_message_lists_the_valid_phases() -> None:
    cp = _cp().evolve(phase="deploy", phase_payload={"phase": "deploy"})
    rep = check_record(cp, PIPELINE, now=NOW)
    assert _issues(rep) == [("error", "phase", "unknown_phase")]
    assert "implement" in rep.issues[0].message
    assert "ready_for_merge" in rep.issues[0].message


def test_phase_payload_must_agree_with_the_header() -> None:
    cp = _cp(phase_payload={**PAYLOADS["implement"], "phase": "create_pr"})
    issues = _check(cp)
    assert ("error", "phase_payload.phase", "phase_payload_agreement") in issues
    assert all(sev == "error" and f.startswith("phase_payload") for sev, f, _ in issues)


def test_phase_payload_without_phase_key() -> None:
    payload = {k: v for k, v in PAYLOADS["implement"].items() if k != "phase"}
    issues = _check(_cp(phase_payload=payload))
    assert ("error", "phase_payload.phase", "phase_payload_agreement") in issues
    assert ("error", "phase_payload", "payload_schema:required") in issues


@pytest.mark.parametrize(
    ("phase", "change", "expected"),
    [
        (
            "implement",
            {"commit_sha": "nothex!"},
            ("phase_payload.commit_sha", "payload_schema:format:git-sha"),
        ),
        (
            "implement",
            {"files_changed": ["/abs"]},
            ("phase_payload.files_changed.0", "payload_schema:format:relative-path"),
        ),
        ("create_pr", {"pr_url": "pull/1"}, ("phase_payload.pr_url", "payload_schema:format:uri")),
        ("create_pr", {"pr_number": 0}, ("phase_payload.pr_number", "payload_schema:minimum")),
        (
            "local_review",
            {"iteration_count": 0},
            ("phase_payload.iteration_count", "payload_schema:minimum"),
        ),
        (
            "ready_for_merge",
            {"label_applied_at": "2026-02-09T18:01:58"},
            ("phase_payload.label_applied_at", "payload_schema:format:date-time"),
        ),
        (
            "pr_release_ready",
            {"surprise": True},
            ("phase_payload", "payload_schema:additionalProperties"),
        ),
    ],
)
def test_payload_schema_errors(phase: str, change: dict[str, Any], expected: tuple[str, str]) -> None:
    cp = _cp(phase, phase_payload={**PAYLOADS[phase], **change})
    assert _check(cp) == [("error", *expected)]


def test_payload_with_tuples_is_checked_like_lists() -> None:
    cp = _cp(phase_payload={**PAYLOADS["implement"], "files_changed": ("a.py", "b.py")})
    assert _check(cp) == []


# -- timestamps ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ahead", "warned"),
    [
        (timedelta(seconds=-3600), False),
        (timedelta(0), False),
        (timedelta(seconds=30), False),
        (timedelta(seconds=59, microseconds=999999), False),
        (timedelta(seconds=60), False),  # "more than 60 s"
        (timedelta(seconds=60, microseconds=1), True),
        (timedelta(seconds=61), True),
        (timedelta(days=365), True),
    ],
)
def test_timestamp_in_the_future(ahead: timedelta, warned: bool) -> None:
    issues = _check(_cp(timestamp_utc=NOW + ahead), now=NOW)
    if warned:
        assert issues == [("warning", "timestamp_utc", "timestamp_future")]
    else:
        assert issues == []


def test_future_warning_does_not_make_the_record_invalid() -> None:
    rep = check_record(_cp(timestamp_utc=NOW + timedelta(hours=1)), PIPELINE, now=NOW)
    assert rep.is_valid
    assert len(rep.warnings) == 1
    assert rep.errors == []


# -- failed attempts ----------------------------------------------------------------------------
@pytest.mark.parametrize("error", [None, ""])
def test_failed_records_need_an_error_text(error: str | None) -> None:
    cp = _cp(status="failed", error=error, phase_payload=None)
    assert _check(cp) == [("error", "error", "failed_error")]


def test_failed_record_with_error_text_is_valid() -> None:
    cp = _cp(status="failed", error="tests failed: 3", phase_payload=None)
    assert _check(cp) == []


def test_failed_records_skip_the_payload_schema_but_not_agreement() -> None:
    partial = {"phase": "implement", "branch_name": "feat/x"}
    assert _check(_cp(status="failed", error="boom", phase_payload=partial)) == []
    wrong = {"phase": "create_pr"}
    assert _check(_cp(status="failed", error="boom", phase_payload=wrong)) == [
        ("error", "phase_payload.phase", "phase_payload_agreement")
    ]


# -- links --------------------------------------------------------------------------------------
def _a2(prev: Checkpoint, **changes: Any) -> Checkpoint:
    return _cp(
        attempt_number=2,
        timestamp_utc=prev.timestamp_utc + timedelta(minutes=5),
        prev_hash=prev.content_hash,
    ).evolve(**changes)


def test_matching_links_are_clean() -> None:
    a1 = _cp()
    impl = a1
    pr = _cp("create_pr", basis={"implement": BasisEntry(1, impl.content_hash)})
    assert _issues(check_links(_a2(a1), previous=a1, lookup={})) == []
    assert _issues(check_links(pr, previous=None, lookup={("implement", 1): impl})) == []
    assert _issues(check_links(a1, previous=None, lookup={})) == []


def test_prev_hash_without_a_previous_attempt() -> None:
    cp = _cp(prev_hash="ab" * 32)
    rep = check_links(cp, previous=None, lookup={})
    assert _issues(rep) == [("error", "prev_hash", "prev_hash")]


def test_prev_hash_not_matching_the_previous_attempt() -> None:
    a1 = _cp()
    a2 = _a2(a1, prev_hash=_cp(error="edited").content_hash)
    rep = check_links(a2, previous=a1, lookup={})
    assert _issues(rep) == [("error", "prev_hash", "prev_hash")]
    assert a1.content_hash[:12] in rep.issues[0].message
    missing = _a2(a1, prev_hash=None)
    assert _issues(check_links(missing, previous=a1, lookup={})) == [("error", "prev_hash", "prev_hash")]


def test_basis_naming_a_record_that_is_not_stored() -> None:
    cp = _cp("create_pr", basis={"implement": BasisEntry(2, "ab" * 32)})
    assert _issues(check_links(cp, previous=None, lookup={("implement", 2): None})) == [
        ("error", "basis.implement", "basis")
    ]
    assert _issues(check_links(cp, previous=None, lookup={})) == [("error", "basis.implement", "basis")]


def test_basis_whose_record_changed() -> None:
    impl = _cp()
    cp = _cp(
        "create_pr",
        basis={
            "implement": BasisEntry(1, impl.content_hash),
            "local_review": BasisEntry(1, "cd" * 32),
        },
    )
    review = _cp("local_review")
    lookup = {("implement", 1): impl, ("local_review", 1): review}
    rep = check_links(cp, previous=None, lookup=lookup)
    assert _issues(rep) == [("error", "basis.local_review", "basis")]


def test_timestamp_order_is_a_warning() -> None:
    a1 = _cp()
    a2 = _a2(a1, timestamp_utc=a1.timestamp_utc - timedelta(seconds=1))
    assert _issues(check_links(a2, previous=a1, lookup={})) == [("warning", "timestamp_utc", "timestamp_order")]
    same = _a2(a1, timestamp_utc=a1.timestamp_utc)
    assert _issues(check_links(same, previous=a1, lookup={})) == []


def test_seed_checkpoints_carry_no_links_but_timestamps_are_still_checked() -> None:
    a1 = _cp(has_metadata=False)
    a2 = _cp(has_metadata=False, attempt_number=2, timestamp_utc=T0 - timedelta(hours=1))
    assert _issues(check_links(a2, previous=a1, lookup={})) == [("warning", "timestamp_utc", "timestamp_order")]
    later = a2.evolve(timestamp_utc=T0 + timedelta(hours=1))
    assert _issues(check_links(later, previous=a1, lookup={})) == []


# -- artifacts ----------------------------------------------------------------------------------
def test_artifacts_present_under_the_root(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "résumé-flow.md").write_text("x", encoding="utf-8")
    (tmp_path / "b.txt").write_text("y", encoding="utf-8")
    cp = _cp(artifact_paths=("docs/résumé-flow.md", "b.txt", "docs"))
    assert _issues(check_artifacts(cp, tmp_path)) == []


def test_missing_artifacts(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text("y", encoding="utf-8")
    cp = _cp(artifact_paths=("a.txt", "b.txt", "c/d.txt"))
    rep = check_artifacts(cp, tmp_path)
    assert _issues(rep) == [
        ("error", "artifact_paths[0]", "artifact_missing"),
        ("error", "artifact_paths[2]", "artifact_missing"),
    ]
    assert not rep.is_valid


def test_artifacts_leaving_the_root_through_a_symlink(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("s", encoding="utf-8")
    os.symlink(outside, root / "link")
    cp = _cp(artifact_paths=("link/secret.txt",))
    assert _issues(check_artifacts(cp, root)) == [("error", "artifact_paths[0]", "artifact_outside_root")]


def test_invalid_artifact_paths_are_left_to_check_record(tmp_path: Path) -> None:
    cp = _cp(artifact_paths=("../escape.txt", "/etc/passwd"))
    assert _issues(check_artifacts(cp, tmp_path)) == []
    assert [i for i in _check(cp) if i[2] == "relative-path"] == [
        ("error", "artifact_paths[0]", "relative-path"),
        ("error", "artifact_paths[1]", "relative-path"),
    ]


# -- report -------------------------------------------------------------------------------------
def test_report_and_issue_shapes() -> None:
    cp = _cp(attempt_number=0, timestamp_utc=NOW + timedelta(hours=1))
    rep = check_record(cp, PIPELINE, now=NOW)
    assert [i.rule for i in rep.errors] == ["attempt_number"]
    assert [i.rule for i in rep.warnings] == ["timestamp_future"]
    issue = rep.errors[0]
    assert issue.to_json() == {
        "severity": "error",
        "field": "attempt_number",
        "rule": "attempt_number",
        "message": issue.message,
    }
    assert re.fullmatch(r"attempt_number: .+ \[attempt_number\]", issue.text())
    merged = Report().extend(rep)
    assert merged.issues == rep.issues
    assert Issue("warning", "f", "r", "m").text() == "f: m [r]"
