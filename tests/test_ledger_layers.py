"""The core packages' own import contract, counting every import (top level, ``TYPE_CHECKING``, inside
functions): model → nothing above it; ledger → model and stores; views → ledger too; transfer → views too;
none of them → an edge; no cycle among them; an import inside a function says why it is lazy.

(tests/test_architecture.py checks the whole tree; this file keeps the ledger's half of it readable.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import phaselog

SRC = Path(phaselog.__file__).parent
CORE = ("model", "ledger", "views", "transfer")
#: What each core package may import (besides itself and phaselog._faults).
MAY = {
    "model": set(),
    "ledger": {"model", "stores"},
    "views": {"model", "stores", "ledger", "guard"},
    "transfer": {"model", "stores", "ledger", "views"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in CORE:
        for path in sorted((SRC / pkg).rglob("*.py")):
            parts = ["phaselog", *path.relative_to(SRC).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every phaselog module named by an import anywhere in the file, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("phaselog")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("phaselog"):
            found += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return found


def _package(name: str) -> str:
    return name.split(".")[1] if name.count(".") >= 1 else ""


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = set()
        for named, _ in _imports(path):
            target = named
            while target and target not in MODULES and target.count(".") > 1:
                target = target.rpartition(".")[0]
            if target in MODULES and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_core_module_imports_only_below_it(name: str) -> None:
    mine = _package(name)
    wrong = sorted(
        f"{target} (line {line})"
        for target, line in _imports(MODULES[name])
        if _package(target) not in {mine, "_faults", *MAY[mine]}
    )
    assert wrong == [], f"{name} ({mine}) may import only {sorted(MAY[mine])}: {wrong}"


def test_no_import_cycle_among_the_core_packages() -> None:
    graph = _edges()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            assert cycle is None, " → ".join(cycle or [])


#: Modules other engineers are reshaping in this issue (their imports are left as they were, to merge cleanly).
NOT_YET = {
    "phaselog.views.run_page": "the dashboard's run page is being reworked (edges, issue 21)",
    "phaselog.ledger.attempts": "its process helpers are moving to the model (files, issue 21)",
}


@pytest.mark.parametrize("name", sorted(set(MODULES) - set(NOT_YET)))
def test_an_import_inside_a_function_says_why_it_is_lazy(name: str) -> None:
    lines = MODULES[name].read_text("utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    unexplained = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    here = lines[node.lineno - 1]
                    # the reason is on the line, or on a comment opening the block of imports just above
                    above = [ln.strip() for ln in lines[max(0, node.lineno - 4) : node.lineno - 1]]
                    if "# lazy" not in here and not any(ln.startswith("# lazy") for ln in above):
                        unexplained.append(f"line {node.lineno}: {here.strip()}")
    assert unexplained == [], f"{name}: say why (`# lazy: …`) or import at the top: {sorted(set(unexplained))}"
