"""``phaselog status --watch`` in a real subprocess (docs/notifications.md "Live pages", D230).

The watcher runs as its own process with its stdout on a pipe (not a terminal: each new table is
printed once, no screen redraws); this process writes through the library; the watcher prints a
second table with the new state; SIGINT ends it with exit 130 and no traceback. Over files and
SQLite (the two ways a change stamp is taken) and PostgreSQL; and on a real terminal (a pty), where
the table is redrawn in place.
"""

from __future__ import annotations

import json
import os
import pty
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW

PHASELOG = str(Path(sys.executable).parent / "phaselog")
DEADLINE_S = 30.0  # a table that has not come by then is missing (a bound, not a measurement)


class Watcher:
    """``phaselog status --watch`` in a subprocess, its stdout read line by line on a thread."""

    def __init__(self, store: str, run: str, *extra: str) -> None:
        cmd = [PHASELOG, "status", "--store", store, "--ticket-id", "T-1", "--run-id", run, "--interval", "0.2", *extra]
        self.proc = subprocess.Popen(
            [*cmd, "--watch"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TERM": "xterm"},
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True).start()

    def _pump(self, out: IO[str]) -> None:
        for line in out:
            self.lines.put(line)
        self.lines.put(None)

    def line(self) -> str:
        got = self.lines.get(timeout=DEADLINE_S)
        if got is None:
            raise EOFError(f"the watcher ended: {self.stop()}")
        return got

    def table(self) -> str:
        """The next table (a table's lines, up to the blank line that ends it)."""
        out: list[str] = []
        while (line := self.line()) != "\n":
            out.append(line)
        return "".join(out)

    def stop(self) -> tuple[int, str]:
        """SIGINT, as Ctrl-C; the exit code and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


@pytest.fixture(params=["files", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "files":
        yield str(tmp_path / "store")
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        yield request.getfixturevalue("pg_schema_url")  # conftest: a fresh schema, dropped afterwards


def _ledger(url: str) -> Any:
    return phaselog.Ledger(phaselog.open_store(url))


def test_a_write_from_another_process_prints_a_second_table_and_sigint_ends_it(store_url: str) -> None:
    ledger = _ledger(store_url)
    ledger.write("T-1", "r1", "implement", IMPLEMENT)
    w = Watcher(store_url, "r1", "--format", "table")
    try:
        first = w.table()
        assert "implement" in first
        assert "local_review" in first
        assert "next: local_review" in first
        ledger.write("T-1", "r1", "local_review", LOCAL_REVIEW)
        second = w.table()
        assert "next: create_pr" in second  # the new state, in a table of its own
        row = next(line for line in second.splitlines() if "local_review" in line)
        assert "completed" in row
    finally:
        code, err = w.stop()
        ledger.close()
    assert code == 130, err
    assert "Traceback" not in err
    assert "\x1b[" not in first + second  # not a terminal: no screen redraws


def test_json_watch_prints_one_status_per_line_and_only_when_it_changes(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    ledger = _ledger(url)
    ledger.write("T-1", "r1", "implement", IMPLEMENT)
    w = Watcher(url, "r1")
    try:
        first = json.loads(w.line())
        assert (first["success"], first["next_phase"]) == (True, "local_review")
        ledger.write("T-1", "r1", "local_review", LOCAL_REVIEW)
        second = json.loads(w.line())
        assert second["next_phase"] == "create_pr"
        assert second["correlation_id"] == first["correlation_id"]  # one invocation
        with pytest.raises(queue.Empty):  # nothing changed: nothing printed (looked at ~5 times)
            w.lines.get(timeout=1.0)
    finally:
        code, err = w.stop()
        ledger.close()
    assert code == 130, err
    assert "Traceback" not in err


def test_bad_watch_options_are_clear_errors(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    _ledger(url).write("T-1", "r1", "implement", IMPLEMENT)
    args = ["status", "--store", url, "--ticket-id", "T-1", "--run-id", "r1", "--watch"]
    bad = subprocess.run([PHASELOG, *args, "--interval", "0"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2
    assert "--interval" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr
    missing = subprocess.run(
        [PHASELOG, *args[:-4], "--ticket-id", "T-1", "--run-id", "nobody", "--watch"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode != 0
    assert "Traceback" not in missing.stderr


def test_on_a_terminal_the_table_is_redrawn_in_place(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    ledger = _ledger(url)
    ledger.write("T-1", "r1", "implement", IMPLEMENT)
    primary, secondary = pty.openpty()
    cmd = [PHASELOG, "status", "--store", url, "--ticket-id", "T-1", "--run-id", "r1", "--format", "table"]
    proc = subprocess.Popen(
        [*cmd, "--watch", "--interval", "0.2"],
        stdout=secondary,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TERM": "xterm", "COLUMNS": "120"},
    )
    os.close(secondary)
    seen = ""

    def until(text: str) -> None:
        nonlocal seen
        deadline = time.monotonic() + DEADLINE_S
        while text not in seen:
            assert time.monotonic() < deadline, f"no {text!r} on the terminal: {seen[-500:]!r}"
            ready, _, _ = select.select([primary], [], [], 0.5)
            if ready:
                seen += os.read(primary, 65536).decode("utf-8", "replace")

    try:
        until("next: local_review")
        ledger.write("T-1", "r1", "local_review", LOCAL_REVIEW)
        until("next: create_pr")
        assert seen.count("\x1b[H\x1b[2J") == 2  # one redraw per table: the screen is cleared, not scrolled
        assert "Ctrl-C stops" in seen
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=DEADLINE_S)
        os.close(primary)
        ledger.close()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
