"""The Agent Skill (`phaselog skill`) and the MCP server's place in the CLI (issue 24).

SKILL.md follows the Agent Skills rules (front matter ``name`` and ``description`` of at most 1,024
characters, a body under 500 lines, the files it links shipped beside it), and every `phaselog`
command it shows runs as written, in order, on a fresh store. `phaselog --help` and `phaselog read`
never import the MCP SDK; --http refuses a bind beyond loopback without a token.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from helpers import cli_env, run_cli
from phaselog.mcp.skill import skill_files, skill_text

NAME_RULE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def front_matter(text: str) -> tuple[dict[str, object], str]:
    assert text.startswith("---\n")
    head, _, body = text[4:].partition("\n---\n")
    data = yaml.safe_load(head)
    assert isinstance(data, dict)
    return data, body


def test_the_skill_follows_the_agent_skills_rules() -> None:
    meta, body = front_matter(skill_text())
    assert set(meta) <= {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
    name, description = meta["name"], meta["description"]
    assert isinstance(name, str)
    assert NAME_RULE.match(name)
    assert len(name) <= 64
    assert isinstance(description, str)
    assert 0 < len(description) <= 1024
    assert "Use it when" in description  # says when to load it, not only what it is
    assert len(body.splitlines()) < 500
    files = skill_files()
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", body))
    assert linked
    assert linked <= set(files), linked - set(files)  # every file it loads on demand is shipped


def test_install_writes_the_skill_folder(tmp_path: Path) -> None:
    res = run_cli(None, "skill", "--install", str(tmp_path / "skills"))
    assert res.rc == 0, res.out
    target = tmp_path / "skills" / "phaselog"
    assert res.json["installed"] == str(target / "SKILL.md")
    assert (target / "SKILL.md").read_text(encoding="utf-8") == skill_text()
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*.md")) == sorted(skill_files())
    printed = run_cli(None, "skill", "--print")
    assert printed.out == skill_text()
    both = run_cli(None, "skill", "--print", "--install", str(tmp_path))
    assert both.rc == 2
    assert both.json["field"] == "install"


def skill_commands(text: str) -> list[list[str]]:
    """Every `phaselog …` command line in the skill's bash blocks, continuation lines joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for raw in block.replace("\\\n", " ").splitlines():
            line = raw.strip()
            if line.startswith("phaselog "):
                commands.append(shlex.split(line))
    return commands


def test_every_command_of_the_skill_runs_as_written(tmp_path: Path) -> None:
    root = tmp_path / "store"
    commands = skill_commands(skill_text())
    assert len(commands) >= 12
    seen = set()
    for argv in commands:
        res = run_cli(root, *argv[1:])
        assert res.rc == 0, (argv, res.out, res.err)
        assert res.json["success"] is True, argv
        seen.add(argv[1])
    # Every command of the seed's checkpoint skill, and the resume path.
    assert {"write", "read", "validate", "list", "status", "explain", "resume", "progress"} <= seen
    listed = run_cli(root, "list", "--ticket-id", "PROJ-1234").json
    assert listed["count"] == 2  # the seed's shape: count and checkpoints
    assert {c["phase"] for c in listed["checkpoints"]} == {"implement", "local_review"}


def test_help_and_read_do_not_import_the_mcp_sdk(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from phaselog.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(json.dumps(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types'))"
        " or m.startswith('phaselog.mcp'))))\n"
    )
    env = cli_env(tmp_path / "store")
    for argv in (["--help"], ["read", "--ticket-id", "T", "--run-id", "r", "--phase", "implement"]):
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, check=False)
        loaded = json.loads(proc.stderr.strip().splitlines()[-1])
        assert loaded == [], (argv, loaded)
    # …and `phaselog mcp` does (the check can fail).
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; import phaselog.mcp.server; print('mcp' in sys.modules)"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert proc.stdout.strip() == "True"


def test_http_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    res = run_cli(tmp_path / "store", "mcp", "--http", "--host", "0.0.0.0")  # refused: the point
    assert res.rc == 2
    assert res.json["field"] == "token"
    assert "PHASELOG_MCP_TOKEN" in res.json["error"]  # the server's own variable, not the dashboard's
    res = run_cli(tmp_path / "store", "mcp", "--token", "x" * 20)
    assert res.rc == 2
    assert res.json["field"] == "http"
