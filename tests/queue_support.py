"""Shared pieces of the queue/worker tests: a pipeline folder, worker processes, effect checks.

The pipeline ``three`` has two Python phases (``call: qphases:step``) and a shell phase; each
execution appends ``<run> <phase> start <exec>`` and ``<run> <phase> done <exec>`` to
``effects.log`` in the worker's working directory (O_APPEND: whole lines from many processes)
and returns ``{"exec": <exec>}`` (``<exec>`` = pid-attempt, unique per execution), so a test
can tell which execution's checkpoint counts and whether anything ran again after it.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent / "phaselog"

PHASES_PY = """
import os, random, signal, time

def _log(ctx, line):
    fd = os.open(os.path.join(str(ctx.workdir), "effects.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)

def step(ctx):
    exec_id = f"{os.getpid()}-{ctx.attempt}"
    _log(ctx, f"{ctx.run_id} {ctx.phase} start {exec_id}")
    pause = float(os.environ.get("QPHASE_SLEEP", "0"))
    if pause:
        time.sleep(random.uniform(0, 2 * pause))
    _log(ctx, f"{ctx.run_id} {ctx.phase} done {exec_id}")
    return {"exec": exec_id}

def slow(ctx):
    exec_id = f"{os.getpid()}-{ctx.attempt}"
    _log(ctx, f"{ctx.run_id} {ctx.phase} start {exec_id}")
    time.sleep(float(os.environ.get("QPHASE_SLOW", "1.5")))
    _log(ctx, f"{ctx.run_id} {ctx.phase} done {exec_id}")
    return {"exec": exec_id}

def suicide(ctx):
    _log(ctx, f"{ctx.run_id} {ctx.phase} start {os.getpid()}-{ctx.attempt}")
    os.kill(os.getpid(), signal.SIGKILL)

def boom(ctx):
    raise RuntimeError("boom")
"""

SHELL_STEP = (
    'echo "$PHASELOG_RUN_ID $PHASELOG_PHASE start $$-$PHASELOG_ATTEMPT" >> effects.log; '
    'echo "$PHASELOG_RUN_ID $PHASELOG_PHASE done $$-$PHASELOG_ATTEMPT" >> effects.log; '
    'echo "{\\"exec\\": \\"$$-$PHASELOG_ATTEMPT\\"}"'
)


def manifest(name: str, phases: list[dict[str, Any]]) -> dict[str, Any]:
    """A manifest document."""
    return {"name": name, "version": "1", "phases": phases}


def pipelines_dir(root: Path) -> Path:
    """A --pipelines folder: qphases.py and a few manifests (three, gated, slowmid, poison, failing)."""
    d = root / "pipelines"
    d.mkdir(parents=True, exist_ok=True)
    (d / "qphases.py").write_text(PHASES_PY)
    docs = {
        "three": [
            {"name": "one", "call": "qphases:step"},
            {"name": "two", "call": "qphases:step"},
            {"name": "three", "run": SHELL_STEP},
        ],
        "pythree": [{"name": n, "call": "qphases:step"} for n in ("one", "two", "three")],
        "gated": [
            {"name": "draft", "call": "qphases:step", "requires_approval": True},
            {"name": "publish", "call": "qphases:step"},
        ],
        "slowmid": [
            {"name": "one", "call": "qphases:step"},
            {"name": "two", "call": "qphases:slow"},
            {"name": "three", "call": "qphases:step"},
        ],
        "poison": [{"name": "one", "call": "qphases:step"}, {"name": "two", "call": "qphases:suicide"}],
        "failing": [{"name": "one", "call": "qphases:boom", "retries": 1, "retry_delay": 0}],
    }
    for name, phases in docs.items():
        (d / f"{name}.yaml").write_text(json.dumps(manifest(name, phases)))
    return d


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a phaselog process: no PHASELOG_* from outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env["PATH"] = f"{BIN.parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``phaselog ARGS`` to the end."""
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=120, check=False, env=env or base_env(), cwd=cwd
    )


def cli_json(*args: str, **kw: Any) -> dict[str, Any]:
    """Run ``phaselog ARGS`` that must succeed; its JSON."""
    done = cli(*args, **kw)
    assert done.returncode == 0, (done.stdout, done.stderr)
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def start_worker(
    url: str, pipelines: Path, workdir: Path, *extra: str, env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[str]:
    """A ``phaselog worker`` process (stderr to ``log`` when given)."""
    err: Any = open(log, "a") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - closed below
    try:
        return subprocess.Popen(
            [str(BIN), "worker", "--store", url, "--pipelines", str(pipelines), "--workdir", str(workdir), *extra],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env or base_env(),
        )
    finally:
        if log is not None:
            err.close()  # the child has its own copy


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 60) -> int:
    """Signal a process and wait for it."""
    if proc.poll() is None:
        proc.send_signal(sig)
    code = proc.wait(timeout=timeout)
    if proc.stdout is not None:
        proc.stdout.close()
    return code


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def queue_states(url: str) -> dict[str, str]:
    """run_id -> state, read straight from the table."""
    import psycopg

    from phaselog.stores.sql.postgres import split_url

    dsn, schema = split_url(url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        return dict(conn.execute("SELECT run_id, state FROM phaselog_queue").fetchall())


def effects(workdir: Path) -> list[tuple[str, str, str, str]]:
    """(run, phase, start|done, exec) lines of effects.log."""
    path = workdir / "effects.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        assert len(parts) == 4, f"torn effects line {line!r}"
        out.append((parts[0], parts[1], parts[2], parts[3]))
    return out


def check_exactly_once(url: str, workdir: Path, runs: dict[str, str], manifest_path: Path) -> None:
    """Every run done: each phase's counted execution completed exactly once, nothing ran after it,
    the run verifies, and every attempt that ran is accounted for."""
    from phaselog.ledger.facade import Ledger
    from phaselog.model.pipelines import load_manifest
    from phaselog.stores import open_store

    pipeline = load_manifest(manifest_path)
    phases = pipeline.phase_names
    lines = effects(workdir)
    by_run: dict[str, list[tuple[str, str, str]]] = collections.defaultdict(list)
    for run, phase, what, exec_id in lines:
        by_run[run].append((phase, what, exec_id))
    with Ledger(open_store(url)) as ledger:
        for run_id, ticket in runs.items():
            report = ledger.verify(ticket, run_id)
            assert report.ok, (run_id, report.problems)
            st = ledger.status(ticket, run_id, pipeline=pipeline)
            assert st.done, (run_id, [(p.phase, p.state) for p in st.phases])
            seq = by_run[run_id]
            for phase in phases:
                latest = ledger.read(ticket, run_id, phase, pipeline=pipeline)
                counted = (latest.record.phase_payload or {})["exec"]
                dones = [i for i, (p, w, e) in enumerate(seq) if p == phase and w == "done" and e == counted]
                assert len(dones) == 1, (run_id, phase, counted, seq)
                later_starts = [e for p, w, e in seq[dones[0] + 1 :] if p == phase and w == "start"]
                assert not later_starts, f"{run_id} {phase} ran again after its completed execution: {later_starts}"
                completed = [a for a in ledger.store.attempts(ticket, run_id) if a.phase == phase and a.completed]
                assert len(completed) == 1, (run_id, phase, completed)
