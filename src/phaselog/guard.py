"""The cron-loop guard: a lock, the loop state, and a circuit breaker (seed 000's cron-closeout
protocol, made safe).

``guard run`` takes the lock, reads the loop state, runs the command, records the outcome and
releases the lock. What the seed's shell script got wrong, and what this does instead:

* check-then-write locking (two cron starts both run) → the decision and the takeover happen
  under an ``flock`` mutex, so however many invocations race, exactly one wins;
* staleness by mtime alone (a long run loses its lock) → a holder on this host is judged by its
  process: alive (same pid *and* same start time) means never displaced without ``--kill-stale``;
  gone (or pid reused) means stale at once; only a holder on another host is judged by age;
* the pid never read back → the holder's pid, host and process start time are in the lock file;
* a non-atomic state rewrite → temp file, fsync, rename, directory fsync.

Files (under the store root): ``pipeline_checkpoints/<name>-state.yaml`` (seed 000's schema),
``pipeline_checkpoints/<name>.lock`` (pid, host, process start time, started_at: readable), and
``pipeline_checkpoints/<name>.history/`` (one JSON file per pass or reset, append-only).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from phaselog import _faults, _yaml
from phaselog.errors import AlreadyExists, Corrupt, StoreError, UsageError
from phaselog.records import SCHEMA_VERSION, check_schema_version, format_timestamp, parse_timestamp

OUTCOMES = ("success", "noop", "failure", "halt", "unknown")
DEFAULT_STALE_AFTER = timedelta(minutes=45)
DEFAULT_MAX_FAILURES = 3
KILL_GRACE_S = 10.0
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
_OUTCOME_RE = re.compile(r"\b(success|noop|failure|halt)\b")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def validate_name(name: str) -> str:
    """A guard name: 1-64 of ``[A-Za-z0-9._-]``, not starting with '.' or '-', no '..'."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        raise UsageError(
            f"--name: 1-64 of letters, digits, '.', '_', '-', not starting with '.' or '-' (got {name!r})",
            field="name",
            rule="guard_name",
        )
    return name


# -- records --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoopState:
    """Seed 000's cron-closeout state, field for field."""

    pass_count: int = 0
    last_status: str | None = None
    last_run_at: datetime | None = None
    consecutive_failures: int = 0
    dry_run: bool = False
    schema_version: str = SCHEMA_VERSION

    def to_seed(self) -> dict[str, Any]:
        """The state file's content, in the seed's order."""
        return {
            "schema_version": self.schema_version,
            "pass_count": self.pass_count,
            "last_status": self.last_status,
            "last_run_at": format_timestamp(self.last_run_at) if self.last_run_at else None,
            "consecutive_failures": self.consecutive_failures,
            "dry_run": self.dry_run,
        }

    @classmethod
    def from_seed(cls, data: Any, where: str) -> LoopState:
        """Parse a state file; Corrupt naming the field if it is broken."""
        if not isinstance(data, dict):
            raise Corrupt(f"{where}: must be a mapping of the state fields", path=where)
        try:
            check_schema_version(str(data.get("schema_version", SCHEMA_VERSION)))
            for key in ("pass_count", "consecutive_failures"):
                value = data.get(key, 0)
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise Corrupt(f"{key}: must be an integer >= 0", field=key, rule="type")
            status = data.get("last_status")
            if status is not None and status not in OUTCOMES:
                raise Corrupt(f"last_status: must be one of {', '.join(OUTCOMES)}", field="last_status")
            ran = data.get("last_run_at")
            if not isinstance(data.get("dry_run", False), bool):
                raise Corrupt("dry_run: must be true or false", field="dry_run", rule="type")
            return cls(
                pass_count=data.get("pass_count", 0),
                last_status=status,
                last_run_at=parse_timestamp(ran, field="last_run_at") if ran is not None else None,
                consecutive_failures=data.get("consecutive_failures", 0),
                dry_run=data.get("dry_run", False),
                schema_version=str(data.get("schema_version", SCHEMA_VERSION)),
            )
        except Corrupt as exc:
            raise Corrupt(
                f"{where}: {exc.message} (fix the file, or move it aside to start a fresh state)",
                path=where,
                field=exc.context.get("field"),
            ) from None


@dataclass(frozen=True)
class Holder:
    """Who holds the lock."""

    pid: int
    host: str
    process_start: float | None
    started_at: datetime
    token: str

    def to_json(self) -> dict[str, Any]:
        """The lock file's content (YAML, readable by people)."""
        return {
            "pid": self.pid,
            "host": self.host,
            "process_start": self.process_start,
            "started_at": format_timestamp(self.started_at),
            "token": self.token,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Holder:
        """Parse a lock file."""
        if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
            raise Corrupt(f"{where}: not a guard lock (needs pid, host, started_at)", path=where)
        return cls(
            pid=data["pid"],
            host=str(data.get("host", "")),
            process_start=data.get("process_start"),
            started_at=parse_timestamp(data.get("started_at"), field="started_at"),
            token=str(data.get("token", "")),
        )


# -- liveness -------------------------------------------------------------------------------------
def process_start_time(pid: int) -> float | None:
    """Start time of ``pid`` (epoch seconds), or None when there is no such process (or it has
    exited and is a zombie nobody reaped: it runs nothing, and must not hold the lock forever)."""
    import psutil

    from phaselog.progress import process_start_time as pst

    with contextlib.suppress(psutil.Error):
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return None
    return pst(pid)


@dataclass
class Environment:
    """What the guard asks of the outside world; tests inject their own."""

    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    host: str = field(default_factory=socket.gethostname)
    start_time_of: Callable[[int], float | None] = process_start_time
    kill: Callable[[int, int], None] = os.kill
    sleep: Callable[[float], None] = time.sleep


def judge_holder(holder: Holder, env: Environment, stale_after: timedelta) -> tuple[str, str]:
    """Classify a lock holder: ``live``, ``hung`` (live but older than stale_after), ``dead``,
    ``remote-live`` or ``remote-stale``, with a human reason."""
    age = env.clock() - holder.started_at
    mins = int(age.total_seconds() // 60)
    if holder.host == env.host:
        started = env.start_time_of(holder.pid)
        if started is None:
            return "dead", f"process {holder.pid} is gone"
        if holder.process_start is not None and abs(started - holder.process_start) > 1.0:
            return "dead", f"pid {holder.pid} now belongs to another process (pid reuse)"
        if age > stale_after:
            return "hung", f"pid {holder.pid} has held the lock for {mins} min, longer than --stale-after: looks hung"
        return "live", f"pid {holder.pid} is running ({mins} min)"
    if age > stale_after:
        return "remote-stale", f"held by {holder.host or 'an unknown host'} for {mins} min, longer than --stale-after"
    return "remote-live", f"held by pid {holder.pid} on {holder.host} ({mins} min); its liveness cannot be checked"


# -- storage ---------------------------------------------------------------------------------------
class FileGuardStore:
    """Guard files under ``<root>/pipeline_checkpoints``."""

    def __init__(self, root: str | os.PathLike[str], name: str) -> None:
        self.name = validate_name(name)
        self.dir = Path(root).expanduser().absolute() / "pipeline_checkpoints"
        self.state_path = self.dir / f"{name}-state.yaml"
        self.lock_path = self.dir / f"{name}.lock"
        self.history_dir = self.dir / f"{name}.history"

    def _ensure(self) -> None:
        for d in (self.dir.parent, self.dir, self.history_dir):
            if not d.exists():
                with contextlib.suppress(FileExistsError):
                    d.mkdir(mode=0o700)
                os.chmod(d, 0o700)
            elif d.is_symlink() and d != self.dir.parent:
                raise StoreError(f"refusing to use {d}: it is a symlink", rule="no_symlinks")

    @contextlib.contextmanager
    def mutex(self) -> Iterator[None]:
        """Serialise lock decisions and state updates (an flock; the kernel drops it on death)."""
        self._ensure()
        fd = os.open(self.dir / f".{self.name}.mutex", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_yaml(self, path: Path) -> Any:
        try:
            with open(path, "rb") as fh:
                data = fh.read(1 << 20)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror}") from None
        try:
            return _yaml.load(data)
        except Corrupt as exc:
            raise Corrupt(f"{path}: {exc.message}", path=str(path)) from None

    def _write_replace(self, path: Path, text: str) -> None:
        """Replace ``path`` atomically: temp file, fsync, rename, directory fsync."""
        tmp = path.with_name(f".tmp-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        if path == self.state_path:
            _faults.point("guard.before_replace")
        else:
            _faults.point("guard.before_lock_replace")
        os.replace(tmp, path)
        dfd = os.open(self.dir, _DIR_FLAGS)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def read_state(self) -> LoopState:
        """The loop state (fresh if there is no file yet)."""
        data = self._read_yaml(self.state_path)
        return LoopState() if data is None else LoopState.from_seed(data, str(self.state_path))

    def write_state(self, state: LoopState, *, token: str | None = None) -> None:
        """Write the loop state atomically; with ``token``, only while it still holds the lock."""
        if token is not None:
            try:
                current = self.read_lock()
            except Corrupt:
                current = None
            if current is None or current.token != token:
                from phaselog.guard_sql import Fenced

                raise Fenced(
                    f"guard {self.name}: the lock was taken over; the loop state was not written", rule="lock_token"
                )
        self._ensure()
        self._write_replace(self.state_path, _yaml.dump(state.to_seed()))

    def read_lock(self) -> Holder | None:
        """The current holder, or None."""
        data = self._read_yaml(self.lock_path)
        return None if data is None else Holder.from_json(data, str(self.lock_path))

    def write_lock(self, holder: Holder) -> Holder:
        """Install ``holder`` (called under the mutex, after the decision)."""
        self._ensure()
        self._write_replace(self.lock_path, _yaml.dump(holder.to_json()))
        return holder

    def remove_lock(self, token: str) -> bool:
        """Remove the lock if ``token`` still holds it (under the mutex)."""
        try:
            current = self.read_lock()
        except Corrupt:
            current = None
        if current is None or current.token != token:
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock_path)
        return True

    def append_history(self, entry: dict[str, Any]) -> None:
        """Append one history entry (create-if-absent by sequence number)."""
        self._ensure()
        for _ in range(1000):
            seq = len(self._history_names()) + 1
            entry = {**entry, "seq": seq}
            tmp = self.history_dir / f".tmp-{os.getpid()}-{secrets.token_hex(4)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, (json.dumps(entry, ensure_ascii=False) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, self.history_dir / f"{seq:09d}.json")
            except FileExistsError:
                continue
            finally:
                os.unlink(tmp)
            dfd = os.open(self.history_dir, _DIR_FLAGS)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            return
        raise AlreadyExists("could not append to the guard history")

    def _history_names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.history_dir) if n.endswith(".json") and not n.startswith("."))
        except FileNotFoundError:
            return []

    def history(self) -> list[dict[str, Any]]:
        """Every history entry, oldest first."""
        out = []
        for n in self._history_names():
            try:
                out.append(json.loads((self.history_dir / n).read_bytes()))
            except (ValueError, OSError) as exc:
                out.append({"seq": n[:-5], "kind": "damaged", "error": str(exc)})
        return out


# -- the guard ------------------------------------------------------------------------------------
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


class Guard:
    """One named guard over a store root."""

    def __init__(self, root: str | os.PathLike[str] | Any, name: str, env: Environment | None = None) -> None:
        """``root``: a files-store root (path), or an open SQL store (its lease table is the lock)."""
        self.files: Any
        if hasattr(root, "dialect"):
            from phaselog.guard_sql import SqlGuardStore

            self.files = SqlGuardStore(root, name)
        elif hasattr(root, "root") and not isinstance(root, str | os.PathLike):
            self.files = FileGuardStore(root.root, name)
        else:
            self.files = FileGuardStore(root, name)
        self.name = self.files.name
        self.env = env or Environment()

    # -- lock -------------------------------------------------------------------------------------
    def _acquire(self, cfg: GuardConfig, pid: int) -> tuple[Holder | None, RunResult | None, dict[str, Any] | None]:
        """Return (our holder, None, takeover) or (None, a skip result, None)."""
        for _ in range(3):
            victim: Holder | None = None
            with self.files.mutex():
                try:
                    current = self.files.read_lock()
                except Corrupt as exc:
                    current, damaged = None, exc.message
                else:
                    damaged = ""
                took_over = None
                if current is not None:
                    verdict, why = judge_holder(current, self.env, cfg.stale_after)
                    if verdict in ("live", "remote-live") or (verdict == "hung" and not cfg.kill_stale):
                        msg = (
                            f"SKIP: previous invocation still running (pid {current.pid}, host {current.host}, "
                            f"age {_age(self.env.clock() - current.started_at)})"
                        )
                        if verdict == "hung":
                            msg += " — it looks hung; --kill-stale would end it"
                        return None, RunResult("skip", msg, 0, holder=current.to_json()), None
                    if verdict == "hung":
                        victim = current
                    else:
                        took_over = {"holder": current.to_json(), "reason": why}
                elif damaged:
                    took_over = {"holder": None, "reason": f"damaged lock file replaced: {damaged}"}
                if victim is None:
                    me = Holder(pid, self.env.host, self.env.start_time_of(pid), self.env.clock(), secrets.token_hex(8))
                    me = self.files.write_lock(me)
                    _faults.point("guard.after_lock")
                    return me, None, took_over
            # A hung live holder and --kill-stale: end it outside the mutex, then decide again.
            if victim is not None:
                self._terminate(victim, cfg)
        raise StoreError(f"could not take the lock of guard {self.name}")

    def _terminate(self, victim: Holder, cfg: GuardConfig) -> None:
        print(
            f"phaselog guard: ending hung holder pid {victim.pid} (TERM, then KILL after {cfg.kill_grace_s:g} s)",
            file=sys.stderr,
            flush=True,
        )
        with contextlib.suppress(ProcessLookupError):
            self.env.kill(victim.pid, signal.SIGTERM)

        def gone() -> bool:
            now = self.env.start_time_of(victim.pid)
            if now is None:
                return True
            return victim.process_start is not None and abs(now - victim.process_start) > 1.0

        deadline = time.monotonic() + cfg.kill_grace_s
        while time.monotonic() < deadline:
            if gone():
                return
            self.env.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            self.env.kill(victim.pid, signal.SIGKILL)
        for _ in range(100):
            if gone():
                return
            self.env.sleep(0.05)

    # -- run --------------------------------------------------------------------------------------
    def run(
        self,
        command: Sequence[str],
        cfg: GuardConfig | None = None,
        *,
        stdout: IO[bytes] | None = None,
        runner: Callable[[Sequence[str], dict[str, str], bool], tuple[int, str | None]] | None = None,
    ) -> RunResult:
        """Run ``command`` under the guard (see the module docstring for the steps)."""
        cfg = cfg or GuardConfig()
        if not command:
            raise UsageError("guard run needs a command after --", field="command", rule="required")
        if cfg.max_failures < 1:
            raise UsageError("--max-failures must be >= 1", field="max_failures")
        me, skipped, took_over = self._acquire(cfg, os.getpid())
        if skipped is not None:
            return skipped
        assert me is not None
        try:
            if took_over:
                why = took_over["reason"]
                print(f"phaselog guard {self.name}: WARNING: took over the lock: {why}", file=sys.stderr, flush=True)
                self.files.append_history({"kind": "takeover", "at": format_timestamp(self.env.clock()), **took_over})
            state = self.files.read_state()
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
            code, tail = (runner or _run_command)(command, env, cfg.outcome_from_output)
            ended = self.env.clock()
            outcome = outcome_of(code, tail if cfg.outcome_from_output else None)
            failed = outcome in ("failure", "halt", "unknown")
            with self.files.mutex():
                # Re-read under the mutex: a `guard reset` while the command ran must not be lost.
                current = self.files.read_state()
                new = replace(
                    current,
                    pass_count=current.pass_count + 1,
                    last_status=outcome,
                    last_run_at=ended,
                    consecutive_failures=current.consecutive_failures + 1 if failed else 0,
                    dry_run=cfg.dry_run,
                    schema_version=SCHEMA_VERSION,
                )
                self.files.write_state(new, token=me.token)
            self.files.append_history(
                {
                    "kind": "pass",
                    "pass": new.pass_count,
                    "started_at": format_timestamp(started),
                    "ended_at": format_timestamp(ended),
                    "outcome": outcome,
                    "exit_code": code,
                    "duration_sec": round((ended - started).total_seconds(), 3),
                    "dry_run": cfg.dry_run,
                    "probe": mode == "half-open",
                    "host": self.env.host,
                    "pid": me.pid,
                    "max_failures": cfg.max_failures,
                    "cooldown_sec": cfg.cooldown.total_seconds() if cfg.cooldown else None,
                    "command": list(command),
                }
            )
            label = " (half-open probe)" if mode == "half-open" else ""
            return RunResult(
                "ran", f"pass {new.pass_count}: {outcome}{label}", code, outcome=outcome, state=new, took_over=took_over
            )
        finally:
            with self.files.mutex():
                self.files.remove_lock(me.token)

    # -- status / reset ---------------------------------------------------------------------------
    def status(
        self,
        *,
        max_failures: int | None = None,
        cooldown: timedelta | None = None,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
    ) -> dict[str, Any]:
        """State, breaker and lock holder. Breaker settings default to the last pass's."""
        state = self.files.read_state()
        history = self.files.history()
        last_pass = next((h for h in reversed(history) if h.get("kind") == "pass"), None)
        if max_failures is None:
            max_failures = (
                int(last_pass.get("max_failures") or DEFAULT_MAX_FAILURES) if last_pass else DEFAULT_MAX_FAILURES
            )
        if cooldown is None and last_pass and last_pass.get("cooldown_sec"):
            cooldown = timedelta(seconds=float(last_pass["cooldown_sec"]))
        holder = None
        try:
            current = self.files.read_lock()
        except Corrupt as exc:
            current, holder = None, {"damaged": exc.message}
        if current is not None:
            verdict, why = judge_holder(current, self.env, stale_after)
            holder = {**current.to_json(), "verdict": verdict, "reason": why}
        return {
            "name": self.name,
            "state": state.to_seed(),
            "breaker": breaker(state, max_failures, cooldown, self.env.clock()),
            "max_failures": max_failures,
            "cooldown_sec": cooldown.total_seconds() if cooldown else None,
            "lock": holder,
            "state_file": str(self.files.state_path),
            "lock_file": str(self.files.lock_path),
        }

    def reset(self, *, by: str | None = None) -> dict[str, Any]:
        """Close the breaker: zero ``consecutive_failures``; note who and when in the history."""
        who = by or os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown"
        with self.files.mutex():
            state = self.files.read_state()
            new = replace(state, consecutive_failures=0)
            self.files.write_state(new)
        note = {
            "kind": "reset",
            "at": format_timestamp(self.env.clock()),
            "by": who,
            "previous_consecutive_failures": state.consecutive_failures,
        }
        self.files.append_history(note)
        return {"name": self.name, "state": new.to_seed(), "reset": note}

    def history(self) -> list[dict[str, Any]]:
        """Every pass, takeover and reset, oldest first."""
        entries: list[dict[str, Any]] = self.files.history()
        return entries


def _age(td: timedelta) -> str:
    secs = int(td.total_seconds())
    return f"{secs // 60} min" if secs >= 60 else f"{secs} s"


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Have the kernel TERM the command if the guard dies (Linux), so a SIGKILLed guard leaves
    no orphan running while the next invocation takes over."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _run_command(command: Sequence[str], env: dict[str, str], capture: bool) -> tuple[int, str | None]:
    """Run the command, passing its output through; keep the output's tail when asked."""
    kwargs: dict[str, Any] = {"env": env}
    if sys.platform.startswith("linux"):
        kwargs["preexec_fn"] = _set_pdeathsig
    try:
        proc = subprocess.Popen(list(command), stdout=subprocess.PIPE if capture else None, **kwargs)
    except FileNotFoundError:
        print(f"phaselog guard: command not found: {command[0]}", file=sys.stderr)
        return 127, "" if capture else None
    except PermissionError:
        print(f"phaselog guard: not executable: {command[0]}", file=sys.stderr)
        return 126, "" if capture else None

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    old = signal.signal(signal.SIGTERM, forward)
    try:
        tail = ""
        if capture:
            assert proc.stdout is not None
            out = sys.stdout.buffer
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr, attr-defined]  # a BufferedReader
                out.write(chunk)
                out.flush()
                tail = (tail + chunk.decode("utf-8", "replace"))[-65536:]
        code = proc.wait()
    finally:
        signal.signal(signal.SIGTERM, old)
        if proc.stdout is not None:
            proc.stdout.close()
    return (128 - code if code < 0 else code), (tail if capture else None)


__all__ = ["Environment", "Guard", "GuardConfig", "LoopState", "RunResult", "breaker", "judge_holder", "outcome_of"]
