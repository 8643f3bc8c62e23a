"""The benchmark package runs and prints its figures. Nothing here times anything or judges
speed: the figures themselves are for people (``make bench``)."""

from __future__ import annotations

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
