"""Every function handed a Ledger says so in its type (mypy --strict then checks what it calls).

A module below the Ledger names it under ``TYPE_CHECKING`` (no import cycle: tests/test_architecture.py);
a service, which never imports ``ledger.py`` (tests/test_ledger_facade.py), names a Protocol of what it
uses (``gates.QueueSource``, ``retention.Ledger``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import phaselog

SRC = Path(phaselog.__file__).parent


def _ledger_params() -> list[tuple[str, int, str, str]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            for arg in args:
                if arg.arg in ("ledger", "led"):
                    note = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                    found.append((path.relative_to(SRC).as_posix(), node.lineno, arg.arg, note))
    return found


def test_no_function_takes_an_untyped_ledger() -> None:
    params = _ledger_params()
    assert len(params) > 20  # the walk sees them (doctor, importing, gates, runner, …)
    untyped = [p for p in params if p[3] in ("", "Any")]
    assert untyped == []
