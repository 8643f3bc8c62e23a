"""The dev/CI lock (requirements-dev.lock) pins what pyproject.toml asks for; scripts/check_lock.py says so."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_lock", REPO / "scripts" / "check_lock.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROJECT = {
    "name": "phaselog",
    "dependencies": ["click>=8.1,<9", "PyYAML>=6.0.1,<7"],
    "optional-dependencies": {"dev": ["phaselog[ui]", "pytest>=8,<10"], "ui": ["jinja2>=3.1,<4"]},
}


def test_a_lock_that_pins_every_requirement_in_range_has_no_problem() -> None:
    check = _checker()
    lock = "click==8.5.1\n    # via phaselog\npyyaml==6.0.2\npytest==9.0.0\nJinja2==3.1.6\n"
    assert check.problems(PROJECT, check.pins(lock)) == []


@pytest.mark.parametrize(
    ("lock", "expected"),
    [
        ("click==9.0.0\npyyaml==6.0.2\npytest==9.0.0\njinja2==3.1.6\n", "pins click==9.0.0, outside the range"),
        ("click==8.2.0\npytest==9.0.0\njinja2==3.1.6\n", "PyYAML<7,>=6.0.1 (pyproject.toml [dependencies])"),
        ("click==8.2.0\npyyaml==6.0.2\npytest==9.0.0\n", "[optional-dependencies.ui]) is not pinned"),
    ],
)
def test_a_lock_out_of_step_with_pyproject_names_the_requirement(lock: str, expected: str) -> None:
    check = _checker()
    found = check.problems(PROJECT, check.pins(lock))
    assert len(found) == 1
    assert expected in found[0]


def test_the_projects_own_name_is_never_required_of_the_lock() -> None:
    check = _checker()
    names = [req.name for _, req in check.requirements(PROJECT)]
    assert "phaselog" not in names
    assert names == ["click", "PyYAML", "pytest", "jinja2"]


def test_the_committed_lock_matches_pyproject_and_holds_no_local_path() -> None:
    script = str(REPO / "scripts" / "check_lock.py")
    ran = subprocess.run([sys.executable, script], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    text = (REPO / "requirements-dev.lock").read_text(encoding="utf-8")
    assert "file://" not in text  # pip-compile writes the project itself as a path unless told not to
    assert "--find-links" not in text
    assert "--index-url" not in text


def test_the_environment_under_test_is_the_locked_one() -> None:
    from importlib.metadata import version

    check = _checker()
    pinned = check.pins((REPO / "requirements-dev.lock").read_text(encoding="utf-8"))
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for extra in ("dev",):
        for text in project["optional-dependencies"][extra]:
            name = text.split("[", 1)[0].split(">", 1)[0].split("<", 1)[0].split("=", 1)[0].strip()
            if name == "phaselog":
                continue
            canonical = check.canonicalize_name(name)
            installed = version(name)
            assert str(pinned[canonical]) == installed, f"{name}: installed {installed}, locked {pinned[canonical]}"


def test_an_unparsable_lock_line_is_named() -> None:
    check = _checker()
    with pytest.raises(SystemExit, match=r"requirements-dev.lock:2: not a 'name==version' pin"):
        check.pins("click==8.5.1\nclick>=8\n")
