"""The ``phaselog`` group: its sections, and commands loaded by area on first use (:class:`Areas`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


#: Sections of ``phaselog --help``, in this order; a command declared without one is listed under "Other".
SECTIONS = (
    "Record",
    "Resume",
    "Runner",
    "Workers",
    "Audit",
    "Gates",
    "Tickets and pipelines",
    "Guard",
    "Notify",
    "Stores",
)


@dataclass(frozen=True)
class Areas:
    """Which module registers which top-level commands, and how to import one (set by :mod:`phaselog.cli._main`).

    The group asks for a module only when one of its commands is needed, so a command line imports
    only the module of its command; the map lives with the entry point, not here, so that the area
    modules (which import this one to register on :data:`cli`) are not imported by it.
    """

    names: Mapping[str, tuple[str, ...]]
    load: Callable[[str], object]

    def area_of(self, name: str) -> str | None:
        """The area whose module registers the command ``name`` (None: none does)."""
        return next((area for area, names in self.names.items() if name in names), None)


class PhaselogGroup(click.Group):
    """Loads a command's module on first use, lists commands by area, and the top-level help by section."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._commands: dict[str, click.Command] = {}
        self._loaded = False
        #: The area map, set by the entry point (None: only the commands added so far).
        self.areas: Areas | None = None
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
        if not self._loaded and self.areas is not None:
            self._loaded = True
            for area in self.areas.names:
                self.areas.load(area)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self._commands and self.areas is not None:
            area = self.areas.area_of(cmd_name)
            if area is not None:
                self.areas.load(area)
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_all()
        listed = [name for names in self.areas.names.values() for name in names] if self.areas is not None else []
        known = [name for name in listed if name in self._commands]
        return known + [name for name in self._commands if name not in listed]

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
