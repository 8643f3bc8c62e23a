"""Running the guard's job: in a session of its own, recorded in the lock before it starts, its
output passed through while a bounded tail is kept, and no process of it left behind.

The steps, and why:

1. The job starts as a tiny gate (``python -I -S -c GATE``) in a new session, so it leads a
   process group (and session) whose id is its pid; every process it starts stays in that group
   unless it leaves on purpose (``setsid``). The gate asks the kernel to TERM it when the guard
   dies (``PR_SET_PDEATHSIG``, Linux), then waits on a pipe.
2. The guard records the group in the lock (``on_start(pgid, start time)``) and only then opens
   the gate, which ``exec``s the command in its own place (same pid, same group). If the guard
   dies first, the gate reads end-of-file and exits without running anything: no job ever runs
   whose group the lock does not name.
3. While the job runs, its stdout and stderr pass through to the guard's own, and the last
   ``tail_bytes`` of each are kept (bounded: a chatty job costs no memory). TERM, INT and HUP sent
   to the guard are forwarded to the whole group.
4. When the job's leader exits, processes it left behind in its group are ended (TERM, then KILL
   after the grace period), as a service manager does: the guard releases the lock only when
   nothing of the job runs any more.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from phaselog.guard.liveness import group_members, process_start_time

#: Bytes of each stream kept for ``--outcome-from-output``; the history keeps HISTORY_TAIL_BYTES.
TAIL_BYTES = 64 * 1024
HISTORY_TAIL_BYTES = 4096
#: After the leader exits, how long to wait for the pipes to close when a process outside the
#: group (one that left with setsid) still holds them open.
DRAIN_S = 1.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

# Exit codes of the gate, as a shell gives them.
NOT_FOUND, NOT_EXECUTABLE, GATE_CLOSED = 127, 126, 125

GATE = f"""\
import os, sys
if sys.platform.startswith("linux"):
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, {int(signal.SIGTERM)})  # PR_SET_PDEATHSIG
    except Exception:
        pass
fd = int(sys.argv[1])
if os.read(fd, 1) != b"g":
    os._exit({GATE_CLOSED})  # the guard died before it recorded this job: run nothing
os.close(fd)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except FileNotFoundError:
    sys.stderr.write("phaselog guard: command not found: %s\\n" % sys.argv[2])
    os._exit({NOT_FOUND})
except OSError as exc:
    sys.stderr.write("phaselog guard: cannot run %s: %s\\n" % (sys.argv[2], exc.strerror))
    os._exit({NOT_EXECUTABLE})
"""


@dataclass(frozen=True)
class JobResult:
    """What the job did: its exit code (128+N when a signal ended it) and its output's tails."""

    exit_code: int
    stdout_tail: bytes = b""
    stderr_tail: bytes = b""
    #: Processes of the job's group still running after its leader exited, ended by the guard.
    leftovers: int = 0


class GateRefused(Exception):
    """``on_start`` refused to record the job: it was not started (carries the cause)."""


def tail_text(data: bytes, limit: int = HISTORY_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of ``data`` as text, starting at a character boundary."""
    cut = data[-limit:]
    if len(data) > limit:
        while cut and 0x80 <= cut[0] <= 0xBF:  # a UTF-8 continuation byte: drop the broken char
            cut = cut[1:]
    return cut.decode("utf-8", "replace")


class _Stream:
    """One of the job's output pipes: forwarded to ``out``, its tail kept."""

    def __init__(self, pipe: IO[bytes], out: IO[bytes] | None) -> None:
        self.fd = pipe.fileno()
        self.out = out
        self.tail = b""

    def take(self) -> bool:
        """Read what is there; False at end of file."""
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        self.tail = (self.tail + chunk)[-TAIL_BYTES:]
        if self.out is not None:
            try:
                self.out.write(chunk)
                self.out.flush()
            except (OSError, ValueError):
                self.out = None  # our own output is gone (closed pipe): keep reading the job's
        return True


def _binary(stream: Any) -> IO[bytes] | None:
    return getattr(stream, "buffer", None)


@contextlib.contextmanager
def _forwarding(pgid: int) -> Iterator[None]:
    """Pass TERM, INT and HUP on to the job's group while it runs (main thread only: Python
    delivers signals there; elsewhere the caller keeps its own handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)

    old = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def end_group(pgid: int, job_start: float | None, grace_s: float) -> int:
    """End every process of the job's group: TERM, then KILL after ``grace_s``. Returns how many
    ran; waits (bounded) until none runs."""
    first = group_members(pgid, job_start)
    if not first:
        return 0
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        for pid in group_members(pgid, job_start):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not group_members(pgid, job_start):
                return len(first)
            time.sleep(0.02)
    return len(first)


def run_job(
    command: Sequence[str],
    env: dict[str, str],
    on_start: Callable[[int, float | None], None],
    *,
    grace_s: float = 10.0,
) -> JobResult:
    """Run ``command`` as described in the module docstring; return its exit code and tails.

    Raises GateRefused (nothing ran) when ``on_start`` raises.
    """
    python = sys.executable or shutil.which("python3")
    if not python:  # an embedded interpreter that cannot name itself
        raise GateRefused("cannot start the job's gate: no Python interpreter found (sys.executable is empty)")
    gate_r, gate_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [python, "-I", "-S", "-c", GATE, str(gate_r), *command],
            env=env,
            stdin=None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(gate_r,),
            start_new_session=True,
        )
    except BaseException:
        os.close(gate_w)
        raise
    finally:
        os.close(gate_r)
    pgid = proc.pid
    job_start = process_start_time(pgid)
    try:
        on_start(pgid, job_start)
    except BaseException as exc:
        os.close(gate_w)  # the gate reads end-of-file and exits: nothing ran
        proc.communicate()
        raise GateRefused(str(exc)) from exc
    assert proc.stdout is not None
    assert proc.stderr is not None
    streams = [_Stream(proc.stdout, _binary(sys.stdout)), _Stream(proc.stderr, _binary(sys.stderr))]
    leftovers = 0
    try:
        with contextlib.suppress(BrokenPipeError):  # the gate died (killed): its exit code says so
            os.write(gate_w, b"g")
        os.close(gate_w)
        with _forwarding(pgid), selectors.DefaultSelector() as sel:
            for s in streams:
                os.set_blocking(s.fd, False)
                sel.register(s.fd, selectors.EVENT_READ, s)
            drain_until: float | None = None
            while True:
                if sel.get_map():
                    for key, _ in sel.select(timeout=0.25):
                        if not key.data.take():
                            sel.unregister(key.fd)
                elif drain_until is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=0.25)  # both pipes closed: wait for the leader itself
                if drain_until is None and proc.poll() is not None:
                    # The leader is done: whatever it left in its group goes too, so that the
                    # lock is released only when nothing of the job runs.
                    leftovers = end_group(pgid, job_start, grace_s)
                    drain_until = time.monotonic() + DRAIN_S
                if drain_until is not None and (not sel.get_map() or time.monotonic() > drain_until):
                    for key in list(sel.get_map().values()):
                        key.data.take()
                    break
    finally:
        if proc.poll() is None or group_members(pgid, job_start):
            # We are leaving abnormally (an exception, KeyboardInterrupt): take the job along.
            leftovers = end_group(pgid, job_start, grace_s)
        code = proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return JobResult(
        exit_code=128 - code if code < 0 else code,
        stdout_tail=streams[0].tail,
        stderr_tail=streams[1].tail,
        leftovers=leftovers,
    )
