"""``phaselog guard run|status|reset|history`` as cron runs it: real subprocesses, real files.

Nothing here measures time: background processes are awaited by polling with a generous deadline.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from helpers import GUARD_SEED_FIELDS as SEED_FIELDS
from helpers import TS_Z, Result, catches_term, cli_env, wait_for
from helpers import alive as running
from helpers import run_cli as run

HOST = socket.gethostname()
NAME = "closeout"


def argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "phaselog", *args]


def guard_run(root: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return run(root, "guard", "run", "--name", NAME, *args, env=env)


def state_path(root: Path) -> Path:
    return root / "pipeline_checkpoints" / f"{NAME}-state.yaml"


def lock_path(root: Path) -> Path:
    return root / "pipeline_checkpoints" / f"{NAME}.lock"


def state(root: Path) -> dict[str, Any]:
    return yaml.safe_load(state_path(root).read_text("utf-8"))


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def append(out: Path, text: str = "ran") -> list[str]:
    return ["sh", "-c", f'echo {text} >> "$0"', str(out)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def background() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Background processes; whatever still runs at the end is killed and reaped."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


@dataclass
class Holder:
    proc: subprocess.Popen[bytes]
    sleep: psutil.Process


def start_holder(root: Path, background: list[subprocess.Popen[bytes]], *extra: str) -> Holder:
    """A real ``phaselog guard run -- sleep 30`` in the background, once it holds the lock and
    its command runs (and it forwards TERM). Reaped as soon as it exits, as cron would."""
    proc = subprocess.Popen(
        argv("guard", "run", "--name", NAME, *extra, "--", "sleep", "300"),
        env=cli_env(root),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    background.append(proc)
    threading.Thread(target=proc.wait, daemon=True).start()

    def ready() -> psutil.Process | None:
        if not lock_path(root).exists() or not catches_term(proc.pid):
            return None
        kids = [c for c in psutil.Process(proc.pid).children() if c.name() == "sleep"]
        return kids[0] if kids else None

    return Holder(proc, wait_for(ready, "the holder to take the lock and start its command"))


# -- a pass ----------------------------------------------------------------------------------------
def test_run_passes_output_through_and_writes_seed_state(root: Path) -> None:
    res = guard_run(root, "--", "sh", "-c", "echo hello; echo to-stderr >&2")
    assert res.rc == 0
    assert res.out == "hello\n", "stdout is the command's"
    assert "to-stderr" in res.err
    text = state_path(root).read_text("utf-8")
    assert [line.split(":", 1)[0] for line in text.splitlines()] == SEED_FIELDS
    data = yaml.safe_load(text)
    assert data["schema_version"] == "1.0.0"
    assert (
        data["pass_count"],
        data["last_status"],
        data["consecutive_failures"],
        data["dry_run"],
    ) == (1, "success", 0, False)
    assert isinstance(data["last_run_at"], str)
    assert TS_Z.fullmatch(data["last_run_at"])
    assert not lock_path(root).exists()
    assert not list((root / "pipeline_checkpoints").glob(".tmp-*"))


def test_json_summary_on_stderr(root: Path) -> None:
    res = guard_run(root, "--json", "--", "sh", "-c", "exit 3")
    assert res.rc == 3
    summary = json.loads(res.err.strip().splitlines()[-1])
    assert (summary["guard"], summary["action"], summary["outcome"], summary["exit_code"]) == (
        NAME,
        "ran",
        "failure",
        3,
    )
    assert list(summary["state"]) == SEED_FIELDS


@pytest.mark.parametrize("code", [7, 1, 0, 42])
def test_exit_code_passes_through(root: Path, code: int) -> None:
    res = guard_run(root, "--", "sh", "-c", f"exit {code}")
    assert res.rc == code
    assert state(root)["last_status"] == ("success" if code == 0 else "failure")


def test_command_not_found_is_a_failed_pass(root: Path, tmp_path: Path) -> None:
    res = guard_run(root, "--", str(tmp_path / "missing"))
    assert res.rc == 127
    assert state(root)["last_status"] == "failure"


# -- the lock --------------------------------------------------------------------------------------
def test_live_holder_skips_and_touches_nothing(
    root: Path, tmp_path: Path, background: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "out.txt"
    holder = start_holder(root, background)
    lock_before = lock_path(root).read_bytes()
    lock = yaml.safe_load(lock_before)
    # The lock is readable: pid, host, process start time, started_at.
    assert lock["pid"] == holder.proc.pid
    assert lock["host"] == HOST
    assert lock["process_start"] == pytest.approx(psutil.Process(holder.proc.pid).create_time())
    assert TS_Z.fullmatch(lock["started_at"])
    hist_before = sorted(os.listdir(root / "pipeline_checkpoints" / f"{NAME}.history"))
    for extra in (
        [],
        ["--stale-after", "0s"],
    ):  # young, and older than --stale-after: still never displaced
        res = guard_run(root, *extra, "--", *append(out))
        assert res.rc == 0
        assert res.out.startswith("SKIP: previous invocation still running")
        assert f"pid {holder.proc.pid}" in res.out
        assert f"host {HOST}" in res.out
        assert "age" in res.out
        assert ("looks hung" in res.out) == bool(extra)
        assert not out.exists()
        assert lock_path(root).read_bytes() == lock_before
        assert not state_path(root).exists()
        assert sorted(os.listdir(root / "pipeline_checkpoints" / f"{NAME}.history")) == hist_before
    assert holder.proc.poll() is None
    assert holder.sleep.is_running()
    st = run(root, "guard", "status", "--name", NAME).json
    assert st["lock"]["pid"] == holder.proc.pid
    assert st["lock"]["verdict"] == "live"


def test_kill_stale_ends_a_hung_holder_and_runs_once(
    root: Path, tmp_path: Path, background: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "out.txt"
    holder = start_holder(root, background)
    res = guard_run(root, "--stale-after", "0s", "--kill-stale", "--", *append(out))
    assert res.rc == 0, res.out + res.err
    assert "ending hung holder" in res.err
    assert lines(out) == ["ran"]
    wait_for(lambda: holder.proc.poll() is not None, "the hung holder to exit")
    wait_for(lambda: not running(holder.sleep.pid), "the hung holder's command to end")
    hist = run(root, "guard", "history", "--name", NAME).json["history"]
    passes = [h for h in hist if h["kind"] == "pass"]
    assert [(p["outcome"], p["exit_code"]) for p in passes] == [
        ("failure", 128 + signal.SIGTERM),
        ("success", 0),
    ]
    assert state(root)["pass_count"] == 2
    assert not lock_path(root).exists()


def test_sigkilled_holder_leaves_no_orphan_and_the_next_run_takes_over(
    root: Path, tmp_path: Path, background: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "out.txt"
    holder = start_holder(root, background)
    holder.proc.kill()  # SIGKILL: no handler, no cleanup, the lock file stays behind
    wait_for(lambda: holder.proc.poll() is not None, "the holder to die")
    assert lock_path(root).exists()
    # PDEATHSIG: the dead guard's command does not keep running.
    wait_for(lambda: not running(holder.sleep.pid), "the orphaned sleep to end")
    res = guard_run(root, "--", *append(out))
    assert res.rc == 0, res.out + res.err
    assert lines(out) == ["ran"]
    assert "took over" in res.err, "a takeover must be warned about"
    assert f"process {holder.proc.pid} is gone" in res.err
    hist = run(root, "guard", "history", "--name", NAME).json["history"]
    assert [h["kind"] for h in hist] == ["takeover", "pass"]
    assert hist[0]["holder"]["pid"] == holder.proc.pid
    assert state(root)["pass_count"] == 1
    assert not lock_path(root).exists()


def test_lock_of_another_host_waits_for_stale_after(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    d = root / "pipeline_checkpoints"
    d.mkdir(parents=True, mode=0o700)
    from datetime import UTC, datetime, timedelta

    started = (datetime.now(UTC) - timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    lock_path(root).write_text(f"pid: 1\nhost: build-02\nstarted_at: '{started}'\ntoken: x\n")
    res = guard_run(root, "--", *append(out))  # 30 min < the default 45m
    assert (res.rc, res.out.startswith("SKIP"), out.exists()) == (0, True, False)
    res = guard_run(root, "--stale-after", "20m", "--", *append(out))
    assert res.rc == 0
    assert lines(out) == ["ran"]


# -- the breaker -----------------------------------------------------------------------------------
def test_breaker_halt_reset_and_history(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    fail = ["sh", "-c", 'echo x >> "$0"; exit 3', str(out)]
    for i in range(3):
        res = guard_run(root, "--max-failures", "3", "--", *fail)
        assert res.rc == 3, f"failure {i + 1} of 3 must still run"
    before = state_path(root).read_bytes()
    res = guard_run(root, "--max-failures", "3", "--", *fail)
    assert res.rc == 1
    assert res.out.startswith("HALT")
    assert f"phaselog guard reset --name {NAME}" in res.out
    assert lines(out) == ["x"] * 3
    assert state_path(root).read_bytes() == before, "HALT leaves the state byte for byte"
    assert run(root, "guard", "status", "--name", NAME).json["breaker"] == "open"

    reset = run(root, "guard", "reset", "--name", NAME, "--by", "ana")
    assert reset.rc == 0
    assert reset.json["state"]["consecutive_failures"] == 0
    assert state(root)["consecutive_failures"] == 0
    assert state(root)["pass_count"] == 3
    assert run(root, "guard", "status", "--name", NAME).json["breaker"] == "closed"
    res = guard_run(root, "--max-failures", "3", "--", *append(out, "ok"))
    assert res.rc == 0
    assert lines(out)[-1] == "ok"

    # Who resets, by default: $USER.
    assert run(root, "guard", "reset", "--name", NAME, env=cli_env(root, USER="bob")).rc == 0
    hist = run(root, "guard", "history", "--name", NAME).json["history"]
    resets = [h for h in hist if h["kind"] == "reset"]
    assert [(r["by"], r["previous_consecutive_failures"]) for r in resets] == [
        ("ana", 3),
        ("bob", 0),
    ]
    assert all(TS_Z.fullmatch(r["at"]) for r in resets)
    assert [h["kind"] for h in hist] == ["pass"] * 3 + ["reset", "pass", "reset"]
    for p in (h for h in hist if h["kind"] == "pass"):
        assert {"started_at", "ended_at", "outcome", "exit_code", "duration_sec"} <= p.keys()
        assert TS_Z.fullmatch(p["started_at"])
        assert TS_Z.fullmatch(p["ended_at"])

    table = run(root, "guard", "history", "--name", NAME, "--format", "table")
    assert table.rc == 0
    assert "reset" in table.out
    assert "by ana" in table.out
    assert "failure (exit 3" in table.out


def test_cooldown_probe(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    assert guard_run(root, "--max-failures", "1", "--", "sh", "-c", "exit 1").rc == 1
    halted = guard_run(root, "--max-failures", "1", "--cooldown", "1h", "--", *append(out))
    assert halted.rc == 1
    assert halted.out.startswith("HALT")
    assert "probe" in halted.out
    assert not out.exists()
    probe = guard_run(root, "--max-failures", "1", "--cooldown", "0s", "--", *append(out))
    assert probe.rc == 0
    assert "half-open probe" in probe.err
    assert lines(out) == ["ran"]
    assert state(root)["consecutive_failures"] == 0
    hist = run(root, "guard", "history", "--name", NAME).json["history"]
    assert hist[-1]["probe"] is True


# -- options ---------------------------------------------------------------------------------------
def test_max_passes(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    for _ in range(2):
        assert guard_run(root, "--max-passes", "2", "--", *append(out)).rc == 0
    before = state_path(root).read_bytes()
    res = guard_run(root, "--max-passes", "2", "--", *append(out))
    assert res.rc == 0
    assert res.out.startswith("SKIP: max passes reached")
    assert lines(out) == ["ran", "ran"]
    assert state_path(root).read_bytes() == before


def test_dry_run(root: Path) -> None:
    script = 'echo "dry=${PHASELOG_DRY_RUN-unset}"'
    res = guard_run(root, "--dry-run", "--", "sh", "-c", script)
    assert (res.rc, res.out) == (0, "dry=1\n")
    assert state(root)["dry_run"] is True
    res = guard_run(root, "--", "sh", "-c", script)
    assert (res.rc, res.out) == (0, "dry=unset\n")
    assert state(root)["dry_run"] is False


@pytest.mark.parametrize(
    ("output", "status", "failures"),
    [
        ("working\nnoop\n", "noop", 0),
        ("halt\n", "halt", 1),
        ("no verdict here\n", "unknown", 1),
        ("failure\nsuccess\n", "success", 0),
    ],
)
def test_outcome_from_output(root: Path, output: str, status: str, failures: int) -> None:
    res = guard_run(root, "--outcome-from-output", "--", "sh", "-c", 'printf %s "$0"', output)
    assert res.rc == 0
    assert res.out == output, "the output still passes through"
    assert (state(root)["last_status"], state(root)["consecutive_failures"]) == (status, failures)


def test_unknown_outcomes_trip_the_breaker(root: Path) -> None:
    for _ in range(2):
        assert guard_run(root, "--max-failures", "2", "--outcome-from-output", "--", "true").rc == 0
    res = guard_run(root, "--max-failures", "2", "--outcome-from-output", "--", "true")
    assert res.rc == 1
    assert res.out.startswith("HALT")


# -- crash safety ----------------------------------------------------------------------------------
def test_crash_before_the_state_rename_keeps_the_old_state(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    assert guard_run(root, "--", *append(out)).rc == 0
    before = state_path(root).read_bytes()
    crashed = guard_run(root, "--", *append(out), env=cli_env(root, PHASELOG_FAULT="guard.before_replace"))
    assert crashed.rc == 137
    assert lines(out) == ["ran", "ran"], "the guard must die at the state write, after the command ran"
    assert state_path(root).read_bytes() == before
    assert yaml.safe_load(before)["pass_count"] == 1
    st = run(root, "guard", "status", "--name", NAME)
    assert st.rc == 0
    assert st.json["state"]["pass_count"] == 1
    # The dead guard's lock is taken over at once; the state goes on from the intact file.
    res = guard_run(root, "--", *append(out))
    assert res.rc == 0
    assert state(root)["pass_count"] == 2


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["run", "--name", "../x", "--", "true"], "name"),
        (["run", "--name", "a/b", "--", "true"], "name"),
        (["run", "--name", "", "--", "true"], "name"),
        (["run", "--name", "job", "--stale-after", "4x", "--", "true"], "--stale-after"),
        (["run", "--name", "job", "--cooldown", "soon", "--", "true"], "--cooldown"),
        (["run", "--name", "job"], "command"),
        (["run", "--name", "job", "--"], "command"),
        (["run", "--name", "job", "--max-failures", "0", "--", "true"], "max_failures"),
        (["run", "--name", "job", "--max-passes", "-1", "--", "true"], "max_passes"),
        (["run", "--name", "job", "--bogus", "--", "true"], None),
        (["run", "--", "true"], "name"),
        (["status", "--name", "../x"], "name"),
        (["status", "--name", "job", "--stale-after", "4x"], "--stale-after"),
        (["reset", "--name", "../../etc"], "name"),
        (["history", "--name", "x/.."], "name"),
    ],
)
def test_bad_input_is_a_json_usage_error(root: Path, args: list[str], field: str | None) -> None:
    res = run(root, "guard", *args)
    assert res.rc == 2, res.out + res.err
    err = res.json
    assert (err["success"], err["error_code"]) == (False, "usage")
    if field is not None:
        assert err["field"] == field
    assert not (root / "pipeline_checkpoints").exists(), "bad input must not create anything"
    assert not (root.parent / "x").exists()


# -- status ----------------------------------------------------------------------------------------
def test_status_json_and_table(root: Path) -> None:
    fresh = run(root, "guard", "status", "--name", NAME).json
    assert fresh["success"] is True
    assert (fresh["breaker"], fresh["lock"]) == ("closed", None)
    assert list(fresh["state"]) == SEED_FIELDS
    assert fresh["state"]["pass_count"] == 0
    for _ in range(2):
        guard_run(root, "--max-failures", "2", "--cooldown", "1h", "--", "false")
    st = run(root, "guard", "status", "--name", NAME).json
    assert (st["breaker"], st["max_failures"], st["cooldown_sec"]) == ("open", 2, 3600.0)
    assert st["state"]["consecutive_failures"] == 2
    assert run(root, "guard", "status", "--name", NAME, "--cooldown", "0s").json["breaker"] == "half-open"
    assert run(root, "guard", "status", "--name", NAME, "--max-failures", "5").json["breaker"] == "closed"
    table = run(root, "guard", "status", "--name", NAME, "--format", "table")
    assert table.rc == 0
    for word in ("breaker", "open", "consecutive_failures", "lock", "free"):
        assert word in table.out
