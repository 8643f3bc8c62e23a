"""Race test: 8 runner processes start on the same run at once; exactly one runs each phase.

On every store (files, SQLite, PostgreSQL), Python and shell phases. Runners that lose either
exit 75 (held) or, arriving after the winner finished, skip every phase (exit 0, nothing run).
With --wait, every loser waits for the winner and then skips everything.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import phaselog
from runner_worker import pipeline_of

WORKER = Path(__file__).parent / "runner_worker.py"
RUNNERS = 8
PHASES = [f"p{i}" for i in range(1, 6)]

pytestmark = [pytest.mark.slow, pytest.mark.all_stores]


def race(store_url: str, kind: str, workdir: Path, *, wait: bool) -> tuple[str, list[int]]:
    run = str(uuid.uuid4())
    extra = ["--barrier", *(["--wait"] if wait else [])]
    procs = []
    for i in range(RUNNERS):
        with open(workdir / f"runner{i}.err", "wb") as err:  # the child keeps its own copy
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(WORKER), store_url, kind, "RACE", run, str(workdir), *extra],
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    cwd=workdir,
                )
            )
    for p in procs:  # every runner imported and waiting at the barrier
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
    (workdir / "go").touch()
    codes = []
    for p in procs:
        codes.append(p.wait(timeout=120))
        assert p.stdout is not None
        p.stdout.close()
    return run, codes


@pytest.mark.parametrize(("kind", "wait"), [("python", False), ("shell", True)])
def test_eight_runners_on_one_run_exactly_one_runs_each_phase(
    store: Any, kind: str, wait: bool, tmp_path: Path
) -> None:
    ledger = phaselog.Ledger(store)
    for round_ in range(2):
        workdir = tmp_path / f"round{round_}"
        workdir.mkdir()
        run, codes = race(store.url, kind, workdir, wait=wait)
        errors = "".join(p.read_text() for p in sorted(workdir.glob("runner*.err")))
        assert set(codes) <= ({0} if wait else {0, 75}), (codes, errors)
        lines = (workdir / "effects.log").read_text().splitlines()
        starts = collections.Counter(line.split()[0] for line in lines if line.split()[1] == "start")
        assert starts == dict.fromkeys(PHASES, 1), lines  # exactly one execution of each phase
        assert ledger.status("RACE", run, pipeline=pipeline_of(kind, workdir).pipeline).done
        records = ledger.list("RACE", run).items
        assert [(s.record.phase, s.record.attempt_number) for s in records] == [(p, 1) for p in PHASES]
        assert ledger.verify("RACE", run).ok
