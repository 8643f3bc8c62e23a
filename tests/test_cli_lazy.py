"""The CLI imports only the module of the command it runs (fast start), and AREAS says truly which
module registers which command (else a command would vanish from a lazy command line)."""

from __future__ import annotations

import json
import subprocess
import sys

from phaselog.cli import cli
from phaselog.cli._scaffold import AREAS


def test_areas_map_every_command_to_the_module_that_registers_it() -> None:
    found: dict[str, list[str]] = {}
    for name, cmd in cli.commands.items():
        assert cmd.callback is not None, name
        found.setdefault(cmd.callback.__module__.rpartition(".")[2], []).append(name)
    assert {area: sorted(names) for area, names in found.items()} == {
        area: sorted(names) for area, names in AREAS.items()
    }


def test_help_lists_commands_in_area_order() -> None:
    import click

    names = cli.list_commands(click.Context(cli))
    assert names == [name for names in AREAS.values() for name in names]


def test_a_command_imports_only_its_own_area() -> None:
    code = (
        "import json, sys, click\n"
        "from phaselog.cli import cli\n"
        "assert cli.get_command(click.Context(cli), 'read') is not None\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('phaselog.cli.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))
    assert "phaselog.cli.records" in loaded
    assert not loaded & {f"phaselog.cli.{area}" for area in AREAS if area != "records"}
