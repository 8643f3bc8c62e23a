"""The cron-loop guard, library level: lock, loop state, circuit breaker.

Real files under tmp_path and real processes throughout; only the clock (and, where a test says
so, the command runner) is injected through ``phaselog.guard.Environment`` / ``Guard.run``.
Nothing here measures time: waits poll with a generous deadline.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from helpers import GUARD_SEED_FIELDS as SEED_FIELDS
from helpers import TS_Z, Clock, catches_term, wait_for
from helpers import alive as running
from phaselog.guard import (
    Environment,
    Fenced,
    Guard,
    GuardConfig,
    JobResult,
    breaker,
    outcome_of,
    process_start_time,
)
from phaselog.model.errors import UsageError

HOST = socket.gethostname()
T0 = datetime(2026, 3, 28, 22, 0, tzinfo=UTC)
NAME = "closeout"


# -- helpers ---------------------------------------------------------------------------------------
OnStart = Callable[[int, float | None], None]


class Runner:
    """A command runner for pure-logic tests: returns (code, stdout tail), records each call."""

    def __init__(self, code: int = 0, tail: str = "") -> None:
        self.code, self.tail = code, tail
        self.calls: list[tuple[list[str], str | None]] = []

    def __call__(self, command: Sequence[str], env: dict[str, str], on_start: OnStart) -> JobResult:
        self.calls.append((list(command), env.get("PHASELOG_DRY_RUN")))
        return JobResult(self.code, stdout_tail=self.tail.encode())


def ckdir(root: Path) -> Path:
    return root / "pipeline_checkpoints"


def state_path(root: Path, name: str = NAME) -> Path:
    return ckdir(root) / f"{name}-state.yaml"


def lock_path(root: Path, name: str = NAME) -> Path:
    return ckdir(root) / f"{name}.lock"


def plant_lock(
    root: Path,
    *,
    pid: int,
    host: str = HOST,
    process_start: float | None,
    started_at: datetime,
    name: str = NAME,
    token: str = "planted-token",
) -> bytes:
    """Write a lock file as another guard would have; return its bytes."""
    d = ckdir(root)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    data: dict[str, Any] = {"pid": pid, "host": host}
    if process_start is not None:
        data["process_start"] = process_start
    data["started_at"] = started_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    data["token"] = token
    tmp = d / f".plant-{os.getpid()}"
    tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    os.replace(tmp, lock_path(root, name))
    return lock_path(root, name).read_bytes()


def history(root: Path, name: str = NAME) -> list[dict[str, Any]]:
    d = ckdir(root) / f"{name}.history"
    if not d.is_dir():
        return []
    return [json.loads(p.read_bytes()) for p in sorted(d.glob("*.json"))]


def reaped(proc: subprocess.Popen[bytes]) -> threading.Thread:
    """Reap ``proc`` as soon as it exits, as cron (its real parent) would."""
    t = threading.Thread(target=proc.wait, daemon=True)
    t.start()
    return t


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Background processes; whatever is still running at the end is killed and reaped."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


def spawn(procs: list[subprocess.Popen[bytes]], *argv: str, **kw: Any) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(list(argv), **kw)
    procs.append(p)
    return p


def dead_process() -> tuple[int, float]:
    """The pid and start time of a real process that has exited (and been reaped)."""
    p = subprocess.Popen(["sleep", "30"])
    started = process_start_time(p.pid)
    assert started is not None
    p.kill()
    p.wait()
    return p.pid, started


def guard(root: Path, clock: Callable[[], datetime] | None = None, name: str = NAME, **env: Any) -> Guard:
    return Guard(root, name, Environment(clock=clock or Clock(T0), **env))


def append_cmd(out: Path, text: str = "ran") -> list[str]:
    """A real, trivial command: append one line to ``out``."""
    return ["sh", "-c", f'echo {text} >> "$0"', str(out)]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def no_temp_files(root: Path) -> bool:
    return not list(ckdir(root).rglob(".tmp-*"))


# -- a plain pass ----------------------------------------------------------------------------------
def test_pass_runs_real_command_and_records_state_and_history(tmp_path: Path) -> None:
    root, out = tmp_path / "store", tmp_path / "out.txt"
    clock = Clock(T0)
    res = guard(root, clock).run(append_cmd(out))
    assert (res.action, res.exit_code, res.outcome) == ("ran", 0, "success")
    assert lines(out) == ["ran"]
    data = yaml.safe_load(state_path(root).read_text())
    assert data == {
        "schema_version": "1.0.0",
        "pass_count": 1,
        "last_status": "success",
        "last_run_at": "2026-03-28T22:00:00Z",
        "consecutive_failures": 0,
        "dry_run": False,
    }
    assert not lock_path(root).exists(), "the lock must be released after the pass"
    [entry] = history(root)
    assert entry["kind"] == "pass"
    assert (entry["started_at"], entry["ended_at"]) == (
        "2026-03-28T22:00:00Z",
        "2026-03-28T22:00:00Z",
    )
    assert (entry["outcome"], entry["exit_code"], entry["duration_sec"]) == ("success", 0, 0.0)
    assert no_temp_files(root)


def test_state_file_follows_seed_schema_and_field_order(tmp_path: Path) -> None:
    root = tmp_path / "store"
    clock = Clock(T0 + timedelta(microseconds=250))
    guard(root, clock).run(["sh", "-c", "exit 3"])
    text = state_path(root).read_text("utf-8")
    keys = [line.split(":", 1)[0] for line in text.splitlines()]
    assert keys == SEED_FIELDS
    data = yaml.safe_load(text)
    assert data["schema_version"] == "1.0.0"
    assert isinstance(data["pass_count"], int)
    assert data["last_status"] in ("success", "noop", "failure", "halt", "unknown")
    assert isinstance(data["last_run_at"], str)
    assert TS_Z.fullmatch(data["last_run_at"])
    assert isinstance(data["consecutive_failures"], int)
    assert isinstance(data["dry_run"], bool)
    assert (data["pass_count"], data["last_status"], data["consecutive_failures"]) == (
        1,
        "failure",
        1,
    )
    assert state_path(root).stat().st_mode & 0o777 == 0o600


# -- the lock --------------------------------------------------------------------------------------
@pytest.mark.parametrize("age", [timedelta(0), timedelta(minutes=44), timedelta(hours=2), timedelta(days=3650)])
def test_live_local_holder_is_never_displaced_without_kill_stale(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]], age: timedelta
) -> None:
    root, out = tmp_path / "store", tmp_path / "out.txt"
    holder = spawn(procs, "sleep", "60")
    started = process_start_time(holder.pid)
    before = plant_lock(root, pid=holder.pid, process_start=started, started_at=T0)
    runner = Runner()
    res = guard(root, Clock(T0 + age)).run(append_cmd(out), GuardConfig(), runner=runner)
    assert (res.action, res.exit_code) == ("skip", 0)
    assert res.message.startswith("SKIP: previous invocation still running")
    assert f"pid {holder.pid}" in res.message
    assert f"host {HOST}" in res.message
    assert ("looks hung" in res.message) == (age > timedelta(minutes=45))
    assert runner.calls == []
    assert not out.exists()
    # Untouched: the lock (byte for byte), no state, no history.
    assert lock_path(root).read_bytes() == before
    assert not state_path(root).exists()
    assert history(root) == []
    assert running(holder.pid)


def test_live_holder_skip_with_real_command(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    root, out = tmp_path / "store", tmp_path / "out.txt"
    holder = spawn(procs, "sleep", "60")
    plant_lock(root, pid=holder.pid, process_start=process_start_time(holder.pid), started_at=T0)
    res = guard(root, Clock(T0 + timedelta(days=365))).run(append_cmd(out))
    assert res.action == "skip"
    assert not out.exists()


def test_dead_local_holder_is_taken_over_at_once(tmp_path: Path) -> None:
    root, out = tmp_path / "store", tmp_path / "out.txt"
    pid, started = dead_process()
    plant_lock(root, pid=pid, process_start=started, started_at=T0)
    res = guard(root, Clock(T0 + timedelta(seconds=1))).run(append_cmd(out))
    assert (res.action, res.exit_code) == ("ran", 0)
    assert lines(out) == ["ran"]
    assert res.took_over is not None
    assert res.took_over["holder"]["pid"] == pid
    assert "gone" in res.took_over["reason"]
    kinds = [h["kind"] for h in history(root)]
    assert kinds == ["takeover", "pass"]
    assert not lock_path(root).exists()


def test_zombie_holder_counts_as_dead(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """A holder that has exited but was not reaped (a zombie) is not running the job."""
    root, out = tmp_path / "store", tmp_path / "out.txt"
    holder = spawn(procs, "sleep", "30")
    started = process_start_time(holder.pid)
    os.kill(holder.pid, signal.SIGKILL)
    wait_for(
        lambda: psutil.Process(holder.pid).status() == psutil.STATUS_ZOMBIE,
        "the holder to become a zombie",
    )
    plant_lock(root, pid=holder.pid, process_start=started, started_at=T0)
    res = guard(root, Clock(T0 + timedelta(seconds=1))).run(append_cmd(out))
    assert res.action == "ran", res.message
    assert lines(out) == ["ran"]


def test_pid_reuse_counts_as_dead(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """Same pid, different process start time: the holder is gone; its pid belongs to another."""
    root, out = tmp_path / "store", tmp_path / "out.txt"
    other = spawn(procs, "sleep", "60")
    real_start = process_start_time(other.pid)
    assert real_start is not None
    plant_lock(root, pid=other.pid, process_start=real_start - 3600, started_at=T0)
    res = guard(root, Clock(T0 + timedelta(seconds=1))).run(append_cmd(out))
    assert res.action == "ran"
    assert res.took_over is not None
    assert "pid reuse" in res.took_over["reason"]
    assert lines(out) == ["ran"]
    assert running(other.pid), "the unrelated process that reuses the pid must not be touched"


def test_pid_reuse_with_injected_start_time(tmp_path: Path) -> None:
    root = tmp_path / "store"
    plant_lock(root, pid=4242, process_start=1000.0, started_at=T0)
    runner = Runner()
    g = guard(root, Clock(T0), start_time_of=lambda pid: 2000.0 if pid == 4242 else 1.0)
    assert g.run(["job"], runner=runner).action == "ran"
    plant_lock(root, pid=4242, process_start=1000.0, started_at=T0)
    g = guard(root, Clock(T0), start_time_of=lambda pid: 1000.0 if pid == 4242 else 1.0)
    assert g.run(["job"], runner=runner).action == "skip"
    assert len(runner.calls) == 1


@pytest.mark.parametrize(
    ("stale_after", "age", "action"),
    [
        (None, timedelta(minutes=45) - timedelta(seconds=1), "skip"),
        (None, timedelta(minutes=45), "skip"),
        (None, timedelta(minutes=45) + timedelta(seconds=1), "ran"),
        (timedelta(minutes=10), timedelta(minutes=10) - timedelta(seconds=1), "skip"),
        (timedelta(minutes=10), timedelta(minutes=10) + timedelta(seconds=1), "ran"),
    ],
)
def test_remote_holder_is_stale_only_after_stale_after(
    tmp_path: Path, stale_after: timedelta | None, age: timedelta, action: str
) -> None:
    root, out = tmp_path / "store", tmp_path / "out.txt"
    # The pid is alive on this host, which must not matter: the holder is on another host.
    before = plant_lock(root, pid=os.getpid(), host="build-02", process_start=None, started_at=T0)
    cfg = GuardConfig() if stale_after is None else GuardConfig(stale_after=stale_after)
    res = guard(root, Clock(T0 + age)).run(append_cmd(out), cfg)
    assert res.action == action, res.message
    if action == "skip":
        assert res.exit_code == 0
        assert "host build-02" in res.message
        assert lock_path(root).read_bytes() == before
        assert not out.exists()
    else:
        assert lines(out) == ["ran"]
        assert res.took_over is not None
        assert res.took_over["holder"]["host"] == "build-02"


def test_damaged_lock_file_is_replaced(tmp_path: Path) -> None:
    root, out = tmp_path / "store", tmp_path / "out.txt"
    ckdir(root).mkdir(parents=True, mode=0o700)
    lock_path(root).write_text("pid: [not, a, pid\n")
    res = guard(root).run(append_cmd(out))
    assert res.action == "ran"
    assert res.took_over is not None
    assert "damaged" in res.took_over["reason"]


def test_lock_file_is_readable_while_running(tmp_path: Path) -> None:
    root = tmp_path / "store"
    seen: dict[str, Any] = {}

    def runner(command: Sequence[str], env: dict[str, str], on_start: OnStart) -> JobResult:
        seen.update(yaml.safe_load(lock_path(root).read_text("utf-8")))
        return JobResult(0)

    guard(root, Clock(T0)).run(["job"], runner=runner)
    assert seen["pid"] == os.getpid()
    assert seen["host"] == HOST
    assert seen["process_start"] == pytest.approx(process_start_time(os.getpid()))
    assert seen["started_at"] == "2026-03-28T22:00:00Z"
    assert not lock_path(root).exists()


def test_lock_taken_over_mid_run_fences_the_state_write(tmp_path: Path) -> None:
    """If another invocation took the lock while we ran, our outcome must not overwrite it."""
    root = tmp_path / "store"
    g = guard(root)
    g.run(["job"], runner=Runner(0))
    before = state_path(root).read_bytes()

    def runner(command: Sequence[str], env: dict[str, str], on_start: OnStart) -> JobResult:
        plant_lock(root, pid=1, host="build-02", process_start=None, started_at=T0, token="theirs")
        return JobResult(1)

    with pytest.raises(Fenced):
        g.run(["job"], runner=runner)
    assert state_path(root).read_bytes() == before
    assert yaml.safe_load(lock_path(root).read_text())["token"] == "theirs", "their lock must stay"


# -- --kill-stale ----------------------------------------------------------------------------------
def test_kill_stale_ends_a_hung_guard_subprocess(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """A real ``phaselog guard run -- sleep 300`` holds the lock; with the clock two hours on it
    looks hung; --kill-stale ends it (and its sleep) and our command runs exactly once."""
    root, out = tmp_path / "store", tmp_path / "out.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    cmd = [sys.executable, "-m", "phaselog", "guard", "run", "--root", str(root), "--name", NAME]
    victim = spawn(
        procs, *cmd, "--", "sleep", "300", env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    reaped(victim)
    wait_for(
        lambda: lock_path(root).exists() and yaml.safe_load(lock_path(root).read_text()).get("pid") == victim.pid,
        "the victim to take the lock",
    )
    sleeper = wait_for(
        lambda: catches_term(victim.pid) and [c for c in psutil.Process(victim.pid).children() if c.name() == "sleep"],
        "the victim's sleep",
    )[0]
    res = guard(root, lambda: datetime.now(UTC) + timedelta(hours=2)).run(append_cmd(out), GuardConfig(kill_stale=True))
    assert (res.action, res.exit_code) == ("ran", 0), res.message
    assert lines(out) == ["ran"]
    wait_for(lambda: victim.poll() is not None, "the victim to exit")
    wait_for(lambda: not running(sleeper.pid), "the victim's sleep to end")
    passes = [h for h in history(root) if h["kind"] == "pass"]
    assert [p["outcome"] for p in passes] == ["failure", "success"]
    assert (passes[0]["pid"], passes[0]["exit_code"]) == (victim.pid, 128 + signal.SIGTERM)
    assert passes[1]["pid"] == os.getpid()


@pytest.mark.parametrize("with_start_time", [True, False])
def test_kill_stale_sends_kill_when_term_is_ignored(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]], with_start_time: bool
) -> None:
    """A real process that ignores TERM is in the lock file: TERM, the grace period, then KILL."""
    root, out = tmp_path / "store", tmp_path / "out.txt"
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = spawn(procs, sys.executable, "-c", code, stdout=subprocess.PIPE)
    assert holder.stdout is not None
    assert holder.stdout.readline() == b"ready\n"
    holder.stdout.close()
    reaped(holder)
    started = process_start_time(holder.pid) if with_start_time else None
    plant_lock(root, pid=holder.pid, process_start=started, started_at=T0)
    res = guard(root, Clock(T0 + timedelta(hours=1))).run(
        append_cmd(out), GuardConfig(kill_stale=True, kill_grace_s=0.3)
    )
    assert res.action == "ran", res.message
    assert lines(out) == ["ran"]
    wait_for(lambda: holder.poll() is not None, "the holder to die")
    assert holder.returncode == -signal.SIGKILL


def test_kill_stale_leaves_a_young_live_holder_alone(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    root, out = tmp_path / "store", tmp_path / "out.txt"
    holder = spawn(procs, "sleep", "60")
    plant_lock(root, pid=holder.pid, process_start=process_start_time(holder.pid), started_at=T0)
    res = guard(root, Clock(T0 + timedelta(minutes=44))).run(append_cmd(out), GuardConfig(kill_stale=True))
    assert res.action == "skip"
    assert running(holder.pid)
    assert not out.exists()


# -- the race --------------------------------------------------------------------------------------
RACERS = 32
ROUNDS = 200


def _race_worker(root: str, out: str, go: str, barrier: Any, conn: Any) -> None:
    """One racer: each round, wait at the barrier, then ``guard run`` a real command that
    appends the round to ``out`` and then waits until the parent says every other racer has
    decided (so a late racer cannot find the lock free again and run legitimately)."""
    for r in range(ROUNDS):
        try:
            barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            break
        script = 'echo "$1" >> "$0"; n=0; while [ ! -e "$2" ] && [ $n -lt 15000 ]; do sleep 0.002; n=$((n+1)); done'
        try:
            res = Guard(root, "race").run(["sh", "-c", script, out, str(r), f"{go}/{r}"])
            conn.send((r, res.action))
        except BaseException as exc:
            conn.send((r, f"error: {exc!r}"))
    conn.close()


@pytest.mark.slow
def test_race_exactly_one_of_32_takes_a_stale_lock(tmp_path: Path) -> None:
    """32 processes start ``guard run`` at once against a stale lock, 200 rounds; the stale lock
    alternates: a dead pid on this host, a reused pid on this host, an old lock of another host."""
    root, out, go = tmp_path / "store", tmp_path / "out.txt", tmp_path / "go"
    go.mkdir()
    ckdir(root).mkdir(parents=True, mode=0o700)
    dead_pid, dead_start = dead_process()
    my_start = process_start_time(os.getpid())
    assert my_start is not None
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(RACERS + 1)
    pipes = [ctx.Pipe(duplex=False) for _ in range(RACERS)]
    workers = [
        ctx.Process(target=_race_worker, args=(str(root), str(out), str(go), barrier, w), daemon=True) for _, w in pipes
    ]
    for p in workers:
        p.start()
    for _, w in pipes:
        w.close()
    readers = [r for r, _ in pipes]
    rounds: list[Counter[str]] = []
    try:
        for r in range(ROUNDS):
            kind = r % 3
            if kind == 0:
                plant_lock(
                    root,
                    name="race",
                    pid=dead_pid,
                    process_start=dead_start,
                    started_at=datetime.now(UTC),
                )
            elif kind == 1:
                plant_lock(
                    root,
                    name="race",
                    pid=os.getpid(),
                    process_start=my_start - 100,
                    started_at=datetime.now(UTC),
                )
            else:
                plant_lock(
                    root,
                    name="race",
                    pid=dead_pid,
                    host="build-02",
                    process_start=None,
                    started_at=datetime.now(UTC) - timedelta(hours=2),
                )
            barrier.wait(timeout=120)
            actions: Counter[str] = Counter()
            pending = list(readers)
            released = False
            deadline = time.monotonic() + 60
            while pending and time.monotonic() < deadline:
                for c in mp_connection.wait(pending, timeout=1):
                    got_round, action = c.recv()
                    assert got_round == r
                    actions[action] += 1
                    pending.remove(c)
                if not released and actions["skip"] >= RACERS - 1:
                    (go / str(r)).touch()
                    released = True
            assert not pending, f"round {r}: {len(pending)} racers did not report ({dict(actions)})"
            rounds.append(actions)
            assert actions == Counter({"ran": 1, "skip": RACERS - 1}), f"round {r}: {dict(actions)}"
            assert not lock_path(root, "race").exists(), f"round {r}: the winner did not release the lock"
    finally:
        barrier.abort()
        for p in workers:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    per_round = Counter(int(x) for x in lines(out))
    assert per_round == Counter(dict.fromkeys(range(ROUNDS), 1))
    state = yaml.safe_load(state_path(root, "race").read_text())
    assert (state["pass_count"], state["consecutive_failures"]) == (ROUNDS, 0)
    kinds = Counter(h["kind"] for h in history(root, "race"))
    assert kinds == Counter({"pass": ROUNDS, "takeover": ROUNDS})


# -- the circuit breaker ---------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3])
def test_breaker_trips_after_exactly_n_failures(tmp_path: Path, n: int) -> None:
    root = tmp_path / "store"
    clock = Clock(T0)
    runner = Runner(code=2)
    g = guard(root, clock)
    cfg = GuardConfig(max_failures=n)
    for i in range(n):
        clock.advance(minutes=15)
        res = g.run(["job"], cfg, runner=runner)
        assert (res.action, res.exit_code) == ("ran", 2), f"invocation {i + 1} must still run"
        assert res.state is not None
        assert res.state.consecutive_failures == i + 1
    assert len(runner.calls) == n
    before = state_path(root).read_bytes()
    st = state_path(root).stat()
    n_history = len(history(root))
    clock.advance(minutes=15)
    res = g.run(["job"], cfg, runner=runner)
    assert (res.action, res.exit_code) == ("halt", 1)
    assert res.message.startswith("HALT")
    assert f"phaselog guard reset --name {NAME}" in res.message
    assert len(runner.calls) == n, "HALT must not run the command"
    # The state file is untouched: same bytes, same inode (not rewritten), same mtime.
    assert state_path(root).read_bytes() == before
    st2 = state_path(root).stat()
    assert (st2.st_ino, st2.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert len(history(root)) == n_history
    assert not lock_path(root).exists()


def test_breaker_with_real_failing_command(tmp_path: Path) -> None:
    root, out = tmp_path / "store", tmp_path / "out.txt"
    g = guard(root, Clock(T0))
    cmd = ["sh", "-c", 'echo x >> "$0"; exit 5', str(out)]
    codes = [g.run(cmd, GuardConfig(max_failures=2)).exit_code for _ in range(3)]
    assert codes == [5, 5, 1]
    assert lines(out) == ["x", "x"]


def test_success_and_noop_zero_the_failure_count(tmp_path: Path) -> None:
    root = tmp_path / "store"
    g = guard(root)
    cfg = GuardConfig(max_failures=3, outcome_from_output=True)
    seq = [
        ("failure", 2),
        ("failure", 1),
        ("noop", 0),
        ("failure", 2),
        ("halt", 0),
        ("success", 0),
        ("failure", 1),
    ]
    counts = []
    for word, code in seq:
        res = g.run(["job"], cfg, runner=Runner(code, f"... {word}\n"))
        assert res.action == "ran"
        assert res.state is not None
        counts.append(res.state.consecutive_failures)
    assert counts == [1, 2, 0, 1, 2, 0, 1]


def test_reset_closes_the_breaker_and_records_who_and_when(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    clock = Clock(T0)
    g = guard(root, clock)
    cfg = GuardConfig(max_failures=2)
    for _ in range(2):
        g.run(["job"], cfg, runner=Runner(1))
    assert g.run(["job"], cfg, runner=Runner(0)).action == "halt"
    clock.advance(hours=1)
    out = g.reset(by="ana")
    assert out["state"]["consecutive_failures"] == 0
    data = yaml.safe_load(state_path(root).read_text())
    assert (data["consecutive_failures"], data["pass_count"], data["last_status"]) == (
        0,
        2,
        "failure",
    )
    note = history(root)[-1]
    assert (note["kind"], note["by"], note["at"], note["previous_consecutive_failures"]) == (
        "reset",
        "ana",
        "2026-03-28T23:00:00Z",
        2,
    )
    assert g.status()["breaker"] == "closed"
    res = g.run(["job"], cfg, runner=Runner(0))
    assert (res.action, res.outcome) == ("ran", "success")
    # Who, by default: $USER.
    monkeypatch.setenv("USER", "bob")
    g.reset()
    assert history(root)[-1]["by"] == "bob"


def _trip(g: Guard, clock: Clock, cfg: GuardConfig) -> None:
    for _ in range(cfg.max_failures):
        assert g.run(["job"], cfg, runner=Runner(1)).action == "ran"
    assert clock() == T0  # the last run was at T0


def test_cooldown_lets_exactly_one_probe_through_and_a_failed_probe_reopens(tmp_path: Path) -> None:
    root = tmp_path / "store"
    clock = Clock(T0)
    g = guard(root, clock)
    cfg = GuardConfig(max_failures=2, cooldown=timedelta(hours=1))
    _trip(g, clock, cfg)
    runner = Runner(1)
    clock.advance(minutes=59, seconds=59)
    res = g.run(["job"], cfg, runner=runner)
    assert res.action == "halt"
    assert "2026-03-28T23:00:00Z" in res.message
    assert g.status(cooldown=cfg.cooldown)["breaker"] == "open"
    clock.advance(seconds=1)  # exactly the cooldown: the breaker is half-open
    assert g.status(cooldown=cfg.cooldown)["breaker"] == "half-open"
    first = g.run(["job"], cfg, runner=runner)
    second = g.run(["job"], cfg, runner=runner)
    assert (first.action, first.exit_code) == ("ran", 1)
    assert "half-open probe" in first.message
    assert first.state is not None
    assert first.state.consecutive_failures == 3
    assert (second.action, second.exit_code) == ("halt", 1), "last_run_at moved: the breaker is open again"
    assert len(runner.calls) == 1
    assert history(root)[-1]["probe"] is True
    # The next probe is one cooldown after the failed probe.
    clock.advance(minutes=59)
    assert g.run(["job"], cfg, runner=runner).action == "halt"
    clock.advance(minutes=1)
    assert g.run(["job"], cfg, runner=runner).action == "ran"
    assert len(runner.calls) == 2


def test_cooldown_probe_success_closes_the_breaker(tmp_path: Path) -> None:
    root = tmp_path / "store"
    clock = Clock(T0)
    g = guard(root, clock)
    cfg = GuardConfig(max_failures=2, cooldown=timedelta(minutes=30))
    _trip(g, clock, cfg)
    clock.advance(minutes=31)
    probe = g.run(["sh", "-c", "exit 0"], cfg)  # a real command
    assert (probe.action, probe.outcome) == ("ran", "success")
    assert probe.state is not None
    assert probe.state.consecutive_failures == 0
    assert g.status()["breaker"] == "closed"
    # Closed again: a failure runs and counts from zero; it takes max_failures more to trip.
    res = g.run(["job"], cfg, runner=Runner(1))
    assert res.action == "ran"
    assert "probe" not in res.message
    assert res.state is not None
    assert res.state.consecutive_failures == 1


def test_breaker_function() -> None:
    from phaselog.guard import LoopState

    open_state = LoopState(consecutive_failures=3, last_run_at=T0)
    assert breaker(LoopState(consecutive_failures=2), 3, None, T0) == "closed"
    assert breaker(open_state, 3, None, T0 + timedelta(days=999)) == "open"
    assert breaker(open_state, 3, timedelta(hours=1), T0 + timedelta(minutes=59)) == "open"
    assert breaker(open_state, 3, timedelta(hours=1), T0 + timedelta(hours=1)) == "half-open"


# -- --max-passes, --dry-run, --outcome-from-output, exit codes ------------------------------------
def test_max_passes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    g = guard(root)
    runner = Runner(0)
    cfg = GuardConfig(max_passes=2)
    assert [g.run(["job"], cfg, runner=runner).action for _ in range(2)] == ["ran", "ran"]
    before = state_path(root).read_bytes()
    res = g.run(["job"], cfg, runner=runner)
    assert (res.action, res.exit_code) == ("skip", 0)
    assert res.message.startswith("SKIP: max passes reached")
    assert len(runner.calls) == 2
    assert state_path(root).read_bytes() == before
    # A higher limit lets it go on.
    assert g.run(["job"], GuardConfig(max_passes=3), runner=runner).action == "ran"


def test_max_passes_zero_never_runs(tmp_path: Path) -> None:
    root, out = tmp_path / "store", tmp_path / "out.txt"
    res = guard(root).run(append_cmd(out), GuardConfig(max_passes=0))
    assert res.action == "skip"
    assert not out.exists()
    assert not state_path(root).exists()


@pytest.mark.parametrize("dry_run", [True, False])
def test_dry_run_env_and_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dry_run: bool) -> None:
    root, seen = tmp_path / "store", tmp_path / "seen.txt"
    monkeypatch.delenv("PHASELOG_DRY_RUN", raising=False)
    cmd = ["sh", "-c", 'printf %s "${PHASELOG_DRY_RUN-unset}" > "$0"', str(seen)]
    res = guard(root).run(cmd, GuardConfig(dry_run=dry_run))
    assert res.action == "ran"
    assert seen.read_text() == ("1" if dry_run else "unset")
    assert yaml.safe_load(state_path(root).read_text())["dry_run"] is dry_run
    assert history(root)[-1]["dry_run"] is dry_run


@pytest.mark.parametrize(
    ("output", "code", "expected"),
    [
        ("checked 12 tickets\nnoop\n", 0, ("noop", 0)),
        ("success\n", 0, ("success", 0)),
        ("step 1 failure\nretried: success\n", 0, ("success", 0)),
        ("success so far\nthen failure\n", 0, ("failure", 1)),
        ("gate says halt\n", 0, ("halt", 1)),
        ("nothing to report\n", 0, ("unknown", 1)),
        ("", 0, ("unknown", 1)),
        ("successful run\n", 0, ("unknown", 1)),  # a word, not a prefix
        ("noop\n", 4, ("noop", 0)),  # the output decides; the exit code still passes through
    ],
)
def test_outcome_from_output_real_command(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    output: str,
    code: int,
    expected: tuple[str, int],
) -> None:
    """(outcome, consecutive_failures) after one pass whose output is ``output``."""
    root = tmp_path / "store"
    cmd = ["sh", "-c", 'printf %s "$0"; exit "$1"', output, str(code)]
    res = guard(root).run(cmd, GuardConfig(outcome_from_output=True))
    assert (res.action, res.outcome, res.exit_code) == ("ran", expected[0], code)
    assert capfd.readouterr().out == output, "the command's output must pass through"
    data = yaml.safe_load(state_path(root).read_text())
    assert (data["last_status"], data["consecutive_failures"]) == expected


def test_without_outcome_from_output_the_exit_code_decides(tmp_path: Path) -> None:
    root = tmp_path / "store"
    res = guard(root).run(["sh", "-c", "echo failure; echo halt"])
    assert res.outcome == "success"
    assert outcome_of(0, None) == "success"
    assert outcome_of(9, None) == "failure"


@pytest.mark.parametrize(
    ("script", "code"),
    [("exit 7", 7), ("exit 0", 0), ("exit 255", 255), ("kill -TERM $$", 128 + signal.SIGTERM)],
)
def test_exit_code_passes_through(tmp_path: Path, script: str, code: int) -> None:
    root = tmp_path / "store"
    res = guard(root).run(["sh", "-c", script])
    assert res.exit_code == code
    assert res.outcome == ("success" if code == 0 else "failure")
    assert history(root)[-1]["exit_code"] == code


def test_missing_command_gives_127(tmp_path: Path) -> None:
    res = guard(tmp_path / "store").run([str(tmp_path / "no-such-command")])
    assert (res.exit_code, res.outcome) == (127, "failure")


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../x", "a/b", "", ".hidden", "-x", "a..b", "x" * 65, "sp ace"])
def test_bad_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(UsageError):
        Guard(tmp_path / "store", name)
    assert not (tmp_path / "store").exists()


def test_empty_command_and_bad_max_failures_are_refused(tmp_path: Path) -> None:
    g = guard(tmp_path / "store")
    with pytest.raises(UsageError):
        g.run([])
    with pytest.raises(UsageError):
        g.run(["true"], GuardConfig(max_failures=0))
    assert not (tmp_path / "store").exists()


def test_status_reports_state_breaker_and_holder(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    root = tmp_path / "store"
    g = guard(root)
    fresh = g.status()
    assert (fresh["breaker"], fresh["lock"], fresh["state"]["pass_count"]) == ("closed", None, 0)
    for _ in range(3):
        g.run(["job"], runner=Runner(1))
    holder = spawn(procs, "sleep", "60")
    plant_lock(root, pid=holder.pid, process_start=process_start_time(holder.pid), started_at=T0)
    st = g.status()
    assert st["breaker"] == "open"
    assert st["state"]["consecutive_failures"] == 3
    assert st["lock"]["pid"] == holder.pid
    assert st["lock"]["verdict"] == "live"
    assert list(st["state"]) == SEED_FIELDS


# -- compatibility with the seed's own files -------------------------------------------------------
SEED_STATE = """\
schema_version: "1.0.0"
pass_count: 5                          # Total completed passes
last_status: success                   # success | noop | failure | halt | unknown
last_run_at: 2026-03-28T22:00:00Z     # UTC timestamp of last completion
consecutive_failures: 0                # Reset to 0 on success/noop; +1 on failure/halt
dry_run: false                         # Whether last pass used --dry-run
"""
SEED_LOCK = "pid: 12345\nstarted_at: 2026-03-28T22:00:00Z\n"


def test_reads_and_continues_a_state_file_written_as_in_seed_000(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ckdir(root).mkdir(parents=True, mode=0o700)
    state_path(root).write_text(SEED_STATE)
    g = guard(root, Clock(T0 + timedelta(hours=1)))
    assert g.status()["state"]["pass_count"] == 5
    res = g.run(["job"], runner=Runner(1))
    assert res.state is not None
    assert (res.state.pass_count, res.state.consecutive_failures) == (6, 1)
    assert yaml.safe_load(state_path(root).read_text())["last_run_at"] == "2026-03-28T23:00:00Z"


def test_a_seed_lock_without_host_is_judged_by_its_age(tmp_path: Path) -> None:
    """The seed's lock names no host, so its pid cannot be checked: its 45-minute rule applies."""
    root = tmp_path / "store"
    ckdir(root).mkdir(parents=True, mode=0o700)
    lock_path(root).write_text(SEED_LOCK)
    runner = Runner()
    young = guard(root, Clock(T0 + timedelta(minutes=44))).run(["job"], runner=runner)
    assert young.action == "skip"
    assert lock_path(root).read_text() == SEED_LOCK
    old = guard(root, Clock(T0 + timedelta(minutes=46))).run(["job"], runner=runner)
    assert old.action == "ran"
    assert len(runner.calls) == 1
