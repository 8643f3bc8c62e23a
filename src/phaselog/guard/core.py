"""The cron-loop guard: a lock, the loop state, and a circuit breaker (seed 000's cron-closeout
protocol, made safe).

``guard run`` takes the lock, reads the loop state, runs the command, records the outcome and
releases the lock. What the seed's shell script got wrong, and what this does instead:

* check-then-write locking (two cron starts both run) → the decision and the takeover happen
  under a mutex (an ``flock``, or the lease row's lock), so however many invocations race,
  exactly one wins;
* staleness by mtime alone (a long run loses its lock) → a holder on this host is judged by its
  processes: its guard alive (same pid *and* start time) or any process of its job's process
  group alive means never displaced without ``--kill-stale``; only a holder on another host is
  judged by age (:mod:`phaselog.guard.liveness`);
* the job's children outliving a killed guard → the job runs in a session of its own that the
  lock names before the job starts (:mod:`phaselog.guard.job`);
* the pid never read back → the holder's pid, host, start time and job group are in the lock;
* a non-atomic state rewrite → temp file, fsync, rename, directory fsync;
* a pass that ran but could not be recorded → never silent: PassNotRecorded, with what was kept.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from phaselog import _faults
from phaselog.guard.job import TAIL_BYTES, GateRefused, JobResult, run_job, tail_text
from phaselog.guard.liveness import Environment, judge_holder
from phaselog.model.errors import Corrupt, Fenced, PhaselogError, StoreError, UsageError
from phaselog.model.events import BreakerOpened, emit
from phaselog.model.guard import Holder, LoopState, PassNotRecorded
from phaselog.model.records import SCHEMA_VERSION, format_timestamp
from phaselog.stores.base import GuardKeeper, GuardStorage, Store, guard_keeper
from phaselog.stores.files.store import FilesStore

DEFAULT_STALE_AFTER = timedelta(minutes=45)
DEFAULT_MAX_FAILURES = 3
KILL_GRACE_S = 10.0
_OUTCOME_RE = re.compile(r"\b(success|noop|failure|halt)\b")

#: How a job is run: ``runner(command, env, on_start)``; ``on_start(pgid, start time)`` must be
#: called before the job does anything (tests inject their own runner).
Runner = Callable[[Sequence[str], dict[str, str], Callable[[int, float | None], None]], JobResult]


@dataclass
class RunResult:
    """What one ``guard run`` invocation did."""

    action: str  # ran | skip | halt
    message: str
    exit_code: int
    outcome: str | None = None
    state: LoopState | None = None
    holder: dict[str, Any] | None = None
    took_over: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON summary (printed on stderr by the CLI: stdout is the command's)."""
        return {
            "action": self.action,
            "message": self.message,
            "exit_code": self.exit_code,
            "outcome": self.outcome,
            "state": self.state.to_seed() if self.state else None,
            "holder": self.holder,
            "took_over": self.took_over,
        }


@dataclass
class GuardConfig:
    """Options of ``guard run``."""

    stale_after: timedelta = DEFAULT_STALE_AFTER
    kill_stale: bool = False
    max_failures: int = DEFAULT_MAX_FAILURES
    max_passes: int | None = None
    cooldown: timedelta | None = None
    dry_run: bool = False
    outcome_from_output: bool = False
    kill_grace_s: float = KILL_GRACE_S


def breaker(state: LoopState, max_failures: int, cooldown: timedelta | None, now: datetime) -> str:
    """``closed``, ``open`` or ``half-open`` (open, but the cooldown has passed)."""
    if state.consecutive_failures < max_failures:
        return "closed"
    if cooldown is not None and state.last_run_at is not None and now - state.last_run_at >= cooldown:
        return "half-open"
    return "open"


def outcome_of(exit_code: int, output_tail: str | None) -> str:
    """The pass outcome: the exit code, or the last outcome word in the output."""
    if output_tail is None:
        return "success" if exit_code == 0 else "failure"
    found = _OUTCOME_RE.findall(output_tail)
    return found[-1] if found else "unknown"


def _age(td: timedelta) -> str:
    secs = int(td.total_seconds())
    return f"{secs // 60} min" if secs >= 60 else f"{secs} s"


#: Where a guard lives: a files-store root (a path), or an open store that keeps guards.
Home = str | os.PathLike[str] | Store


def guard_names(root: Home) -> list[str]:
    """Every guard of a store: a files-store root (a path), or an open store that keeps guards."""
    return _keeper(root).guard_names()


def _keeper(home: Home) -> GuardKeeper:
    """The store that keeps the guards of ``home``; UsageError if it cannot keep guards."""
    if isinstance(home, str | os.PathLike):
        return FilesStore(home)  # a path is a files store's root: its guards live beside it
    keeper = guard_keeper(home)
    if keeper is None:
        raise UsageError(f"the store {home.url} cannot keep guards", field="store", rule="no_guard_storage")
    return keeper


class Guard:
    """One named guard over a store root."""

    def __init__(self, root: Home, name: str, env: Environment | None = None) -> None:
        """``root``: a files-store root (path), or an open store (a SQL store's lease table is the lock)."""
        #: Where the lock, the loop state and the history are kept (the store's backend family).
        self.storage: GuardStorage = _keeper(root).guard_storage(name)
        self.name = self.storage.name
        self.env = env or Environment()

    # -- lock -------------------------------------------------------------------------------------
    def _current(self) -> tuple[Holder | None, Corrupt | None, object]:
        """The holder, or why the lock is damaged (with its raw content, when it parsed at all)."""
        try:
            data = self.storage.lock_data()
        except Corrupt as exc:
            return None, exc, None
        if data is None:
            return None, None, None
        try:
            return Holder.from_json(data, str(self.storage.lock_path)), None, data
        except Corrupt as exc:
            return None, exc, data

    def _refuse_damaged(self, damaged: Corrupt, data: object) -> None:
        """A damaged lock that names a process still running here is not taken over blindly."""
        ids, host = Holder.salvage(data)
        if host not in (None, "", self.env.host):
            return
        running = [i for i in ids if self.env.start_time_of(i) is not None or self.env.group_of(i, None)]
        if running:
            raise Corrupt(
                f"{damaged.message}; it names pid {', '.join(map(str, running))}, which still runs on this host, "
                f"so the guard does not take it over: check that process, then fix or remove {self.storage.lock_path}",
                path=str(self.storage.lock_path),
                field=damaged.context.get("field"),
                rule=damaged.context.get("rule"),
            )

    def _acquire(self, cfg: GuardConfig, pid: int) -> tuple[Holder | None, RunResult | None, dict[str, Any] | None]:
        """Return (our holder, None, takeover) or (None, a skip result, None)."""
        for _ in range(3):
            victim: Holder | None = None
            with self.storage.mutex():
                current, damaged, data = self._current()
                took_over: dict[str, Any] | None = None
                if current is not None:
                    verdict, why = judge_holder(current, self.env, cfg.stale_after)
                    if verdict in ("live", "remote-live") or (verdict == "hung" and not cfg.kill_stale):
                        msg = (
                            f"SKIP: previous invocation still running (pid {current.pid}, host {current.host}, "
                            f"age {_age(self.env.clock() - current.started_at)})"
                        )
                        if verdict in ("live", "hung") and not self.env.guard_alive(current):
                            msg += f"; its guard is gone, but its job's process group {current.pgid} still runs"
                        if verdict == "hung":
                            msg += " — it looks hung; --kill-stale would end it"
                        holder = {**current.to_json(), "verdict": verdict, "reason": why}
                        return None, RunResult("skip", msg, 0, holder=holder), None
                    if verdict == "hung":
                        victim = current
                    else:
                        took_over = {"holder": current.to_json(), "reason": why}
                elif damaged is not None:
                    self._refuse_damaged(damaged, data)
                    took_over = {"holder": None, "reason": f"damaged lock file replaced: {damaged.message}"}
                if victim is None:
                    me = Holder(pid, self.env.host, self.env.start_time_of(pid), self.env.clock(), secrets.token_hex(8))
                    me = self.storage.write_lock(me)
                    _faults.point("guard.after_lock")
                    return me, None, took_over
            # A hung live holder and --kill-stale: end it outside the mutex, then decide again.
            if victim is not None:
                self._terminate(victim, cfg)
        raise StoreError(f"could not take the lock of guard {self.name}", rule="lock")

    def _terminate(self, victim: Holder, cfg: GuardConfig) -> None:
        """TERM the hung holder's guard and every process of its job's group; KILL what is left
        after the grace period."""
        print(
            f"phaselog guard: ending hung holder pid {victim.pid}"
            + (f" and its job's process group {victim.pgid}" if victim.pgid else "")
            + f" (TERM, then KILL after {cfg.kill_grace_s:g} s)",
            file=sys.stderr,
            flush=True,
        )

        def targets() -> list[int]:
            return ([victim.pid] if self.env.guard_alive(victim) else []) + self.env.job_processes(victim)

        for sig, wait_s in ((signal.SIGTERM, cfg.kill_grace_s), (signal.SIGKILL, 5.0)):
            for pid in targets():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    self.env.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if not targets():
                    return
                self.env.sleep(0.05)

    def _release(self, me: Holder) -> None:
        """Release the lock, unless a process of our job still runs (then the lock keeps it)."""
        if me.pgid is not None:
            left = self.env.group_of(me.pgid, me.job_start)
            if left:
                print(
                    f"phaselog guard {self.name}: WARNING: processes of the job still run (pid "
                    f"{', '.join(map(str, left))}); the lock stays held until they end",
                    file=sys.stderr,
                    flush=True,
                )
                return
        try:
            with self.storage.mutex():
                self.storage.remove_lock(me.token)
        except (PhaselogError, OSError) as exc:
            print(
                f"phaselog guard {self.name}: WARNING: could not release the lock: {exc}; it names this "
                "process, which is gone once this exits, so the next invocation on this host takes it over",
                file=sys.stderr,
                flush=True,
            )

    # -- run --------------------------------------------------------------------------------------
    def run(self, command: Sequence[str], cfg: GuardConfig | None = None, *, runner: Runner | None = None) -> RunResult:
        """Run ``command`` under the guard (see the module docstring for the steps).

        Raises:
            PassNotRecorded: the job ran but its pass could not be recorded (what was kept is said).
            Fenced: the lock was taken over before the state could be written.
        """
        cfg = cfg or GuardConfig()
        if not command:
            raise UsageError("guard run needs a command after --", field="command", rule="required")
        if cfg.max_failures < 1:
            raise UsageError("--max-failures must be >= 1", field="max_failures")
        me, skipped, took_over = self._acquire(cfg, os.getpid())
        if skipped is not None:
            return skipped
        assert me is not None
        mine: Holder = me  # the lock we hold; on_start adds the job's group to it
        try:
            if took_over:
                why = took_over["reason"]
                print(f"phaselog guard {self.name}: WARNING: took over the lock: {why}", file=sys.stderr, flush=True)
                self.storage.append_history({"kind": "takeover", "at": format_timestamp(self.env.clock()), **took_over})
            state = self.storage.read_state()
            now = self.env.clock()
            if cfg.max_passes is not None and state.pass_count >= cfg.max_passes:
                return RunResult(
                    "skip", f"SKIP: max passes reached ({state.pass_count} of {cfg.max_passes})", 0, state=state
                )
            mode = breaker(state, cfg.max_failures, cfg.cooldown, now)
            if mode == "open":
                hint = f"phaselog guard reset --name {self.name}"
                wait = ""
                if cfg.cooldown is not None and state.last_run_at is not None:
                    wait = f"; or wait until {format_timestamp(state.last_run_at + cfg.cooldown)} for a probe"
                return RunResult(
                    "halt",
                    f"HALT: circuit breaker open after {state.consecutive_failures} consecutive failures "
                    f"(max {cfg.max_failures}); to reset: {hint}{wait}",
                    1,
                    state=state,
                )
            started = self.env.clock()
            env = dict(os.environ)
            env.pop("PHASELOG_DRY_RUN", None)  # only this guard's --dry-run says it
            if cfg.dry_run:
                env["PHASELOG_DRY_RUN"] = "1"

            def on_start(pgid: int, job_start: float | None) -> None:
                # Name the job's group in the lock before the job may do anything.
                nonlocal mine
                named = replace(mine, pgid=pgid, job_start=job_start)
                with self.storage.mutex():
                    self.storage.update_lock(named)
                mine = named
                _faults.point("guard.before_gate")  # a crash here: the job must not run at all

            try:
                job = (runner or partial(run_job, grace_s=cfg.kill_grace_s))(command, env, on_start)
            except GateRefused as exc:  # nothing ran: the lock could not name the job, or no gate
                raise exc.__cause__ or StoreError(str(exc), rule="gate") from None
            ended = self.env.clock()
            stdout = tail_text(job.stdout_tail, TAIL_BYTES) if cfg.outcome_from_output else None
            outcome = outcome_of(job.exit_code, stdout)
            entry: dict[str, Any] = {
                "kind": "pass",
                "pass": None,  # the pass number, once the state is written
                "started_at": format_timestamp(started),
                "ended_at": format_timestamp(ended),
                "outcome": outcome,
                "exit_code": job.exit_code,
                "duration_sec": round((ended - started).total_seconds(), 3),
                "dry_run": cfg.dry_run,
                "probe": mode == "half-open",
                "host": self.env.host,
                "pid": mine.pid,
                "max_failures": cfg.max_failures,
                "cooldown_sec": cfg.cooldown.total_seconds() if cfg.cooldown else None,
                "command": list(command),
            }
            if outcome in ("failure", "halt", "unknown"):
                # What the job said last: `guard history` is where users find out why it failed.
                entry["stdout_tail"] = tail_text(job.stdout_tail)
                entry["stderr_tail"] = tail_text(job.stderr_tail)
            if job.leftovers:
                entry["leftovers_ended"] = job.leftovers
            new = self._record(mine, cfg, entry, ended)
            label = " (half-open probe)" if mode == "half-open" else ""
            return RunResult(
                "ran",
                f"pass {new.pass_count}: {outcome}{label}",
                job.exit_code,
                outcome=outcome,
                state=new,
                took_over=took_over,
            )
        finally:
            self._release(mine)

    def _record(self, me: Holder, cfg: GuardConfig, entry: dict[str, Any], ended: datetime) -> LoopState:
        """Write the state and append the pass; keep whatever can be kept, and say what was not."""
        failed = entry["outcome"] in ("failure", "halt", "unknown")
        ran = f"the job ran (exit {entry['exit_code']}, {entry['outcome']})"
        causes: dict[str, str] = {}
        new: LoopState | None = None
        try:
            with self.storage.mutex():
                # Re-read under the mutex: a `guard reset` while the command ran must not be lost.
                current = self.storage.read_state()
                new = replace(
                    current,
                    pass_count=current.pass_count + 1,
                    last_status=entry["outcome"],
                    last_run_at=ended,
                    consecutive_failures=current.consecutive_failures + 1 if failed else 0,
                    dry_run=cfg.dry_run,
                    schema_version=SCHEMA_VERSION,
                )
                self.storage.write_state(new, token=me.token)
        except Fenced as exc:
            raise Fenced(f"{exc.message}; {ran}, and this pass is not recorded", **exc.context) from None
        except (PhaselogError, OSError) as exc:
            causes["state"] = str(exc)
            entry["state_not_written"] = str(exc)
        entry["pass"] = new.pass_count if new is not None else None
        try:
            self.storage.append_history(entry)
        except (PhaselogError, OSError) as exc:
            causes["history"] = str(exc)
        if causes:
            raise PassNotRecorded(
                f"guard {self.name}: {ran}, but its pass could not be recorded: "
                + "; ".join(f"{what}: {why}" for what, why in causes.items())
                + ("" if "history" in causes else " (the pass is in the history)"),
                rule="pass_not_recorded",
                not_written=list(causes),
                job_exit_code=entry["exit_code"],
                outcome=entry["outcome"],
                **{"pass": entry},
            )
        assert new is not None
        if failed and new.consecutive_failures == cfg.max_failures:  # this pass opens the breaker: durable now
            emit([BreakerOpened(self.name, new.consecutive_failures, format_timestamp(ended))], self.storage)
        return new

    # -- status / reset ---------------------------------------------------------------------------
    def status(
        self,
        *,
        max_failures: int | None = None,
        cooldown: timedelta | None = None,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
    ) -> dict[str, Any]:
        """State, breaker and lock holder. Breaker settings default to the last pass's."""
        state = self.storage.read_state()
        history = self.storage.history()
        last_pass = next((h for h in reversed(history) if h.get("kind") == "pass"), None)
        if max_failures is None:
            max_failures = (
                int(last_pass.get("max_failures") or DEFAULT_MAX_FAILURES) if last_pass else DEFAULT_MAX_FAILURES
            )
        if cooldown is None and last_pass and last_pass.get("cooldown_sec"):
            cooldown = timedelta(seconds=float(last_pass["cooldown_sec"]))
        holder: dict[str, Any] | None = None
        current, damaged, _ = self._current()
        if damaged is not None:
            where = {k: v for k, v in damaged.context.items() if k in ("field", "rule")}
            holder = {"damaged": damaged.message, **where}
        if current is not None:
            verdict, why = judge_holder(current, self.env, stale_after)
            holder = {**current.to_json(), "verdict": verdict, "reason": why}
            if current.host == self.env.host:
                holder["job_pids"] = self.env.job_processes(current)
        return {
            "name": self.name,
            "state": state.to_seed(),
            "breaker": breaker(state, max_failures, cooldown, self.env.clock()),
            "max_failures": max_failures,
            "cooldown_sec": cooldown.total_seconds() if cooldown else None,
            "lock": holder,
            "state_file": str(self.storage.state_path),
            "lock_file": str(self.storage.lock_path),
        }

    def reset(self, *, by: str | None = None) -> dict[str, Any]:
        """Close the breaker: zero ``consecutive_failures``; note who and when in the history."""
        who = by or os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown"
        with self.storage.mutex():
            state = self.storage.read_state()
            new = replace(state, consecutive_failures=0)
            self.storage.write_state(new)
        note = {
            "kind": "reset",
            "at": format_timestamp(self.env.clock()),
            "by": who,
            "previous_consecutive_failures": state.consecutive_failures,
        }
        self.storage.append_history(note)
        return {"name": self.name, "state": new.to_seed(), "reset": note}

    def history(self) -> list[dict[str, Any]]:
        """Every pass, takeover and reset, oldest first."""
        entries: list[dict[str, Any]] = self.storage.history()
        return entries
