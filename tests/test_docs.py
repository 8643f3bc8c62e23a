"""The CLI reference is generated from --help and kept current; the README names every command."""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from helpers import command_paths
from phaselog.cli import cli

REPO = Path(__file__).resolve().parent.parent
GENERATOR = REPO / "docs" / "gen_cli_reference.py"
REFERENCE = REPO / "docs" / "cli-reference.md"
README = REPO / "README.md"


@pytest.fixture(scope="module")
def generated() -> str:
    """The generator's output, run as `make docs` runs it, in a narrow terminal (it must not
    depend on the terminal width)."""
    env = {**os.environ, "COLUMNS": "40", "LINES": "10"}
    proc = subprocess.run(
        [sys.executable, str(GENERATOR)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_reference_is_up_to_date(generated: str) -> None:
    assert REFERENCE.is_file(), "docs/cli-reference.md is missing: run `make docs`"
    current = REFERENCE.read_text(encoding="utf-8")
    if current != generated:
        diff = "".join(
            list(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    generated.splitlines(keepends=True),
                    "docs/cli-reference.md",
                    "generated",
                )
            )[:60]
        )
        hint = "docs/cli-reference.md is out of date with the CLI's --help: run `make docs`"
        pytest.fail(f"{hint}\n{diff}")


def test_generator_includes_every_command_in_order(generated: str) -> None:
    headings = re.findall(r"^## (phaselog(?: [\w-]+)*)$", generated, re.M)
    assert headings == ["phaselog", *(f"phaselog {p}" for p in command_paths())]
    for path in command_paths():
        section = generated.split(f"## phaselog {path}\n", 1)[1].split("\n## ", 1)[0]
        assert f"Usage: phaselog {path}" in section
        assert "Example" in section, f"`phaselog {path} --help` has no example"


def test_generator_output_is_the_help_text(generated: str) -> None:
    """What the reference shows is what `--help` prints (options and their help)."""
    for path in ("write", "list", "resume"):
        cmd = cli.commands[path]
        for param in cmd.params:
            if isinstance(param, click.Option):
                assert param.opts[-1] in generated.split(f"## phaselog {path}\n", 1)[1]


def test_makefile_docs_target_runs_the_generator() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^docs:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "Makefile has no docs target"
    assert "docs/gen_cli_reference.py > docs/cli-reference.md" in recipe.group(1)


@pytest.mark.parametrize("command", command_paths())
def test_every_command_in_reference(command: str) -> None:
    assert REFERENCE.is_file(), "docs/cli-reference.md is missing: run `make docs`"
    assert f"phaselog {command}" in REFERENCE.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", [p for p in command_paths() if " " not in p])
def test_every_command_in_readme(command: str) -> None:
    if not README.exists():
        pytest.skip("README.md does not exist yet (being written); nothing to check")
    text = README.read_text(encoding="utf-8")
    name = re.escape(command)
    # an invocation (`phaselog list ...`) or the command named in code (`list`)
    found = re.search(rf"phaselog\s+{name}\b|`{name}\b", text)
    assert found, f"README.md never mentions the `{command}` command"
