"""Is a lock holder still running? The guard process, and every process of its job's group.

A holder on this host holds the lock while its guard process runs (same pid *and* same start
time) **or** while any process of its job's process group runs: a guard SIGKILLed while its shell
job's grandchild does the work has left that grandchild running, and a second copy must not start
beside it. A holder on another host cannot be checked from here and is judged by its age.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from phaselog.model.guard import Holder
from phaselog.model.processes import START_SLACK_S
from phaselog.model.processes import process_start_time as _any_start_time


def process_start_time(pid: int) -> float | None:
    """Start time of ``pid`` (epoch seconds), or None when there is no such process (or it has
    exited and is a zombie nobody reaped: it runs nothing, and must not hold the lock forever)."""
    import psutil  # lazy: only a guard with a holder to judge asks (psutil, ~13 ms)

    with contextlib.suppress(psutil.Error):
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return None
    return _any_start_time(pid)


def group_members(pgid: int, job_start: float | None) -> list[int]:
    """The running (non-zombie) processes of process group ``pgid``, as long as it is still the
    group our job started: when its leader runs with another start time, the id was reused and
    the group is not ours; members that started before our job cannot be of it either."""
    import psutil  # lazy: psutil costs ~13 ms at start; only a liveness check of another process needs it

    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []  # no process at all in the group: the common case, without a scan
    except PermissionError:
        pass  # someone's processes are in it; look closer
    if job_start is not None:
        leader = process_start_time(pgid)
        if leader is not None and abs(leader - job_start) > START_SLACK_S:
            return []
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != pgid or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if job_start is not None and proc.create_time() < job_start - START_SLACK_S:
                continue
        except (OSError, psutil.Error):
            continue  # gone while we looked
        members.append(proc.pid)
    return sorted(members)


@dataclass
class Environment:
    """What the guard asks of the outside world; tests inject their own."""

    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    host: str = field(default_factory=socket.gethostname)
    start_time_of: Callable[[int], float | None] = process_start_time
    group_of: Callable[[int, float | None], list[int]] = group_members
    kill: Callable[[int, int], None] = os.kill
    sleep: Callable[[float], None] = time.sleep

    def guard_alive(self, holder: Holder) -> bool:
        """The holder's guard process still runs (and its pid was not reused)."""
        started = self.start_time_of(holder.pid)
        if started is None:
            return False
        return holder.process_start is None or abs(started - holder.process_start) <= START_SLACK_S

    def job_processes(self, holder: Holder) -> list[int]:
        """The running processes of the holder's job group (none if it has not started one)."""
        return self.group_of(holder.pgid, holder.job_start) if holder.pgid else []


def judge_holder(holder: Holder, env: Environment, stale_after: timedelta) -> tuple[str, str]:
    """Classify a lock holder: ``live``, ``hung`` (live but older than stale_after), ``dead``,
    ``remote-live`` or ``remote-stale``, with a human reason."""
    age = env.clock() - holder.started_at
    mins = int(age.total_seconds() // 60)
    if holder.host == env.host:
        guard_alive = env.guard_alive(holder)
        job = env.job_processes(holder)
        if not guard_alive and not job:
            if env.start_time_of(holder.pid) is None:
                return "dead", f"process {holder.pid} is gone"
            return "dead", f"pid {holder.pid} now belongs to another process (pid reuse)"
        if guard_alive:
            who = f"pid {holder.pid} is running"
        else:
            who = (
                f"pid {holder.pid} is gone, but its job's process group {holder.pgid} still runs "
                f"(pid {', '.join(map(str, job[:5]))}{', …' if len(job) > 5 else ''})"
            )
        if age > stale_after:
            return "hung", f"{who}; it has held the lock for {mins} min, longer than --stale-after: looks hung"
        return "live", f"{who} ({mins} min)"
    if age > stale_after:
        return "remote-stale", f"held by {holder.host or 'an unknown host'} for {mins} min, longer than --stale-after"
    return "remote-live", f"held by pid {holder.pid} on {holder.host} ({mins} min); its liveness cannot be checked"
