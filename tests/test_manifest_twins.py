"""The built-in manifests' JSON twins (loaded at run time) match their YAML sources."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from phaselog.model.pipelines import BUILTIN_DIR, builtin, load_manifest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gen_manifest_json.py"


def _render() -> object:
    spec = importlib.util.spec_from_file_location("gen_manifest_json", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.render


@pytest.mark.parametrize("name", ["ticket-pipeline", "video-pipeline"])
def test_json_twin_is_up_to_date(name: str) -> None:
    render = _render()
    twin = BUILTIN_DIR / f"{name}.json"
    assert twin.read_text("utf-8") == render(BUILTIN_DIR / f"{name}.yaml"), "run `make docs` to regenerate"  # type: ignore[operator]


@pytest.mark.parametrize("name", ["ticket-pipeline", "video-pipeline"])
def test_builtin_loads_the_same_pipeline_from_either_file(name: str) -> None:
    from_yaml = load_manifest(BUILTIN_DIR / f"{name}.yaml")
    from_json = builtin(name)
    assert from_json.manifest_hash == from_yaml.manifest_hash
    assert from_json.phases == from_yaml.phases
    assert json.loads((BUILTIN_DIR / f"{name}.json").read_text())["name"] == name
