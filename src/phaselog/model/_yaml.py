"""YAML exactly as the seed tool writes it, and loaded safely.

The seed tool writes ``yaml.safe_dump(data, sort_keys=False, allow_unicode=True,
default_flow_style=False)``. ``dump`` produces the same bytes. For the common shape of a
checkpoint (plain keys, simple strings, ints, bools, nested mappings and lists) a small emitter
writes them directly, because PyYAML's emitter costs about as much as the durable write itself;
anything outside that shape goes to PyYAML. ``tests/test_yaml.py`` checks with hypothesis that
both paths give identical bytes, and PyYAML's own resolver decides which strings need quotes.

``load`` refuses what a checkpoint never contains: tags, anchors/aliases (alias bombs), more than
``MAX_DEPTH`` levels of nesting, and non-string mapping keys.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from phaselog.model._json import lists_and_dicts
from phaselog.model.errors import Corrupt

try:  # libyaml is present in PyYAML wheels; fall back to pure Python where it is not.
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on the PyYAML build
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

# Writing must use the pure-Python SafeDumper, as the seed's yaml.safe_dump does: libyaml's
# emitter gives other bytes (it escapes astral characters such as emoji, measures simple keys
# in bytes rather than characters, and writes an empty key and U+0085 differently).
_Dumper = yaml.SafeDumper

MAX_DEPTH = 64

# Strings the fast path may emit: a conservative subset of what PyYAML writes plain in block
# context. No spaces, no flow/indicator characters at the start, no line breaks, no ':' or '#'
# hazards. Non-ASCII letters are allowed because the seed writes with allow_unicode=True.
_U = "\u00c0-\u02ff\u0370-\u1fff\u2c00-\ud7ff\uf900-\ufdcf\ufdf0-\ufefe"
_SIMPLE = re.compile(rf"[A-Za-z0-9_./{_U}](?:[A-Za-z0-9_./+@=~{_U}-]|:(?!$))*")
_MAX_SIMPLE_KEY = 120  # PyYAML switches to "? " complex keys at 128 characters
_resolver = yaml.resolver.Resolver()
_STR_TAG = "tag:yaml.org,2002:str"
_RESOLVE_CACHE: dict[str, bool] = {}


class _Fallback(Exception):
    """The value is outside the fast path's shape."""


def _needs_quotes(s: str) -> bool:
    """Tell whether PyYAML would quote ``s`` because it would not read back as a string."""
    hit = _RESOLVE_CACHE.get(s)
    if hit is None:
        hit = _resolver.resolve(yaml.ScalarNode, s, (True, False)) != _STR_TAG  # type: ignore[no-untyped-call]  # PyYAML is untyped
        if len(_RESOLVE_CACHE) < 4096:
            _RESOLVE_CACHE[s] = hit
    return hit


def _scalar(value: Any, *, key: bool = False) -> str:
    if isinstance(value, str):
        # "..." (and "---") open a string PyYAML never writes plain: they mark a document's end.
        if not _SIMPLE.fullmatch(value) or value.startswith("...") or (key and len(value) > _MAX_SIMPLE_KEY):
            raise _Fallback
        return f"'{value}'" if _needs_quotes(value) else value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if type(value) is int:
        return str(value)
    raise _Fallback  # floats, dates, bytes ...: PyYAML's representers decide


def _emit_mapping(data: dict[Any, Any], indent: str, out: list[str]) -> None:
    for k, v in data.items():
        ks = _scalar(k, key=True)
        if isinstance(v, dict):
            if v:
                out.append(f"{indent}{ks}:\n")
                _emit_mapping(v, indent + "  ", out)
            else:
                out.append(f"{indent}{ks}: {{}}\n")
        elif isinstance(v, list | tuple):
            if v:
                out.append(f"{indent}{ks}:\n")
                _emit_sequence(v, indent, out)  # PyYAML: sequences in mappings are not indented
            else:
                out.append(f"{indent}{ks}: []\n")
        else:
            out.append(f"{indent}{ks}: {_scalar(v)}\n")


def _emit_sequence(items: list[Any] | tuple[Any, ...], indent: str, out: list[str]) -> None:
    for item in items:
        if isinstance(item, dict) and item:
            sub: list[str] = []
            _emit_mapping(item, indent + "  ", sub)
            first = sub[0]
            out.append(f"{indent}- {first[len(indent) + 2 :]}")
            out.extend(sub[1:])
        elif isinstance(item, dict | list | tuple):
            raise _Fallback  # empty collections and nested sequences: rare, let PyYAML do it
        else:
            out.append(f"{indent}- {_scalar(item)}\n")


def dump_pyyaml(data: dict[str, Any]) -> str:
    """Serialise with PyYAML exactly as the seed tool does (the reference for ``dump``)."""
    return yaml.dump(
        lists_and_dicts(data),  # PyYAML's safe representer refuses tuples
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
    )


def dump(data: dict[str, Any]) -> str:
    """Serialise a mapping to the seed tool's YAML (block style, insertion order, UTF-8)."""
    if not data:
        return "{}\n"
    out: list[str] = []
    try:
        _emit_mapping(data, "", out)
    except _Fallback:
        return dump_pyyaml(data)
    return "".join(out)


def _check_events(text: bytes | str) -> None:
    """Refuse tags, anchors and aliases; only called when the bytes could contain them."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise Corrupt("YAML anchors and aliases are not allowed", rule="yaml_alias")
            tag = getattr(event, "tag", None)
            if tag is not None:
                implicit = getattr(event, "implicit", True)
                explicit = not (implicit[0] if isinstance(implicit, tuple) else implicit)
                if explicit:
                    raise Corrupt(f"YAML tags are not allowed (found {tag})", rule="yaml_tag")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise Corrupt(f"nesting deeper than {MAX_DEPTH} levels", rule="max_depth")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        raise Corrupt(f"not valid YAML: {_short(exc)}", rule="yaml_syntax") from exc


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


#: ``key: value`` on one line (in a list item or not), the value plain: not quoted, not a block.
_PLAIN_PAIR = re.compile(r"\s*(?:-\s+)?([A-Za-z_][\w.-]*):[ \t]+(?![\"'|>])(.*\S)")


def _syntax_hint(probe: bytes, exc: yaml.YAMLError) -> tuple[int | None, str]:
    """The 1-based line a YAML error is on, and what to do about it: a one-line ``key: value``
    whose plain value holds ``": "`` (a shell command printing JSON: ``run: echo '{"ok": 1}'``)
    is read as a second key; it must be quoted or written as a block scalar."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return None, ""
    lines = probe.decode("utf-8", "replace").splitlines()
    if not 0 <= mark.line < len(lines):
        return mark.line + 1, ""
    text = lines[mark.line]
    found = _PLAIN_PAIR.match(text)
    if found is None or ": " not in found.group(2):
        return mark.line + 1, ""
    key = found.group(1)
    return mark.line + 1, (
        f"; line {mark.line + 1} ({text.strip()[:80]}): the value of {key!r} holds ': ', which YAML "
        f'reads as another key; quote the whole value ({key}: "..." with \\" for each " inside) or '
        f"write it as a block scalar ({key}: | and the value indented on the next line)"
    )


def _check_tree(node: Any, depth: int = 0, *, json_only: bool = False, at: str = "") -> None:
    if depth > MAX_DEPTH:
        raise Corrupt(f"nesting deeper than {MAX_DEPTH} levels", rule="max_depth")
    if isinstance(node, dict):
        for k, v in node.items():
            if not isinstance(k, str):
                raise Corrupt(f"mapping keys must be strings (found {k!r})", rule="key_type")
            where = f"{at}.{k}" if at else k
            if isinstance(v, dict | list):
                _check_tree(v, depth + 1, json_only=json_only, at=where)
            elif json_only:
                _check_scalar(v, where)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, dict | list):
                _check_tree(v, depth + 1, json_only=json_only, at=f"{at}[{i}]")
            elif json_only:
                _check_scalar(v, f"{at}[{i}]")


def _check_scalar(value: Any, where: str) -> None:
    """Refuse a scalar JSON cannot hold: YAML reads ``2026-01-01`` as a date, ``.nan`` and ``.inf``
    as floats that are not numbers; a record holding one is damaged, not data."""
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if math.isfinite(value):
            return
        kind = "NaN" if math.isnan(value) else "infinity"
    else:
        kind = type(value).__name__  # date, datetime, bytes (only via tags, refused earlier) ...
    raise Corrupt(
        f"{where}: YAML reads this unquoted value as a {kind} ({value}), which is not JSON data",
        field=where,
        rule="json_type",
    )


def load(data: bytes | str, *, json_only: bool = False) -> Any:
    """Parse YAML safely: no tags, no aliases, bounded depth, string keys only.

    ``json_only``: also refuse scalars JSON cannot hold (dates, timestamps, NaN, infinities), as
    Corrupt with rule ``json_type`` — what records and manifests need, since they are hashed as JSON.
    """
    probe = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    # Anchors, aliases and tags all need one of these bytes; most checkpoints have none, so the
    # precise event scan runs only when it could find something. Flow collections ('[' '{') can
    # nest deeply on one line, so they get the scan too.
    if any(c in probe for c in (b"&", b"*", b"!", b"[[", b"{{", b"[{", b"{[")):
        _check_events(probe)
    try:
        tree = yaml.load(probe, Loader=_Loader)
    except RecursionError as exc:
        raise Corrupt(f"nesting deeper than {MAX_DEPTH} levels", rule="max_depth") from exc
    except yaml.YAMLError as exc:
        line, hint = _syntax_hint(probe, exc)
        raise Corrupt(f"not valid YAML: {_short(exc)}{hint}", rule="yaml_syntax", line=line) from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise Corrupt(f"not valid YAML: {_short(exc)}", rule="yaml_syntax") from exc
    try:
        _check_tree(tree, 1, json_only=json_only)  # the top-level collection is level 1, as in _check_events
    except RecursionError as exc:  # pragma: no cover - _check_tree stops at MAX_DEPTH
        raise Corrupt(f"nesting deeper than {MAX_DEPTH} levels", rule="max_depth") from exc
    return tree
