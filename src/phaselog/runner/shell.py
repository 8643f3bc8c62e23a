"""Shell phases: a manifest phase's ``run:`` command, run by ``sh -c`` in the working directory.

The command gets ``PHASELOG_TICKET_ID``, ``PHASELOG_RUN_ID``, ``PHASELOG_PHASE``,
``PHASELOG_ATTEMPT``, ``PHASELOG_RESUME_AFTER`` (the last step done), ``PHASELOG_PAYLOAD`` (a file to write its
JSON payload to; else the last JSON object line of its stdout is the payload), ``PHASELOG_INPUTS``
(a file with the earlier phases' payloads), the run's parameters (``PHASELOG_PARAM_<NAME>`` each, and
``PHASELOG_PARAMS``, a file with them all as a JSON object), and what ``phaselog step N`` needs to record progress
(``PHASELOG_STORE``, ``PHASELOG_PIPELINE_FILE``, ``PHASELOG_LEASE_TOKEN``). Its stdout and stderr
go to a log beside the attempt and, bounded, into the store with the attempt (runner/logsink.py);
their tail goes into a failed attempt's record.

The command runs in a process group of its own (a timeout or a signal stops all of it) and dies
with the runner (``PR_SET_PDEATHSIG``): a SIGKILLed runner leaves nothing running that the next
runner could overlap with. While it runs, the lease names its process group, so a runner that
would take over waits until that group is gone.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from phaselog.model.errors import NotFound
from phaselog.model.limits import TooDeep, json_loads_bounded
from phaselog.model.logs import DEFAULT_LOG_CAP
from phaselog.model.params import env_name, env_value
from phaselog.model.pipelines import Phase, manifest_dict
from phaselog.model.records import format_timestamp
from phaselog.runner.console import attempt_log, to_stderr
from phaselog.runner.lease import group_alive
from phaselog.runner.logsink import LogSink, abandon, finish
from phaselog.runner.outcome import Failure, Success, tail
from phaselog.runner.signals import Interrupt

if TYPE_CHECKING:
    from phaselog.runner.context import PhaseContext

KILL_GRACE_S = 5.0
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024


@functools.cache
def _prctl() -> Any:
    """libc's ``prctl``, looked up in the runner (never between fork and exec), or None."""
    try:
        import ctypes  # lazy: ctypes and libc's prctl exist only on Linux (the ImportError is caught)

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None


def _die_with(parent: int) -> Any:
    """The command's ``preexec_fn``: die with the runner ``parent`` (``PR_SET_PDEATHSIG``).

    A runner killed after the fork but before the child asked for the signal would never send
    it: the child then finds its parent changed, and exits before it runs anything.
    """
    prctl = _prctl()

    def child() -> None:  # pragma: no cover - runs in the child between fork and exec
        if prctl is not None:
            prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(128 + signal.SIGKILL)

    return child


class ShellPhase:
    """Runs one attempt of a shell phase (callable as an executor)."""

    def __init__(
        self, *, log_dir: Path | None, store_url: str, tee: IO[bytes] | None = None, log_cap: int = DEFAULT_LOG_CAP
    ) -> None:
        self.log_dir = log_dir
        self.store_url = store_url
        self.tee = tee
        self.log_cap = log_cap

    def __call__(self, phase: Phase, ctx: PhaseContext) -> Success | Failure:
        ex = phase.execution
        assert ex.run is not None
        log_path = attempt_log(ctx, phase.ordinal, self.log_dir)
        log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        scratch = Path(tempfile.mkdtemp(prefix="phaselog-phase-"))
        sink = ctx.log_sink(phase, self.log_cap, to_stderr)
        try:
            env = self._env(phase, ctx, scratch)
            outcome = self._run(phase, ctx, env, log_path, scratch / "payload.json", sink)
        except BaseException:
            abandon(sink)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return finish(sink, outcome)  # before the engine records the attempt: a follower stops at the kept log

    def _env(self, phase: Phase, ctx: PhaseContext, scratch: Path) -> dict[str, str]:
        inputs: dict[str, Any] = {}
        for earlier in ctx.pipeline.earlier(phase):
            with contextlib.suppress(NotFound):
                inputs[earlier.name] = dict(ctx.payload(earlier.name))
        (scratch / "inputs.json").write_text(json.dumps(inputs, ensure_ascii=False, indent=1) + "\n")
        (scratch / "pipeline.json").write_text(json.dumps(manifest_dict(ctx.pipeline), ensure_ascii=False))
        (scratch / "params.json").write_text(json.dumps(ctx.params, ensure_ascii=False, sort_keys=True) + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_PARAM")}  # not an outer run's
        env.update(phase.execution.env)
        env.update({env_name(k): env_value(v) for k, v in ctx.params.items()})
        env.update(
            {
                "PHASELOG_STORE": self.store_url,
                "PHASELOG_TICKET_ID": ctx.ticket_id,
                "PHASELOG_RUN_ID": ctx.run_id,
                "PHASELOG_PHASE": phase.name,
                "PHASELOG_ATTEMPT": str(ctx.attempt),
                "PHASELOG_RESUME_AFTER": str(ctx.resume_after),
                "PHASELOG_RESUME_FROM_STEP": str(ctx.resume_after) if ctx.resume_after else "",  # the old name
                "PHASELOG_PAYLOAD": str(scratch / "payload.json"),
                "PHASELOG_INPUTS": str(scratch / "inputs.json"),
                "PHASELOG_PARAMS": str(scratch / "params.json"),
                "PHASELOG_PIPELINE_FILE": str(scratch / "pipeline.json"),
                "PHASELOG_LEASE_TOKEN": str(ctx.lease.token),
                # `phaselog step` stamps the attempt's start event with it (D98).
                "PHASELOG_ATTEMPT_STARTED_AT": format_timestamp(ctx.started_at) if ctx.started_at else "",
            }
        )
        return env

    def _run(
        self,
        phase: Phase,
        ctx: PhaseContext,
        env: dict[str, str],
        log_path: Path,
        payload_file: Path,
        sink: LogSink | None = None,
    ) -> Success | Failure:
        ex = phase.execution
        kwargs: dict[str, Any] = {}
        if sys.platform.startswith("linux"):
            kwargs["preexec_fn"] = _die_with(os.getpid())
        with open(log_path, "ab") as log:
            os.chmod(log_path, 0o600)
            try:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", ex.run or ""],
                    cwd=ctx.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    **kwargs,
                )
            except OSError as exc:
                return Failure("exit_code", f"cannot start /bin/sh: {exc.strerror}", {"log": str(log_path)})
            reader = _Reader(proc, log, self.tee, sink)
            deadline = time.monotonic() + ex.timeout if ex.timeout else None
            stopped: Failure | None = None
            try:
                # The lease names the command's process group: a runner that would take over from
                # us, dead, waits until the group is gone (a signal here still stops the command).
                ctx.lease.renew(child_pgid=proc.pid, phase=phase.name, attempt=ctx.attempt)
                while not reader.done:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        stopped = Failure(
                            "timeout",
                            f"the command ran longer than its timeout of {ex.timeout:g} s",
                            {"timeout_sec": ex.timeout},
                        )
                        _stop(proc, reader)
                        break
                    reader.pump(min(left, 1.0) if left is not None else 1.0)
                code = proc.wait()
            except Interrupt as exc:
                name = signal.Signals(exc.signum).name
                try:
                    _stop(proc, reader, first=exc.signum)
                except BaseException:
                    end_group(proc)  # a second signal, or the output path failed while stopping
                    raise
                code = proc.wait()
                stopped = Failure(
                    "interrupted", f"interrupted by {name}", {"signal": name}, cause=exc, signum=exc.signum
                )
            except BaseException:
                # Anything else (the log's disk is full, a store error renewing the lease, a bug):
                # the command must not outlive this attempt, nor run on after the lease is released.
                end_group(proc)
                raise
            finally:
                with contextlib.suppress(Exception):
                    ctx.lease.renew(child_pgid=None, phase=None, attempt=None)
        detail = {"log": str(log_path), "log_tail": tail(reader.tail), "exit_code": _code(code)}
        last = _last_line(reader.tail)
        if stopped is not None:
            stopped.detail.update(detail)
            if last and stopped.rule == "timeout":
                stopped.message += f"; last output: {last}"
            return stopped
        if code != 0:
            said = f"; last output: {last}" if last else ""
            return Failure("exit_code", f"the command exited with {_code(code)}{said}", detail)
        payload = _payload(payload_file, reader.last_json, reader.too_deep)
        if isinstance(payload, Failure):
            payload.detail.update(detail)
            return payload
        artifacts = _artifacts(ctx.workdir, ex.artifacts)
        if isinstance(artifacts, Failure):
            artifacts.detail.update(detail)
            return artifacts
        return Success(payload, artifacts)


class _Reader:
    """Copies the command's stdout and stderr to the log (and a tee), keeping a tail and the
    last JSON object line of stdout."""

    def __init__(
        self, proc: subprocess.Popen[bytes], log: IO[bytes], tee: IO[bytes] | None, sink: LogSink | None = None
    ) -> None:
        self.sink = sink
        self.sel = selectors.DefaultSelector()
        assert proc.stdout is not None
        assert proc.stderr is not None
        self.sel.register(proc.stdout, selectors.EVENT_READ, "out")
        self.sel.register(proc.stderr, selectors.EVENT_READ, "err")
        self.open = 2
        self.log = log
        self.tee = tee
        self.tail = ""
        self._line = b""
        self.last_json: dict[str, Any] | None = None
        #: The last JSON object line, when it nested too deeply to be a payload.
        self.too_deep: TooDeep | None = None

    @property
    def done(self) -> bool:
        return self.open == 0

    def pump(self, timeout: float) -> None:
        self._pump(timeout)
        if self.sink is not None:
            self.sink.tick()

    def _pump(self, timeout: float) -> None:
        for key, _ in self.sel.select(timeout):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                self.sel.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]  # our pipes: file objects, not raw fds
                self.open -= 1
                if key.data == "out" and self._line:
                    self._json(self._line)
                continue
            self.log.write(chunk)
            self.log.flush()
            if self.sink is not None:
                self.sink.write(chunk, key.data)
            if self.tee is not None:
                with contextlib.suppress(OSError, ValueError):
                    self.tee.write(chunk)
                    self.tee.flush()
            self.tail = (self.tail + chunk.decode("utf-8", "replace"))[-8192:]
            if key.data == "out":
                *lines, self._line = (self._line + chunk).split(b"\n")
                for line in lines:
                    self._json(line)
                self._line = self._line[-MAX_PAYLOAD_BYTES:]

    def _json(self, line: bytes) -> None:
        text = line.strip()
        if text.startswith(b"{"):
            try:
                doc = json_loads_bounded(text, what="the last JSON line of stdout")
            except TooDeep as exc:
                self.last_json, self.too_deep = None, exc  # meant as the payload, and refused
            except ValueError:
                return
            else:
                if isinstance(doc, dict):
                    self.last_json, self.too_deep = doc, None

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.done and time.monotonic() < end:
            self.pump(min(0.2, max(0.0, end - time.monotonic())))


def _stop(proc: subprocess.Popen[bytes], reader: _Reader, first: int = signal.SIGTERM) -> None:
    """Signal the command's process group, give it a grace period, then SIGKILL it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, first)
    end = time.monotonic() + KILL_GRACE_S
    while proc.poll() is None and time.monotonic() < end:
        reader.drain(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    reader.drain(1.0)


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's whole process group now and wait until none of it runs (the runner is
    failing: no grace period, and no reading of its output, which may be what failed)."""

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    end = time.monotonic() + KILL_GRACE_S
    while group_alive(proc.pid) and time.monotonic() < end:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # a member forked after the first signal
        time.sleep(0.01)


def _last_line(text: str, limit: int = 200) -> str:
    """The output's last non-empty line (for a failed attempt's ``error``), shortened."""
    for raw in reversed(text.splitlines()):
        line = raw.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _code(code: int) -> int:
    return 128 - code if code < 0 else code


def _payload(path: Path, last_json: dict[str, Any] | None, too_deep: TooDeep | None) -> dict[str, Any] | Failure:
    if path.is_file() and path.stat().st_size > 0:
        if path.stat().st_size > MAX_PAYLOAD_BYTES:
            return Failure("bad_result", f"$PHASELOG_PAYLOAD holds more than {MAX_PAYLOAD_BYTES} bytes")
        try:
            doc = json_loads_bounded(path.read_bytes(), what="$PHASELOG_PAYLOAD")
        except TooDeep as exc:
            return Failure("bad_result", exc.message, {"max_depth": exc.max_depth})
        except ValueError as exc:
            return Failure("bad_result", f"$PHASELOG_PAYLOAD is not JSON: {exc}")
        if not isinstance(doc, dict):
            return Failure("bad_result", "$PHASELOG_PAYLOAD must hold a JSON object")
        return doc
    if too_deep is not None:
        return Failure("bad_result", too_deep.message, {"max_depth": too_deep.max_depth})
    return dict(last_json) if last_json is not None else {}


def _artifacts(workdir: Path, patterns: tuple[str, ...]) -> list[str] | Failure:
    out: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, root_dir=workdir, recursive=True))
        if not matches:
            return Failure(
                "artifact_missing", f"artifacts: {pattern!r} matches nothing in {workdir}", {"pattern": pattern}
            )
        out.extend(m for m in matches if m not in out)
    return out
