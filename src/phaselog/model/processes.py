"""Facts about operating-system processes that records name (a pid and its start time).

An attempt's progress events, a run lease, a queue worker and a guard's lock all name a process
by its pid *and* its start time, so that a reused pid is not taken for the process that wrote
the record. Both the ledger (is an attempt abandoned?) and the guard (is a lock holder alive?)
ask this module.
"""

from __future__ import annotations

#: Start times closer than this (seconds) are the same process (psutil rounds; clocks tick).
START_SLACK_S = 1.0


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None if it does not exist."""
    import psutil  # lazy: ~10 ms of start-up, needed only when a record names a process

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
