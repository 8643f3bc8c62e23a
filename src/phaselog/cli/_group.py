"""The ``phaselog`` group: its sections, the map of areas to modules, and lazy command loading."""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from typing import Any

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


#: Sections of ``phaselog --help``, in this order; a command declared without one is listed under "Other".
SECTIONS = ("Record", "Resume", "Runner", "Workers", "Audit", "Gates", "Tickets and pipelines", "Guard", "Stores")


#: The modules that register the top-level commands, in help order, and what each registers.
#: A command line imports only the module of its command (``phaselog read``: cli.records), so a
#: command does not pay for the others' imports; help, completion and ``cli.commands`` load them
#: all. tests/test_cli_usability.py checks this map against what the modules register.
AREAS: dict[str, tuple[str, ...]] = {
    "records": ("write", "read", "validate", "list"),
    "state": ("status", "resume", "verify", "pipelines"),
    "catalog": ("tickets", "runs", "approvals"),
    "audit": ("progress", "approve", "reject", "init", "decisions", "history", "diff", "fork", "doctor"),
    "runner": ("run", "explain", "step"),
    "queue": ("submit", "queue", "worker"),
    "guard": ("guard",),
    "store": ("export", "import", "copy", "prune", "store"),
    "ui": ("ui",),
}
_AREA_OF = {name: area for area, names in AREAS.items() for name in names}


class PhaselogGroup(click.Group):
    """Loads a command's module on first use, lists commands by area, and the top-level help by section."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._commands: dict[str, click.Command] = {}
        self._loaded = False
        super().__init__(*args, **kwargs)
        self.sections: dict[str, str] = {}

    @property  # click has a plain attribute here; a property loads every area on first access
    def commands(self) -> MutableMapping[str, click.Command]:
        """Every command (importing every area's module on first access)."""
        self._load_all()
        return self._commands

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        self._commands = dict(value)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        name = name or cmd.name
        if name is None:  # pragma: no cover - click refuses nameless commands earlier
            raise TypeError("Command has no name.")
        self._commands[name] = cmd

    def _load_all(self) -> None:
        if not self._loaded:
            self._loaded = True
            for area in AREAS:
                importlib.import_module(f"phaselog.cli.{area}")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self._commands and cmd_name in _AREA_OF:
            importlib.import_module(f"phaselog.cli.{_AREA_OF[cmd_name]}")
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_all()
        known = [name for names in AREAS.values() for name in names if name in self._commands]
        return known + [name for name in self._commands if name not in _AREA_OF]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Every command by section, subcommands by their full name (``guard run``), one list."""
        grouped: dict[str, list[tuple[str, click.Command]]] = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows = grouped.setdefault(self.sections.get(name, "Other"), [])
            if not isinstance(cmd, click.Group) or cmd.invoke_without_command:
                rows.append((name, cmd))  # a group that does something itself (progress) has a row too
            if isinstance(cmd, click.Group):
                rows += [(f"{name} {n}", sub) for n, sub in cmd.commands.items() if not sub.hidden]
        order = [*SECTIONS, *sorted(k for k in grouped if k not in SECTIONS and k != "Other"), "Other"]
        pad = max((len(label) for rows in grouped.values() for label, _ in rows), default=0)
        limit = max(formatter.width - formatter.current_indent - pad - 4, 30)
        for section in order:
            if grouped.get(section):
                with formatter.section(section):
                    formatter.write_dl(
                        [(label.ljust(pad), cmd.get_short_help_str(limit=limit)) for label, cmd in grouped[section]]
                    )


@click.group(cls=PhaselogGroup, context_settings=CONTEXT)
@click.version_option(package_name="phaselog", message="phaselog %(version)s")
def cli() -> None:
    """Durable checkpoints for multi-phase pipelines: record, resume, validate, audit.

    Output is JSON on stdout (--format table for people). Exit 0 on success, 1 when an
    operation fails or a check says no, 2 for bad usage. `phaselog COMMAND --help` shows a
    command's options and an example.
    """


def in_section(cmd: click.Command, section: str, group: click.Command | None = None) -> click.Command:
    """List ``cmd`` under ``section`` in ``phaselog --help`` (for groups made with ``cli.group``)."""
    parent = group if group is not None else cli
    if isinstance(parent, PhaselogGroup) and cmd.name:
        parent.sections[cmd.name] = section
    return cmd
