"""A manifest's ``notify:`` hooks: which of a pipeline's (or a phase's) events go where.

The manifest checks their shape (a list of rules: ``events`` of known types, exactly one of
``webhook`` and ``command``, no unknown key); the deliverer checks the rest when it starts
(``phaselog.notify.config``: the URL's scheme, the secret's variable, the template), since a
writer loading a manifest has no reason to hold the deliverer's secrets. See docs/pipelines.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from phaselog.model.errors import PipelineError
from phaselog.model.events import TYPES

__all__ = ["HOOK_KEYS", "check_hooks"]

#: The keys of one hook (the config file's rule keys, less the filters the manifest implies).
HOOK_KEYS = frozenset({"name", "events", "tickets", "from", "webhook", "command"})


def check_hooks(value: Any, where: str, at: str) -> tuple[Mapping[str, Any], ...]:
    """The hooks of ``at`` (``notify`` or ``phases[i].notify``) as given; PipelineError naming the key."""

    def bad(key: str, message: str, rule: str) -> PipelineError:
        return PipelineError(f"{where}: {key} {message}", field=key, rule=rule)

    if not isinstance(value, Sequence) or isinstance(value, str):
        raise bad(at, "must be a list of hooks (each: events, and a webhook or a command)", "type")
    out = []
    for i, hook in enumerate(value):
        key = f"{at}[{i}]"
        if not isinstance(hook, Mapping):
            raise bad(key, "must be a mapping (events, and a webhook or a command)", "type")
        unknown = sorted(set(hook) - HOOK_KEYS)
        if unknown:
            raise bad(
                f"{key}.{unknown[0]}", f"is not a hook key (known: {', '.join(sorted(HOOK_KEYS))})", "unknown_key"
            )
        events = hook.get("events")
        if not isinstance(events, Sequence) or isinstance(events, str) or not events:
            raise bad(f"{key}.events", "must be a non-empty list of event types", "required")
        wrong = sorted(str(e) for e in events if e not in TYPES)
        if wrong:
            raise bad(f"{key}.events", f"unknown event type {wrong[0]!r} (known: {', '.join(TYPES)})", "event_type")
        if sum(k in hook for k in ("webhook", "command")) != 1:
            raise bad(key, "needs exactly one destination: webhook or command", "destination")
        out.append(dict(hook))
    return tuple(out)
