"""Helpers shared by the test modules: a hand-moved clock, a store-tree dump, the CLI in a
subprocess, and polling for processes.

Fixtures live in conftest.py; plain functions and classes live here, imported by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

# The hand-moved clock and the instant most tests start it at: the conformance suite's own.
from phaselog.testing.data import T0, Clock

__all__ = ["T0", "Clock"]  # re-exported: test modules import them from here

# Seed 000, "Cron-Closeout Checkpoint Protocol" / "Checkpoint Schema": the guard state's fields, in order.
GUARD_SEED_FIELDS = [
    "schema_version",
    "pass_count",
    "last_status",
    "last_run_at",
    "consecutive_failures",
    "dry_run",
]
# A UTC timestamp as the guard writes it.
TS_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z")


# -- time --------------------------------------------------------------------------------------------
# -- files -------------------------------------------------------------------------------------------
def tree(root: Path) -> dict[str, str]:
    """Every file below ``root`` (lock files aside) with a hash of its bytes; {} if there is no root."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


# -- records --------------------------------------------------------------------------------------
def decision(did: str, selected: str = "a", **extra: Any) -> dict[str, Any]:
    """One decision in seed 002's shape."""
    return {
        "decision_id": did,
        "category": "creative_direction",
        "subject": f"subject of {did}",
        "options_considered": [
            {"option_id": "a", "label": "Bold", "score": 0.8, "reason": "memorable"},
            {"option_id": "b", "label": "Calm", "score": 0.4, "reason": "safe"},
        ],
        "selected": selected,
        "reason": "fits the brand",
        **extra,
    }


# -- the CLI in a subprocess -------------------------------------------------------------------------
@dataclass
class Result:
    """What one CLI run produced."""

    rc: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        """stdout parsed as one JSON document (fails the test if it is not)."""
        try:
            return json.loads(self.out)
        except ValueError:
            pytest.fail(f"stdout is not one JSON document (rc={self.rc}):\n{self.out}\n{self.err}")


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without any PHASELOG_* variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env.update(extra)
    return env


def cli_env(root: Path | None = None, **extra: str) -> dict[str, str]:
    """A clean environment; with ``root``, the store root in PHASELOG_HOME and HOME under tmp_path."""
    env = clean_env()
    if root is not None:
        env["PHASELOG_HOME"] = str(root)
        env["HOME"] = str(root.parent / "user-home")
    env.update(extra)
    return env


def command_paths() -> list[str]:
    """Every command of the CLI (subcommands of groups too), in the order ``--help`` lists them."""
    import click

    from phaselog.cli import cli

    def walk(group: click.Group, prefix: str) -> list[str]:
        ctx = click.Context(group, info_name=prefix or "phaselog")
        out: list[str] = []
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            path = f"{prefix} {name}".strip()
            out.append(path)
            if isinstance(cmd, click.Group):
                out += walk(cmd, path)
        return out

    return walk(cli, "")


def run_cli(
    root: Path | None,
    *args: str | bytes,
    stdin: str | bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> Result:
    """Run ``python -m phaselog ARGS`` in a subprocess; never a traceback, always UTF-8 out.

    ``root`` is the store root (PHASELOG_HOME, and its parent the working directory) unless
    ``env`` says otherwise.
    """
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run(
        [sys.executable, "-m", "phaselog", *args],
        input=data if data is not None else b"",
        capture_output=True,
        env=env if env is not None else cli_env(root),
        cwd=root.parent if root is not None else None,
        timeout=timeout,  # a guard against a hang, not a measurement
        check=False,
    )
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    assert "Traceback" not in out, out
    assert "Traceback" not in err, err
    return Result(proc.returncode, out, err)


# -- processes ---------------------------------------------------------------------------------------
def wait_for(pred: Callable[[], Any], what: str, timeout: float = 30.0, interval: float = 0.02) -> Any:
    """Poll ``pred`` until it is truthy (a generous deadline against hangs, not a measurement)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has exited: it does not run)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def catches_term(pid: int) -> bool:
    """True once ``pid`` has a SIGTERM handler (a guard forwards TERM to its command)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:")), 0)
    return bool(mask & (1 << (signal.SIGTERM - 1)))
