"""The JSON Schemas of the MCP tools' arguments and results, and the one check of a call's arguments.

A tool's arguments are checked here against its input schema before the library sees them, so a
wrong type, a missing argument or an oversized string is a ``usage`` error naming the argument
(``field``) and the schema keyword it breaks (``rule``); what only the library knows (an unknown
ticket, a phase the pipeline lacks, a payload against the phase's schema) is the library's error.
The result schemas describe the views of :mod:`phaselog.views.results` (the CLI's JSON without its
envelope): the keys a model can rely on, open to the ones a later version adds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jsonschema

from phaselog.model.errors import UsageError
from phaselog.model.ids import RUN_ID_MAX, TICKET_ID_MAX
from phaselog.model.limits import MAX_ATTEMPT, MAX_PHASE_ORDINAL

#: The longest free text an argument may carry (a comment, a status line, an error message).
MAX_TEXT = 4_000
#: The longest progress output an MCP call may carry (characters; the ledger caps its bytes too).
MAX_OUTPUT_CHARS = 1_000_000

TICKET = {
    "type": "string",
    "minLength": 1,
    "maxLength": TICKET_ID_MAX,
    "description": "The ticket id, e.g. PROJ-1234 (letters, digits, . _ -).",
}
RUN = {
    "type": "string",
    "minLength": 1,
    "maxLength": RUN_ID_MAX,
    "description": "The run id: a UUID, or any name (mapped to the same UUID v5 every time).",
}
PHASE = {
    "type": ["string", "integer"],
    "minLength": 1,
    "maxLength": 200,
    "minimum": 1,
    "maximum": MAX_PHASE_ORDINAL,
    "description": "A phase of the run's pipeline, by name (implement) or ordinal (1).",
}
ATTEMPT = {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPT, "description": "An attempt number (>= 1)."}
TEXT = {"type": "string", "maxLength": MAX_TEXT}
WORKDIR = {
    "type": "string",
    "maxLength": 4096,
    "description": "Folder where the run's artifact files are checked against their recorded hashes "
    "(default: the server's working folder).",
}


def text(description: str, max_length: int = MAX_TEXT) -> dict[str, Any]:
    """A free-text argument of at most ``max_length`` characters."""
    return {"type": "string", "maxLength": max_length, "description": description}


def obj(properties: Mapping[str, Any], required: tuple[str, ...] = (), *, closed: bool = True) -> dict[str, Any]:
    """An object schema (``closed``: no other argument is accepted, so a misspelt one is an error)."""
    out: dict[str, Any] = {"type": "object", "properties": dict(properties), "required": list(required)}
    if closed:
        out["additionalProperties"] = False
    return out


def view(**properties: Any) -> dict[str, Any]:
    """A result schema: these keys are always there, with these types; later keys may be added."""
    return {"type": "object", "properties": properties, "required": list(properties)}


STR, INT, BOOL, ARRAY, OBJECT = ({"type": t} for t in ("string", "integer", "boolean", "array", "object"))
OPT_STR = {"type": ["string", "null"]}

# -- result schemas (the views) ------------------------------------------------------------------------
TICKETS = view(count=INT, tickets=ARRAY)
RUNS = view(ticket_id=STR, count=INT, runs=ARRAY)
STATUS = view(ticket_id=STR, run_id=STR, pipeline=STR, next_phase=OPT_STR, done=BOOL, phases=ARRAY, warnings=ARRAY)
EXPLANATION = view(ticket_id=STR, run_id=STR, pipeline=STR, done=BOOL, next_phase=OPT_STR, to_run=ARRAY, phases=ARRAY)
READ = view(checkpoint=OBJECT, metadata=OBJECT, checkpoint_path=STR, warnings=ARRAY)
VALIDATION = view(
    is_valid=BOOL, errors=ARRAY, warnings=ARRAY, issues=ARRAY, checkpoint=OBJECT, metadata=OBJECT, checkpoint_path=STR
)
LISTING = view(count=INT, checkpoints=ARRAY, failed_attempts=ARRAY, warnings=ARRAY, next_after=OPT_STR)
WRITTEN = view(
    checkpoint_path=STR, run_id=STR, phase=STR, attempt_number=INT, status=STR, content_hash=STR, warnings=ARRAY
)
PROGRESS = view(event=OBJECT)
HISTORY = view(count=INT, history=ARRAY)
DIFFS = view(diffs=ARRAY)
APPROVALS = view(count=INT, approvals=ARRAY, problems=ARRAY)
VERIFY = view(ok=BOOL, checked=INT, problems=ARRAY)
SKIP = view(skip_to=STR, allowed=BOOL, blockers=ARRAY, next_phase=OPT_STR, completed_phases=ARRAY)
JUDGED = view(approval=OBJECT, phase_state=OPT_STR, warnings=ARRAY)
PIPELINE = view(pipeline=OBJECT)
LOGS = view(
    ticket_id=STR,
    run_id=STR,
    phase=STR,
    attempt=INT,
    complete=BOOL,
    total_bytes=INT,
    dropped_bytes=INT,
    damaged=ARRAY,
    text=STR,
)

_QUOTED = re.compile(r"'([^']+)'")


def check_arguments(schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """``arguments`` if they fit ``schema``; else a UsageError naming the first argument that does not."""
    if arguments is None:
        arguments = {}
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is None:
        return dict(arguments)
    path = [str(p) for p in error.absolute_path]
    field = path[0] if path else None
    if field is None and error.validator in ("required", "additionalProperties"):
        names = _QUOTED.findall(error.message)
        field = names[0] if names else None
    where = ".".join(path) or field or "arguments"
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    raise UsageError(f"argument {where}: {message}", field=field, rule=str(error.validator))
