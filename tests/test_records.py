"""Checkpoint records: seed field order, timestamps, content hash, parsing (phaselog.model.records)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from phaselog.model import _yaml
from phaselog.model.decoding import checkpoint_from_seed
from phaselog.model.errors import Corrupt, UnsupportedVersion
from phaselog.model.records import (
    SCHEMA_VERSION,
    SEED_FIELDS,
    BasisEntry,
    Checkpoint,
    PipelineRef,
    canonical_bytes,
    check_schema_version,
    format_timestamp,
    parse_timestamp,
)

FIXTURES = Path(__file__).parent / "fixtures" / "seed-tool-files" / "checkpoints"
FIXTURE_FILES = sorted(FIXTURES.rglob("phase_*.yaml"))
_NAME = re.compile(r"phase_(\d+)_([a-z_]+)_a(\d+)\.yaml")
RUN = "4fa2159f-9c61-5f8b-9ae5-28692b46cbd7"
T0 = datetime(2026, 2, 9, 15, 4, 27, 318204, tzinfo=UTC)


def _fixture(path: Path) -> tuple[bytes, dict[str, Any], int]:
    raw = path.read_bytes()
    m = _NAME.fullmatch(path.name)
    assert m is not None
    return raw, _yaml.load(raw), int(m.group(1))


def _cp(**changes: Any) -> Checkpoint:
    base = Checkpoint(
        ticket_id="OMN-2143",
        run_id=RUN,
        phase="implement",
        phase_ordinal=1,
        attempt_number=1,
        timestamp_utc=T0,
        repo_commit_map={"omnibase_infra": "9c1f0e7"},
        artifact_paths=("docs/design/checkpoint-resume.md",),
        phase_payload={
            "phase": "implement",
            "branch_name": "feat/x",
            "commit_sha": "9c1f0e7",
            "files_changed": ["src/a.py"],
        },
    )
    return base.evolve(**changes)


def _seed(**changes: Any) -> dict[str, Any]:
    data = _cp().seed_dict()
    data.update(changes)
    return data


# -- seed part: field order and content ----------------------------------------------------------
def test_seed_fields_are_the_seed_contract_in_order() -> None:
    assert SEED_FIELDS == (
        "schema_version",
        "run_id",
        "ticket_id",
        "phase",
        "timestamp_utc",
        "repo_commit_map",
        "artifact_paths",
        "attempt_number",
        "phase_payload",
    )


def test_seed_dict_has_exactly_the_seed_fields_in_order() -> None:
    assert tuple(_cp().seed_dict()) == SEED_FIELDS


def test_seed_dict_is_json_typed() -> None:
    d = _cp(
        artifact_paths=("a", "b"),
        phase_payload={"phase": "implement", "when": T0, "nested": ({"t": T0},)},
    ).seed_dict()
    assert d["schema_version"] == SCHEMA_VERSION == "1.0.0"
    assert d["timestamp_utc"] == "2026-02-09T15:04:27.318204Z"
    assert d["artifact_paths"] == ["a", "b"]
    assert type(d["artifact_paths"]) is list
    assert type(d["repo_commit_map"]) is dict
    assert d["phase_payload"] == {
        "phase": "implement",
        "when": "2026-02-09T15:04:27.318204Z",
        "nested": [{"t": "2026-02-09T15:04:27.318204Z"}],
    }
    json.dumps(d, allow_nan=False)  # serialisable as is
    assert _cp(phase_payload=None).seed_dict()["phase_payload"] is None


def test_checkpoints_are_immutable() -> None:
    cp = _cp()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cp.attempt_number = 2  # type: ignore[misc]
    assert cp.evolve(attempt_number=2).attempt_number == 2
    assert cp.attempt_number == 1


# -- timestamps ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ts", "text"),
    [
        (datetime(2026, 2, 9, 15, 4, 27, 318204, tzinfo=UTC), "2026-02-09T15:04:27.318204Z"),
        (datetime(2026, 2, 9, 16, 20, 31, tzinfo=UTC), "2026-02-09T16:20:31Z"),
        (datetime(2026, 2, 11, 10, 15, 40, 999, tzinfo=UTC), "2026-02-11T10:15:40.000999Z"),
        (datetime(2026, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=2))), "2025-12-31T23:00:00Z"),
        (
            datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=timezone(timedelta(hours=-5))),
            "2026-01-01T05:00:00.500000Z",
        ),
        (datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC), "0999-01-02T03:04:05Z"),
    ],
)
def test_timestamps_format_as_the_seed_does(ts: datetime, text: str) -> None:
    assert format_timestamp(ts) == text
    assert parse_timestamp(text) == ts


def test_naive_timestamps_are_refused_when_formatting() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_timestamp(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("2026-02-09T15:04:27", "timezone_aware"),
        ("2026-02-09", "timezone_aware"),
        ("yesterday", "datetime"),
        ("", "datetime"),
        (None, "datetime"),
        (1707491067, "datetime"),
    ],
)
def test_parse_timestamp_refuses_without_timezone(value: Any, rule: str) -> None:
    with pytest.raises(Corrupt) as info:
        parse_timestamp(value, field="label_applied_at")
    assert info.value.context == {"field": "label_applied_at", "rule": rule}


def test_parse_timestamp_converts_to_utc() -> None:
    ts = parse_timestamp("2026-02-09T17:04:27+02:00")
    assert ts.utcoffset() == timedelta(0)
    assert ts == datetime(2026, 2, 9, 15, 4, 27, tzinfo=UTC)


aware = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC))


@given(aware)
def test_timestamp_format_round_trips_and_has_the_seed_shape(ts: datetime) -> None:
    text = format_timestamp(ts)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", text)
    assert ("." in text) == (ts.microsecond != 0)
    assert parse_timestamp(text) == ts
    assert format_timestamp(parse_timestamp(text)) == text


@given(aware, st.integers(min_value=-14 * 60, max_value=14 * 60))
def test_the_same_instant_in_any_zone_formats_the_same(ts: datetime, minutes: int) -> None:
    assume(datetime(2, 1, 1, tzinfo=UTC) < ts < datetime(9999, 1, 1, tzinfo=UTC))
    other = ts.astimezone(timezone(timedelta(minutes=minutes)))
    assert format_timestamp(other) == format_timestamp(ts)
    assert _cp(timestamp_utc=other).content_hash == _cp(timestamp_utc=ts).content_hash


# -- content hash --------------------------------------------------------------------------------
def test_content_hash_is_sha256_of_the_canonical_bytes() -> None:
    cp = _cp(phase_payload={"phase": "implement", "note": "résumé"})
    raw = canonical_bytes(cp)
    assert cp.content_hash == hashlib.sha256(raw).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", cp.content_hash)
    assert "résumé".encode() in raw  # UTF-8, not \\u escapes
    assert b" " not in raw.replace("résumé".encode(), b"")  # no spaces after separators
    doc = json.loads(raw)
    assert set(doc) == {"checkpoint", "phaselog"}
    assert doc["checkpoint"] == cp.seed_dict()
    again = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert raw == again.encode("utf-8")


def test_same_record_gives_the_same_hash() -> None:
    assert _cp().content_hash == _cp().content_hash
    assert _cp() == _cp()
    assert _cp().evolve().content_hash == _cp().content_hash


def test_hash_ignores_dict_insertion_order_but_not_values() -> None:
    a = _cp(repo_commit_map={"x": "1111111", "y": "2222222"})
    b = _cp(repo_commit_map={"y": "2222222", "x": "1111111"})
    assert a.content_hash == b.content_hash
    assert a.content_hash != _cp(repo_commit_map={"x": "2222222", "y": "1111111"}).content_hash


def test_a_seed_checkpoint_hashes_like_one_with_default_metadata() -> None:
    seed = _cp(has_metadata=False)
    assert seed.content_hash == _cp(has_metadata=True).content_hash
    meta = seed.meta_dict()
    assert meta["status"] == "completed"
    for key in ("error", "pipeline", "basis", "prev_hash"):
        assert meta[key] is None
    assert meta["decisions"] == []
    assert meta["phase_ordinal"] == 1


json_leaf = st.one_of(
    st.text(max_size=8),
    st.integers(),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
json_value = st.recursive(
    json_leaf,
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=5), c, max_size=3)),
    max_leaves=8,
)
hexes = st.text(alphabet="0123456789abcdef", min_size=7, max_size=64)
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "ticket_id": st.text(min_size=1, max_size=20),
    "run_id": st.uuids().map(str) | st.text(max_size=20),
    "phase": st.sampled_from(["implement", "local_review", "create_pr", "x"]),
    "phase_ordinal": st.integers(min_value=1, max_value=20),
    "attempt_number": st.integers(min_value=1, max_value=10**6),
    "timestamp_utc": aware,
    "repo_commit_map": st.dictionaries(st.text(max_size=10), hexes, max_size=3),
    "artifact_paths": st.lists(st.text(max_size=10), max_size=3).map(tuple),
    "phase_payload": st.none() | st.dictionaries(st.text(max_size=8), json_value, max_size=4),
    "schema_version": st.sampled_from(["1.0.0", "1.1.0", "0.9.0"]),
    "status": st.sampled_from(["completed", "failed"]),
    "error": st.none() | st.text(max_size=20),
    "pipeline": st.none() | st.builds(PipelineRef, st.text(max_size=8), st.text(max_size=5), hexes),
    "basis": st.none()
    | st.dictionaries(st.text(max_size=8), st.builds(BasisEntry, st.integers(1, 9), hexes), max_size=3),
    "prev_hash": st.none() | hexes,
    "decisions": st.lists(st.dictionaries(st.text(max_size=5), json_value, max_size=3), max_size=2).map(tuple),
}
checkpoints = st.builds(
    Checkpoint,
    **FIELD_VALUES,
)


def test_every_hashed_field_is_covered_by_the_property() -> None:
    hashed = set(SEED_FIELDS) | set(_cp().meta_dict()) | {"phase_ordinal"}
    untested = hashed - set(FIELD_VALUES) - {"forked_from"}
    assert not untested
    assert set(FIELD_VALUES) <= {f.name for f in dataclasses.fields(Checkpoint)}


@given(checkpoints, st.data())
def test_any_field_change_changes_the_hash(cp: Checkpoint, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(FIELD_VALUES)), label="field")
    new = data.draw(FIELD_VALUES[name], label="new value")
    assume(getattr(cp, name) != new)
    changed = cp.evolve(**{name: new})
    assert changed.content_hash != cp.content_hash
    assert cp.evolve(**{name: getattr(cp, name)}).content_hash == cp.content_hash


@given(checkpoints)
def test_hash_survives_the_stored_form(cp: Checkpoint) -> None:
    """Seed part + phaselog part, serialised and parsed again, give the same record and hash."""
    seed = json.loads(json.dumps(cp.seed_dict()))
    meta = json.loads(json.dumps(cp.meta_dict()))
    back, _ = checkpoint_from_seed(seed, phase_ordinal=99, meta=meta)
    assert back.content_hash == cp.content_hash
    assert back.phase_ordinal == cp.phase_ordinal
    assert back.seed_dict() == cp.seed_dict()


# -- parsing the seed tool's files ---------------------------------------------------------------
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_fixture_parses_and_its_seed_dict_round_trips(path: Path) -> None:
    raw, data, ordinal = _fixture(path)
    cp, warnings = checkpoint_from_seed(data, phase_ordinal=ordinal)
    assert warnings == []
    assert cp.phase_ordinal == ordinal
    assert cp.has_metadata is False
    assert cp.unknown_fields == ()
    assert list(cp.seed_dict().items()) == list(data.items())  # same values, same order
    assert _yaml.dump(cp.seed_dict()).encode("utf-8") == raw
    assert f"_a{cp.attempt_number}.yaml" in path.name
    assert path.parent.name == cp.run_id
    assert path.parent.parent.name == cp.ticket_id


def test_fixture_hash_matches_the_documented_canonical_form() -> None:
    path = FIXTURES / "OMN-2143" / RUN / "phase_1_implement_a1.yaml"
    _, data, ordinal = _fixture(path)
    cp, _ = checkpoint_from_seed(data, phase_ordinal=ordinal)
    doc = {"checkpoint": data, "phaselog": cp.meta_dict()}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert cp.content_hash == hashlib.sha256(blob.encode("utf-8")).hexdigest()


def test_reformatting_the_yaml_keeps_the_hash() -> None:
    run = FIXTURES / "OMN-2144" / "5f0c8e2a-3b1d-4c7e-9a2f-6d8b1e4c7a90"
    path = run / "phase_1_implement_a1.yaml"
    raw, data, ordinal = _fixture(path)
    reformatted = yaml.safe_dump(data, default_flow_style=True, sort_keys=True, allow_unicode=False)
    assert reformatted.encode() != raw
    a, _ = checkpoint_from_seed(data, phase_ordinal=ordinal)
    b, _ = checkpoint_from_seed(_yaml.load(reformatted), phase_ordinal=ordinal)
    assert a.content_hash == b.content_hash
    edited = dict(data, attempt_number=2)
    c, _ = checkpoint_from_seed(edited, phase_ordinal=ordinal)
    assert c.content_hash != a.content_hash


def test_unknown_top_level_keys_are_kept_for_validation() -> None:
    cp, _ = checkpoint_from_seed(_seed(extra=1, another="x"), phase_ordinal=1)
    assert cp.unknown_fields == ("extra", "another")
    assert tuple(cp.seed_dict()) == SEED_FIELDS  # never written back


# -- broken records ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ticket_id", "run_id", "phase", "attempt_number"])
def test_missing_required_fields_raise_corrupt_naming_the_field(name: str) -> None:
    data = _seed()
    del data[name]
    with pytest.raises(Corrupt) as info:
        checkpoint_from_seed(data, phase_ordinal=1)
    assert info.value.context == {"field": name, "rule": "required"}
    assert name in info.value.message


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("schema_version", None, "type"),
        ("schema_version", 1, "type"),
        ("schema_version", "one", "semver"),
        ("ticket_id", 2143, "type"),
        ("ticket_id", None, "type"),
        ("run_id", ["x"], "type"),
        ("phase", 1, "type"),
        ("attempt_number", "1", "type"),
        ("attempt_number", 1.0, "type"),
        ("attempt_number", True, "type"),
        ("attempt_number", None, "type"),
        ("timestamp_utc", None, "datetime"),
        ("timestamp_utc", "not a time", "datetime"),
        ("timestamp_utc", "2026-02-09T15:04:27", "timezone_aware"),
        ("repo_commit_map", ["a"], "type"),
        ("repo_commit_map", {"a": 1234567}, "type"),
        ("repo_commit_map", "a", "type"),
        ("artifact_paths", "a.txt", "type"),
        ("artifact_paths", [1], "type"),
        ("artifact_paths", {"a": "b"}, "type"),
        ("phase_payload", ["implement"], "type"),
        ("phase_payload", "implement", "type"),
    ],
)
def test_mistyped_fields_raise_corrupt_naming_the_field(name: str, value: Any, rule: str) -> None:
    with pytest.raises(Corrupt) as info:
        checkpoint_from_seed(_seed(**{name: value}), phase_ordinal=1)
    assert info.value.context["field"] == name
    assert info.value.context["rule"] == rule
    assert name in info.value.message


def test_missing_schema_version_is_corrupt() -> None:
    data = _seed()
    del data["schema_version"]
    with pytest.raises(Corrupt) as info:
        checkpoint_from_seed(data, phase_ordinal=1)
    assert info.value.context["field"] == "schema_version"


def test_missing_timestamp_is_corrupt() -> None:
    data = _seed()
    del data["timestamp_utc"]
    with pytest.raises(Corrupt) as info:
        checkpoint_from_seed(data, phase_ordinal=1)
    assert info.value.context["field"] == "timestamp_utc"


@pytest.mark.parametrize("data", [None, [], "checkpoint", 3])
def test_a_non_mapping_record_is_corrupt(data: Any) -> None:
    with pytest.raises(Corrupt) as info:
        checkpoint_from_seed(data, phase_ordinal=1)
    assert info.value.context["rule"] == "type"


META_OK: dict[str, Any] = {
    "status": "completed",
    "error": None,
    "phase_ordinal": 1,
    "pipeline": None,
    "basis": None,
    "prev_hash": None,
    "decisions": [],
}


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("status", "done", "status"),
        ("phase_ordinal", 0, "phase_ordinal"),
        ("phase_ordinal", "1", "phase_ordinal"),
        ("phase_ordinal", True, "phase_ordinal"),
        ("phase_ordinal", None, "phase_ordinal"),
        ("basis", [], "basis"),
        ("basis", {"implement": {"attempt": "1", "hash": "ab"}}, "basis.implement"),
        ("basis", {"implement": {"attempt": 1}}, "basis.implement"),
        ("prev_hash", 12, "prev_hash"),
        ("error", 12, "error"),
        ("decisions", {"a": 1}, "decisions"),
        ("decisions", ["approve"], "decisions"),
        ("pipeline", {"name": "ticket-pipeline"}, "pipeline"),
    ],
)
def test_broken_metadata_raises_corrupt_naming_the_field(name: str, value: Any, field: str) -> None:
    meta = dict(META_OK, **{name: value})
    with pytest.raises(Corrupt) as info:
        checkpoint_from_seed(_seed(), phase_ordinal=1, meta=meta)
    assert info.value.context["field"] == field


def test_metadata_ordinal_wins_over_the_file_name_ordinal() -> None:
    cp, _ = checkpoint_from_seed(_seed(), phase_ordinal=7, meta=dict(META_OK, phase_ordinal=1))
    assert cp.phase_ordinal == 1
    assert cp.has_metadata is True


# -- schema versions -----------------------------------------------------------------------------
def test_current_version_reads_without_warning() -> None:
    assert check_schema_version("1.0.0") == []


@pytest.mark.parametrize("version", ["0.9.0", "0.1", "1.1.0", "1.0.1"])
def test_other_readable_versions_read_with_a_warning(version: str) -> None:
    cp, warnings = checkpoint_from_seed(_seed(schema_version=version), phase_ordinal=1)
    assert cp.schema_version == version
    assert len(warnings) == 1
    assert version in warnings[0]
    assert "schema_version" in warnings[0]


@pytest.mark.parametrize("version", ["2.0.0", "2", "10.0.0", "3.1.4"])
def test_a_newer_major_version_is_refused_with_upgrade_advice(version: str) -> None:
    with pytest.raises(UnsupportedVersion) as info:
        checkpoint_from_seed(_seed(schema_version=version), phase_ordinal=1)
    err = info.value
    assert "upgrade" in err.message
    assert version in err.message
    assert err.context["found"] == version
    assert err.context["field"] == "schema_version"
    assert err.error_code == "unsupported_version"
    assert isinstance(err, ValueError)
