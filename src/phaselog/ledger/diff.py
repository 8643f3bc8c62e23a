"""Differences between two records: attempts (``RUN:PHASE:ATTEMPT``) or progress events
(``RUN:PHASE:ATTEMPT:SEQ``), field by field.

References are parsed strictly: ``3abc`` is not attempt 3 (seed 003 accepted it), numbers are
plain decimal ≥ 1, and the run part goes through the run-id rules before it names anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import UsageError
from phaselog.model.ids import normalize_run_id, run_label

if TYPE_CHECKING:
    from phaselog.model.entries import ProgressEvent
    from phaselog.stores.base import Stored

_NUM = re.compile(r"[1-9][0-9]{0,8}")
_MISSING = object()

CHECKPOINT_FIELDS = (
    "status",
    "error",
    "timestamp_utc",
    "repo_commit_map",
    "artifact_paths",
    "phase_payload",
    "content_hash",
)
EVENT_FIELDS = (
    "event",
    "status",
    "step",
    "provider",
    "tokens",
    "elapsed_sec",
    "output_sha256",
    "output_length",
    "timestamp",
)


@dataclass(frozen=True)
class Ref:
    """A parsed reference to an attempt or one of its progress events."""

    run_id: str
    phase: str
    attempt: int
    seq: int | None = None

    def __str__(self) -> str:
        tail = f":{self.seq}" if self.seq is not None else ""
        return f"{self.run_id}:{self.phase}:{self.attempt}{tail}"


def parse_ref(text: str, *, field: str = "ref") -> Ref:
    """Parse ``RUN:PHASE:ATTEMPT`` or ``RUN:PHASE:ATTEMPT:SEQ``; UsageError if malformed."""
    parts = text.split(":") if isinstance(text, str) else []
    if len(parts) not in (3, 4) or not all(parts):
        raise UsageError(
            f"{field}: {text!r} is not RUN:PHASE:ATTEMPT or RUN:PHASE:ATTEMPT:SEQ", field=field, rule="ref_format"
        )
    run, phase, attempt = parts[0], parts[1], parts[2]
    for name, value in (("attempt", attempt), *((("seq", parts[3]),) if len(parts) == 4 else ())):
        if not _NUM.fullmatch(value):
            raise UsageError(
                f"{field}: {name} must be a whole number >= 1 written in digits only (got {value!r})",
                field=field,
                rule="ref_number",
            )
    if not re.fullmatch(r"[a-z][a-z0-9_]*|[1-9][0-9]*", phase):
        raise UsageError(f"{field}: {phase!r} is not a phase name or ordinal", field=field, rule="ref_phase")
    return Ref(normalize_run_id(run, field=field), phase, int(attempt), int(parts[3]) if len(parts) == 4 else None)


def diff_values(a: Any, b: Any, path: str = "") -> list[dict[str, Any]]:
    """Field-level differences between two JSON values (recursing into objects and lists)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out: list[dict[str, Any]] = []
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            va, vb = a.get(key, _MISSING), b.get(key, _MISSING)
            if va is _MISSING:
                out.append({"field": sub, "change": "added", "b": vb})
            elif vb is _MISSING:
                out.append({"field": sub, "change": "removed", "a": va})
            else:
                out.extend(diff_values(va, vb, sub))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if a == b:
            return []
        if all(not isinstance(x, dict | list) for x in [*a, *b]):
            added = [x for x in b if x not in a]
            removed = [x for x in a if x not in b]
            change: dict[str, Any] = {"field": path, "change": "changed", "a": a, "b": b}
            if added:
                change["added"] = added
            if removed:
                change["removed"] = removed
            return [change]
        out = []
        for i in range(max(len(a), len(b))):
            sub = f"{path}[{i}]"
            if i >= len(a):
                out.append({"field": sub, "change": "added", "b": b[i]})
            elif i >= len(b):
                out.append({"field": sub, "change": "removed", "a": a[i]})
            else:
                out.extend(diff_values(a[i], b[i], sub))
        return out
    if a == b and type(a) is type(b):
        return []
    return [{"field": path, "change": "changed", "a": a, "b": b}]


def diff_fields(a: Mapping[str, Any], b: Mapping[str, Any], fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """Differences restricted to ``fields`` (in that order)."""
    out: list[dict[str, Any]] = []
    for f in fields:
        out.extend(diff_values({f: a.get(f)}, {f: b.get(f)}))
    return out


def checkpoint_view(
    stored: Stored, label: str, events: Sequence[ProgressEvent], run_name: str | None = None
) -> dict[str, Any]:
    """What a diff compares of an attempt: its seed fields, status, error, hash, and a summary of
    its last progress event (``events``: the attempt's, by sequence number). ``run_name``: the
    run's name (:func:`phaselog.model.ids.run_name_of`), shown with the diff."""
    cp = stored.record
    view = {
        **cp.seed_dict(),
        "status": cp.status,
        "error": cp.error,
        "content_hash": cp.content_hash,
        "ref": label,
        "run_name": run_name,
    }
    if events:
        last = events[-1]
        view["progress"] = {
            "elapsed_sec": last.elapsed_sec,
            "tokens": last.tokens,
            "output_sha256": last.output_sha256,
            "output_length": last.output_length,
        }
    else:
        view["progress"] = None
    return view


def event_view(event: ProgressEvent, label: str, run_name: str | None = None) -> dict[str, Any]:
    """What a diff compares of a progress event."""
    return {**event.to_json(), "ref": label, "run_name": run_name}


def compare(a: Mapping[str, Any], b: Mapping[str, Any], *, events: bool) -> dict[str, Any]:
    """The diff result of two views (:func:`checkpoint_view`, or :func:`event_view` with ``events``)."""
    changes = diff_fields(a, b, EVENT_FIELDS if events else (*CHECKPOINT_FIELDS, "progress"))
    return {
        "a": a["ref"],
        "b": b["ref"],
        "a_run_name": a.get("run_name"),
        "b_run_name": b.get("run_name"),
        "identical": not changes,
        "changes": changes,
    }


def shown_ref(ref: str, run_name: str | None) -> str:
    """A reference as people read it: its run by name (``nightly-1:implement:2``), else as it is."""

    run, sep, rest = ref.partition(":")
    return f"{run_label(run, run_name)}{sep}{rest}"


def render_text(result: Mapping[str, Any]) -> str:
    """A readable rendering of one diff result."""
    a, b = shown_ref(result["a"], result.get("a_run_name")), shown_ref(result["b"], result.get("b_run_name"))
    lines = [f"--- {a}", f"+++ {b}"]
    if not result["changes"]:
        lines.append("(identical)")
    for c in result["changes"]:
        if c["change"] == "added":
            lines.append(f"+ {c['field']}: {c['b']!r}")
        elif c["change"] == "removed":
            lines.append(f"- {c['field']}: {c['a']!r}")
        else:
            lines.append(f"~ {c['field']}: {c['a']!r} → {c['b']!r}")
            for x in c.get("added", []):
                lines.append(f"    + {x!r}")
            for x in c.get("removed", []):
                lines.append(f"    - {x!r}")
    return "\n".join(lines)
