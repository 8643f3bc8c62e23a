"""[5] Cold start: ``phaselog read …`` in a fresh process vs ``python -c "import yaml"``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import phaselog
from bench import _data
from bench._timing import BASELINE, INFO, SUBJECT, Contestant, Ratio, Section, run_rounds

TICKET = "BENCH-5"
GOAL = 1.8  # issue 22: cold start <= 1.8x `python -c "import yaml"` (issue 10 had 2.0x)


def setup(workdir: Path) -> tuple[dict[str, str], list[str]]:
    """A store with one run (implement a1, a2); returns the environment and the read args."""
    root = workdir / "start-store"
    ledger = _data.open_ledger(root)
    run_uuid = _data.run_id("start")
    for _ in range(2):
        _data.write_phase(ledger, TICKET, run_uuid, "implement")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASELOG_", "PYTHON"))}
    env["PHASELOG_HOME"] = str(root)
    # The processes run the phaselog this bench imported (a worktree's src/, not the one the
    # venv's editable install points at); every command gets the same path, the baseline too.
    env["PYTHONPATH"] = str(Path(phaselog.__file__).resolve().parent.parent)
    args = ["read", "--ticket-id", TICKET, "--run-id", run_uuid, "--phase", "implement"]
    return env, args


def console_script() -> str | None:
    """The installed ``phaselog`` entry point beside this interpreter, if any."""
    exe = Path(sys.executable).parent / "phaselog"
    return str(exe) if exe.is_file() and os.access(exe, os.X_OK) else None


def _check(cmd: list[str], env: dict[str, str]) -> None:
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{cmd} exited {res.returncode}: {res.stdout}{res.stderr}")
    if "read" in cmd and not json.loads(res.stdout).get("success"):
        raise RuntimeError(f"{cmd} did not succeed: {res.stdout}")


def _runner(cmd: list[str], env: dict[str, str]) -> Any:
    def run_once(_: object) -> None:
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    return run_once


def run(workdir: Path, *, rounds: int, ops: int = 8, warmup_ops: int = 2, progress: Any = None) -> Section:
    """Time fresh processes, interleaved: bare interpreter, import yaml, phaselog read."""
    env, args = setup(workdir)
    py = sys.executable
    script = console_script()
    commands: list[tuple[str, str, str, list[str]]] = [
        ("py_pass", 'python -c "pass" (bare interpreter start)', INFO, [py, "-c", "pass"]),
        ("import_yaml", 'python -c "import yaml"', BASELINE, [py, "-c", "import yaml"]),
        ("module_read", "python -m phaselog read …", SUBJECT, [py, "-m", "phaselog", *args]),
    ]
    if script is not None:
        commands.insert(2, ("cli_read", "phaselog read … (console script)", SUBJECT, [script, *args]))
    for _, _, _, cmd in commands:
        _check(cmd, env)
    contestants = [Contestant(k, label, role, _runner(cmd, env)) for k, label, role, cmd in commands]
    subject = "cli_read" if script is not None else "module_read"
    section = Section(
        "start",
        "[5] cold start: `phaselog read` of the latest implement checkpoint, fresh process each",
        [
            f"interpreter {py}; console script {script or 'not installed (using python -m)'}",
            f"{rounds} rounds x {ops} processes of each command, interleaved; wall time of subprocess.run "
            "(fork/exec included, output to /dev/null)",
            "where the time goes: python -m bench --profile-start",
        ],
    )
    section.stats = run_rounds(contestants, rounds=rounds, ops=ops, warmup_ops=warmup_ops, progress=progress)
    section.ratio(subject, "import_yaml", goal=GOAL)
    if script is not None:
        section.ratio("module_read", "import_yaml")
    floor = section.stat("py_pass").median_ns
    net = (section.stat(subject).median_ns - floor) / (section.stat("import_yaml").median_ns - floor)
    section.ratios.append(
        Ratio(f"{subject} - py_pass", "import_yaml - py_pass", net, note="above the bare interpreter")
    )
    return section
