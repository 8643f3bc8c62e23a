"""The Agent Skill shipped with phaselog: ``agent_skill/SKILL.md`` and the files it loads on demand.

``phaselog skill --print`` prints SKILL.md; ``--install DIR`` writes the skill's folder
(``DIR/phaselog/SKILL.md`` and ``reference/…``), the layout Agent Skills clients read
(``~/.claude/skills``, a project's ``.claude/skills``). Needs nothing beyond phaselog itself.
"""

from __future__ import annotations

import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from phaselog.model.errors import UsageError

#: The skill's name (its front matter's ``name``, and the folder ``--install`` writes).
NAME = "phaselog"


def _root() -> Traversable:
    return files("phaselog.mcp").joinpath("agent_skill")


def skill_files() -> dict[str, str]:
    """Every file of the skill by relative path (``SKILL.md`` first), as text."""
    out: dict[str, str] = {}
    pending: list[tuple[str, Traversable]] = [("", _root())]
    while pending:
        prefix, folder = pending.pop()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            rel = f"{prefix}{entry.name}"
            if entry.is_dir():
                pending.append((f"{rel}/", entry))
            elif entry.name.endswith(".md"):
                out[rel] = entry.read_text(encoding="utf-8")
    return {"SKILL.md": out.pop("SKILL.md"), **dict(sorted(out.items()))}


def skill_text() -> str:
    """SKILL.md itself."""
    return skill_files()["SKILL.md"]


def install(directory: str | os.PathLike[str]) -> list[str]:
    """Write the skill's folder under ``directory`` (created if absent); the paths written.

    An existing skill folder is updated file by file (each written to a temporary name, then
    renamed), so a client never reads half a SKILL.md.
    """
    base = Path(directory)
    if base.exists() and not base.is_dir():
        raise UsageError(f"--install: {directory} is not a folder", field="install", rule="folder")
    target = base / NAME
    written = []
    for rel, text in skill_files().items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # a file the user may update: replacing it is the point (not a record)
        written.append(str(path))
    return written
