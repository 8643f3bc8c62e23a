"""The layers of the files store and the guard (issue 21), counting every import.

Top-level imports, imports under ``TYPE_CHECKING`` and imports inside functions all count:
stores and the guard's records point down to the model only, the guard (a service beside the ledger) reaches its
storage through the stores' contract, and no module reads another object's private member.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from phaselog.guard import Guard, guard_names
from phaselog.model.guard import LoopState
from phaselog.stores.base import Capability, guard_keeper
from phaselog.stores.files.guard import FileGuardStore
from phaselog.stores.files.store import FilesStore

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "phaselog"
#: Moved by the SQL store's engineer to stores/sql/guard.py (issue 21); judged there.
NOT_OURS = {PACKAGE / "guard" / "sql.py"}
MAX_LINES = 500


def _modules(*parts: str) -> list[Path]:
    base = PACKAGE.joinpath(*parts)
    paths = [base] if base.suffix == ".py" else sorted(base.rglob("*.py"))
    return [p for p in paths if p not in NOT_OURS]


FILES = _modules("stores", "files")
GUARD = _modules("guard")
DOWN = [*FILES, *_modules("stores", "base.py"), *_modules("model", "guard.py"), *_modules("model", "processes.py")]


def _ids(paths: list[Path]) -> list[object]:
    return [pytest.param(p, id=p.relative_to(SRC).as_posix()) for p in paths]


def _imports(path: Path) -> set[str]:
    """Every phaselog module ``path`` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}: relative import"
            module = node.module or ""
            if module == "phaselog":  # ``from phaselog import _faults`` imports phaselog._faults
                found.update(f"{module}.{a.name}" for a in node.names)
            else:
                found.add(module)
    return {m for m in found if m == "phaselog" or m.startswith("phaselog.")}


def _allowed(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", _ids(DOWN))
def test_stores_and_the_guards_records_point_down_to_the_model(path: Path) -> None:
    allowed = ("phaselog.model", "phaselog._faults")
    if "stores" in path.parts:
        allowed = (*allowed, "phaselog.stores")
    wrong = sorted(m for m in _imports(path) if not _allowed(m, allowed))
    assert wrong == [], f"{path.relative_to(SRC)} imports {wrong}: a store knows only the model"


@pytest.mark.parametrize("path", _ids(GUARD))
def test_the_guard_reaches_only_stores_and_the_model(path: Path) -> None:
    allowed = ("phaselog.guard", "phaselog.model", "phaselog.stores", "phaselog._faults")
    wrong = sorted(m for m in _imports(path) if not _allowed(m, allowed))
    assert wrong == [], f"{path.relative_to(SRC)} imports {wrong}: the guard sits over stores and model only"


def test_the_guard_gets_its_storage_only_through_the_contract() -> None:
    core = _imports(PACKAGE / "guard" / "core.py")
    assert not any(m.startswith("phaselog.stores.files.guard") or m.startswith("phaselog.stores.sql") for m in core)


def _private_reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "os", "sys"):
            continue
        if node.attr in defined:
            continue  # a module's own helper
        out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


@pytest.mark.parametrize("path", _ids([*FILES, *GUARD, *_modules("stores", "base.py")]))
def test_no_private_reads(path: Path) -> None:
    assert _private_reads(path) == []


@pytest.mark.parametrize("path", _ids([*FILES, *GUARD]))
def test_no_module_over_500_lines(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_a_path_and_its_files_store_keep_the_same_guard(tmp_path: Path) -> None:
    store = FilesStore(tmp_path)
    keeper = guard_keeper(store)
    assert keeper is not None
    assert Capability.GUARD_STORAGE in store.capabilities
    storage = keeper.guard_storage("nightly")
    assert isinstance(storage, FileGuardStore)
    by_path, by_store = Guard(tmp_path, "nightly"), Guard(store, "nightly")
    assert str(by_path.storage.state_path) == str(by_store.storage.state_path) == str(storage.state_path)
    assert str(by_path.storage.lock_path) == str(storage.lock_path)
    with storage.mutex():
        storage.write_state(LoopState(pass_count=3))
    assert by_store.status()["state"]["pass_count"] == 3
    assert guard_names(tmp_path) == guard_names(store) == ["nightly"]
