"""The SQL backend's seams: the session is the one way to the database, the dialect owns every
difference between databases, and the checkpoint INSERT is written once.

(The layer contract over the whole library is tests/test_architecture.py; these pin what the SQL
backend promises on its own.)
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

import phaselog
from phaselog.stores.sql.dialect import Dialect
from phaselog.stores.sql.sqlite import SqliteDialect, SqliteStore

SRC = Path(phaselog.__file__).parent
SQL = SRC / "stores" / "sql"
#: The dialects themselves are where the differences live.
DIALECTS = {SQL / "sqlite.py", SQL / "postgres.py", SQL / "dialect.py"}
#: The store's private state: nothing outside its own module reads these on another object.
STORE_PRIVATES = {"_query", "_query_raw", "_sql", "_write", "_retry", "_stored", "_ensure_ready", "_translate"}


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _dialect_name_tests(path: Path) -> list[int]:
    """Lines comparing ``….dialect.name`` (or a dialect's ``name``) with something."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if (
                    isinstance(side, ast.Attribute)
                    and side.attr == "name"
                    and isinstance(side.value, ast.Attribute | ast.Name)
                    and "dialect" in ast.unparse(side.value)
                ):
                    found.append(node.lineno)
        if isinstance(node, ast.Subscript) and "dialect.name" in ast.unparse(node.slice):
            found.append(node.lineno)  # a table keyed by the dialect's name
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and any("dialect.name" in ast.unparse(arg) for arg in node.args)
        ):
            found.append(node.lineno)
    return found


@pytest.mark.parametrize("path", [p for p in _modules() if p not in DIALECTS], ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_but_a_dialect_asks_which_database_it_is_on(path: Path) -> None:
    assert _dialect_name_tests(path) == [], f"{path}: move the difference into the Dialect"


def test_nothing_reads_the_sql_store_s_private_members() -> None:
    reads = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in STORE_PRIVATES
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                reads.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert reads == []


def test_the_checkpoint_insert_is_written_once() -> None:
    hits = [
        str(path.relative_to(SRC))
        for path in _modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "INSERT INTO phaselog_checkpoints" in node.value
    ]
    assert hits == ["stores/sql/checkpoints.py"]


def test_every_dialect_fills_in_the_differences() -> None:
    from phaselog.stores.sql.postgres import PostgresDialect

    for dialect in (SqliteDialect, PostgresDialect):
        assert issubclass(dialect, Dialect)
        assert isinstance(dialect.now, str)
        assert dialect.now
    assert (PostgresDialect.for_update, PostgresDialect.for_share) == (" FOR UPDATE", " FOR SHARE")
    assert (SqliteDialect.for_update, SqliteDialect.for_share) == ("", "")


def test_the_session_reads_the_database_clock_and_runs_transactions(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db", migrate=True) as store:
        session = store.session
        (now,) = session.query(f"SELECT {store.dialect.now}")[0]
        assert abs(float(now) - time.time()) < 5
        session.transact(
            lambda tx: tx.execute("INSERT INTO phaselog_guard_state (name, body) VALUES (?, ?)", ("g", "x"))
        )
        assert session.query("SELECT name, body FROM phaselog_guard_state") == [("g", "x")]

        def fail_inside() -> None:
            with session.hold(lambda tx: None) as tx:
                tx.execute("INSERT INTO phaselog_guard_state (name, body) VALUES (?, ?)", ("h", "y"))
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            fail_inside()
        assert session.query("SELECT name FROM phaselog_guard_state") == [("g",)]


def test_a_session_reads_nothing_from_a_store_not_created_yet(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "absent.db") as store:
        assert store.session.query("SELECT name FROM phaselog_guard_state") == []
        assert not (tmp_path / "absent.db").exists()  # a read creates nothing


def test_a_fence_without_a_lease_row_is_fenced_not_a_crash(tmp_path: Path) -> None:
    from phaselog.model.errors import Fenced
    from phaselog.stores.base import RunFence
    from phaselog.stores.sql.lease import check_fence

    fence = RunFence("T-1", "00000000-0000-4000-8000-000000000001", 3)
    with SqliteStore(tmp_path / "s.db", migrate=True) as store, pytest.raises(Fenced, match="no lease"):
        store.session.transact(lambda tx: check_fence(tx, fence))
