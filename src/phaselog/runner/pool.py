"""``phaselog worker --concurrency N``: N worker processes under one supervisor.

Each child is a plain ``phaselog worker`` (concurrency 1) with the same options: one run at a
time in its main thread, its own heartbeat row and connections. The supervisor forwards
SIGTERM/SIGINT to every child and waits for them (each finishes its phase, releases its run);
a child that dies while the pool is not stopping is started again after a short pause (its run
is recovered by the queue's rules). With ``--burst`` children that exit 0 are not replaced.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType

RESTART_PAUSE_S = 1.0


def supervise(child_argv: Sequence[str], n: int, *, burst: bool, echo: Callable[[str], None] = lambda _t: None) -> int:
    """Run ``n`` children of ``child_argv`` (a ``phaselog worker`` command line) until they end; exit code."""
    stopping: list[int] = []
    children: dict[int, subprocess.Popen[bytes]] = {}

    def start(slot: int) -> None:
        children[slot] = subprocess.Popen(list(child_argv))
        echo(f"worker {slot + 1}/{n}: pid {children[slot].pid}")

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)
        for proc in children.values():
            if proc.poll() is None:
                proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    codes: dict[int, int] = {}
    try:
        for slot in range(n):
            start(slot)
        while children:
            time.sleep(0.2)
            for slot, proc in list(children.items()):
                code = proc.poll()
                if code is None:
                    continue
                del children[slot]
                codes[slot] = code
                if stopping or (burst and code == 0):
                    continue
                echo(f"worker {slot + 1}/{n} (pid {proc.pid}) exited {code}; starting another in {RESTART_PAUSE_S:g} s")
                time.sleep(RESTART_PAUSE_S)
                if not stopping:
                    start(slot)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if stopping:
        return 0 if all(c == 0 for c in codes.values()) else 128 + stopping[0]
    return max(codes.values(), default=0)


def child_command(args: Sequence[str]) -> list[str]:
    """The command line of one child: this interpreter running ``phaselog`` with ``args``."""
    return [sys.executable, "-m", "phaselog", *args]
