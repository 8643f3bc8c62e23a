"""What one attempt produced: a payload (and artifacts), or a failure to record."""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TAIL_BYTES = 4096

#: Failure rules that another attempt of the same code would hit again: the output itself is
#: refused (a payload that breaks the schema, an artifact that is not there, a value that is not a
#: payload, an earlier phase that blocks it). They fail the phase at once, without its retries.
#: Every other rule (``exception``, ``exit_code``, ``timeout``) is retried. Decisions D99.
PERMANENT_RULES = frozenset({"invalid", "artifact_missing", "bad_result", "prerequisite"})


@dataclass
class Success:
    """The attempt finished: its payload and artifact paths (relative to the working directory)."""

    payload: dict[str, Any]
    artifacts: list[str] = field(default_factory=list)


@dataclass
class Failure:
    """The attempt failed. ``rule``: exception, timeout, exit_code, interrupted, bad_result, invalid,
    artifact_missing, prerequisite, runner_error (:data:`PERMANENT_RULES`, ``interrupted`` and
    ``runner_error`` are not retried)."""

    rule: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)
    cause: BaseException | None = None
    signum: int | None = None

    @property
    def retryable(self) -> bool:
        """Whether another attempt may succeed: not for :data:`PERMANENT_RULES` (nor a stop)."""
        return self.rule not in PERMANENT_RULES and self.rule not in ("interrupted", "runner_error")

    @property
    def error(self) -> str:
        """The checkpoint's ``error`` text."""
        return self.message if self.message.startswith(f"{self.rule}:") else f"{self.rule}: {self.message}"

    def payload(self, phase: str) -> dict[str, Any]:
        """The failed attempt's payload: the phase, and the failure in detail."""
        return {"phase": phase, "failure": {"rule": self.rule, "message": self.message, **self.detail}}


def tail(text: str, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` bytes of ``text`` (at a character boundary)."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return text
    return "…" + raw[-limit:].decode("utf-8", "ignore")


def from_exception(exc: BaseException) -> Failure:
    """A failure from a phase's exception: type, message, and the traceback's tail."""
    kind = type(exc).__qualname__
    module = type(exc).__module__
    name = kind if module in ("builtins", "__main__") else f"{module}.{kind}"
    text = "".join(traceback.format_exception(exc))
    return Failure(
        "exception",
        f"{kind}: {exc}",
        {"type": name, "traceback_tail": tail(text)},
        cause=exc,
    )


def runner_failure(exc: Exception) -> Failure:
    """The runner itself failed during an attempt (its log's disk is full, a store error while it
    renewed the lease, a bug): the attempt is recorded as failed with the error, and not retried."""
    failure = from_exception(exc)
    failure.rule = "runner_error"
    failure.message = f"the runner failed while running the attempt: {failure.message}"
    return failure


def phase_exit(exc: SystemExit | KeyboardInterrupt) -> Failure:
    """A phase's own ``sys.exit()`` or ``raise KeyboardInterrupt``: a failed attempt (rule
    ``exception``) naming it, never the runner's exit (decision D112)."""
    failure = from_exception(exc)
    if isinstance(exc, SystemExit):
        code = exc.code
        failure.message = f"SystemExit: the phase called sys.exit({code!r})"
        failure.detail["exit_code"] = code if code is None or isinstance(code, int) else str(code)
    else:
        failure.message = "KeyboardInterrupt: raised by the phase itself (no signal reached the runner)"
    return failure


def normalize(result: Any, workdir: Path) -> Success | Failure:
    """Turn a phase function's return value into a Success, or a ``bad_result`` failure.

    Accepted: None (empty payload), a mapping (the payload), or (payload, artifact paths).
    """
    payload: Any = result
    artifacts: Any = ()
    if isinstance(result, tuple):
        if len(result) != 2:
            return Failure(
                "bad_result", f"a phase returns a payload or (payload, artifacts), not a {len(result)}-tuple"
            )
        payload, artifacts = result
    if payload is None:
        payload = {}
    if not isinstance(payload, Mapping):
        return Failure("bad_result", f"the payload must be a mapping (a JSON object), not {type(payload).__name__}")
    if isinstance(artifacts, str | bytes) or not isinstance(artifacts, Sequence | set | frozenset):
        return Failure("bad_result", "artifacts must be a list of paths relative to the working directory")
    paths: list[str] = []
    for a in artifacts:
        if not isinstance(a, str | Path):
            return Failure("bad_result", f"artifact {a!r} is not a path")
        p = Path(a)
        if p.is_absolute():
            base = workdir.resolve()  # only here: a realpath costs a system call per folder
            try:
                p = p.resolve().relative_to(base)
            except ValueError:
                return Failure("bad_result", f"artifact {str(a)!r} is outside the working directory {base}")
        paths.append(p.as_posix())
    return Success(dict(payload), paths)
