"""The deliverer's configuration: a YAML file of rules, each sending some events to one destination.

Everything is checked before anything is delivered (``load_config``): an unknown key, an unknown
event type, a secret whose environment variable is not set, a URL that is not http(s), a template
naming a field the event does not have. Each error is a UsageError naming the key
(``rules[1].webhook.url``) and the rule it breaks. See docs/notifications.md, "Delivering".
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from phaselog.ledger.feed import check_types
from phaselog.model import _yaml
from phaselog.model.durations import parse_duration
from phaselog.model.errors import Corrupt, PhaselogError, UsageError
from phaselog.model.guard import validate_name

__all__ = [
    "TEMPLATE_FIELDS",
    "CommandTarget",
    "Config",
    "Retry",
    "Rule",
    "WebhookTarget",
    "load_config",
    "parse_config",
]

#: The names a body template may use: the event's fields, flat (``data_<key>`` for its data).
TEMPLATE_FIELDS = (
    "event_id",
    "type",
    "ticket_id",
    "run_id",
    "run_name",
    "pipeline",
    "phase",
    "attempt",
    "at",
    "url",
    "event_json",
)
_TOP_KEYS = {"name", "poll", "base_url", "stale_after", "manifests", "rules"}
_RULE_KEYS = {"name", "events", "pipelines", "tickets", "phases", "from", "webhook", "command"}
_RETRY_KEYS = {"timeout", "max_attempts", "backoff", "max_backoff"}
_WEBHOOK_KEYS = {"url", "secret_env", "template", "headers"} | _RETRY_KEYS
_COMMAND_KEYS = {"run"} | _RETRY_KEYS


@dataclass(frozen=True)
class Retry:
    """How one destination is tried: per attempt ``timeout`` s; ``max_attempts`` in all, then a dead letter;
    waits of ``backoff`` s doubling up to ``max_backoff`` s, each with ±20 % jitter."""

    timeout: float = 10.0
    max_attempts: int = 8
    backoff: float = 1.0
    max_backoff: float = 300.0


@dataclass(frozen=True)
class WebhookTarget:
    """An HTTP POST of the event (or of ``template`` rendered from it), signed with the secret."""

    url: str
    secret_env: str | None
    secret: bytes | None = field(repr=False)
    template: object | None
    headers: Mapping[str, str]
    retry: Retry


@dataclass(frozen=True)
class CommandTarget:
    """A command run with the event as JSON on stdin and in ``PHASELOG_EVENT_*`` variables."""

    argv: tuple[str, ...] | None
    shell: str | None
    retry: Retry


@dataclass(frozen=True)
class Rule:
    """Which events (types, and optionally pipelines, tickets, phases) go to which destination."""

    name: str
    events: frozenset[str]
    pipelines: frozenset[str] | None
    tickets: frozenset[str] | None
    phases: frozenset[str] | None
    target: WebhookTarget | CommandTarget
    start: str = "beginning"
    origin: str = "config"

    def matches(self, event: Any) -> bool:
        """Does ``event`` (a FeedEvent) pass this rule's filters?"""
        return (
            event.type in self.events
            and (self.pipelines is None or event.pipeline in self.pipelines)
            and (self.tickets is None or event.ticket_id in self.tickets)
            and (self.phases is None or event.phase in self.phases)
        )


@dataclass(frozen=True)
class Config:
    """A whole configuration file, checked."""

    name: str
    rules: tuple[Rule, ...]
    poll: float = 1.0
    base_url: str | None = None
    stale_after: float = 60.0
    path: str | None = None
    #: Deliver the pipelines' own ``notify:`` hooks too (D219).
    manifests: bool = True


def _bad(key: str, message: str, rule: str) -> UsageError:
    return UsageError(f"{key}: {message}", field=key, rule=rule)


def _mapping(value: object, key: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(key, f"must be a mapping (keys: {', '.join(sorted(allowed))})", "type")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise _bad(
            f"{key}.{unknown[0]}" if key else unknown[0],
            f"unknown key (known here: {', '.join(sorted(allowed))})",
            "unknown_key",
        )
    return value


def _seconds(value: object, key: str, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _bad(key, f"must be a duration such as 500ms, 10s or 5m, not {value!r}", "duration")
    try:
        secs = parse_duration(str(value), field=key).total_seconds()
    except PhaselogError as exc:
        raise _bad(key, exc.message, "duration") from None
    if secs < minimum:
        raise _bad(key, f"must be at least {minimum:g}s", "range")
    return secs


def _names(value: object, key: str) -> frozenset[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not value or not all(isinstance(v, str | int) for v in value):
        raise _bad(key, "must be a non-empty list of names", "type")
    return frozenset(str(v) for v in value)


def _retry(doc: Mapping[str, Any], key: str) -> Retry:
    base = Retry()
    attempts = doc.get("max_attempts", base.max_attempts)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise _bad(f"{key}.max_attempts", f"must be a whole number ≥ 1, not {attempts!r}", "range")
    retry = Retry(
        timeout=_seconds(doc.get("timeout", base.timeout), f"{key}.timeout", minimum=0.001),
        max_attempts=attempts,
        backoff=_seconds(doc.get("backoff", base.backoff), f"{key}.backoff"),
        max_backoff=_seconds(doc.get("max_backoff", base.max_backoff), f"{key}.max_backoff"),
    )
    if retry.max_backoff < retry.backoff:
        raise _bad(f"{key}.max_backoff", "must be at least backoff", "range")
    return retry


def check_template(template: object, key: str) -> None:
    """UsageError naming ``key`` unless every string in ``template`` names only event fields."""
    if isinstance(template, Mapping):
        for k, v in template.items():
            check_template(v, f"{key}.{k}")
    elif isinstance(template, list):
        for i, v in enumerate(template):
            check_template(v, f"{key}[{i}]")
    elif isinstance(template, str):
        try:
            parts = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise _bad(key, f"not a template ({exc}); write {{{{ and }}}} for literal braces", "template") from None
        for _, name, spec, conv in parts:
            if name is None:
                continue
            if name not in TEMPLATE_FIELDS and not (name.startswith("data_") and name[5:].isidentifier()):
                raise _bad(
                    key,
                    f"{{{name}}} is not an event field (use one of {', '.join(TEMPLATE_FIELDS)}, or data_<key>)",
                    "template_field",
                )
            if spec or conv:
                raise _bad(key, f"{{{name}}}: no conversions or format specs (write the plain field)", "template")
    elif template is not None and not isinstance(template, int | float | bool):
        raise _bad(key, "must be a mapping, a list, a string or a plain value", "type")


def _webhook(doc: object, key: str, env: Mapping[str, str]) -> WebhookTarget:
    w = _mapping(doc, key, _WEBHOOK_KEYS)
    url = w.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(f"{key}.url", f"must be an http:// or https:// URL with a host, not {url!r}", "url")
    secret_env = w.get("secret_env")
    secret = None
    if secret_env is not None:
        if not isinstance(secret_env, str) or not secret_env:
            raise _bad(f"{key}.secret_env", "must name an environment variable", "type")
        value = env.get(secret_env)
        if not value:
            raise _bad(
                f"{key}.secret_env",
                f"the environment variable {secret_env} is not set (the secret is never written in the file)",
                "secret_missing",
            )
        secret = value.encode("utf-8")
    headers = w.get("headers", {})
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise _bad(f"{key}.headers", "must map header names to strings", "type")
    template = w.get("template")
    check_template(template, f"{key}.template")
    return WebhookTarget(str(url), secret_env, secret, template, dict(headers), _retry(w, key))


def _command(doc: object, key: str) -> CommandTarget:
    c = {"run": doc} if isinstance(doc, str | list) else _mapping(doc, key, _COMMAND_KEYS)
    run = c.get("run")
    where = key if not isinstance(doc, Mapping) else f"{key}.run"
    if isinstance(run, str) and run.strip():
        return CommandTarget(None, run, _retry(c, key))
    if isinstance(run, list) and run and all(isinstance(a, str) for a in run):
        return CommandTarget(tuple(run), None, _retry(c, key))
    raise _bad(where, "must be a shell command line or a non-empty list of arguments", "type")


def _rule(doc: object, i: int, env: Mapping[str, str], origin: str) -> Rule:
    key = f"rules[{i}]"
    r = _mapping(doc, key, _RULE_KEYS)
    if "events" not in r:
        raise _bad(f"{key}.events", "required: the event types this rule sends", "required")
    events = _names(r["events"], f"{key}.events")
    try:
        check_types(events)
    except UsageError as exc:
        raise _bad(f"{key}.events", exc.message.removeprefix("types: "), "event_type") from None
    name = r.get("name", f"rule{i + 1}")
    try:
        validate_name(str(name))
    except UsageError:
        raise _bad(f"{key}.name", f"1-64 of letters, digits, '.', '_', '-' (got {name!r})", "name") from None
    start = r.get("from", "beginning")
    if start not in ("beginning", "now"):
        raise _bad(f"{key}.from", f"must be beginning or now, not {start!r}", "choice")
    kinds = [k for k in ("webhook", "command") if k in r]
    if len(kinds) != 1:
        raise _bad(key, "needs exactly one destination: webhook or command", "destination")
    target: WebhookTarget | CommandTarget = (
        _webhook(r["webhook"], f"{key}.webhook", env)
        if kinds[0] == "webhook"
        else _command(r["command"], f"{key}.command")
    )
    opt = {f: _names(r[f], f"{key}.{f}") if f in r else None for f in ("pipelines", "tickets", "phases")}
    return Rule(str(name), events, opt["pipelines"], opt["tickets"], opt["phases"], target, start, origin)


def hook_rule(
    doc: Mapping[str, Any], *, pipeline: str, phase: str | None, index: int, env: Mapping[str, str] | None = None
) -> Rule:
    """A manifest's ``notify:`` hook as a rule of its pipeline (and phase); UsageError naming it."""
    where = f"pipeline {pipeline}: " + (f"phase {phase} notify[{index}]" if phase else f"notify[{index}]")
    try:
        rule = _rule({**doc, "name": "hook"}, index, os.environ if env is None else env, "manifest")
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}", **exc.context) from None
    name = f"{pipeline}.{phase or 'run'}.{doc.get('name', index + 1)}"
    only_phase = frozenset({phase}) if phase else None
    return replace(rule, name=name, pipelines=frozenset({pipeline}), phases=only_phase)


def parse_config(doc: object, *, name: str, env: Mapping[str, str] | None = None, path: str | None = None) -> Config:
    """Check a parsed configuration document; UsageError naming the first key that is wrong."""
    env = os.environ if env is None else env
    top = _mapping(doc, "", _TOP_KEYS)
    rules_doc = top.get("rules")
    if not isinstance(rules_doc, list) or not rules_doc:
        raise _bad("rules", "required: a non-empty list of rules", "required")
    rules = tuple(_rule(r, i, env, "config") for i, r in enumerate(rules_doc))
    seen: set[str] = set()
    for i, rule in enumerate(rules):
        if rule.name in seen:
            raise _bad(f"rules[{i}].name", f"{rule.name!r} names two rules (each keeps its own cursor)", "unique")
        seen.add(rule.name)
    cfg_name = str(top.get("name", name))
    try:
        validate_name(f"notify.{cfg_name}")
    except UsageError:
        raise _bad("name", f"1-57 of letters, digits, '.', '_', '-' (got {cfg_name!r})", "name") from None
    base_url = top.get("base_url")
    if base_url is not None and (not isinstance(base_url, str) or urlsplit(base_url).scheme not in ("http", "https")):
        raise _bad("base_url", f"must be an http(s) URL of the dashboard, not {base_url!r}", "url")
    manifests = top.get("manifests", True)
    if not isinstance(manifests, bool):
        raise _bad("manifests", "must be true or false", "type")
    return Config(
        manifests=manifests,
        name=cfg_name,
        rules=rules,
        poll=_seconds(top.get("poll", 1.0), "poll", minimum=0.01),
        base_url=base_url,
        stale_after=_seconds(top.get("stale_after", 60.0), "stale_after", minimum=1.0),
        path=path,
    )


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None) -> Config:
    """Read and check a configuration file (YAML, loaded safely)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"--config: cannot read {p}: {exc.strerror}", field="config", rule="file") from None
    try:
        doc = _yaml.load(data)
    except Corrupt as exc:
        raise UsageError(f"--config: {p} is not YAML: {exc.message}", field="config", rule="yaml") from None
    try:
        return parse_config(doc, name=p.stem, env=env, path=str(p))
    except UsageError as exc:
        raise UsageError(f"{p}: {exc.message}", **exc.context) from None
