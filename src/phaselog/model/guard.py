"""The guard's records: the loop state (seed 000's schema), the lock holder, guard names.

Plain data that the guard (an edge) and every store's guard storage share; nothing here does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from phaselog.model._lazyre import LazyPattern
from phaselog.model.errors import Corrupt, PhaselogError, UsageError
from phaselog.model.records import SCHEMA_VERSION, check_schema_version, format_timestamp, parse_timestamp

__all__ = ["OUTCOMES", "Holder", "LoopState", "PassNotRecorded", "validate_name"]

OUTCOMES = ("success", "noop", "failure", "halt", "unknown")
_NAME_RE = LazyPattern(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


class PassNotRecorded(PhaselogError):
    """The job ran, but its pass could not be (fully) recorded; the context says what was kept.

    Context: ``exit_code`` and ``outcome`` of the job, ``not_written`` (``state``, ``history``),
    ``pass`` (the pass record, so that a log keeps it), and each cause.
    """

    error_code = "pass_not_recorded"


def validate_name(name: str) -> str:
    """A guard name: 1-64 of ``[A-Za-z0-9._-]``, not starting with '.' or '-', no '..'."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        raise UsageError(
            f"--name: 1-64 of letters, digits, '.', '_', '-', not starting with '.' or '-' (got {name!r})",
            field="name",
            rule="guard_name",
        )
    return name


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
                rule=exc.context.get("rule"),
            ) from None


def _int_field(data: dict[str, Any], key: str, *, required: bool = False) -> int | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Corrupt(f"{key}: must be a process id (an integer >= 1), got {value!r}", field=key, rule="type")
    return value


def _time_field(data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise Corrupt(
            f"{key}: must be a process start time (seconds since the epoch), got {value!r}", field=key, rule="type"
        )
    return float(value)


@dataclass(frozen=True)
class Holder:
    """Who holds the lock: the guard process, and (once it runs) its job's process group.

    ``pgid`` is the job's process group (and session) id: the job's leader was started with it as
    its own pid, and every process the job starts stays in it unless it leaves on purpose.
    ``job_start`` is the leader's start time, so that a reused group id is not taken for the job.
    """

    pid: int
    host: str
    process_start: float | None
    started_at: datetime
    token: str
    pgid: int | None = None
    job_start: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The lock file's content (YAML, readable by people)."""
        return {
            "pid": self.pid,
            "host": self.host,
            "process_start": self.process_start,
            "started_at": format_timestamp(self.started_at),
            "token": self.token,
            "pgid": self.pgid,
            "job_start": self.job_start,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Holder:
        """Parse a lock; Corrupt naming the field and the rule if it is broken."""
        if not isinstance(data, dict):
            raise Corrupt(f"{where}: not a guard lock (needs pid, host, started_at)", path=where, rule="type")
        try:
            pid = _int_field(data, "pid", required=True)
            assert pid is not None
            host = data.get("host", "")
            if not isinstance(host, str):
                raise Corrupt(f"host: must be a host name, got {host!r}", field="host", rule="type")
            token = data.get("token", "")
            if not isinstance(token, str | int) or isinstance(token, bool):
                raise Corrupt(f"token: must be a string, got {token!r}", field="token", rule="type")
            return cls(
                pid=pid,
                host=host,
                process_start=_time_field(data, "process_start"),
                started_at=parse_timestamp(data.get("started_at"), field="started_at"),
                token=str(token),
                pgid=_int_field(data, "pgid"),
                job_start=_time_field(data, "job_start"),
            )
        except Corrupt as exc:
            raise Corrupt(
                f"{where}: {exc.message}", path=where, field=exc.context.get("field"), rule=exc.context.get("rule")
            ) from None

    @staticmethod
    def salvage(data: Any) -> tuple[list[int], str | None]:
        """From a lock that does not parse: the process ids it names (pid, pgid) and its host."""
        if not isinstance(data, dict):
            return [], None
        ids = [
            v for v in (data.get("pid"), data.get("pgid")) if isinstance(v, int) and not isinstance(v, bool) and v > 0
        ]
        host = data.get("host")
        return ids, host if isinstance(host, str) else None
