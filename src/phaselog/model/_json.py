"""JSON for records: the standard library's exact bytes and values, at orjson's speed where they agree.

A record's content hash is over ``json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=False)``, so those bytes can never change. orjson writes the very same bytes for
strings, integers within 64 bits, booleans, null, lists and dicts with string keys (keys sorted by
code point; UTF-8 byte order is the same order), 20-30x faster (docs/decisions.md, "orjson for the
JSON side"). It differs on floats (``1.5e-7`` where Python writes ``1.5e-07``) and fails on larger
integers, so a document holding either is written by the standard library, as before.

Reading: orjson parses what the standard library parses to the same values, except that it refuses
some input the standard library accepts (``Infinity``, escaped lone surrogates) and reads integers
beyond 64 bits as floats. Input with a run of 19 or more digits goes to the standard library; so
does anything orjson refuses, which then fails (or not) exactly as before.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; without it everything is stdlib
    orjson = None  # type: ignore[assignment]

_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1
#: A run of digits long enough to be an integer orjson would read as a float (or just a long number),
#: found as a run of zeros once every digit is mapped to "0" (a regex is 10x slower here).
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def _plain(value: Any) -> bool:
    """True when orjson writes ``value`` byte for byte as the standard library does."""
    # A loop over a stack, not recursion through generators: this walks every value of a record
    # each time one is hashed or stored (a third of the cost of hashing a 1 KB record before).
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            extend(item.values())
        elif kind is list or kind is tuple:
            extend(item)
        elif kind is int:
            if not _I64_MIN <= item <= _U64_MAX:
                return False
        else:
            return False  # floats (exponent spelling differs), subclasses, anything else
    return True


def is_plain(value: Any) -> bool:
    """True when orjson writes ``value`` byte for byte as the standard library does (one walk of it).

    A caller that writes the same value twice (a record: hashed sorted, stored in its own order)
    walks it once and passes the answer as ``plain=`` to both dumps.
    """
    return orjson is not None and _plain(value)


def dumps_canonical(doc: Any, *, plain: bool | None = None) -> bytes:
    """Sorted keys, no spaces, UTF-8, no escapes, no NaN: the bytes a content hash is taken over.

    ``plain``: :func:`is_plain` of ``doc``, when the caller already asked (None: ask now).
    """
    if orjson is not None and (_plain(doc) if plain is None else plain):
        with contextlib.suppress(orjson.JSONEncodeError):  # e.g. a lone surrogate: stdlib raises its own error
            return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def dumps_sorted_fast(doc: Any) -> bytes | None:
    """orjson's sorted-keys bytes of ``doc`` without the plainness check; None where orjson refuses.

    Not the canonical form where the standard library writes a value differently (a float with an
    exponent): only for comparing with a hash that the canonical form gave, where a difference
    just means "not the same" and the caller takes the exact path.
    """
    if orjson is None:  # pragma: no cover
        return None
    try:
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return None


def dumps_compact(doc: Any, *, newline: bool = False, plain: bool | None = None) -> bytes:
    """Keys in insertion order, no spaces, UTF-8, no escapes, no NaN (a record's stored document).

    ``plain``: :func:`is_plain` of ``doc``, when the caller already asked (None: ask now).
    """
    if orjson is not None and (_plain(doc) if plain is None else plain):
        with contextlib.suppress(orjson.JSONEncodeError):  # e.g. a lone surrogate: stdlib raises its own error
            return orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE) if newline else orjson.dumps(doc)
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text + "\n" if newline else text).encode("utf-8")


def lists_and_dicts(value: Any) -> Any:
    """A copy of ``value`` with every mapping a dict and every tuple a list (what JSON and YAML hold)."""
    if isinstance(value, Mapping):
        return {k: lists_and_dicts(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [lists_and_dicts(v) for v in value]
    return value


#: What :func:`fast_loads` returns when the standard library must decide.
UNDECIDED: Any = object()


def fast_loads(data: str | bytes) -> Any:
    """The parsed value where orjson's equals the standard library's; else :data:`UNDECIDED`.

    :func:`phaselog.model.limits.json_loads` (no NaN, no Infinity, no overflow) calls it first.
    """
    if orjson is None:  # pragma: no cover
        return UNDECIDED
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _LONG_RUN in raw.translate(_DIGITS_TO_ZERO):
        return UNDECIDED
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return UNDECIDED  # the standard library decides, with its own error message
