"""Run many ``phaselog`` command lines in one real process, one after another.

The corpus tests feed dozens of command lines to every store. Starting an interpreter for each
costs ~0.15 s, so a batch runs in one child process that calls the CLI's own entry point
(``phaselog.cli.main``) per command line, with its own standard input, and reports each exit code,
stdout and stderr. :func:`run_one` runs a single command as its own process, for the cases where
the process itself matters (memory, devices).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers import Result

_DRIVER = r"""
import base64, contextlib, io, json, sys
from phaselog.cli import main

results = []
for case in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    sys.stdin = io.TextIOWrapper(io.BytesIO(base64.b64decode(case["stdin"])), encoding="utf-8")
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(case["argv"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    results.append({"rc": code, "out": out.getvalue(), "err": err.getvalue()})
sys.__stdout__.write(json.dumps(results))
"""


@dataclass
class Outcome(Result):
    """What one command line did (``argv`` besides exit code, stdout and stderr)."""

    argv: list[str]

    @property
    def json(self) -> Any:
        """The JSON document on stdout (None if stdout is not one)."""
        try:
            return json.loads(self.out)
        except ValueError:
            return None

    def describe(self) -> str:
        """A one-paragraph account for assertion messages."""
        return f"phaselog {' '.join(self.argv)}\n  rc={self.rc}\n  stdout={self.out[:600]}\n  stderr={self.err[:600]}"


def run_batch(
    commands: list[tuple[list[str], bytes]], *, env: dict[str, str], cwd: Path, timeout: float = 600
) -> list[Outcome]:
    """Run each (argv, stdin bytes) through ``phaselog.cli.main`` in one child process."""
    payload = json.dumps([{"argv": argv, "stdin": base64.b64encode(stdin).decode()} for argv, stdin in commands])
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER],
        input=payload.encode(),
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=timeout,  # a guard against a hang, not a measurement
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"the batch process died (rc={proc.returncode}):\n{proc.stderr.decode()[-3000:]}")
    results = json.loads(proc.stdout)
    return [Outcome(r["rc"], r["out"], r["err"], argv) for (argv, _), r in zip(commands, results, strict=True)]


def run_one(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    stdin: bytes = b"",
    preexec_fn: Any = None,
    prefix: tuple[str, ...] = (),
    timeout: float = 120,
) -> Outcome:
    """Run ``python -m phaselog ARGV`` as its own process (``prefix``: a wrapper such as setpriv)."""
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "phaselog", *argv],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=timeout,  # a guard against a hang, not a measurement
        check=False,
        preexec_fn=preexec_fn,
    )
    return Outcome(
        proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"), argv
    )
