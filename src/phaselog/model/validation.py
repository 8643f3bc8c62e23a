"""Validation: seed 000's structural checks plus payload schemas and hash links.

Rules and severities (docs/cli.md lists them with examples):

=====================  ========  ==========================================================
rule                   severity  what
=====================  ========  ==========================================================
schema_version         warning   not the current ``1.0.0`` (a newer major cannot be read)
unknown_field          error     a top-level key the seed contract does not have
ticket_id / run_id     error     identifier rules (see :mod:`phaselog.model.ids`)
unknown_phase          error     the phase is not in the run's pipeline
attempt_number         error     must be an integer >= 1
git-sha                error     ``repo_commit_map`` values: 7-40 lowercase hex
relative-path          error     ``artifact_paths``: relative, normalised, no ``..``
phase_payload_agreement error    ``phase_payload.phase`` must equal ``phase``
payload_schema         error     the payload against the phase's JSON Schema
timestamp_future       warning   more than 60 s in the future
failed_error           error     a failed attempt must say why
prev_hash / basis      error     links to earlier records must match what is stored
timestamp_order        warning   an attempt older than the attempt before it
artifact_missing       error     with an artifacts root: every path must exist under it
=====================  ========  ==========================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from phaselog.model import formats
from phaselog.model._json import lists_and_dicts
from phaselog.model.artifacts import changed_artifacts
from phaselog.model.errors import PhaselogError, UnknownPhase
from phaselog.model.ids import given_run_name, is_canonical_uuid, normalize_run_id, validate_ticket_id
from phaselog.model.pipelines import Pipeline
from phaselog.model.records import SCHEMA_VERSION, SEED_FIELDS, Checkpoint

FUTURE_TOLERANCE = timedelta(seconds=60)


@dataclass(frozen=True)
class Issue:
    """One finding: the field path, the rule broken, and what to do."""

    severity: Literal["error", "warning"]
    field: str
    rule: str
    message: str

    def text(self) -> str:
        """Render as ``field: message [rule]``."""
        return f"{self.field}: {self.message} [{self.rule}]"

    def to_json(self) -> dict[str, str]:
        """Return the JSON form."""
        return {"severity": self.severity, "field": self.field, "rule": self.rule, "message": self.message}


@dataclass
class Report:
    """Errors and warnings of one validation."""

    issues: list[Issue] = field(default_factory=list)

    @property
    def errors(self) -> list[Issue]:
        """Error-level findings."""
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        """Warning-level findings."""
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def is_valid(self) -> bool:
        """True when there is no error."""
        return not self.errors

    def error(self, path: str, rule: str, message: str) -> None:
        """Add an error."""
        self.issues.append(Issue("error", path, rule, message))

    def warn(self, path: str, rule: str, message: str) -> None:
        """Add a warning."""
        self.issues.append(Issue("warning", path, rule, message))

    def extend(self, other: Report) -> Report:
        """Add every finding of ``other``; return self."""
        self.issues.extend(other.issues)
        return self


def _names_run(name: str, run_id: str) -> bool:
    """True when ``name`` is a run name (not a UUID) that maps to ``run_id``."""
    try:
        return given_run_name(name) is not None and normalize_run_id(name, field="run_name") == run_id
    except PhaselogError:
        return False


def check_record(cp: Checkpoint, pipeline: Pipeline, *, now: datetime | None = None) -> Report:
    """Check what a record says on its own (no store access)."""
    rep = Report()
    if cp.schema_version != SCHEMA_VERSION:
        rep.warn(
            "schema_version",
            "schema_version",
            f"{cp.schema_version} differs from the current {SCHEMA_VERSION}",
        )
    for key in cp.unknown_fields:
        rep.error(
            key,
            "unknown_field",
            f"not a field of the checkpoint contract ({', '.join(SEED_FIELDS)}); "
            "the seed tool refuses files with unknown keys",
        )
    try:
        validate_ticket_id(cp.ticket_id)
    except PhaselogError as exc:
        rep.error("ticket_id", str(exc.context.get("rule", "ticket_id")), exc.message)
    if not is_canonical_uuid(cp.run_id):
        rep.error("run_id", "run_id", f"must be a lowercase hyphenated UUID (got {cp.run_id!r})")
    if cp.run_name is not None and not _names_run(cp.run_name, cp.run_id):
        rep.error("run_name", "run_name", f"{cp.run_name[:80]!r} is not a name whose UUID v5 is run {cp.run_id}")
    phase = None
    try:
        phase = pipeline.phase(cp.phase)
    except UnknownPhase as exc:
        rep.error("phase", "unknown_phase", exc.message)
    if phase is not None and phase.ordinal != cp.phase_ordinal:
        rep.error(
            "phase",
            "phase_ordinal",
            f"{cp.phase} is phase {phase.ordinal} of {pipeline.name}, but the record says {cp.phase_ordinal}",
        )
    if cp.attempt_number < 1:
        rep.error("attempt_number", "attempt_number", f"must be >= 1 (got {cp.attempt_number})")
    for repo, sha in cp.repo_commit_map.items():
        if not repo:
            rep.error("repo_commit_map", "repo_name", "repo names must not be empty")
        reason = formats.git_sha(sha)
        if reason:
            rep.error(f"repo_commit_map.{repo}", "git-sha", reason)
    seen: set[str] = set()
    for i, path in enumerate(cp.artifact_paths):
        reason = formats.relative_path(path)
        if reason:
            rep.error(f"artifact_paths[{i}]", "relative-path", reason)
        elif path in seen:
            rep.warn(f"artifact_paths[{i}]", "duplicate_path", f"{path!r} is listed twice")
        seen.add(path)
    now = now or datetime.now(UTC)
    if cp.timestamp_utc - now > FUTURE_TOLERANCE:
        rep.warn(
            "timestamp_utc",
            "timestamp_future",
            f"{cp.timestamp_utc.isoformat()} is more than 60 s in the future; check the clock",
        )
    _check_decisions(cp, rep)
    if cp.completed:
        _check_payload(cp, phase, rep)
    else:
        if not cp.error:
            rep.error("error", "failed_error", "a failed attempt must say why it failed")
        if cp.phase_payload is not None:
            _check_payload_phase(cp, rep)
    return rep


_DECISION_KEYS = ("decision_id", "category", "subject", "options_considered", "selected", "reason")
_OPTION_KEYS = ("option_id", "label", "score", "reason")


def _check_decisions(cp: Checkpoint, rep: Report) -> None:
    """Seed 002's decision log entries: ids, options considered, the selected option."""
    seen: set[str] = set()
    for i, d in enumerate(cp.decisions):
        at = f"decisions[{i}]"
        for key in ("decision_id", "category", "subject", "selected", "reason"):
            value = d.get(key)
            if not isinstance(value, str) or not value.strip():
                rep.error(f"{at}.{key}", "required", "must be a non-empty string")
        for key in d:
            if key not in _DECISION_KEYS:
                rep.error(f"{at}.{key}", "unknown_field", f"not a decision field ({', '.join(_DECISION_KEYS)})")
        did = d.get("decision_id")
        if isinstance(did, str):
            if did in seen:
                rep.error(f"{at}.decision_id", "duplicate", f"{did!r} appears twice in this checkpoint")
            seen.add(did)
        options = d.get("options_considered", [])
        if not isinstance(options, list | tuple):
            rep.error(f"{at}.options_considered", "type", "must be a list of options")
            continue
        ids = []
        for j, opt in enumerate(options):
            oat = f"{at}.options_considered[{j}]"
            if not isinstance(opt, Mapping):
                rep.error(oat, "type", "must be an object with option_id, label, score, reason")
                continue
            for key in ("option_id", "label"):
                if not isinstance(opt.get(key), str) or not opt.get(key):
                    rep.error(f"{oat}.{key}", "required", "must be a non-empty string")
            score = opt.get("score")
            if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
                rep.error(f"{oat}.score", "type", "must be a number")
            if opt.get("reason") is not None and not isinstance(opt.get("reason"), str):
                rep.error(f"{oat}.reason", "type", "must be a string")
            for key in opt:
                if key not in _OPTION_KEYS:
                    rep.error(f"{oat}.{key}", "unknown_field", f"not an option field ({', '.join(_OPTION_KEYS)})")
            ids.append(opt.get("option_id"))
        selected = d.get("selected")
        if ids and isinstance(selected, str) and selected not in ids:
            rep.error(f"{at}.selected", "selected_option", f"{selected!r} is not one of the options considered {ids}")


def _check_payload_phase(cp: Checkpoint, rep: Report) -> None:
    payload = cp.phase_payload or {}
    declared = payload.get("phase")
    if declared != cp.phase:
        rep.error(
            "phase_payload.phase",
            "phase_payload_agreement",
            f"must equal the checkpoint's phase {cp.phase!r} (got {declared!r})",
        )


def _check_payload(cp: Checkpoint, phase: Any, rep: Report) -> None:
    if cp.phase_payload is None:
        rep.error("phase_payload", "required", "a completed checkpoint needs a payload")
        return
    _check_payload_phase(cp, rep)
    if phase is not None:
        payload = user_payload(phase.payload_schema, lists_and_dicts(cp.phase_payload))
        for path, rule, message in phase.check_payload(payload):
            rep.error(path, f"payload_schema:{rule}", message)


def user_payload(schema: Any, payload: Any) -> Any:
    """The payload as its author wrote it: without the ``phase`` key phaselog adds for the seed file,
    unless the schema itself speaks of ``phase`` (then the author validates it, as the built-ins do)."""
    if not isinstance(payload, dict) or "phase" not in payload or not isinstance(schema, Mapping):
        return payload
    props = schema.get("properties")
    required = schema.get("required")
    if (isinstance(props, Mapping) and "phase" in props) or (isinstance(required, list) and "phase" in required):
        return payload
    return {k: v for k, v in payload.items() if k != "phase"}


def check_links(
    cp: Checkpoint,
    *,
    previous: Checkpoint | None,
    lookup: Mapping[tuple[str, int], Checkpoint | None],
    pruned: Mapping[tuple[str, int], Any] | None = None,
    quarantined: Mapping[tuple[str, int], str | None] | None = None,
) -> Report:
    """Check ``prev_hash`` and ``basis`` against stored records, and timestamp order.

    ``previous`` is the newest stored attempt before ``cp`` in its phase (None if none);
    ``lookup`` maps (phase name, attempt) to the stored record for every basis entry (None: not
    found); ``pruned`` maps (phase name, attempt) to what the run's prune notes say was removed
    (anything with ``content_hash``). A link to a pruned record is checked against the note's
    hash exactly as it would be against the record: a prune never leaves a link unchecked.
    ``quarantined`` maps (phase name, attempt) to the hash a record ``doctor --quarantine`` moved
    aside carried (None: unknown): a link to it is a warning that says so (D115), not damage.
    """
    rep = Report()
    pruned = pruned or {}
    quarantined = quarantined or {}
    if previous is not None and cp.timestamp_utc < previous.timestamp_utc:
        rep.warn(
            "timestamp_utc",
            "timestamp_order",
            f"attempt {cp.attempt_number} is older than attempt {previous.attempt_number} "
            f"({previous.timestamp_utc.isoformat()})",
        )
    if not cp.has_metadata:
        return rep  # a seed-tool checkpoint carries no links
    gone = [
        a
        for (ph, a) in pruned
        if ph == cp.phase and a < cp.attempt_number and (previous is None or a > previous.attempt_number)
    ]
    if gone:
        note = pruned[(cp.phase, max(gone))]
        if cp.prev_hash != note.content_hash:
            rep.error(
                "prev_hash",
                "prev_hash",
                f"does not match attempt {max(gone)}, which was pruned (recorded {_short(cp.prev_hash)}, the prune "
                f"note says {_short(note.content_hash)}): this record or the note changed after they were written",
            )
    elif (moved := _quarantined_prev(cp, previous, quarantined)) is not None:
        rep.warn(
            "prev_hash",
            "prev_quarantined",
            f"links to attempt {moved} of {cp.phase}, which `doctor --quarantine` moved aside (D18)",
        )
    elif previous is None:
        if cp.prev_hash is not None:
            rep.error("prev_hash", "prev_hash", "names a previous attempt, but none is stored or recorded as pruned")
    elif cp.prev_hash != previous.content_hash:
        rep.error(
            "prev_hash",
            "prev_hash",
            f"does not match attempt {previous.attempt_number} "
            f"(recorded {_short(cp.prev_hash)}, stored record hashes to "
            f"{_short(previous.content_hash)}): an earlier attempt changed after this one was written",
        )
    for name, entry in sorted((cp.basis or {}).items()):
        target = lookup.get((name, entry.attempt))
        gone_target = pruned.get((name, entry.attempt)) if target is None else None
        moved = (name, entry.attempt) in quarantined and quarantined[(name, entry.attempt)] in (None, entry.hash)
        if moved and (target is None or target.content_hash != entry.hash):
            now = (
                f"; attempt {entry.attempt} of {name} is now a newer record (hash {_short(target.content_hash)}) "
                "that took the freed number, so this phase is stale, not tampered with"
                if target is not None
                else ""
            )
            rep.warn(
                f"basis.{name}",
                "basis_quarantined",
                f"built on attempt {entry.attempt} of {name} with hash {_short(entry.hash)}, which "
                f"`doctor --quarantine` moved aside as damaged (D18){now}",
            )
        elif target is None and gone_target is not None:
            if gone_target.content_hash != entry.hash:
                rep.error(
                    f"basis.{name}",
                    "basis",
                    f"built on attempt {entry.attempt} of {name} with hash {_short(entry.hash)}, but the prune "
                    f"note says it hashed to {_short(gone_target.content_hash)}",
                )
        elif target is None:
            rep.error(
                f"basis.{name}",
                "basis",
                f"built on attempt {entry.attempt} of {name}, which is not stored (or damaged)",
            )
        elif target.content_hash != entry.hash:
            rep.error(
                f"basis.{name}",
                "basis",
                f"built on attempt {entry.attempt} of {name} with hash {_short(entry.hash)}, "
                f"but it now hashes to {_short(target.content_hash)}: it changed after this was written",
            )
    return rep


def check_artifacts(cp: Checkpoint, root: str | os.PathLike[str]) -> Report:
    """Check that every artifact exists under ``root`` (without leaving it) and, when the
    checkpoint recorded their SHA-256 at write time, that each still has that hash."""
    rep = Report()
    base = Path(root).resolve()
    if not base.is_dir():
        rep.error("artifacts_root", "artifacts_root", f"{root} is not a folder; cannot check the artifacts")
        return rep
    for i, rel in enumerate(cp.artifact_paths):
        if formats.relative_path(rel):
            continue  # already an error of its own
        target = (base / rel).resolve()
        if not target.is_relative_to(base):
            rep.error(f"artifact_paths[{i}]", "artifact_outside_root", f"{rel!r} resolves outside {base}")
        elif not target.exists():
            rep.error(f"artifact_paths[{i}]", "artifact_missing", f"{rel!r} does not exist under {base}")
    if cp.artifact_hashes:
        index = {rel: i for i, rel in enumerate(cp.artifact_paths)}
        for rel, rule, message in changed_artifacts(base, cp.artifact_hashes):
            if rule == "artifact_changed" or rel not in index:
                rep.error(f"artifact_paths[{index.get(rel, '?')}]", rule, message)
    return rep


def _short(h: str | None) -> str:
    return "null" if h is None else h[:12]


def _quarantined_prev(
    cp: Checkpoint, previous: Checkpoint | None, quarantined: Mapping[tuple[str, int], str | None]
) -> int | None:
    """The quarantined attempt ``cp.prev_hash`` names, when it no longer matches a stored one (else None)."""
    if cp.prev_hash is None or (previous is not None and cp.prev_hash == previous.content_hash):
        return None
    low = previous.attempt_number if previous is not None else 0
    for (ph, a), h in sorted(quarantined.items(), key=lambda kv: -kv[0][1]):
        if ph == cp.phase and low <= a < cp.attempt_number and h in (None, cp.prev_hash):
            return a
    return None
