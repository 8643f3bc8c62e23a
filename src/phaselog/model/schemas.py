"""Payload schemas: a phase's JSON Schema (Draft 2020-12) checked and applied to a payload.

jsonschema costs ~60 ms to import and fastjsonschema compiles each schema: both are imported on
first use, inside the functions below. A schema that uses only keywords whose meaning is the same in
Draft 7 is checked by fastjsonschema first (the happy path, ~8x cheaper); a payload it refuses goes
to jsonschema, which names every problem.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from phaselog.model.errors import PipelineError

Problem = tuple[str, str, str]  # (field path, rule, message)


def schema_problems(schema_json: str, ordinal: int, phase: str, payload: Any, prefix: str) -> list[Problem]:
    """Every problem of ``payload`` against the schema of phase ``phase`` (at ``ordinal``); none when valid."""
    validator = schema_validator(schema_json, ordinal)  # cached; checks the schema itself on first use
    fast = _fast_validator(schema_json)
    if fast is not None:
        import fastjsonschema  # lazy: compiled schemas only where a payload is checked

        try:
            fast(payload)
            return []  # valid: the common case, ~8x cheaper than jsonschema's full walk
        except fastjsonschema.JsonSchemaException:
            pass  # invalid: let jsonschema name every problem
    from referencing.exceptions import Unresolvable  # lazy: part of jsonschema (below)

    try:
        errors = sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path))
    except (Unresolvable, RecursionError) as exc:
        # A $ref that points nowhere, or a cycle of $refs that never reaches a schema: the
        # manifest is broken, not the payload.
        what = "a cycle of $ref that never resolves" if isinstance(exc, RecursionError) else f"{exc}"
        raise PipelineError(
            f"phase {phase}: payload_schema has an unusable $ref ({what[:200]}); fix the pipeline manifest",
            field=f"phases[{ordinal - 1}].payload_schema",
            rule="schema_ref",
        ) from None
    problems: list[Problem] = []
    for err in errors:
        path = ".".join([prefix, *(str(p) for p in err.absolute_path)])
        rule = err.validator if err.validator != "format" else f"format:{err.validator_value}"
        problems.append((path, str(rule), _message(err)))
    return problems


def _format_checker() -> Any:
    import jsonschema  # lazy: ~60 ms to import, only where a payload or schema is checked

    from phaselog.model.formats import CHECKERS  # lazy: its patterns only where a payload is checked

    checker = jsonschema.FormatChecker(formats=())
    for fmt, fn in CHECKERS.items():
        checker.checks(fmt)(_as_bool(fn))
    return checker


def _as_bool(fn: Any) -> Any:
    def check(value: object) -> bool:
        return not isinstance(value, str) or fn(value) is None

    return check


@cache
def schema_validator(schema_json: str, ordinal: int) -> Any:
    """The Draft 2020-12 validator of a payload schema (cached); PipelineError when it is no JSON Schema."""
    where = f"phases[{ordinal - 1}].payload_schema"
    return checked_validator(schema_json, where, where, formats=True)


def checked_validator(schema_json: str, what: str, field: str, *, formats: bool) -> Any:
    """A Draft 2020-12 validator of ``schema_json`` (``formats``: with the format checker);
    PipelineError naming ``field`` when it is no JSON Schema (``what`` leads the message)."""
    from jsonschema import Draft202012Validator  # lazy: as above
    from jsonschema.exceptions import SchemaError  # lazy: as above

    schema = json.loads(schema_json)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise PipelineError(
            f"{what} is not a valid JSON Schema (Draft 2020-12): {exc.message}", field=field, rule="json_schema"
        ) from None
    return Draft202012Validator(schema, format_checker=_format_checker() if formats else None)


# Keywords whose meaning is the same in Draft 7 (fastjsonschema) and Draft 2020-12 (jsonschema).
# A schema using only these is checked by fastjsonschema first; anything else goes to jsonschema.
_FAST_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "enum", "const", "minimum", "maximum"}
    | {"exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems"}
    | {"uniqueItems", "format", "description", "title", "default", "examples", "items"}
)


def _fast_safe(schema: Any) -> bool:
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict) or not set(schema) <= _FAST_KEYWORDS:
        return False
    if "items" in schema and not isinstance(schema["items"], dict | bool):
        return False  # tuple-form items differ between drafts
    subs = [*(schema.get("properties") or {}).values()]
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            subs.append(schema[key])
    return all(_fast_safe(s) for s in subs)


@cache
def _fast_validator(schema_json: str) -> Any:
    """A compiled fastjsonschema validator for the happy path, or None when not applicable."""
    schema = json.loads(schema_json)
    if not _fast_safe(schema):
        return None
    try:
        import fastjsonschema  # lazy: as above

        from phaselog.model.formats import CHECKERS  # lazy: its patterns only where a payload is checked

        return fastjsonschema.compile(schema, formats={k: _as_bool(f) for k, f in CHECKERS.items()})
    except Exception:
        return None


def _message(err: Any) -> str:
    if err.validator == "format":
        from phaselog.model.formats import CHECKERS  # lazy: its patterns only where a payload is checked

        fn = CHECKERS.get(err.validator_value)
        if fn is not None and isinstance(err.instance, str):
            reason = fn(err.instance)
            if reason:
                return reason
    if err.validator == "additionalProperties":
        return f"{err.message} (this phase's payload allows only the keys its schema lists)"
    return str(err.message)


__all__ = ["Problem", "schema_problems", "schema_validator"]
