"""The run lease: one runner per run, and a runner that lost its lease cannot write (fenced).

Acquiring goes through the store's run-lease service (files: the run's ``.lease`` file, locked
while the runner lives; SQL: a lease row with a fencing token). Every checkpoint the runner
writes carries ``lease.fence``; the store checks it atomically with the append.

Who may take a lease that is held (:func:`judge`, the same rule on every store, as the guard's
``judge_holder``):

* a holder on this host whose process is gone (no such pid, or the pid now belongs to a process
  that started at another time) is displaced at once. If the phase command it started (its
  process group) is still running, that command's processes are ended first (SIGKILL, waited
  for: :func:`orphans`, :func:`end_orphans`) — they belong to a runner that can never record
  their result — when every one of them provably is that runner's (its environment names the
  run and the holder's fencing token); a group that holds anything else keeps the run held;
* a holder on another host is displaced once its lease has expired (no heartbeat for ``ttl``);
* otherwise the run is held: ``RunHeld`` (exit 75), or wait with ``wait=``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from phaselog.model.errors import RunHeld, UsageError
from phaselog.model.records import format_timestamp
from phaselog.stores.base import Capability, LeaseCapable, LeaseState, RunFence, RunLeases, Store, Verdict

#: Seconds a lease lasts without a heartbeat (SQL stores); heartbeats come every third of it.
DEFAULT_TTL = 30.0
WAIT_POLL_S = 0.5


def process_start_time(pid: int) -> float | None:
    """Start time of ``pid`` (epoch seconds), or None when it is gone (zombies count as gone)."""
    from phaselog.guard import process_start_time as pst  # lazy: only judging a holder needs the guard

    return pst(pid)


def group_alive(pgid: int) -> bool:
    """True if process group ``pgid`` still has a running member on this host.

    Zombies do not count: they run nothing, and an orphan's zombie waits for init to reap it,
    which in a container may be never.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    import psutil  # lazy: psutil costs ~13 ms at start; only a liveness check of another process needs it

    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, PermissionError):
            continue
    return False


#: How long a runner taking over waits for a dead runner's phase command to die after SIGKILL.
END_ORPHANS_WAIT_S = 10.0


@dataclass(frozen=True)
class Orphaned(Verdict):
    """Held by a dead holder's phase command, which the new runner may end (``pids``) and then take over."""

    pgid: int = 0
    pids: tuple[int, ...] = ()


def _group_members(pgid: int) -> list[Any]:
    """The processes of group ``pgid`` on this host that are not zombies."""
    import psutil  # lazy: psutil costs ~13 ms at start; only a liveness check of another process needs it

    out = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (ProcessLookupError, PermissionError):
            continue
    return out


def orphans(pgid: int, run_id: str, token: int) -> tuple[int, ...] | None:
    """The pids of group ``pgid`` when every live one is the phase command of ``run_id``'s
    acquisition ``token`` (its environment says so: PHASELOG_RUN_ID, PHASELOG_LEASE_TOKEN); None
    when one is not provably that (another's, or unreadable) — such a group is never signalled."""
    import psutil  # lazy: psutil costs ~13 ms at start; only a liveness check of another process needs it

    pids = []
    for proc in _group_members(pgid):
        try:
            env = proc.environ()
        except psutil.NoSuchProcess:
            continue
        except (psutil.AccessDenied, OSError):
            return None
        if env.get("PHASELOG_RUN_ID") != run_id or env.get("PHASELOG_LEASE_TOKEN") != str(token):
            return None
        pids.append(proc.pid)
    return tuple(pids)


def marked(run_id: str, token: int) -> tuple[int, ...]:
    """Processes on this host (not this one) whose environment names ``run_id`` and the lease
    ``token``: what a Python phase of that acquisition started (:func:`marking`)."""
    import psutil  # lazy: psutil costs ~13 ms at start; only a liveness check of another process needs it

    pids = []
    for proc in psutil.process_iter(["status"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("PHASELOG_RUN_ID") == run_id and env.get("PHASELOG_LEASE_TOKEN") == str(token):
            pids.append(proc.pid)
    return tuple(pids)


@contextlib.contextmanager
def marking(lease: Lease) -> Iterator[None]:
    """While a Python phase runs, the processes it starts carry the run and the lease's token in
    their environment, so a runner taking over from this one, dead, can find and end them.
    Only on the main thread (``os.environ`` is the process's); restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    env = os.environ
    old_run, old_token = env.get("PHASELOG_RUN_ID"), env.get("PHASELOG_LEASE_TOKEN")
    env["PHASELOG_RUN_ID"] = lease.run_id
    env["PHASELOG_LEASE_TOKEN"] = str(lease.token)
    try:
        yield
    finally:
        for k, v in (("PHASELOG_RUN_ID", old_run), ("PHASELOG_LEASE_TOKEN", old_token)):
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v


def _running(pid: int) -> bool:
    import psutil  # lazy: psutil costs ~13 ms at start; only a liveness check of another process needs it

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def end_orphans(verdict: Orphaned, *, wait_s: float = END_ORPHANS_WAIT_S) -> bool:
    """SIGKILL a dead runner's phase processes (a group re-checked: its members are still the ones
    judged) and wait until none runs; True when they are gone."""

    def live() -> list[int]:
        if verdict.pgid:
            return [p.pid for p in _group_members(verdict.pgid)]
        return [pid for pid in verdict.pids if _running(pid)]

    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        members = live()
        if not members:
            return True
        if not set(members) <= set(verdict.pids):
            return False  # something joined the group that we did not judge: leave it alone
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    return not live()


def end_marked(lease: Lease) -> None:
    """End (SIGKILL, then wait) every process on this host that carries ``lease``'s marks: what the
    attempt in progress started. A runner failing mid-attempt calls it before it releases the lease."""
    pids = marked(lease.run_id, lease.token)
    if pids:
        end_orphans(Orphaned(False, "the runner is failing", pids=pids))


#: This process's start time, keyed by its pid (a forked child has another pid: asked again).
_OWN_START: dict[int, float | None] = {}


def _own_start_time(pid: int) -> float | None:
    """:func:`process_start_time` of this process, asked once per process (it cannot change)."""
    if pid not in _OWN_START:
        _OWN_START.clear()
        _OWN_START[pid] = process_start_time(pid)
    return _OWN_START[pid]


def holder_info(runner_id: str | None = None, *, marks: bool = False) -> dict[str, Any]:
    """Who we are, as a lease records it: host, pid, process start time, a random runner id, and
    ``marks`` when the processes our Python phases start carry our marks (:func:`marking`)."""
    pid = os.getpid()
    return {
        **({"marks": True} if marks else {}),
        "runner_id": runner_id or secrets.token_hex(8),
        "host": socket.gethostname(),
        "pid": pid,
        "process_start": _own_start_time(pid),
        "acquired_at": format_timestamp(datetime.now(UTC)),
    }


def describe(holder: Mapping[str, Any] | None) -> str:
    """A holder in a few words: ``pid 4242 on build-7 (since 2026-11-30T10:00:00Z)``."""
    if not holder:
        return "nobody"
    since = f" (since {holder['acquired_at']})" if holder.get("acquired_at") else ""
    phase = f", running {holder['phase']} attempt {holder.get('attempt')}" if holder.get("phase") else ""
    return f"pid {holder.get('pid')} on {holder.get('host') or 'an unknown host'}{since}{phase}"


def judge(
    state: LeaseState,
    *,
    host: str | None = None,
    start_time_of: Callable[[int], float | None] = process_start_time,
    group_alive_of: Callable[[int], bool] = group_alive,
) -> Verdict:
    """May a new runner displace the holder of ``state``? (See the module docstring.)"""
    holder = state.holder
    if holder is None:
        return Verdict(True, "the lease is free")
    here = host or socket.gethostname()
    who = describe(holder)
    same_host = holder.get("host") == here
    live = [g for g in _pgids(holder) if group_alive_of(g)] if same_host else []
    if live:
        pgid = live[0]
        why = f"{who}: its phase command (process group {', '.join(map(str, live))}) is still running"
        if _gone(state, holder, start_time_of):
            found = [orphans(g, state.run_id, state.token) for g in live]
            if all(found) and len(live) == 1:
                return Orphaned(False, f"{why}, but its runner is gone: ending it", pgid=pgid, pids=found[0] or ())
            if all(found):  # phases side by side: every group's members, judged one by one (D292)
                pids = tuple(p for f in found for p in f or ())
                return Orphaned(False, f"{why}, but its runner is gone: ending them", pids=pids)
            if any(f is None for f in found):
                why += " and holds processes that are not provably its own; stop them"
        return Verdict(False, why)
    if same_host and holder.get("marks") and _gone(state, holder, start_time_of):
        pids = marked(state.run_id, state.token)
        if pids:
            return Orphaned(False, f"{who} is gone, but processes its Python phase started still run: ending them",
                            pids=pids)  # fmt: skip
    if state.lock_free is False:
        pid = holder.get("pid")
        gone = same_host and isinstance(pid, int) and start_time_of(pid) is None
        if gone:
            return Verdict(False, f"{who}: that process is gone, but a process it started still holds the lock")
        return Verdict(False, f"{who} holds the run's lock")
    if state.lock_free is True:
        return Verdict(True, f"{who} is gone (its lock was released)")
    if same_host:
        pid = holder.get("pid")
        if isinstance(pid, int):
            started = start_time_of(pid)
            if started is None:
                return Verdict(True, f"{who}: that process is gone")
            recorded = holder.get("process_start")
            if isinstance(recorded, int | float) and abs(started - recorded) > 1.0:
                return Verdict(True, f"{who}: that pid now belongs to another process")
            late = _late(state)
            if late:
                return Verdict(False, f"{who} is alive but {late}: hung? stop it, or wait")
            return Verdict(False, f"{who} is running")
    late = _late(state)
    if late:
        return Verdict(True, f"{who}: {late}")
    left = (state.expires_at or state.now) - state.now
    return Verdict(False, f"{who}; its liveness cannot be checked from here, and its lease expires in {left:.0f} s")


def _pgids(holder: Mapping[str, Any]) -> list[int]:
    """The process groups of the holder's phase commands (``child_pgids``, else ``child_pgid``)."""
    many = holder.get("child_pgids")
    groups = many if isinstance(many, list) else [holder.get("child_pgid")]
    return [g for g in groups if isinstance(g, int) and not isinstance(g, bool)]


def _gone(state: LeaseState, holder: Mapping[str, Any], start_time_of: Callable[[int], float | None]) -> bool:
    """The holder, on this host, provably no longer runs: its lock was freed (files), or its pid is
    gone or belongs to a process started at another time."""
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return state.lock_free is True
    started = start_time_of(pid)
    recorded = holder.get("process_start")
    return started is None or (isinstance(recorded, int | float) and abs(started - recorded) > 1.0)


def _late(state: LeaseState) -> str | None:
    if state.expires_at is not None and state.now > state.expires_at:
        return f"its lease expired {state.now - state.expires_at:.0f} s ago (no heartbeat)"
    return None


def leases_of(store: Store) -> RunLeases:
    """The store's run-lease service; UsageError for a store without one."""
    if Capability.LEASES not in store.capabilities:
        raise UsageError(
            f"{type(store).__name__} cannot hold run leases; the runner needs a files, SQLite or PostgreSQL store",
            field="store",
            rule="no_leases",
        )
    return cast(LeaseCapable, store).run_leases()


@dataclass
class Lease:
    """A held run lease. ``fence`` goes with every write; ``renew`` is the heartbeat."""

    leases: RunLeases
    ticket_id: str
    run_id: str
    token: int
    ttl: float
    holder: dict[str, Any]
    took_over: Mapping[str, Any] | None = None
    #: Whether the lease expires without heartbeats (SQL stores); a files lease lives with its process.
    expires: bool = True
    last_renewed: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    released: bool = False

    @property
    def fence(self) -> RunFence:
        """The write guard for this lease."""
        return RunFence(self.ticket_id, self.run_id, self.token, self.holder.get("runner_id"))

    #: The process group of the phase command each thread runs (``child_pgid``; several when
    #: phases run side by side, D292): the holder names them all.
    groups: dict[int, int] = field(default_factory=dict, repr=False)

    def renew(self, leases: RunLeases | None = None, **details: Any) -> None:
        """Extend the lease and record ``details`` (e.g. the phase running); Fenced if taken over."""
        with self._lock:
            if "child_pgid" in details:
                details = self._grouped(dict(details))
            if details:
                self.holder.update(dict(details.items()))
                for k in [k for k, v in self.holder.items() if v is None]:
                    del self.holder[k]
            (leases or self.leases).renew(self.ticket_id, self.run_id, self.token, ttl=self.ttl, holder=self.holder)
            self.last_renewed = time.monotonic()

    def _grouped(self, details: dict[str, Any]) -> dict[str, Any]:
        """``details`` with ``child_pgid`` kept per thread: alone, the holder reads as it always did
        (``child_pgid``, the phase, the attempt); with phases side by side it names every group
        (``child_pgids``) and the first one as ``child_pgid``."""
        me, pgid = threading.get_ident(), details["child_pgid"]
        if pgid is None:
            self.groups.pop(me, None)
        else:
            self.groups[me] = pgid
        if len(self.groups) + (pgid is None) <= 1 and "child_pgids" not in self.holder:
            return details  # one command at a time: today's holder
        pgids = list(self.groups.values())
        first = pgids[0] if pgids else None
        return {"child_pgid": first, "child_pgids": pgids or None, "phase": None, "attempt": None}

    def due(self) -> bool:
        """True when a heartbeat is due (a third of the ttl since the last renewal)."""
        return self.expires and time.monotonic() - self.last_renewed >= self.ttl / 3

    def release(self) -> None:
        """Give the lease up (idempotent; a lease already taken over is left alone)."""
        if self.released:
            return
        self.released = True
        with contextlib.suppress(Exception):  # releasing is best effort: an expired lease frees itself
            self.leases.release(self.ticket_id, self.run_id, self.token)


def acquire(
    store: Store,
    ticket_id: str,
    run_id: str,
    *,
    ttl: float = DEFAULT_TTL,
    wait: float | bool = False,
    judge_fn: Callable[[LeaseState], Verdict] = judge,
    on_wait: Callable[[RunHeld], None] | None = None,
    marks: bool = False,
) -> Lease:
    """Take the run's lease; RunHeld (exit 75) if another runner holds it.

    ``wait``: True waits as long as it takes, a number waits that many seconds, polling.
    """
    if ttl <= 0:
        raise UsageError("the lease ttl must be positive", field="ttl")
    leases = leases_of(store)
    me = holder_info(marks=marks)
    deadline = None if wait is True else time.monotonic() + (float(wait) if wait else 0.0)
    told = False
    seen: list[Verdict] = []
    ended: list[dict[str, Any]] = []

    def judging(state: LeaseState) -> Verdict:
        verdict = judge_fn(state)
        seen[:] = [verdict]
        return verdict

    while True:
        seen.clear()
        try:
            state = leases.acquire(ticket_id, run_id, me, ttl=ttl, judge=judging)
        except RunHeld as exc:
            orphan = seen[0] if seen and isinstance(seen[0], Orphaned) else None
            if orphan is not None and len(ended) < 3 and end_orphans(orphan):
                # The dead runner's command is gone: take the run over now (D100).
                ended.append({"process_group": orphan.pgid, "pids": list(orphan.pids), "signal": "SIGKILL"})
                continue
            if deadline is not None and time.monotonic() >= deadline:
                if wait:
                    exc.message += f" (waited {float(wait):g} s)"
                else:
                    exc.message += "; try again later, or pass --wait to wait for it"
                raise
            if on_wait is not None and not told:
                on_wait(exc)
                told = True
            time.sleep(WAIT_POLL_S)
            continue
        took_over = state.took_over
        if ended and took_over is not None:
            took_over = {
                **took_over,
                "ended": ended,
                "reason": f"{took_over.get('reason')}; its phase command (process group "
                f"{ended[-1]['process_group']}: pids {', '.join(map(str, ended[-1]['pids']))}) was ended with SIGKILL",
            }
        return Lease(
            leases,
            ticket_id,
            run_id,
            state.token,
            ttl,
            dict(state.holder or me),
            took_over,
            expires=state.lock_free is None,
        )
