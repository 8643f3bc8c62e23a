"""The SQL schema's migrations are frozen: a released migration's text never changes.

Each number's statements are pinned by their SHA-256. A database migrated by an older phaselog
ran exactly that text; editing it would leave such databases different from new ones without
anything noticing. A schema change is a new number (add its hash here), never an edit.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from phaselog.stores.sql import migrations, schema

#: SHA-256 of each migration's statements joined by "\n;\n" (as released).
RELEASED = {
    1: "e18c1b7fca7b94e34afb27cfede489ff250f18731a5d33b571f773b0288b7d22",
    2: "af340aeab7a8e19ca387350e9d1f407bfe2c1629a014ae16df00556bdec9fffe",
    3: "72afbf0449ba4f1333de244c5d84e54e5737fd74414ee87147867b0b19e77359",
    4: "964f9440da7a73db12b28130d37f727169fed015c1058e24b0464963772b5d66",
    5: "405d9d3dcbd10cca02c700cb837c93e4b5d2c57fa5743a97b3ef990c2eb4c232",
    6: "80d51d74f84d1bb838bde572b747ffd9467e61d4eae925538ecc78dac45227ce",
    7: "bc475a52fafb7303f6e50587b21999f0aeff7bfbe5b17196891ffaa2afb6344b",
    8: "f88f48d923b37f19073930ff70d0ad9296aee25cecf12940829e14edae5f332c",
    9: "0741e2f4a36e90c46f647d83e45557cc895af2a1716bc99455b8046fd14c3a5a",
}


def _digest(statements: tuple[str, ...]) -> str:
    return hashlib.sha256("\n;\n".join(statements).encode("utf-8")).hexdigest()


@pytest.mark.parametrize("number", sorted(migrations.FROZEN))
def test_a_released_migration_never_changes(number: int) -> None:
    assert number in RELEASED, (
        f"migration {number} is new: pin its hash in RELEASED ({_digest(migrations.FROZEN[number])})"
    )
    assert _digest(migrations.FROZEN[number]) == RELEASED[number], (
        f"migration {number} was edited: a released migration never changes; add a new number instead"
    )


def test_the_migrations_are_numbered_one_to_the_schema_version_without_gaps() -> None:
    assert sorted(migrations.FROZEN) == list(range(1, schema.SCHEMA_VERSION + 1))
    assert set(RELEASED) <= set(migrations.FROZEN), "a released migration was removed"


def test_the_schema_applies_the_frozen_migrations() -> None:
    assert {n: tuple(s) for n, s in schema.MIGRATIONS.items()} == dict(migrations.FROZEN)


def test_the_frozen_migrations_cannot_be_changed_at_run_time() -> None:
    with pytest.raises(TypeError):
        migrations.FROZEN[1] = ()  # type: ignore[index]  # the point: a read-only mapping


def test_the_migrations_module_is_plain_data() -> None:
    """Literal strings only: no constant of another module is interpolated into a migration."""
    tree = ast.parse(Path(migrations.__file__).read_text(encoding="utf-8"))
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module != "__future__"
    }
    assert imported <= {"collections.abc", "types"}
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)], "no f-strings in migrations"
