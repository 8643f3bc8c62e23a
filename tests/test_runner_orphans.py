"""A SIGKILLed runner's phase command does not keep the run: the next runner on the host ends
the command's processes (provably that runner's) and takes the run over at once. Real
`phaselog run` subprocesses, real SIGKILL, a shell phase whose grandchild outlives its shell."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import phaselog
from phaselog.model.ids import normalize_run_id
from phaselog.runner import lease as leasing
from phaselog.stores.base import LeaseState

REPO = Path(__file__).resolve().parent.parent

MANIFEST = """name: orphans
version: "1"
phases:
  - name: work
    run: |
      if [ -e first ]; then rm first; sh -c 'sleep 30 & echo $! > grandchild.pid; wait'; fi
      echo '{"ok": 1}'
  - name: after
    run: |
      echo '{"after": 1}'
"""


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _env(store: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env.update(PHASELOG_STORE=store, PYTHONPATH=str(REPO / "src"))
    return env


def _run(store: str, workdir: Path, env: dict[str, str] | None = None) -> Any:
    return subprocess.Popen(
        [sys.executable, "-m", "phaselog", "run", "--pipeline-file", str(workdir / "job.yaml"), "--quiet",
         "--ticket-id", "O-1", "--run-id", "r"],
        cwd=workdir, env=env or _env(store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_a_sigkilled_runner_s_grandchild_is_ended_and_the_rerun_starts_at_once(kind: str, tmp_path: Path) -> None:
    store = str(tmp_path / "store") if kind == "files" else f"sqlite:///{tmp_path / 'ledger.db'}"
    (tmp_path / "job.yaml").write_text(MANIFEST)
    (tmp_path / "first").write_text("")
    first = _run(store, tmp_path)
    marker = tmp_path / "grandchild.pid"
    for _ in range(600):
        if marker.exists() and marker.read_text().strip():
            break
        assert first.poll() is None, first.communicate()
        time.sleep(0.05)
    grandchild = int(marker.read_text())
    time.sleep(1.5)  # past the start event's delay: attempt 1 is recorded as started
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=30)
    try:
        time.sleep(0.2)  # the shell dies with the runner (PR_SET_PDEATHSIG) ...
        assert _running(grandchild), "... but its child lives on: the case this test is about"
        rerun = _run(store, tmp_path)
        out, err = rerun.communicate(timeout=60)
        assert rerun.returncode == 0, (out, err)
        assert "Traceback" not in err
        result = json.loads(out)
        took = result["took_over"]
        assert took["ended"][0]["signal"] == "SIGKILL"
        assert grandchild in took["ended"][0]["pids"]
        assert "ended with SIGKILL" in took["reason"]
        assert not _running(grandchild)
    finally:
        if _running(grandchild):
            os.kill(grandchild, signal.SIGKILL)
    ledger = phaselog.Ledger(phaselog.open_store(store))
    try:
        st = ledger.status("O-1", "r", pipeline=phaselog.pipeline(str(tmp_path / "job.yaml")).pipeline)
        assert st.done, st.to_json()
        records = [(s.record.phase, s.record.attempt_number, s.record.status) for s in ledger.list("O-1", "r").items]
        # attempt 1 never finished (its runner died; its start event shows it abandoned): attempt 2 ran
        assert records == [("work", 2, "completed"), ("after", 1, "completed")]
    finally:
        ledger.close()


def _state(holder: dict[str, Any], token: int = 7) -> LeaseState:
    return LeaseState("T", normalize_run_id("r"), token, holder, 100.0, 130.0, 110.0, lock_free=True)


def _group(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "30"], env={**os.environ, **env}, start_new_session=True)


def test_only_a_group_that_is_provably_the_dead_runner_s_is_ended(tmp_path: Path) -> None:
    run = normalize_run_id("r")
    ours = _group({"PHASELOG_RUN_ID": run, "PHASELOG_LEASE_TOKEN": "7"})
    theirs = _group({"PHASELOG_RUN_ID": run, "PHASELOG_LEASE_TOKEN": "8"})  # another acquisition's
    try:
        dead = {"host": socket.gethostname(), "pid": 2**22 + 4321, "process_start": 1.0}
        alive = {**dead, "pid": os.getpid(), "process_start": psutil.Process().create_time()}
        verdict = leasing.judge(_state({**dead, "child_pgid": ours.pid}))
        assert isinstance(verdict, leasing.Orphaned)
        assert verdict.pids == (ours.pid,)
        # a live runner's command is never touched; nor a group that is not provably the dead one's
        kept = leasing.judge(_state({**alive, "child_pgid": ours.pid}, token=7))
        assert not isinstance(kept, leasing.Orphaned)
        assert not kept.take
        held = leasing.judge(_state({**dead, "child_pgid": theirs.pid}))
        assert not isinstance(held, leasing.Orphaned)
        assert not held.take
        assert "not provably its own" in held.reason
        assert leasing.end_orphans(verdict)
        assert ours.wait(timeout=10) == -signal.SIGKILL
        assert theirs.poll() is None
    finally:
        for p in (ours, theirs):
            if p.poll() is None:
                p.kill()
            p.wait()


PY_MANIFEST = """name: orphans-py
version: "1"
phases:
  - name: work
    call: orphan_phase:work
"""

PY_PHASE = """
import subprocess
import time
from pathlib import Path


def work(ctx):
    first = ctx.workdir / "first"
    if first.exists():
        first.unlink()
        child = subprocess.Popen(["sleep", "30"])
        (ctx.workdir / "child.pid").write_text(str(child.pid))
        time.sleep(30)
    return {"ok": 1}
"""


@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_a_sigkilled_runner_s_python_phase_child_is_ended_and_the_rerun_starts_at_once(
    kind: str, tmp_path: Path
) -> None:
    store = str(tmp_path / "store") if kind == "files" else f"sqlite:///{tmp_path / 'ledger.db'}"
    (tmp_path / "job.yaml").write_text(PY_MANIFEST)
    (tmp_path / "orphan_phase.py").write_text(PY_PHASE)
    (tmp_path / "first").write_text("")
    env = {**_env(store), "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{tmp_path}"}
    first = _run(store, tmp_path, env=env)
    marker = tmp_path / "child.pid"
    for _ in range(600):
        if marker.exists() and marker.read_text().strip():
            break
        assert first.poll() is None, first.communicate()
        time.sleep(0.05)
    child = int(marker.read_text())
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)  # not communicate(): the child holds the runner's stdout open
    first.stdout.close()
    first.stderr.close()
    try:
        assert _running(child), "the phase's child outlives its runner: the case this test is about"
        rerun = _run(store, tmp_path, env=env)
        out, err = rerun.communicate(timeout=60)
        assert rerun.returncode == 0, (out, err)
        took = json.loads(out)["took_over"]
        assert child in took["ended"][0]["pids"]
        assert not _running(child)
    finally:
        if _running(child):
            os.kill(child, signal.SIGKILL)
