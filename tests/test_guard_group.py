"""The guard's job runs in a process group of its own, and the lock is held while any process of
that group lives: a SIGKILLed guard whose shell job left a grandchild working must not let the
next invocation start a second copy.

Real processes throughout: ``phaselog guard run`` subprocesses killed with SIGKILL, shell jobs
whose grandchild does the work. "Two copies at once" is observed, not inferred: the worker holds
an ``flock`` for as long as it works, and a second copy fails to take it and says so in a log.
Nothing here measures time; waits poll with a generous deadline.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from helpers import alive, wait_for
from helpers import clean_env as cli_env

NAME = "closeout"

# The grandchild that does the work: it holds an flock while it works (a second copy cannot take
# it: "overlap"), and logs start/end with its pid. One O_APPEND write per line: whole or absent.
WORKER = textwrap.dedent("""
    import fcntl, os, sys, time
    lock, log, hold = sys.argv[1], sys.argv[2], sys.argv[3]
    def note(word):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{word} {os.getpid()}\\n".encode())
        os.close(fd)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        note("overlap")
        sys.exit(3)
    note("start")
    if hold.replace(".", "").isdigit():
        time.sleep(float(hold))
    else:  # a directory: work until the test releases us (a file named after our pid appears)
        for _ in range(12000):
            if os.path.exists(os.path.join(hold, str(os.getpid()))):
                break
            time.sleep(0.01)
    note("end")
""")

# The job: a shell script whose child (the guard's grandchild) does the work. The trailing
# command keeps the shell from exec'ing the worker in its place.
JOB = textwrap.dedent("""\
    "$PY" "$WORKER" "$@"
    status=$?
    exit $status
""")


def events(log: Path) -> list[tuple[str, int]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        word, pid = line.split()
        out.append((word, int(pid)))
    return out


@pytest.fixture
def workers() -> Iterator[set[int]]:
    """Worker pids seen by a test; any still running at the end are killed."""
    seen: set[int] = set()
    yield seen
    for pid in seen:
        with contextlib.suppress(ProcessLookupError):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def store_args(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    if kind == "files":
        return ["--root", str(tmp_path / "store")]
    if kind == "sqlite":
        return ["--store", f"sqlite://{tmp_path}/guard.db"]
    return ["--store", str(request.getfixturevalue("pg_schema_url"))]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["files", "sqlite", "postgres"])
def test_sigkilled_guard_never_lets_a_second_copy_start(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, workers: set[int]
) -> None:
    """50 rounds: a guard runs a shell job whose grandchild does the work; the guard is SIGKILLed
    at a random moment of the work; another guard is started while the orphaned grandchild still
    works (PDEATHSIG ends only the shell): it must SKIP, not start a second copy. Then the orphan
    is let finish, and the next round's guard takes the lock over. Overlaps (a worker that finds
    the work's flock taken) must be zero."""
    rounds = 50
    rng = random.Random(8)
    worker, job, release = tmp_path / "worker.py", tmp_path / "job.sh", tmp_path / "release"
    worker.write_text(WORKER)
    job.write_text(JOB)
    release.mkdir()
    work_lock, log = tmp_path / "work.lock", tmp_path / "work.log"
    env = cli_env(PY=sys.executable, WORKER=str(worker))
    # A second copy fails (exit 3): a high --max-failures keeps the breaker from hiding that.
    base = [sys.executable, "-m", "phaselog", "guard", "run", "--name", NAME, "--max-failures", "1000000"]
    base += store_args(kind, tmp_path, request)
    command = ["--", "sh", str(job), str(work_lock), str(log), str(release)]
    outcomes: Counter[str] = Counter()
    said: list[str] = []

    def starts() -> list[int]:
        return [pid for word, pid in events(log) if word == "start"]

    for r in range(rounds):
        begun = len(starts())
        # Its output goes to a file: a pipe would stay open in the orphan (the old guard's case).
        with open(tmp_path / f"guard-{r}.out", "wb") as sink:
            guard = subprocess.Popen([*base, *command], env=env, stdout=sink, stderr=subprocess.STDOUT)

        def started_or_done(guard: subprocess.Popen[bytes] = guard, begun: int = begun) -> bool:
            return len(starts()) > begun or guard.poll() is not None

        wait_for(started_or_done, f"round {r}: the guard to run its job")
        if len(starts()) == begun:
            text = (tmp_path / f"guard-{r}.out").read_text()
            pytest.fail(f"round {r}: the guard did not run its job (exit {guard.returncode}): {text}")
        orphan = starts()[-1]
        workers.add(orphan)
        time.sleep(rng.uniform(0.0, 0.3))  # a random moment inside the work
        guard.kill()
        guard.wait(timeout=60)
        assert alive(orphan), f"round {r}: the grandchild must outlive its guard (it is the case under test)"
        second = subprocess.run([*base, *command], env=env, capture_output=True, timeout=120, check=False)
        out = second.stdout.decode()
        outcomes["skip" if out.startswith("SKIP") else f"exit {second.returncode}"] += 1
        if not out.startswith("SKIP"):
            said.append(f"round {r}: exit {second.returncode}: {out} {second.stderr.decode()}")
        (release / str(orphan)).touch()
        wait_for(lambda orphan=orphan: not alive(orphan), f"round {r}: the released worker to finish")

    evs = Counter(word for word, _ in events(log))
    assert evs["overlap"] == 0, f"{evs['overlap']} times a second copy of the job ran beside the first ({outcomes})"
    assert outcomes == Counter({"skip": rounds}), said
    assert evs["start"] == rounds
    print(  # the figures for the note (pytest -s)
        f"\n{kind}: {rounds} rounds, {evs['start']} starts, {evs['overlap']} overlaps, {dict(outcomes)}"
    )
    # Afterwards, the next guard takes the (dead) lock over and runs.
    done = subprocess.run([*base, "--", "sh", "-c", "exit 0"], env=env, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert b"took over the lock" in done.stderr


def test_the_lock_names_the_job_group_and_a_live_group_keeps_it(tmp_path: Path, workers: set[int]) -> None:
    """The lock records the job's process group; a guard SIGKILLed while its shell job's
    grandchild works leaves the lock held (SKIP, naming the group) until that grandchild ends."""
    root, worker, job = tmp_path / "store", tmp_path / "worker.py", tmp_path / "job.sh"
    worker.write_text(WORKER)
    job.write_text(JOB)
    work_lock, log, go = tmp_path / "work.lock", tmp_path / "work.log", tmp_path / "go"
    env = cli_env(PY=sys.executable, WORKER=str(worker))
    base = [sys.executable, "-m", "phaselog", "guard", "run", "--name", NAME, "--root", str(root)]
    guard = subprocess.Popen(
        [*base, "--", "sh", str(job), str(work_lock), str(log), "600"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    [(_, wpid)] = wait_for(lambda: events(log), "the worker to start")
    workers.add(wpid)
    lock = yaml.safe_load((root / "pipeline_checkpoints" / f"{NAME}.lock").read_text())
    shell = psutil.Process(wpid).ppid()
    assert lock["pid"] == guard.pid
    assert lock["pgid"] == shell == os.getpgid(wpid), "the job's shell leads a process group the worker is in"
    assert os.getsid(wpid) == shell, "the job runs in a session of its own"
    guard.kill()
    guard.wait(timeout=60)
    wait_for(lambda: not alive(shell), "PDEATHSIG to end the job's shell")
    assert alive(wpid), "the grandchild outlives its shell: this is the case the group check is for"
    res = subprocess.run([*base, "--", "touch", str(go)], env=env, capture_output=True, timeout=120, check=False)
    assert res.returncode == 0
    assert res.stdout.decode().startswith("SKIP: previous invocation still running")
    assert f"process group {shell}" in res.stdout.decode()
    assert not go.exists()
    status = subprocess.run(
        [*base[:4], "status", "--name", NAME, "--root", str(root)], env=env, capture_output=True, check=False
    )
    import json

    holder = json.loads(status.stdout)["lock"]
    assert holder["verdict"] == "live"
    assert str(wpid) in holder["reason"]
    os.kill(wpid, signal.SIGKILL)
    wait_for(lambda: not alive(wpid), "the worker to die")
    res = subprocess.run([*base, "--", "touch", str(go)], env=env, capture_output=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert go.exists()
    assert b"took over the lock" in res.stderr


def test_kill_stale_ends_the_orphaned_job_group_of_a_dead_guard(tmp_path: Path, workers: set[int]) -> None:
    """A SIGKILLed guard's grandchild still works past --stale-after: --kill-stale ends it (the
    guard itself is gone, so only its group can be signalled), then runs its own command once."""
    root, worker, job = tmp_path / "store", tmp_path / "worker.py", tmp_path / "job.sh"
    worker.write_text(WORKER)
    job.write_text(JOB)
    work_lock, log, go = tmp_path / "work.lock", tmp_path / "work.log", tmp_path / "go"
    env = cli_env(PY=sys.executable, WORKER=str(worker))
    base = [sys.executable, "-m", "phaselog", "guard", "run", "--name", NAME, "--root", str(root)]
    guard = subprocess.Popen(
        [*base, "--", "sh", str(job), str(work_lock), str(log), "600"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    [(_, wpid)] = wait_for(lambda: events(log), "the worker to start")
    workers.add(wpid)
    guard.kill()
    guard.wait(timeout=60)
    young = subprocess.run([*base, "--kill-stale", "--", "touch", str(go)], env=env, capture_output=True, check=False)
    assert young.stdout.decode().startswith("SKIP"), "younger than --stale-after: left alone even with --kill-stale"
    assert alive(wpid)
    res = subprocess.run(
        [*base, "--stale-after", "0s", "--kill-stale", "--", "touch", str(go)],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert b"ending hung holder" in res.stderr
    assert b"and its job's process group" in res.stderr
    wait_for(lambda: not alive(wpid), "the orphaned worker to be ended")
    assert go.exists(), "the new command ran once the group was gone"
    assert [w for w, _ in events(log)] == ["start"], "the worker was killed (no end), and no second one ran"
