"""Crash test: SIGKILL the runner at 200 random points of a 5-phase pipeline, rerun until complete.

After every trial: the run is complete, `verify` passes, each phase has exactly one completed
checkpoint whose execution's side effect completed exactly once, no phase started again after its
counted execution finished, and no two executions overlapped. Python and shell phases, on the
files and SQLite stores (PostgreSQL is in the race test).
"""

from __future__ import annotations

import collections
import os
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import phaselog
from runner_worker import pipeline_of
from zygote_support import Zygote

WORKER = Path(__file__).parent / "runner_worker.py"
KILLS = int(os.environ.get("PHASELOG_CRASH_KILLS", "200"))
KILLS_PER_TRIAL = 5
PHASES = [f"p{i}" for i in range(1, 6)]

pytestmark = pytest.mark.slow


def effects(workdir: Path) -> list[tuple[str, str, str]]:
    path = workdir / "effects.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        phase, event, exec_id = line.split()
        out.append((phase, event, exec_id))
    return out


def check_trial(ledger: Any, pipeline: Any, ticket: str, run: str, workdir: Path) -> None:
    st = ledger.status(ticket, run, pipeline=pipeline)
    assert st.done, st.to_json()
    assert ledger.verify(ticket, run).ok
    lines = effects(workdir)
    records = [s.record for s in ledger.list(ticket, run).items]
    assert all(r.completed for r in records), [(r.phase, r.attempt_number, r.error) for r in records]
    for phase in PHASES:
        mine = [r for r in records if r.phase == phase]
        assert len(mine) == 1, f"{phase} completed {len(mine)} times"  # no completed phase ran again
        counted = mine[0].phase_payload["exec"]  # type: ignore[index]
        done = [i for i, (p, e, x) in enumerate(lines) if p == phase and e == "done" and x == counted]
        assert len(done) == 1, f"{phase}: the counted execution {counted} completed {len(done)} times"
        later_starts = [x for (p, e, x) in lines[done[0] + 1 :] if p == phase and e == "start"]
        assert not later_starts, f"{phase} started again after its counted execution: {later_starts}"
    # one execution at a time: nothing else happens between an execution's start and its done
    open_exec: tuple[str, str] | None = None
    for phase, event, exec_id in lines:
        if event == "start":
            open_exec = (phase, exec_id)
        else:
            assert open_exec == (phase, exec_id), f"{phase} {exec_id} finished inside another execution"
            open_exec = None


@pytest.mark.parametrize("kind", ["python", "shell"])
@pytest.mark.parametrize("store_kind", ["files", "sqlite"])
def test_sigkill_anywhere_then_rerun_until_complete(store_kind: str, kind: str, tmp_path: Path) -> None:
    store = str(tmp_path / "store") if store_kind == "files" else f"sqlite:///{tmp_path}/ledger.db"
    rng = random.Random(int(os.environ.get("PHASELOG_CRASH_SEED", "11")))
    ledger = phaselog.open(store)
    zygote = Zygote(WORKER, store, kind, "CRASH")
    # Calibrate: how long a whole run takes (the kill window).
    cal = tmp_path / "calibrate"
    cal.mkdir()
    began = time.monotonic()
    assert zygote.wait(zygote.start(str(uuid.uuid4()), cal)) == 0
    window = time.monotonic() - began
    kills = 0
    landed: collections.Counter[int] = collections.Counter()
    trial = 0
    try:
        while kills < KILLS:
            trial += 1
            workdir = tmp_path / f"t{trial}"
            workdir.mkdir()
            run = str(uuid.uuid4())
            for _ in range(KILLS_PER_TRIAL):
                if kills >= KILLS:
                    break
                done_before = sum(1 for _, e, _ in effects(workdir) if e == "done")
                pid = zygote.start(run, workdir)
                # a point anywhere in what is left of the run (startup, phases, writes, release)
                time.sleep(rng.uniform(0, window * (5 - min(done_before, 4)) / 5))
                os.kill(pid, signal.SIGKILL)
                if zygote.wait(pid) == -signal.SIGKILL:
                    kills += 1
                    landed[sum(1 for _, e, _ in effects(workdir) if e == "done") - done_before] += 1
            for _ in range(50):  # rerun until complete (75: a killed runner's command is still ending)
                code = zygote.wait(zygote.start(run, workdir))
                if code == 0:
                    break
                assert code == 75, f"a rerun exited {code}"
                time.sleep(0.05)
            check_trial(ledger, pipeline_of(kind, workdir).pipeline, "CRASH", run, workdir)
    finally:
        zygote.close()
        ledger.close()
    print(
        f"\n{store_kind}/{kind}: {kills} SIGKILLs in {trial} trials; "
        f"phases whose side effect completed in the killed process: {dict(sorted(landed.items()))}"
    )
    assert kills == KILLS
