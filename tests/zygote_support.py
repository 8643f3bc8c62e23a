"""A zygote: one interpreter that imported phaselog forks a fresh runner process per request.

The crash tests (test_runner_crash, test_runner_dag) SIGKILL runners at random moments, hundreds of
times: forking from a warmed-up interpreter keeps each runner's life about running phases, not
importing. The worker scripts (runner_worker.py, dag_worker.py) call :func:`serve`; the tests drive
them with :class:`Zygote`. On stdin: ``run RUN WORKDIR`` (answers ``pid N``) and ``wait PID``
(answers ``exit PID CODE``, CODE -9 for a SIGKILL).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

RunOnce = Callable[[str, Path], int]  # (run id, workdir) -> exit code


def serve(run_once: RunOnce, warm_up: Callable[[str, Path], int]) -> int:
    """Warm up (one whole run, so every lazily imported module is loaded before forking), say
    ``ready``, then fork a runner per ``run`` line and report each ``wait``."""
    with tempfile.TemporaryDirectory() as warm:  # nothing stays open
        assert warm_up(str(uuid.uuid4()), Path(warm)) == 0
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "run":
            pid = os.fork()
            if pid == 0:  # the runner process
                code = 1
                try:
                    code = run_once(args[0], Path(args[1]))
                except BaseException:
                    import traceback

                    traceback.print_exc()  # os._exit below would lose it
                    sys.stderr.flush()
                finally:
                    os._exit(code)
            print(f"pid {pid}", flush=True)
        elif cmd == "wait":
            pid = int(args[0])
            _, status = os.waitpid(pid, 0)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            print(f"exit {pid} {code}", flush=True)
    return 0


class Zygote:
    """The test's side: starts ``script --zygote *args`` and asks it for runners."""

    def __init__(self, script: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--zygote", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._ask(None) == "ready"

    def _ask(self, line: str | None) -> str:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        if line is not None:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def start(self, run: str, workdir: Path) -> int:
        word, pid = self._ask(f"run {run} {workdir}").split()
        assert word == "pid"
        return int(pid)

    def wait(self, pid: int) -> int:
        word, got, code = self._ask(f"wait {pid}").split()
        assert (word, int(got)) == ("exit", pid)
        return int(code)

    def close(self) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
