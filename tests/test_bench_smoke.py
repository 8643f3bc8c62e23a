"""The benchmark package runs and prints its figures. Nothing here times anything or judges
speed: the figures themselves are for people (``make bench``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_bench_quick_write_prints_a_ratio_line(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "write", "--dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    # e.g. "   ratio  write_next / raw_write = 2.41x   goal <= 1.50x: MISSED"
    ratio_line = re.compile(r"^\s*ratio\s+write_next / raw_write = \d+\.\d+x", re.M)
    assert ratio_line.search(res.stdout), res.stdout
    assert "summary" in res.stdout
    assert list(tmp_path.iterdir()) == [], "the temporary stores are removed afterwards"


def test_bench_quick_sql_prints_its_ratio_lines(tmp_path: Path) -> None:
    """The SQL-store benchmark at its smallest scale: SQLite always; PostgreSQL and LangGraph's
    savers print as skipped (with the reason) where they are not available."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            "sql",
            "--scale",
            "2k",
            "--dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    # e.g. "   ratio  write / raw_insert = 1.84x   goal <= 1.30x: MISSED   (same durability …)"
    assert re.search(r"^\s*ratio\s+write / raw_insert = \d+\.\d+x", res.stdout, re.M), res.stdout
    assert re.search(r"^\s*ratio\s+ops/s status / ops/s lg_status = ", res.stdout, re.M), res.stdout
    assert re.search(r"^\s*limit\s+status median = ", res.stdout, re.M), res.stdout
    assert "sqlite-2k" in res.stdout
    assert "postgres-2k" in res.stdout
    assert list(tmp_path.iterdir()) == [], "the temporary stores are removed afterwards"


def test_bench_quick_prints_every_row_of_the_issue_table(tmp_path: Path) -> None:
    """`--quick --only api` still closes with the whole table: rows it did not run say so."""
    from bench._table import ROWS

    res = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "api", "--dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    table = res.stdout[res.stdout.index("== issue 22: every row") :]
    for row in ROWS:
        assert row.label in table, row.label
    # e.g. "   SQLite read, fresh Run each / get_tuple   55.3 µs   26.6 µs   2.23x  <= 1.50x  MISSED"
    assert re.search(r"SQLite read, fresh Run each / get_tuple .* \d+\.\d+x\s+<= 1\.50x\s+(met|MISSED)", table), table
    assert re.search(r"not run \(--only runner\)", table), table
    assert list(tmp_path.iterdir()) == [], "the temporary stores are removed afterwards"


def test_the_cold_start_processes_run_the_phaselog_the_bench_imported(tmp_path: Path) -> None:
    """A worktree's figure is its own code's, not the one the venv's editable install points at (D332)."""
    code = (
        "import json, sys; from pathlib import Path; from bench import bench_start; import phaselog\n"
        f"env, _ = bench_start.setup(Path({str(tmp_path)!r}))\n"
        "print(json.dumps([env['PYTHONPATH'], str(Path(phaselog.__file__).resolve().parent.parent)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    given, imported = json.loads(out)
    assert given == imported
