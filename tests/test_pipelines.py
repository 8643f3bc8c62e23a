"""Pipelines and phases: built-ins, lookup, manifests, payload schemas (phaselog.model.pipelines)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from phaselog.model.errors import PipelineError, UnknownPhase, UsageError
from phaselog.model.pipelines import (
    BUILTIN_DIR,
    DEFAULT_PIPELINE,
    Phase,
    Pipeline,
    available_pipelines,
    builtin,
    check_schemas,
    find_pipeline,
    load_manifest,
    pipeline_from_dict,
    search_dirs,
)

TICKET_PHASES = ["implement", "local_review", "create_pr", "pr_release_ready", "ready_for_merge"]
VIDEO_PHASES = [
    "research",
    "proposal",
    "script",
    "scene_plan",
    "assets",
    "edit",
    "compose",
    "publish",
]
GOOD_IMPLEMENT = {
    "phase": "implement",
    "branch_name": "feat/x",
    "commit_sha": "a1b2c3d",
    "files_changed": ["src/foo.py"],
}


def _manifest(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "mini",
        "version": "1.0.0",
        "description": "A small pipeline.",
        "order": "strict",
        "phases": [
            {
                "name": "fetch",
                "description": "Fetch.",
                "payload_schema": {
                    "type": "object",
                    "properties": {"phase": {"const": "fetch"}, "url": {"type": "string"}},
                },
            },
            {"name": "train", "requires_approval": True},
        ],
    }
    doc.update(changes)
    return doc


def _phase_change(index: int, **changes: Any) -> dict[str, Any]:
    doc = _manifest()
    doc["phases"] = copy.deepcopy(doc["phases"])
    doc["phases"][index].update(changes)
    return doc


def _write(folder: Path, name: str, doc: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make sure an outer PHASELOG_PIPELINES does not leak into lookups."""
    monkeypatch.delenv("PHASELOG_PIPELINES", raising=False)


# -- built-in pipelines -------------------------------------------------------------------------
def test_ticket_pipeline_follows_the_seed_tool() -> None:
    p = builtin("ticket-pipeline")
    assert DEFAULT_PIPELINE == "ticket-pipeline"
    assert p.name == "ticket-pipeline"
    assert p.version == "1.0.0"
    assert p.phase_names == TICKET_PHASES
    assert {ph.name: ph.ordinal for ph in p.phases} == {
        "implement": 1,
        "local_review": 2,
        "create_pr": 3,
        "pr_release_ready": 4,
        "ready_for_merge": 5,
    }
    assert [ph.file_stem for ph in p.phases] == [
        "1_implement",
        "2_local_review",
        "3_create_pr",
        "4_pr_release_ready",
        "5_ready_for_merge",
    ]
    assert not any(ph.requires_approval for ph in p.phases)


def test_default_builtin_is_the_ticket_pipeline() -> None:
    assert builtin() == builtin("ticket-pipeline")


def test_video_pipeline_phases_and_approvals() -> None:
    p = builtin("video-pipeline")
    assert p.phase_names == VIDEO_PHASES
    assert [ph.ordinal for ph in p.phases] == list(range(1, 9))
    gated = {ph.name for ph in p.phases if ph.requires_approval}
    assert gated == {"proposal", "script", "scene_plan", "assets", "publish"}


def test_unknown_builtin_is_a_pipeline_error() -> None:
    with pytest.raises(PipelineError):
        builtin("no-such-pipeline")


@pytest.mark.parametrize("name", ["ticket-pipeline", "video-pipeline"])
def test_builtin_schemas_are_valid_json_schema(name: str) -> None:
    p = builtin(name)
    check_schemas(p)  # raises PipelineError otherwise
    for ph in p.phases:
        assert ph.payload_schema["type"] == "object"
        assert ph.payload_schema["additionalProperties"] is False
        assert ph.payload_schema["properties"]["phase"] == {"const": ph.name}
        assert "phase" in ph.payload_schema["required"]


def test_manifest_hash_is_stable_and_content_sensitive() -> None:
    p = builtin()
    assert len(p.manifest_hash) == 64
    assert p.manifest_hash == load_manifest(BUILTIN_DIR / "ticket-pipeline.yaml").manifest_hash
    assert p.ref.name == "ticket-pipeline"
    assert p.ref.manifest_hash == p.manifest_hash
    other = Pipeline(p.name, "1.0.1", p.phases, p.description, p.order)
    assert other.manifest_hash != p.manifest_hash
    assert builtin("video-pipeline").manifest_hash != p.manifest_hash


# -- phase lookup -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("implement", "implement"),
        ("create_pr", "create_pr"),
        (3, "create_pr"),
        ("3", "create_pr"),
        (1, "implement"),
        ("5", "ready_for_merge"),
        (4, "pr_release_ready"),
    ],
)
def test_phase_lookup_by_name_and_ordinal(key: str | int, name: str) -> None:
    assert builtin().phase(key).name == name


@pytest.mark.parametrize("key", ["deploy", "Implement", "", 0, 6, "6", "-1", -1, "1_implement"])
def test_unknown_phase_lists_the_valid_phases(key: str | int) -> None:
    with pytest.raises(UnknownPhase) as info:
        builtin().phase(key)
    err = info.value
    assert isinstance(err, UsageError)
    assert err.context["field"] == "phase"
    assert err.context["valid_phases"] == TICKET_PHASES
    for i, name in enumerate(TICKET_PHASES, start=1):
        assert f"{i}={name}" in err.message
    assert repr(key) in err.message


def test_phase_by_ordinal_and_earlier() -> None:
    p = builtin()
    assert p.phase_by_ordinal(2) is not None
    assert p.phase_by_ordinal(2).name == "local_review"  # type: ignore[union-attr]
    assert p.phase_by_ordinal(9) is None
    assert [e.name for e in p.earlier(p.phase("create_pr"))] == ["implement", "local_review"]
    assert p.earlier(p.phase("implement")) == ()


# -- manifest lookup ----------------------------------------------------------------------------
def test_root_pipelines_folder_is_searched_first(tmp_path: Path, no_env: None) -> None:
    _write(tmp_path / "pipelines", "mini", _manifest())
    p = find_pipeline("mini", tmp_path)
    assert p.name == "mini"
    assert p.phase_names == ["fetch", "train"]
    assert p.phase("train").requires_approval is True
    assert p.source == str(tmp_path / "pipelines" / "mini.yaml")


def test_root_manifest_shadows_a_builtin(tmp_path: Path, no_env: None) -> None:
    _write(tmp_path / "pipelines", "ticket-pipeline", _manifest(name="ticket-pipeline"))
    assert find_pipeline("ticket-pipeline", tmp_path).phase_names == ["fetch", "train"]
    assert find_pipeline("ticket-pipeline").phase_names == TICKET_PHASES


def test_env_folders_are_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "first", _manifest(name="first"))
    _write(b, "second", _manifest(name="second"))
    _write(b, "first", _manifest(name="first", version="2.0.0"))
    monkeypatch.setenv("PHASELOG_PIPELINES", f"{a}{os.pathsep}{b}")
    assert find_pipeline("second").name == "second"
    assert find_pipeline("first").version == "1.0.0"  # the first folder wins
    assert search_dirs(None) == [a, b, BUILTIN_DIR]
    assert search_dirs(tmp_path) == [tmp_path / "pipelines", a, b, BUILTIN_DIR]
    names = [p.name for p in available_pipelines()]
    assert names.count("first") == 1
    assert {"first", "second", "ticket-pipeline", "video-pipeline"} <= set(names)


def test_root_wins_over_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "env", "mini", _manifest(version="env"))
    _write(tmp_path / "root" / "pipelines", "mini", _manifest(version="root"))
    monkeypatch.setenv("PHASELOG_PIPELINES", str(tmp_path / "env"))
    assert find_pipeline("mini", tmp_path / "root").version == "root"


def test_edited_manifest_is_reloaded(tmp_path: Path, no_env: None) -> None:
    path = _write(tmp_path / "pipelines", "mini", _manifest(version="1"))
    assert find_pipeline("mini", tmp_path).version == "1"
    path.write_text(yaml.safe_dump(_manifest(version="2")), encoding="utf-8")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert find_pipeline("mini", tmp_path).version == "2"


def test_missing_pipeline_names_the_folders(tmp_path: Path, no_env: None) -> None:
    with pytest.raises(PipelineError) as info:
        find_pipeline("nope", tmp_path)
    assert info.value.context["pipeline"] == "nope"
    assert str(tmp_path / "pipelines") in info.value.message


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b", "", ".hidden", "x" * 65])
def test_unsafe_pipeline_names_are_refused(tmp_path: Path, name: str, no_env: None) -> None:
    with pytest.raises(PipelineError):
        find_pipeline(name, tmp_path)


def test_version_numbers_are_read_as_strings() -> None:
    assert pipeline_from_dict(_manifest(version=2)).version == "2"
    assert pipeline_from_dict(_manifest(version=1.5)).version == "1.5"


# -- malformed manifests ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([], "manifest"),
        ("name: x", "manifest"),
        (_manifest(name=None), "name"),
        (_manifest(name="bad name"), "name"),
        (_manifest(name="../up"), "name"),
        (_manifest(version=""), "version"),
        (_manifest(version=None), "version"),
        (_manifest(version=True), "version"),
        (_manifest(order="random"), "order"),
        (_manifest(phases=[]), "phases"),
        (_manifest(phases="fetch"), "phases"),
        (_manifest(phases=None), "phases"),
        (_manifest(phases=["fetch"]), "phases[0]"),
        (_phase_change(1, name="fetch"), "phases[1].name"),
        (_phase_change(0, name="Fetch"), "phases[0].name"),
        (_phase_change(0, name="1fetch"), "phases[0].name"),
        (_phase_change(0, name="fetch-data"), "phases[0].name"),
        (_phase_change(0, name=""), "phases[0].name"),
        (_phase_change(0, name=None), "phases[0].name"),
        (_phase_change(0, name="x" * 64), "phases[0].name"),
        (_phase_change(1, requires_approval="yes"), "phases[1].requires_approval"),
        (_phase_change(1, requires_approval=1), "phases[1].requires_approval"),
        (_phase_change(0, payload_schema=["type", "object"]), "phases[0].payload_schema"),
        (_phase_change(0, payload_schema="object"), "phases[0].payload_schema"),
        (_phase_change(1, gate="manual"), "phases[1].gate"),
    ],
)
def test_malformed_manifests_name_the_field(doc: Any, field: str) -> None:
    with pytest.raises(PipelineError) as info:
        pipeline_from_dict(doc, source="test.yaml")
    assert info.value.context["field"] == field
    assert "test.yaml" in info.value.message


def test_duplicate_phase_names_are_refused() -> None:
    with pytest.raises(PipelineError) as info:
        pipeline_from_dict(_phase_change(1, name="fetch"))
    assert "duplicate" in info.value.message
    assert "fetch" in info.value.message


def test_unknown_phase_keys_are_named() -> None:
    with pytest.raises(PipelineError) as info:
        pipeline_from_dict(_phase_change(1, gate="manual", owner="me"))
    assert "unknown keys: gate, owner" in info.value.message


def test_unknown_top_level_keys_are_named() -> None:
    with pytest.raises(PipelineError) as info:
        pipeline_from_dict(_manifest(stages=[], owner="me"))
    assert "stages" in info.value.message
    assert "owner" in info.value.message


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "objekt"},
        {"type": "object", "required": "phase"},
        {"type": "object", "properties": {"n": {"minimum": "one"}}},
        {"type": "object", "additionalProperties": "no"},
    ],
)
def test_invalid_json_schema_is_refused_by_check_schemas(schema: dict[str, Any]) -> None:
    p = pipeline_from_dict(_phase_change(1, payload_schema=schema), source="bad.yaml")
    with pytest.raises(PipelineError) as info:
        check_schemas(p)
    assert "phases[1].payload_schema" in info.value.message
    assert info.value.context["field"] == "phases[1].payload_schema"
    assert "bad.yaml" in info.value.message
    with pytest.raises(PipelineError):  # and on first use
        p.phase("train").check_payload({"phase": "train"})


def test_manifest_files_that_are_not_yaml_mappings(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n", encoding="utf-8")
    with pytest.raises(PipelineError) as info:
        load_manifest(bad)
    assert info.value.context["path"] == str(bad)
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text("name: !!python/object:os.system x\n", encoding="utf-8")
    with pytest.raises(PipelineError):
        load_manifest(tagged)
    with pytest.raises(PipelineError) as missing:
        load_manifest(tmp_path / "missing.yaml")
    assert "not found" in missing.value.message


# -- payload schemas ----------------------------------------------------------------------------
def _problems(phase: str, payload: Any, pipeline: str = "ticket-pipeline") -> list[tuple[str, str]]:
    return [(path, rule) for path, rule, _ in builtin(pipeline).phase(phase).check_payload(payload)]


def test_a_good_payload_has_no_problems() -> None:
    assert _problems("implement", GOOD_IMPLEMENT) == []
    assert (
        _problems(
            "local_review",
            {
                "phase": "local_review",
                "iteration_count": 1,
                "issue_fingerprints": [],
                "last_clean_sha": "a1b2c3d",
            },
        )
        == []
    )
    assert (
        _problems(
            "create_pr",
            {
                "phase": "create_pr",
                "pr_url": "https://github.com/o/r/pull/1",
                "pr_number": 1,
                "head_sha": "a1b2c3d",
            },
        )
        == []
    )
    assert (
        _problems(
            "ready_for_merge",
            {
                "phase": "ready_for_merge",
                "label_applied_at": "2026-02-09T18:01:58Z",
            },
        )
        == []
    )


@pytest.mark.parametrize(
    ("phase", "change", "expected"),
    [
        ("implement", {"commit_sha": "XYZ"}, ("phase_payload.commit_sha", "format:git-sha")),
        ("implement", {"commit_sha": "A1B2C3D"}, ("phase_payload.commit_sha", "format:git-sha")),
        (
            "implement",
            {"files_changed": ["/etc/passwd"]},
            ("phase_payload.files_changed.0", "format:relative-path"),
        ),
        (
            "implement",
            {"files_changed": ["ok.py", "../up.py"]},
            ("phase_payload.files_changed.1", "format:relative-path"),
        ),
        (
            "implement",
            {"files_changed": ["a\\b.py"]},
            ("phase_payload.files_changed.0", "format:relative-path"),
        ),
        ("create_pr", {"pr_url": "not a url"}, ("phase_payload.pr_url", "format:uri")),
        ("create_pr", {"pr_url": "github.com/o/r/pull/1"}, ("phase_payload.pr_url", "format:uri")),
        ("create_pr", {"pr_number": 0}, ("phase_payload.pr_number", "minimum")),
        ("create_pr", {"pr_number": -5}, ("phase_payload.pr_number", "minimum")),
        ("create_pr", {"pr_number": "1"}, ("phase_payload.pr_number", "type")),
        ("local_review", {"iteration_count": 0}, ("phase_payload.iteration_count", "minimum")),
        (
            "local_review",
            {"last_clean_sha": "abc"},
            ("phase_payload.last_clean_sha", "format:git-sha"),
        ),
        (
            "ready_for_merge",
            {"label_applied_at": "2026-02-09T18:01:58"},
            ("phase_payload.label_applied_at", "format:date-time"),
        ),
        (
            "ready_for_merge",
            {"label_applied_at": "tomorrow"},
            ("phase_payload.label_applied_at", "format:date-time"),
        ),
        ("implement", {"extra": 1}, ("phase_payload", "additionalProperties")),
        ("implement", {"phase": "create_pr"}, ("phase_payload.phase", "const")),
        ("implement", {"branch_name": ""}, ("phase_payload.branch_name", "minLength")),
    ],
)
def test_payload_schema_is_enforced(phase: str, change: dict[str, Any], expected: tuple[str, str]) -> None:
    base = {
        "implement": GOOD_IMPLEMENT,
        "local_review": {
            "phase": "local_review",
            "iteration_count": 1,
            "issue_fingerprints": [],
            "last_clean_sha": "a1b2c3d",
        },
        "create_pr": {
            "phase": "create_pr",
            "pr_url": "https://x.test/pull/1",
            "pr_number": 1,
            "head_sha": "a1b2c3d",
        },
        "ready_for_merge": {"phase": "ready_for_merge", "label_applied_at": "2026-02-09T18:01:58Z"},
    }[phase]
    assert _problems(phase, base) == []
    assert _problems(phase, {**base, **change}) == [expected]


def test_format_problems_carry_the_reason() -> None:
    problems = builtin().phase("implement").check_payload({**GOOD_IMPLEMENT, "commit_sha": "XYZ"})
    assert len(problems) == 1
    assert "7-40 lowercase hex" in problems[0][2]


def test_missing_required_payload_keys() -> None:
    problems = _problems("implement", {"phase": "implement"})
    assert problems == [("phase_payload", "required")] * 3


def test_video_payload_formats() -> None:
    good = {
        "phase": "publish",
        "url": "https://video.test/v/1",
        "published_at": "2026-03-01T10:00:00Z",
    }
    assert _problems("publish", good, "video-pipeline") == []
    assert _problems("publish", {**good, "url": "v/1"}, "video-pipeline") == [("phase_payload.url", "format:uri")]
    assert _problems("script", {"phase": "script", "script_path": "C:/x.md", "word_count": 5}, "video-pipeline") == [
        ("phase_payload.script_path", "format:relative-path")
    ]


def test_a_phase_without_schema_accepts_anything() -> None:
    p = pipeline_from_dict(_manifest())
    assert p.phase("train").check_payload({"anything": [1, 2]}) == []


# -- payload order ------------------------------------------------------------------------------
def test_order_payload_puts_phase_first_then_schema_order_then_the_rest() -> None:
    ph = builtin().phase("implement")
    payload = {
        "zzz": 1,
        "files_changed": [],
        "commit_sha": "a1b2c3d",
        "phase": "implement",
        "branch_name": "b",
        "aaa": 2,
    }
    ordered = ph.order_payload(payload)
    assert list(ordered) == ["phase", "branch_name", "commit_sha", "files_changed", "zzz", "aaa"]
    assert ordered == payload


def test_order_payload_without_phase_key() -> None:
    ph = builtin().phase("create_pr")
    ordered = ph.order_payload({"head_sha": "a1b2c3d", "pr_number": 1, "pr_url": "https://x.test"})
    assert list(ordered) == ["pr_url", "pr_number", "head_sha"]


def test_order_payload_matches_the_seed_files() -> None:
    ph = Phase("local_review", 2, payload_schema=builtin().phase("local_review").payload_schema)
    payload = {
        "last_clean_sha": "4801973",
        "issue_fingerprints": [],
        "iteration_count": 3,
        "phase": "local_review",
    }
    assert list(ph.order_payload(payload)) == [
        "phase",
        "iteration_count",
        "issue_fingerprints",
        "last_clean_sha",
    ]


def test_order_payload_puts_phase_first_even_when_the_schema_lists_it_later() -> None:
    ph = Phase(
        "fetch",
        1,
        payload_schema={
            "type": "object",
            "properties": {"url": {"type": "string"}, "phase": {"const": "fetch"}},
        },
    )
    ordered = ph.order_payload({"extra": 0, "url": "https://x.test", "phase": "fetch"})
    assert list(ordered) == ["phase", "url", "extra"]
    no_schema = Phase("fetch", 1)
    assert list(no_schema.order_payload({"b": 1, "phase": "fetch", "a": 2})) == ["phase", "b", "a"]
