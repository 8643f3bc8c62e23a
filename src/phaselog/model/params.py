"""Run parameters: a manifest's ``params`` schema, the values a run is given, checked and typed.

A manifest declares ``params`` as a JSON Schema object (Draft 2020-12)::

    params:
      type: object
      properties:
        date: {type: string, format: date}
        limit: {type: integer, minimum: 1, default: 100}
      required: [date]

A run's parameters are the values given (``--param date=2026-11-30``, ``--params-file``,
``pipe.run(params=...)``) over the schema's defaults, checked against it before anything runs.
``--param`` values are text, typed by the schema (``"3"`` is 3 for an integer parameter). The
effective parameters are recorded in the run's checkpoints (``params`` in the phaselog part, D260).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from phaselog.model._lazyre import LazyPattern
from phaselog.model.errors import PipelineError, UsageError
from phaselog.model.schemas import checked_validator

_NAME_RE = LazyPattern(r"[a-z][a-z0-9_]{0,62}")
#: The canonical JSON of a run's parameters is at most this long (they ride in every record).
MAX_PARAMS_BYTES = 64 * 1024


def check_params_schema(raw: Any, where: str) -> dict[str, Any]:
    """The ``params`` of a manifest, checked: a JSON Schema object whose properties are the parameters."""
    if not isinstance(raw, Mapping):
        raise PipelineError(f"{where}: params must be a JSON Schema object", field="params", rule="type")
    schema = dict(raw)
    if schema.get("type", "object") != "object":
        raise PipelineError(f"{where}: params must have type: object", field="params.type", rule="type")
    props = schema.get("properties", {})
    if not isinstance(props, Mapping):
        raise PipelineError(f"{where}: params.properties must be a mapping", field="params.properties", rule="type")
    for name, sub in props.items():
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise PipelineError(
                f"{where}: parameter name {name!r} must match [a-z][a-z0-9_]* (it names PHASELOG_PARAM_<NAME>)",
                field=f"params.properties.{name}",
                rule="name",
            )
        if not isinstance(sub, Mapping | bool):
            raise PipelineError(
                f"{where}: params.properties.{name} must be a JSON Schema", field=f"params.properties.{name}"
            )
    required = schema.get("required", [])
    if not isinstance(required, list) or any(r not in props for r in required):
        raise PipelineError(
            f"{where}: params.required must list names of params.properties", field="params.required", rule="required"
        )
    schema.setdefault("type", "object")
    schema.setdefault("additionalProperties", False)  # an unknown name is an error, not ignored
    # Checked against the metaschema by check_metaschema (before a run), not here: reading records
    # of such a pipeline must not pay for jsonschema.
    return schema


def params_of(doc: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """A manifest's ``params``, checked (None: not declared)."""
    return check_params_schema(doc["params"], where) if doc.get("params") is not None else None


def check_metaschema(schema: Mapping[str, Any] | None, where: str) -> None:
    """PipelineError when ``params`` is no JSON Schema (Draft 2020-12); nothing to check for None."""
    if schema is not None:
        _validator(json.dumps(dict(schema), sort_keys=True), where)


@cache
def _validator(schema_json: str, where: str) -> Any:
    return checked_validator(schema_json, f"{where}: params", "params", formats=False)


def _types(sub: Any) -> list[str]:
    kind = sub.get("type") if isinstance(sub, Mapping) else None
    if isinstance(kind, str):
        return [kind]
    return [k for k in kind if isinstance(k, str)] if isinstance(kind, list) else []


def coerce(schema: Mapping[str, Any] | None, name: str, text: str) -> Any:
    """A ``--param name=text`` value typed by the parameter's schema; UsageError naming it."""
    props = (schema or {}).get("properties", {})
    if name not in props:
        raise unknown(schema, [name])
    kinds = _types(props[name])
    for kind in kinds or ["json", "string"]:
        value = _as(kind, text)
        if value is not _NO:
            return value
    raise UsageError(
        f"parameter {name}: {text!r} is not {' or '.join(f'a {k}' if k != 'integer' else 'an integer' for k in kinds)}",
        field=f"params.{name}",
        rule="type",
    )


_NO = object()


def _as(kind: str, text: str) -> Any:
    if kind == "string":
        return text
    if kind == "boolean":
        return {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}.get(text.lower(), _NO)
    if kind == "null":
        return None if text in ("null", "") else _NO
    try:
        value = json.loads(text)
    except ValueError:
        return _NO
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
        ok = ok or (isinstance(value, float) and value.is_integer())
        return int(value) if ok else _NO
    if kind == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else _NO
    wanted = {"array": list, "object": dict}.get(kind)
    return value if wanted is None or isinstance(value, wanted) else _NO


def unknown(schema: Mapping[str, Any] | None, names: Sequence[str]) -> UsageError:
    """The error for parameters the pipeline does not declare."""
    props = sorted((schema or {}).get("properties", {}))
    valid = f"it declares: {', '.join(props)}" if props else "it declares no params"
    return UsageError(
        f"unknown parameter {', '.join(sorted(names))} ({valid})", field=f"params.{sorted(names)[0]}", rule="unknown"
    )


def parse_pairs(schema: Mapping[str, Any] | None, pairs: Sequence[str]) -> dict[str, Any]:
    """``--param key=value`` pairs (repeatable) typed by the schema."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, eq, text = pair.partition("=")
        if not eq or not name:
            raise UsageError(f"--param takes key=value (got {pair!r})", field="param", rule="key_value")
        out[name.strip()] = coerce(schema, name.strip(), text)
    return out


def from_cli(schema: Mapping[str, Any] | None, pairs: Sequence[str], file: str | None) -> dict[str, Any] | None:
    """``--params-file F.json`` (a JSON object), then ``--param key=value`` over it; None: neither given."""
    if not pairs and file is None:
        return None
    given: dict[str, Any] = {}
    if file is not None:
        from phaselog.model.limits import read_file_bounded  # lazy: only when a params file is given

        try:
            doc = json.loads(read_file_bounded(Path(file), MAX_PARAMS_BYTES, what=f"--params-file {file}"))
        except OSError as exc:
            raise UsageError(f"--params-file {file}: {exc.strerror}", field="params_file", rule="read") from None
        except ValueError as exc:
            raise UsageError(f"--params-file {file}: not JSON: {exc}", field="params_file", rule="json") from None
        if not isinstance(doc, dict):
            raise UsageError(f"--params-file {file}: must hold a JSON object", field="params_file", rule="type")
        given.update(doc)
    given.update(parse_pairs(schema, pairs))
    return given


def resolve(schema: Mapping[str, Any] | None, given: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The run's effective parameters (the schema's defaults, then ``given``), checked; None when the
    pipeline declares no params and none are given. UsageError naming the first bad parameter."""
    given = dict(given or {})
    if any(not isinstance(k, str) for k in given):
        raise UsageError("parameter names must be strings", field="params", rule="type")
    if schema is None:
        if given:
            raise unknown(None, list(given))
        return None
    props = schema.get("properties", {})
    extra = [k for k in given if k not in props]
    if extra:
        raise unknown(schema, extra)
    values = {k: sub["default"] for k, sub in props.items() if isinstance(sub, Mapping) and "default" in sub}
    values.update(given)
    missing = [r for r in schema.get("required", []) if r not in values]
    if missing:
        raise UsageError(
            f"missing required parameter {', '.join(missing)} (give it with --param {missing[0]}=VALUE)",
            field=f"params.{missing[0]}",
            rule="required",
        )
    errors = sorted(
        _validator(json.dumps(schema, sort_keys=True), "params").iter_errors(values),
        key=lambda e: list(e.absolute_path),
    )
    if errors:
        err = errors[0]
        path = ".".join(str(p) for p in err.absolute_path)
        raise UsageError(
            f"parameter {path or '(all)'}: {err.message}",
            field=f"params.{path}" if path else "params",
            rule=str(err.validator),
        )
    try:
        size = len(json.dumps(values, sort_keys=True, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"parameters must be JSON: {exc}", field="params", rule="json") from None
    if size > MAX_PARAMS_BYTES:
        raise UsageError(
            f"parameters are {size} bytes as JSON; at most {MAX_PARAMS_BYTES}", field="params", rule="size"
        )
    return values


def differences(recorded: Mapping[str, Any] | None, given: Mapping[str, Any] | None) -> list[str]:
    """What differs between a run's recorded parameters and the ones a rerun gives, one line each."""
    old, new = dict(recorded or {}), dict(given or {})
    out = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            out.append(f"{name}: recorded {json.dumps(old[name])}, not given now")
        elif name not in old:
            out.append(f"{name}: not recorded, given {json.dumps(new[name])}")
        elif json.dumps(old[name], sort_keys=True) != json.dumps(new[name], sort_keys=True):
            out.append(f"{name}: recorded {json.dumps(old[name])}, given {json.dumps(new[name])}")
    return out


def env_name(name: str) -> str:
    """``PHASELOG_PARAM_<NAME>`` for parameter ``name``."""
    return f"PHASELOG_PARAM_{name.upper()}"


def env_value(value: Any) -> str:
    """A parameter as an environment variable: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


__all__ = ["MAX_PARAMS_BYTES", "check_params_schema", "coerce", "differences", "env_name", "env_value"]
