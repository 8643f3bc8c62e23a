"""Read the import graph and the private reads of a package from its source (for test_architecture.py).

Every way one of phaselog's modules can come to load another counts as an edge, each tagged by kind:

- ``top``: an ``import``/``from … import`` run when the module is imported (including ``try``/``else``
  branches, ``if not TYPE_CHECKING:`` bodies and class bodies);
- ``typing``: under ``if TYPE_CHECKING:`` (a cycle there is a cycle in the design, even if Python never
  runs it);
- ``deferred``: inside a function or method (a lazy import: the dependency is there, just later);
- ``importlib``: ``importlib.import_module("…")`` or ``__import__("…")`` with a literal name, or an
  f-string whose constant parts and the module's own string constants name modules
  (``f"phaselog.cli.{area}"`` over the ``AREAS`` keys);
- ``string``: a dotted module name (or ``module:attr``) written as a string in a table or a call, as
  lazy loaders do (``{"Ledger": "phaselog.ledger.facade"}``, ``_Lazy("phaselog.ledger.audit", …)``).
  A string bound alone to a name (``KIND = "phaselog.x"``), a docstring, a logger's name and an
  entry point group are data, not references.

Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit edges are not counted
(every module would depend on ``phaselog/__init__.py``), as import-linter and grimp do not count them.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

KINDS = ("top", "typing", "deferred", "importlib", "string")
#: Callables whose first argument is a module's name.
IMPORTERS = {"import_module", "__import__"}
#: Calls whose string arguments name something else than a module (a logger, an entry point group).
NOT_MODULE_NAMES = {"getLogger", "entry_points"}
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+(:[A-Za-z_][A-Za-z0-9_.]*)?")


@dataclass(frozen=True, order=True)
class Import:
    """One edge of the graph: ``source`` loads ``target`` (at ``line``, in the way ``kind`` says)."""

    source: str
    target: str
    line: int
    kind: str

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}, {self.kind})"


@dataclass(frozen=True, order=True)
class PrivateRead:
    """``module`` uses another module's private name ``name`` at ``line`` (``text`` is the expression)."""

    module: str
    line: int
    name: str
    text: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.text}"


def modules(src: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``src`` by dotted name (a package by its ``__init__.py``)."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


@cache
def parse(path: Path) -> ast.Module:
    """The syntax tree of ``path`` (parsed once per test session)."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_not_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_type_checking(test.operand)


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes of the module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


class _Collector(ast.NodeVisitor):
    """Walks one module and records every module it loads, with the kind of each load."""

    def __init__(self, name: str, is_package: bool, known: Mapping[str, object], tree: ast.Module) -> None:
        self.name = name
        self.package = name if is_package else name.rpartition(".")[0]
        self.known = known
        self.found: list[Import] = []
        self.kind = "top"
        self.skip = _docstrings(tree)
        # The module's own string constants: the values an f-string's holes can take (AREAS keys).
        self.words = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}

    # -- where we are --------------------------------------------------------------------------------
    def _under(self, kind: str, nodes: Iterable[ast.AST]) -> None:
        outer, self.kind = self.kind, (self.kind if self.kind in ("typing", "deferred") else kind)
        for node in nodes:
            self.visit(node)
        self.kind = outer

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        if _is_type_checking(node.test):
            self._under("typing", node.body)
            self._under("top", node.orelse)
        elif _is_not_type_checking(node.test):
            self._under("top", node.body)
            self._under("typing", node.orelse)
        else:
            self._under("top", [*node.body, *node.orelse])

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # Decorators, defaults and annotations run when the def runs; the body runs later.
        for deco in getattr(node, "decorator_list", []):
            self.visit(deco)
        self.visit(node.args)
        if getattr(node, "returns", None) is not None:
            self.visit(node.returns)
        body = node.body if isinstance(node.body, list) else [node.body]
        self._under("deferred", body)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    # -- what is loaded ------------------------------------------------------------------------------
    def _add(self, target: str, line: int, kind: str | None = None) -> None:
        if target in self.known and target != self.name:
            self.found.append(Import(self.name, target, line, kind or self.kind))

    def _absolute(self, module: str | None, level: int) -> str:
        if not level:
            return module or ""
        base = self.package.split(".")
        base = base[: len(base) - level + 1]
        return ".".join([*base, module] if module else base)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(self._deepest(alias.name), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = self._absolute(node.module, node.level)
        for alias in node.names:
            sub = f"{module}.{alias.name}"
            # ``from pkg import module`` loads that module; ``from module import name``, the module.
            self._add(sub if sub in self.known else module, node.lineno)

    def _deepest(self, dotted: str) -> str:
        """The longest known module that ``dotted`` (a module, ``module.attr`` or ``module:attr``) names."""
        parts = dotted.replace(":", ".").split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in self.known:
                return candidate
        return dotted

    def visit_Call(self, node: ast.Call) -> None:
        callee = _callee(node)
        if callee in IMPORTERS and node.args:
            self._import_call(node.args[0], node.lineno)
            for arg in [*node.args[1:], *(k.value for k in node.keywords)]:
                self.visit(arg)
            self.visit(node.func)
            return
        if callee in NOT_MODULE_NAMES:
            return
        self.generic_visit(node)

    def _import_call(self, arg: ast.expr, line: int) -> None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            self._add(arg.value, line, "importlib")
        elif isinstance(arg, ast.JoinedStr):
            pattern = "".join(
                re.escape(v.value) if isinstance(v, ast.Constant) else "(?P<hole>[A-Za-z0-9_]+)" for v in arg.values
            )
            for name in self.known:
                match = re.fullmatch(pattern, name)
                if match and all(hole in self.words for hole in match.groups()):
                    self._add(name, line, "importlib")
        else:
            self.visit(arg)

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Constant):  # ``KIND = "phaselog.x"``: a value, not a table entry
            return
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.annotation)
        if node.value is not None and not isinstance(node.value, ast.Constant):
            self.visit(node.value)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.skip and _DOTTED.fullmatch(node.value):
            target = self._deepest(node.value)
            # ``module:attr`` / ``module.attr`` name the module; a bare package (``phaselog``) is a word.
            if "." in target or ":" in node.value:
                self._add(target, node.lineno, "string")


def imports_of(name: str, path: Path, known: Mapping[str, object]) -> list[Import]:
    """Every load of a module of ``known`` by module ``name`` (its source at ``path``), deduplicated."""
    tree = parse(path)
    collector = _Collector(name, path.name == "__init__.py", known, tree)
    collector.visit(tree)
    seen: dict[tuple[str, int, str], Import] = {}
    for imp in collector.found:
        seen.setdefault((imp.target, imp.line, imp.kind), imp)
    return sorted(seen.values())


def graph(edges: Iterable[Import], nodes: Iterable[str]) -> dict[str, set[str]]:
    """The adjacency sets of ``edges`` over ``nodes``."""
    out: dict[str, set[str]] = {n: set() for n in nodes}
    for edge in edges:
        out[edge.source].add(edge.target)
    return out


def strongly_connected(adj: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(adj[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in adj[v]:
                out.append(sorted(comp))

    for v in sorted(adj):
        if v not in index:
            strong(v)
    return sorted(out)


def shortest_cycle(adj: Mapping[str, set[str]], start: str) -> list[str]:
    """The shortest path ``start → … → start`` (breadth first), or ``[]`` if ``start`` is on no cycle."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(adj[v]):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    return []


def cycles(adj: Mapping[str, set[str]]) -> list[tuple[list[str], list[list[str]]]]:
    """Each component with a cycle and the distinct shortest cycles through its members."""
    out = []
    for comp in strongly_connected(adj):
        inside = {v: adj[v] & set(comp) for v in comp}
        paths: list[list[str]] = []
        seen: set[frozenset[tuple[str, str]]] = set()
        for v in comp:
            path = shortest_cycle(inside, v)
            # The same loop read from another of its members is the same cycle: keep it once.
            key = frozenset(itertools.pairwise(path))
            if path and key not in seen:
                seen.add(key)
                paths.append(path)
        out.append((comp, paths))
    return out


# -- private reads -----------------------------------------------------------------------------------
#: Underscore names that are documented public API of the standard library (namedtuple's methods,
#: ``sys._getframe``, ``os._exit``): using them reads nobody's internals.
PUBLIC_UNDERSCORE = {"_asdict", "_replace", "_fields", "_field_defaults", "_make", "_getframe", "_exit"}
#: Modules whose private names anyone may use (the crash tests' fault points).
OPEN_MODULES = {"phaselog._faults"}
_SELF = {"self", "cls"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.Module) -> set[str]:
    """The names the module itself defines: functions, classes, bound names, ``self.x``/``cls.x``, slots."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.partition(".")[0])
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in _SELF
        ):
            out.add(node.attr)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            out.update(
                n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            )
    return out


def _is_self_like(node: ast.expr) -> bool:
    """``self``, ``cls``, ``super()``, ``type(self)``, ``self.__class__``: the object's own class chain."""
    if isinstance(node, ast.Name):
        return node.id in _SELF
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id == "super" or (
            node.func.id == "type" and len(node.args) == 1 and _is_self_like(node.args[0])
        )
    return isinstance(node, ast.Attribute) and node.attr == "__class__" and _is_self_like(node.value)


def private_reads(name: str, path: Path, known: Mapping[str, object]) -> list[PrivateRead]:
    """The places where module ``name`` uses a private name that another module defines.

    ``obj._x`` is allowed when ``obj`` is the object itself (``self``, ``cls``, ``super()``) or when
    ``_x`` is defined in this module (a class using its own private on another instance, a module
    using its own private function); ``from m import _x`` and ``m._x`` of another module are not,
    except for :data:`OPEN_MODULES`. Importing a private *module* (``from phaselog.model import
    _yaml``) is not a read of a member and is allowed.
    """
    tree = parse(path)
    own = _defined(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    open_aliases: set[str] = set()
    out: list[PrivateRead] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in OPEN_MODULES:
                    open_aliases.add(alias.asname or alias.name)
                elif base not in OPEN_MODULES and _private(alias.name) and f"{base}.{alias.name}" not in known:
                    out.append(PrivateRead(name, node.lineno, alias.name, f"from {base} import {alias.name}"))
        elif isinstance(node, ast.Import):
            open_aliases.update(a.asname or a.name for a in node.names if a.name in OPEN_MODULES)
    for node in ast.walk(tree):
        used = _used_private(node)
        if used is None:
            continue
        obj, attr, text = used
        if _is_self_like(obj) or attr in PUBLIC_UNDERSCORE or ast.unparse(obj) in open_aliases:
            continue
        # A name this module defines is its own, except on an object the instance holds
        # (``self.store._sql`` is the store's ``_sql`` even where this class has one too).
        if attr in own and not _held(obj):
            continue
        out.append(PrivateRead(name, node.lineno, attr, text))
    return sorted(out)


def _used_private(node: ast.AST) -> tuple[ast.expr, str, str] | None:
    """``(obj, name, text)`` if ``node`` is ``obj._name`` or ``getattr(obj, "_name")`` (and its kin)."""
    if isinstance(node, ast.Attribute) and _private(node.attr):
        return node.value, node.attr, ast.unparse(node)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and _private(node.args[1].value)
    ):
        return node.args[0], node.args[1].value, ast.unparse(node)
    return None


def _held(obj: ast.expr) -> bool:
    """``self.x`` / ``self.x.y``: an object the instance holds, not the instance."""
    while isinstance(obj, ast.Attribute):
        if _is_self_like(obj.value):
            return obj.attr != "__class__"
        obj = obj.value
    return False


# -- lazy imports ------------------------------------------------------------------------------------
#: The reason a lazy import gives, on a line of the import statement: ``# lazy: <why>`` (not empty).
LAZY_REASON = re.compile(r"#\s*lazy:\s*\S")


@dataclass(frozen=True, order=True)
class LazyImport:
    """An import statement inside a function or method of ``module`` (at ``line``), and its ``reason``."""

    module: str
    line: int
    text: str
    reason: str | None

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.text}"


def lazy_imports(name: str, path: Path) -> list[LazyImport]:
    """Every ``import``/``from … import`` inside a function or method of ``path`` (nested ones too).

    The reason is a ``# lazy: …`` comment on one of the statement's lines (a parenthesized import may
    carry it on any of its lines); None when there is none.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    found: dict[int, LazyImport] = {}
    for fn in ast.walk(parse(path)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import | ast.ImportFrom) and node.lineno not in found:
                statement = lines[node.lineno - 1 : (node.end_lineno or node.lineno)]
                said = [m.string[m.end() - 1 :].strip() for ln in statement if (m := LAZY_REASON.search(ln))]
                reason = said[0] if said else None
                found[node.lineno] = LazyImport(name, node.lineno, ast.unparse(node), reason)
    return sorted(found.values())
