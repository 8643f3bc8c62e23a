"""How the runner executes a phase: the manifest keys ``run``, ``call``, ``env``, ``timeout``,
``retries``, ``backoff``, ``retry_delay``, ``artifacts`` and ``fingerprint`` (docs/runner.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phaselog.model._lazyre import LazyPattern
from phaselog.model.durations import MAX_DAYS, check_seconds, parse_duration
from phaselog.model.errors import PipelineError, UsageError

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
_CALL_RE = LazyPattern(f"{_DOTTED}:{_DOTTED}")

BACKOFFS = ("none", "fixed", "linear", "exponential")
FINGERPRINTS = ("code",)
EXECUTION_KEYS = ("run", "call", "env", "timeout", "retries", "backoff", "retry_delay", "artifacts", "fingerprint")
MAX_RETRIES = 100


@dataclass(frozen=True)
class Execution:
    """How the runner executes a phase: the manifest keys ``run``, ``env``, ``timeout``,
    ``retries``, ``backoff``, ``retry_delay``, ``artifacts`` and ``fingerprint`` (docs/runner.md)."""

    #: A command line run by ``sh -c`` in the runner's working directory (a shell phase).
    run: str | None = None
    #: ``package.module:function`` imported and called with ctx (a Python phase named in a manifest).
    call: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    #: Seconds; None for no limit.
    timeout: float | None = None
    #: Attempts after the first.
    retries: int = 0
    backoff: str = "exponential"
    #: Seconds before the first retry (the backoff grows from it).
    retry_delay: float = 1.0
    #: Globs relative to the working directory, hashed when the checkpoint is written.
    artifacts: tuple[str, ...] = ()
    #: ``code``: skip only while the phase's code is unchanged.
    fingerprint: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The non-default keys, as a manifest would spell them."""
        out: dict[str, Any] = {}
        default = Execution()
        for key in EXECUTION_KEYS:
            value = getattr(self, key)
            if value != getattr(default, key):
                out[key] = list(value) if isinstance(value, tuple) else dict(value) if key == "env" else value
        return out


def execution_from_dict(raw: Mapping[str, Any], where: str, at: str) -> Execution:
    """Check the runner keys of one phase (``at`` names it); PipelineError naming the key."""

    def bad(key: str, rule: str, message: str) -> PipelineError:
        return PipelineError(f"{where}: {at}.{key} {message}", field=f"{at}.{key}", rule=rule)

    def seconds(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise bad(key, "duration", f"must be a duration such as 30s, 45m, 1h30m (got {value!r:.60})")
        try:
            if isinstance(value, int | float):
                if value < 0:
                    raise bad(key, "duration", f"must not be negative (got {value!r:.60})")
                return check_seconds(value, field=f"{at}.{key}")  # the bound `…d` has: one for both forms
            return parse_duration(value, field=f"{at}.{key}").total_seconds()
        except UsageError as exc:
            if exc.context.get("rule") == "duration_max":
                too_long = f"is too long: at most {MAX_DAYS}d (100 years) (got {value!r:.60})"
                raise bad(key, "duration_max", too_long) from None
            raise bad(key, "duration", f"must be a duration such as 30s, 45m, 1h30m (got {value!r:.60})") from None

    kw: dict[str, Any] = {}
    if "run" in raw:
        run = raw["run"]
        if not isinstance(run, str) or not run.strip():
            raise bad("run", "type", "must be a non-empty command line (a string run by sh -c)")
        if "\x00" in run:
            raise bad("run", "format", "must not contain NUL characters")
        kw["run"] = run
    if "call" in raw:
        call = raw["call"]
        if not isinstance(call, str) or not _CALL_RE.fullmatch(call):
            raise bad("call", "format", f"must be package.module:function (got {call!r})")
        if "run" in kw:
            raise bad("call", "exclusive", "cannot be given with run: (a phase is a command or a function)")
        kw["call"] = call
    if "env" in raw:
        env = raw["env"]
        if not isinstance(env, Mapping):
            raise bad("env", "type", "must map variable names to strings")
        clean: dict[str, str] = {}
        for k, v in env.items():
            if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise bad("env", "env_name", f"has an invalid variable name {k!r}")
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                raise bad("env", "type", f"value of {k} must be a string (got {v!r})")
            if isinstance(v, str) and "\x00" in v:
                raise bad("env", "format", f"value of {k} must not contain NUL characters (an environment cannot)")
            try:
                os.fsencode(str(v))
            except UnicodeError:
                raise bad("env", "format", f"value of {k} cannot be encoded for the environment") from None
            clean[k] = str(v)
        kw["env"] = clean
    if "timeout" in raw and raw["timeout"] is not None:
        kw["timeout"] = seconds("timeout", raw["timeout"])
        if kw["timeout"] <= 0:
            raise bad("timeout", "duration", "must be longer than zero")
    if "retries" in raw:
        retries = raw["retries"]
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
            raise bad("retries", "type", f"must be an integer from 0 to {MAX_RETRIES} (attempts after the first)")
        kw["retries"] = retries
    if "backoff" in raw:
        if raw["backoff"] not in BACKOFFS:
            raise bad("backoff", "enum", f"must be one of {', '.join(BACKOFFS)} (got {raw['backoff']!r})")
        kw["backoff"] = raw["backoff"]
    if "retry_delay" in raw:
        kw["retry_delay"] = seconds("retry_delay", raw["retry_delay"])
    if "artifacts" in raw:
        arts = raw["artifacts"]
        if isinstance(arts, str):
            arts = [arts]
        if not isinstance(arts, Sequence) or not all(isinstance(a, str) and a for a in arts):
            raise bad("artifacts", "type", "must be a list of globs relative to the working directory")
        for a in arts:
            if a.startswith("/") or ".." in Path(a).parts:
                raise bad("artifacts", "relative-path", f"must stay inside the working directory (got {a!r})")
        kw["artifacts"] = tuple(arts)
    if "fingerprint" in raw and raw["fingerprint"] is not None:
        if raw["fingerprint"] not in FINGERPRINTS:
            raise bad("fingerprint", "enum", f"must be 'code' (got {raw['fingerprint']!r})")
        kw["fingerprint"] = raw["fingerprint"]
    return Execution(**kw)
