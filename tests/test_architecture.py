"""The layer contract of src/phaselog (issue 21), counting every import, checked on every run.

The bars:

- **No import cycle at all** among phaselog's modules, counting every kind of import: top level,
  under ``if TYPE_CHECKING:``, inside functions, ``importlib.import_module``/``__import__`` names,
  and dotted module names in the string tables of lazy loaders (what counts: tests/_imports.py).
- **Layers point one way** (DESIGN.md, "Dependencies point one way"): the edges (cli, ui, runner,
  integrations, mcp) → the middle (transfer → views → ledger and guard, in that order) → the bottom
  (stores → model). No edge is imported by the middle or the bottom; the ledger imports neither views
  nor transfer; stores import only model and stores; model imports only model. ``phaselog/__init__.py``
  and ``phaselog.testing`` are the public surface and may import anything, and nothing inside imports
  them; ``phaselog._faults`` (the crash tests' fault points) may be imported by anyone and imports
  nothing of phaselog.
- **No module reads a private member of another module's object**: ``obj._x`` only on the object
  itself (``self``, ``cls``, ``super()``) or where ``_x`` is this module's own name; never
  ``from m import _x`` or ``m._x`` of another module (``phaselog._faults`` and dunders aside).
- **Plain imports; a lazy one says why.** Every import inside a function or method carries a one-line
  reason on its line, ``# lazy: <why>`` (the CLI's start-up, a command of a CLI area that the others
  must not pay for, an optional extra that may be absent); anything else is imported at the top.
- **The guard reaches its storage through the stores' contract** (``guard_keeper``), never a backend's
  guard module or the SQL store.
- **At most 12 modules directly in src/phaselog/**, and **no module over 500 lines**.

Each check names the module that breaks it (one parametrized case per module). Runs in about a second.
"""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from _imports import Import, cycles, graph, imports_of, lazy_imports, modules, private_reads, strongly_connected

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "phaselog"
MAX_LINES = 500
MAX_TOP_LEVEL_MODULES = 12
#: Modules still over the bar, each with who removes it from this list (xfail-strict: once the
#: module is split, the test passes and the strict xfail fails until the entry is removed).
OVER_THE_BAR: dict[str, str] = {}

MODULES = modules(SRC, "phaselog")
IMPORTS: dict[str, list[Import]] = {name: imports_of(name, path, MODULES) for name, path in MODULES.items()}
GRAPH = graph((imp for found in IMPORTS.values() for imp in found), MODULES)

# -- the layers --------------------------------------------------------------------------------------
#: Where each part of the package sits: a module belongs to the longest prefix that names it.
LAYERS = {
    "phaselog": "surface",
    "phaselog.testing": "surface",
    "phaselog.__main__": "entry",
    "phaselog._faults": "faults",
    **{f"phaselog.{edge}": "edge" for edge in ("cli", "ui", "runner", "integrations", "mcp")},
    "phaselog.transfer": "transfer",
    "phaselog.views": "views",
    "phaselog.ledger": "ledger",
    "phaselog.guard": "guard",
    "phaselog.notify": "notify",
    "phaselog.stores": "stores",
    "phaselog.model": "model",
}
#: What each layer may import (besides itself). The middle is ordered: transfer writes its streamed
#: output with the views' writers and checks imports like a write; views read through the ledger;
#: the ledger knows neither (D145). The guard is a service beside the ledger: the lock and breaker of
#: cron loops over the stores' guard storage; its views and its CLI command sit above it (D149).
#: Notifications are a service over both: the ledger's feed, delivered, with its lease, cursors and
#: dead letters in the guard storage; only the edges use it (D215).
BELOW = {
    "model": {"faults"},
    "stores": {"model", "faults"},
    "ledger": {"stores", "model", "faults"},
    "guard": {"stores", "model", "faults"},
    "notify": {"ledger", "guard", "stores", "model", "faults"},
    "views": {"ledger", "guard", "stores", "model", "faults"},
    "transfer": {"views", "ledger", "stores", "model", "faults"},
    "edge": {"edge", "notify", "transfer", "views", "ledger", "guard", "stores", "model", "faults"},
    "entry": {"edge", "notify", "transfer", "views", "ledger", "guard", "stores", "model", "faults", "surface"},
    "surface": {"entry", "edge", "notify", "transfer", "views", "ledger", "guard", "stores", "model", "faults"},
    "faults": set(),
}


def layer_of(module: str) -> str | None:
    """The layer of ``module``: that of the longest prefix of it in :data:`LAYERS` (None: unplaced)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        layer = LAYERS.get(".".join(parts[:end]))
        if layer is not None:
            return layer
    return None


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(name for name in MODULES if layer_of(name) is None)
    assert unplaced == [], f"modules in no layer (add their package to LAYERS): {unplaced}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layers_point_one_way(module: str) -> None:
    layer = layer_of(module)
    allowed = {layer} | BELOW.get(layer or "", set())
    wrong = [imp for imp in IMPORTS[module] if layer_of(imp.target) not in allowed]
    assert wrong == [], (
        f"{module} ({layer}) may import only {', '.join(sorted(a for a in allowed if a))}; it imports\n  "
        + "\n  ".join(f"{imp} [{layer_of(imp.target)}]" for imp in wrong)
    )


# -- no cycle ----------------------------------------------------------------------------------------
def _step(source: str, target: str) -> str:
    how = ", ".join(f"{imp.kind} l.{imp.line}" for imp in IMPORTS[source] if imp.target == target)
    return f"{target} ({how})"


def describe_cycle(path: list[str]) -> str:
    """``a → b (top l.3) → … → a (deferred l.40)``: each step with where and how it imports."""
    return " → ".join([path[0], *(_step(a, b) for a, b in itertools.pairwise(path))])


def test_no_import_cycle() -> None:
    found = cycles(GRAPH)
    report = [
        f"{len(comp)} modules tied together: {', '.join(comp)}\n    " + "\n    ".join(map(describe_cycle, paths))
        for comp, paths in found
    ]
    assert found == [], f"{len(found)} import cycles among src/phaselog modules:\n  " + "\n  ".join(report)


def test_the_cycle_finder_finds_cycles() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []
    assert cycles({"a": {"b"}, "b": {"a", "c"}, "c": {"b"}}) == [(["a", "b", "c"], [["a", "b", "a"], ["c", "b", "c"]])]


# -- private reads -----------------------------------------------------------------------------------
@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_reads_of_another_module(module: str) -> None:
    reads = private_reads(module, MODULES[module], MODULES)
    assert reads == [], (
        f"{module} uses {len(reads)} private names of other modules (give them a public seam):\n  "
        + "\n  ".join(map(str, reads))
    )


# -- lazy imports say why ---------------------------------------------------------------------------
@pytest.mark.parametrize("module", sorted(MODULES))
def test_an_import_inside_a_function_says_why_it_is_lazy(module: str) -> None:
    unexplained = [imp for imp in lazy_imports(module, MODULES[module]) if imp.reason is None]
    assert unexplained == [], (
        f"{module} imports {len(unexplained)} modules inside functions with no reason: import them at the top, "
        "or say why on the line (`# lazy: <why>`)\n  " + "\n  ".join(map(str, unexplained))
    )


# -- the guard's storage -----------------------------------------------------------------------------
#: Backend modules the guard must not name: it gets its storage from the store (``guard_keeper``).
GUARD_BACKENDS = ("phaselog.stores.files.guard", "phaselog.stores.sql")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer_of(m) == "guard"))
def test_the_guard_gets_its_storage_only_through_the_contract(module: str) -> None:
    wrong = [imp for imp in IMPORTS[module] if imp.target.startswith(GUARD_BACKENDS)]
    assert wrong == [], f"{module} reaches a backend's guard storage directly:\n  " + "\n  ".join(map(str, wrong))


# -- size --------------------------------------------------------------------------------------------
def test_at_most_12_modules_directly_in_the_package() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= MAX_TOP_LEVEL_MODULES, f"{len(flat)} modules directly in src/phaselog/: {flat}"


def _sizes() -> list[object]:
    params: list[object] = []
    for path in MODULES.values():
        rel = path.relative_to(SRC).as_posix()
        marks = [pytest.mark.xfail(strict=True, reason=OVER_THE_BAR[rel])] if rel in OVER_THE_BAR else []
        params.append(pytest.param(path, id=rel, marks=marks))
    return params


@pytest.mark.parametrize("path", _sizes())
def test_no_module_over_500_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(SRC)} has {lines} lines; split it by meaning (STYLE.md)"


def test_the_allowlist_names_real_modules() -> None:
    assert all((SRC / rel).is_file() for rel in OVER_THE_BAR)


# -- the checker itself, on code written for it --------------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return modules(tmp_path, "pkg")


LOADER = '''
    """A module that loads the others every way there is (a docstring naming a module loads nothing)."""
    from __future__ import annotations

    import importlib
    import logging
    from importlib.metadata import entry_points
    from typing import TYPE_CHECKING

    from pkg import a
    from pkg.sub import b as _b, thing

    if TYPE_CHECKING:
        from pkg.c import C
    if not TYPE_CHECKING:
        from . import d

    KIND = "pkg.e"  # a stored value that happens to look like a module name
    LAZY = {"F": "pkg.f", "G": "pkg.g:G"}
    log = logging.getLogger("pkg.h")
    plugins = entry_points(group="pkg.h")
    AREAS = {"i": 1, "nope": 2}

    class Doc:
        """pkg.docs"""

    def later():
        import pkg.j
        importlib.import_module("pkg.k")
        __import__("pkg.l")
        for area in AREAS:
            importlib.import_module(f"pkg.{area}")
        return pkg.j
'''


def test_every_kind_of_import_is_counted(tmp_path: Path) -> None:
    names = ["a", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "docs"]
    mods = _package(
        tmp_path,
        {"pkg/__init__.py": "", "pkg/sub/__init__.py": "thing = 1\n", "pkg/sub/b.py": "", "pkg/loader.py": LOADER}
        | {f"pkg/{n}.py": "" for n in names},
    )
    found = {(imp.target, imp.kind) for imp in imports_of("pkg.loader", mods["pkg.loader"], mods)}
    assert found == {
        ("pkg.a", "top"),
        ("pkg.sub.b", "top"),
        ("pkg.sub", "top"),
        ("pkg.c", "typing"),
        ("pkg.d", "top"),
        ("pkg.f", "string"),
        ("pkg.g", "string"),
        ("pkg.j", "deferred"),
        ("pkg.k", "importlib"),
        ("pkg.l", "importlib"),
        ("pkg.i", "importlib"),
    }


PRIVATE = """
    import os

    from pkg import _faults, other
    from pkg._faults import _point
    from pkg.other import _hidden, shown
    from pkg import _module


    def _helper():
        return 1


    class Box:
        __slots__ = ("_slot",)

        def __init__(self, store):
            self._mine = 1
            self.store = store

        def _own(self):
            return self._mine

        def peer(self, other_box: "Box"):
            return other_box._mine, other_box._slot, other_box._own(), super()._base()

        def held(self):
            return self.store._own, self.store._query

        def reads(self, store):
            return store._query, getattr(store, "_retry"), other._secret, _faults._point, os._exit, _helper
"""


LAZY = """
    def plain():
        import json  # lazy: only this path needs it
        from pkg import (  # lazy: the extra may be absent
            a,
            b,
        )
        from pkg import (
            c,  # lazy: said on a later line of the statement
        )
        import os
        import re  # lazy:
        import sys  # a comment, not a reason

        class Inner:
            def method(self):
                from pkg import d

        return json, a, b, c, os, re, sys, Inner
"""


def test_lazy_imports_without_a_reason_are_found(tmp_path: Path) -> None:
    mods = _package(tmp_path, {"pkg/__init__.py": "import os\n", "pkg/lazy.py": LAZY})
    found = lazy_imports("pkg.lazy", mods["pkg.lazy"])
    assert [(imp.text, imp.reason) for imp in found] == [
        ("import json", "only this path needs it"),
        ("from pkg import a, b", "the extra may be absent"),
        ("from pkg import c", "said on a later line of the statement"),
        ("import os", None),
        ("import re", None),
        ("import sys", None),
        ("from pkg import d", None),
    ]
    assert lazy_imports("pkg", mods["pkg"]) == []


def test_private_reads_are_told_apart(tmp_path: Path) -> None:
    mods = _package(
        tmp_path,
        {"pkg/__init__.py": "", "pkg/_faults.py": "", "pkg/_module.py": "", "pkg/other.py": "", "pkg/box.py": PRIVATE},
    )
    import _imports

    _imports.OPEN_MODULES.add("pkg._faults")
    try:
        reads = private_reads("pkg.box", mods["pkg.box"], mods)
    finally:
        _imports.OPEN_MODULES.discard("pkg._faults")
    assert [r.text for r in reads] == [
        "from pkg.other import _hidden",
        "self.store._own",
        "self.store._query",
        "store._query",
        "getattr(store, '_retry')",
        "other._secret",
    ]
