"""``phaselog events``: JSON Lines in the feed's order, a cursor line to resume from, --follow, bad input.

Real processes over a real files store: the CLI runs as a subprocess, and --follow sees a write made
by another process while it waits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.stores.files.store import FilesStore

T = "PROJ-7"
IMPL = {"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []}
SRC = str(Path(__file__).resolve().parent.parent / "src")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_events_prints_json_lines_then_the_cursor_that_resumes_exactly_after(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ledger = Ledger(FilesStore(root))
    first = ledger.write(T, "r1", "implement", IMPL)
    ledger.write(T, "r1", "local_review", None, status="failed", error="boom")
    done = _cli("events", "--root", str(root), "--ticket-id", T)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line.get("type") for line in lines[:-1]] == ["checkpoint.written", "checkpoint.written", "phase.failed"]
    assert lines[0]["event_id"] == f"checkpoint.written:{first.record.content_hash}"
    assert set(lines[0]) == {
        "event_id",
        "type",
        "ticket_id",
        "run_id",
        "run_name",
        "pipeline",
        "phase",
        "attempt",
        "at",
        "data",
        "url",
    }
    assert list(lines[-1]) == ["cursor"]
    ledger.write(T, "r2", "implement", IMPL)
    more = _cli("events", "--root", str(root), "--ticket-id", T, "--after", lines[-1]["cursor"])
    got = [json.loads(line) for line in more.stdout.splitlines()]
    assert [(g.get("run_name"), g.get("type")) for g in got[:-1]] == [("r2", "checkpoint.written")]
    same = _cli("events", "--root", str(root), "--ticket-id", T)  # the same events, byte for byte
    assert same.stdout.splitlines()[:3] == done.stdout.splitlines()[:3]


def test_bad_input_is_a_clear_error_naming_the_option(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Ledger(FilesStore(root)).write(T, "r1", "implement", IMPL)
    for args, option in (
        (["--type", "phase.done"], "--type"),
        (["--after", "not-a-cursor"], "--after"),
        (["--limit", "0"], "--limit"),
    ):
        done = _cli("events", "--root", str(root), "--ticket-id", T, *args)
        assert done.returncode == 2, (args, done.stdout)
        err = json.loads(done.stdout)
        assert err["field"] == option
        assert err["error"].startswith(option)
        assert "Traceback" not in done.stdout + done.stderr


def test_follow_prints_a_write_made_while_it_waits(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.write(T, "r1", "implement", IMPL)
    env = {**os.environ, "PYTHONPATH": SRC}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "phaselog",
            "events",
            "--root",
            str(root),
            "--ticket-id",
            T,
            "--follow",
            "--poll",
            "0.1s",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            seen = [json.loads(proc.stdout.readline()), json.loads(proc.stdout.readline())]
            assert [next(iter(s)) for s in seen] == ["event_id", "cursor"]
            written = ledger.write(
                T, "r1", "local_review", {"iteration_count": 1, "issue_fingerprints": [], "last_clean_sha": "a1b2c3d"}
            )
            deadline = time.monotonic() + 60  # a bound on a hang, not a timing assertion
            line = ""
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if line and "event_id" in line:
                    break
            assert json.loads(line)["event_id"] == f"checkpoint.written:{written.record.content_hash}"
            assert "cursor" in json.loads(proc.stdout.readline())
        finally:
            proc.kill()
            proc.wait()
