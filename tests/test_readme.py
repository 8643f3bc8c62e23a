"""The README's commands (and docs/pipelines.md's) run as written, top to bottom.

Every ``$ …`` line of a ```console block runs in one bash session (so ``export`` carries over), in
a scratch directory with ``TMPDIR`` and ``HOME`` under tmp_path (the README's ``mktemp -d`` stays
inside it) and the ``phaselog`` of this interpreter first on ``PATH``. A line must exit 0 unless
its comment says ``# exit N``. Each ```python block runs as a script.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import phaselog
from conftest import REPO

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXIT = re.compile(r"#\s*exit (\d+)")
HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")


def blocks(path: Path, lang: str) -> list[str]:
    return [body for kind, body in BLOCK.findall(path.read_text(encoding="utf-8")) if kind == lang]


def commands(block: str) -> list[tuple[str, int]]:
    """The ``$`` lines of a console block (continuations and here-documents joined) with the exit code
    each expects."""
    out: list[tuple[str, int]] = []
    lines = iter(block.splitlines())
    for line in lines:
        if not line.startswith("$ "):
            continue  # output shown in the README, not a command
        cmd = line[2:]
        while cmd.rstrip().endswith("\\"):
            cmd += "\n" + next(lines)
        heredoc = HEREDOC.search(cmd)
        if heredoc:  # the document's lines belong to the command, up to the delimiter
            body = []
            for more in lines:
                body.append(more)
                if more == heredoc.group(1):
                    break
            cmd += "\n" + "\n".join(body)
        expected = EXIT.search(cmd)
        out.append((cmd, int(expected.group(1)) if expected else 0))
    return out


def scratch_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    bindir = str(Path(sys.executable).parent)
    env.update(HOME=str(home), TMPDIR=str(tmp), COLUMNS="100", PATH=bindir + os.pathsep + env.get("PATH", ""))
    return env


def run_console(cmds: list[tuple[str, int]], cwd: Path, env: dict[str, str]) -> list[tuple[str, int, int]]:
    """Run the commands in one bash session; return (command, expected, actual) for each."""
    rc_file = cwd / ".rcs"
    script = [f"exec 9>{rc_file}"]
    for cmd, _ in cmds:
        script += [cmd, 'printf "%s\\n" "$?" >&9']
    proc = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    rcs = [int(x) for x in rc_file.read_text().split()]
    assert len(rcs) == len(cmds), proc.stdout + proc.stderr
    return [(cmd, want, got) for (cmd, want), got in zip(cmds, rcs, strict=True)]


def test_every_readme_command_runs_as_written(tmp_path: Path) -> None:
    readme = REPO / "README.md"
    cmds = [c for block in blocks(readme, "console") for c in commands(block)]
    assert len(cmds) >= 30  # the walkthrough, the audit trail, the guard and the stores
    work = tmp_path / "work"
    work.mkdir()
    results = run_console(cmds, work, scratch_env(tmp_path))
    wrong = [f"{cmd!r}: exit {got}, expected {want}" for cmd, want, got in results if got != want]
    assert not wrong, "\n".join(wrong)
    assert (work / "dump.jsonl").stat().st_size > 0  # the export wrote the ticket's records


def test_readme_python_block_runs_and_finishes_the_run(tmp_path: Path) -> None:
    (code,) = [b for b in blocks(REPO / "README.md", "python") if "phaselog.open()" in b]
    env = scratch_env(tmp_path)
    env["PHASELOG_HOME"] = str(tmp_path / "store")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert phaselog.open(tmp_path / "store").status("PROJ-1234", "a1b2c3d4").done


def test_pipelines_guide_example_runs(tmp_path: Path) -> None:
    guide = REPO / "docs" / "pipelines.md"
    work = tmp_path / "work"
    work.mkdir()
    manifest = blocks(guide, "yaml")[0]
    (work / "data-job.yaml").write_text(manifest, encoding="utf-8")
    env = scratch_env(tmp_path)
    env["PHASELOG_HOME"] = str(tmp_path / "store")
    cmds = [c for block in blocks(guide, "console") for c in commands(block)]
    assert cmds
    wrong = [f"{cmd!r}: exit {got}" for cmd, want, got in run_console(cmds, work, env) if got != want]
    assert not wrong, "\n".join(wrong)
    (code,) = blocks(guide, "python")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pipelines_guide_describes_every_manifest_key() -> None:
    from phaselog.model.pipelines import MANIFEST_KEYS, PHASE_KEYS, pipeline_from_dict

    text = (REPO / "docs" / "pipelines.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", text, re.MULTILINE))
    assert rows >= MANIFEST_KEYS | PHASE_KEYS, sorted((MANIFEST_KEYS | PHASE_KEYS) - rows)
    # and the documented keys are the accepted ones: each documented phase key is accepted …
    base = {"name": "p", "version": "1", "phases": [{"name": "a"}]}
    for key in rows - {"name", "version", "phases"}:
        value = {
            "order": "free",
            "payload_schema": {},
            "requires_approval": True,
            "run": "true",
            "call": "package.module:function",
            "env": {"A": "1"},
            "timeout": "30s",
            "retries": 1,
            "backoff": "fixed",
            "retry_delay": "1s",
            "artifacts": ["out/*"],
            "fingerprint": "code",
            "awaits_input": True,
            "needs": [],
            "params": {"type": "object", "properties": {"date": {"type": "string"}}},
            "notify": [{"events": ["run.completed"], "command": "true"}],
        }.get(key, "text")
        if key in PHASE_KEYS:
            pipeline_from_dict({**base, "phases": [{"name": "a", key: value}]})
        if key in MANIFEST_KEYS:
            pipeline_from_dict({**base, key: value})
    for words in ("order", "strict", "free", "requires_approval", "PHASELOG_PIPELINES", "--pipeline-file"):
        assert words in text
    with pytest.raises(phaselog.PipelineError):  # … and one that is not documented is refused
        pipeline_from_dict({**base, "phases": [{"name": "a", "require_approval": True}]})
