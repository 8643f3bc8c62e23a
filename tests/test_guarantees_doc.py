"""docs/guarantees.md names the tests that show each promise: every name must be a real test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

DOC = REPO / "docs" / "guarantees.md"
REFERENCE = re.compile(r"`(test_[a-z0-9_]+\.py)::(test_[a-z0-9_]+)`")


def _defined_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def _tests_in(path: str) -> set[str]:
    text = REPO / "tests" / path
    names = _defined_in(text)
    if "StoreConformance" in text.read_text("utf-8"):  # it runs the installable suite's tests too
        for module in (REPO / "src" / "phaselog" / "testing").glob("*.py"):
            names |= _defined_in(module)
    return names


def test_every_test_the_guarantees_name_exists() -> None:
    refs = REFERENCE.findall(DOC.read_text("utf-8"))
    assert len(refs) >= 30  # the page names its evidence; a page that names none is not checked
    missing = [f"{f}::{t}" for f, t in refs if not (REPO / "tests" / f).is_file() or t not in _tests_in(f)]
    assert not missing, f"docs/guarantees.md names tests that do not exist: {missing}"


def test_every_limit_in_the_table_is_the_one_in_the_code() -> None:
    from phaselog.model import limits

    text = DOC.read_text("utf-8")
    assert f"1 … {limits.MAX_ATTEMPT:,}" in text
    assert f"{limits.MAX_RECORD_BYTES // (1 << 20)} MiB" in text
    assert f"{limits.MAX_ENTRY_BYTES // (1 << 20)} MiB" in text
    assert f"{limits.MAX_OUTPUT_BYTES // (1 << 20)} MiB" in text
    assert f"{limits.MAX_MANIFEST_BYTES // (1 << 20)} MiB" in text
