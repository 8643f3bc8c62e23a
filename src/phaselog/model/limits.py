"""Every bound phaselog enforces, defined once, and the readers that enforce them while reading.

The same numbers hold on every store and at every edge (CLI options, files read for input,
standard input, imported lines, records read back). ``docs/guarantees.md`` lists them with the
tests that show each one. Inputs are read with :func:`read_bounded`: at most ``limit + 1`` bytes
are ever taken, so an endless or huge input (``/dev/zero``, a 50 MB file) is refused after
reading just past the limit instead of after filling memory.

JSON from users and from storage goes through :func:`json_loads`, which refuses what RFC 8259
does not have (``NaN``, ``Infinity``, numbers that overflow to infinity): Python's parser takes
them and ``json.dumps(allow_nan=False)`` would fail much later, far from the input.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from typing import Any, BinaryIO

from phaselog.model._json import UNDECIDED, fast_loads
from phaselog.model.errors import InvalidRecord, TooLarge, UsageError

#: Highest attempt number (and the ceiling of automatic numbering). Fits a 32-bit signed
#: PostgreSQL INTEGER with room to spare; far beyond any real retry loop.
MAX_ATTEMPT = 1_000_000
#: Highest phase ordinal a record may carry (a pipeline has at most this many phases).
MAX_PHASE_ORDINAL = 1_000
#: A record's size: the bytes of its stored JSON document (the files store's sidecar body, a SQL
#: row's ``body``), and also the bytes of its YAML seed file. Both must fit, on every store, so a
#: record one store takes, every store takes.
MAX_RECORD_BYTES = 16 * 1024 * 1024
#: An audit entry (progress event, approval, marker): room for 8 MiB of progress output, which JSON
#: escaping can grow (control characters become ``\\uXXXX``).
MAX_ENTRY_BYTES = 4 * MAX_RECORD_BYTES
#: One input read for a command: ``--payload @FILE``, ``-`` (standard input), ``--decisions``, a
#: manifest. Anything larger could not become a record under MAX_RECORD_BYTES anyway.
MAX_INPUT_BYTES = MAX_RECORD_BYTES
#: Progress output kept with an event (``--output-file``, ``--output -``).
MAX_OUTPUT_BYTES = 8 * 1024 * 1024
#: A pipeline manifest file.
MAX_MANIFEST_BYTES = 1 << 20
#: Nesting depth of a record as stored (the YAML loader refuses deeper files); a payload sits two
#: levels down (the record, then ``phase_payload``).
MAX_DEPTH = 64
#: Largest integer magnitude in a record, in bits (~4,000 decimal digits: Python refuses to print
#: longer integers, so a larger one could be accepted and never written).
MAX_INT_BITS = 13_000
#: A sidecar holds the stored document plus the YAML file's SHA-256 (64 hex digits and quotes).
SIDECAR_SLACK_BYTES = 128
#: How much larger than its JSON a record's YAML can be: one list item per line, indented at the
#: deepest level the YAML loader allows (2 x 64 spaces for a 2-byte ``0,``). Below
#: ``cap / YAML_WORST_EXPANSION`` bytes of JSON the YAML cannot pass the cap, so SQL stores
#: render the YAML only for records larger than that.
YAML_WORST_EXPANSION = 70


#: A number given as text (a URL's ``?page=``, a cursor's parts): at most this many ASCII digits,
#: so ``int()`` never sees 5,000 digits and ``²`` or an Arabic-Indic one are not numbers.
MAX_NUMBER_DIGITS = 18


def is_digits(text: str) -> bool:
    """True for 1 to MAX_NUMBER_DIGITS ASCII digits (what :func:`parse_number` takes)."""
    return 0 < len(text) <= MAX_NUMBER_DIGITS and text.isascii() and text.isdigit()


def parse_number(text: str, *, field: str, minimum: int = 0, maximum: int = 10**MAX_NUMBER_DIGITS - 1) -> int:
    """``text`` as a whole number from ``minimum`` to ``maximum``; UsageError naming ``field`` (rule
    ``number``) for anything else: signs, spaces, non-ASCII digits, more than MAX_NUMBER_DIGITS digits."""
    if not is_digits(text) or not minimum <= int(text) <= maximum:
        shown = repr(text) if len(text) <= 40 else repr(text[:40]) + "…"
        raise UsageError(
            f"{field}: must be a whole number from {minimum} to {maximum} (got {shown})", field=field, rule="number"
        )
    return int(text)


def is_phase_ordinal(value: Any) -> bool:
    """True for a phase ordinal: an int from 1 to MAX_PHASE_ORDINAL (the one check of that bound:
    a manifest's length, a record written, a record read)."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PHASE_ORDINAL


def is_attempt(value: Any) -> bool:
    """True for an attempt number: an int from 1 to MAX_ATTEMPT."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ATTEMPT


def check_attempt(value: Any, *, field: str = "attempt") -> int:
    """Return ``value`` if it is an attempt number (1..MAX_ATTEMPT); UsageError naming ``field`` otherwise."""
    if not is_attempt(value):
        shown = value if isinstance(value, int) and abs(value) < 10**30 else "a larger number"
        raise UsageError(
            f"--{field.replace('_', '-')}: must be an integer from 1 to {MAX_ATTEMPT} (got {shown})",
            field=field,
            rule="max_attempt",
        )
    return int(value)


def check_json_data(value: Any, *, field: str, max_depth: int = MAX_DEPTH - 2) -> None:
    """Refuse (InvalidRecord naming the path and the rule) anything JSON cannot hold as it is.

    JSON data is: objects with string keys, arrays, strings, integers (up to MAX_INT_BITS),
    finite floats, true/false, null. NaN, infinities, dates, sets and bytes would be accepted
    by Python and fail later, while the record is hashed or written.
    """
    stack: list[tuple[Any, str, int]] = [(value, field, 1)]
    while stack:
        v, at, depth = stack.pop()
        problem = None
        if isinstance(v, dict | list | tuple):
            if depth > max_depth:
                problem = ("max_depth", f"nested deeper than {max_depth} levels")
            elif isinstance(v, dict):
                for k, item in v.items():
                    if not isinstance(k, str):
                        problem = ("json", f"object keys must be strings (found {type(k).__name__} {k!r:.40})")
                        break
                    stack.append((item, f"{at}.{k}", depth + 1))
            else:
                stack.extend((item, f"{at}[{i}]", depth + 1) for i, item in enumerate(v))
        elif isinstance(v, float):
            if not math.isfinite(v):
                problem = ("json", f"{v} is not a JSON number")
        elif isinstance(v, bool) or v is None or isinstance(v, str):
            pass
        elif isinstance(v, int):
            if v.bit_length() > MAX_INT_BITS:
                problem = ("max_int", f"integer larger than 2**{MAX_INT_BITS}")
        else:
            problem = ("json", f"a {type(v).__name__} is not JSON data")
        if problem is not None:
            rule, message = problem
            raise InvalidRecord(
                f"{at}: {message}",
                errors=[{"field": at, "rule": rule, "message": message}],
                field=at,
                rule=rule,
            )


def yaml_size_matters(body_bytes: int, cap: int) -> bool:
    """Whether a record of ``body_bytes`` of JSON could have a YAML rendering over ``cap``."""
    return body_bytes * YAML_WORST_EXPANSION > cap


def check_record_size(body_bytes: int, yaml_bytes: int | None, cap: int, *, path: str) -> None:
    """Refuse a record whose stored JSON document or YAML seed file is over ``cap`` bytes (TooLarge).

    Every store calls this with the same two numbers, so a record one store takes, every store
    takes (``copy`` works both ways). ``yaml_bytes`` is None for a failed attempt (no seed file).
    """
    for size, what in ((body_bytes, "stored JSON document"), (yaml_bytes, "YAML checkpoint file")):
        if size is not None and size > cap:
            raise TooLarge(
                f"record of {size} bytes ({what}) exceeds the cap of {cap} bytes",
                path=path,
                rule="max_record_bytes",
                limit=cap,
            )


def check_text(value: Any, *, field: str, max_chars: int, multiline: bool = False) -> str:
    """Return ``value`` if it is text a person can read: at most ``max_chars`` characters, no control
    characters (ANSI escapes would repaint the terminal of whoever lists it later; line breaks and
    tabs only where ``multiline``). UsageError naming ``field`` and the rule otherwise."""
    option = f"--{field.replace('_', '-')}"
    if not isinstance(value, str):
        raise UsageError(f"{option}: must be text", field=field, rule="type")
    if len(value) > max_chars:
        raise UsageError(f"{option}: at most {max_chars} characters", field=field, rule="max_length")
    allowed = "\n\t" if multiline else ""
    bad = next((c for c in value if is_control(c) and c not in allowed), None)
    if bad is not None:
        raise UsageError(
            f"{option}: control character {bad!r} is not allowed (terminal escapes would replay on every viewer)",
            field=field,
            rule="control_characters",
        )
    return value


def is_control(c: str) -> bool:
    """True for a C0 or C1 control character, DEL, or a Unicode line or paragraph separator."""
    o = ord(c)
    return o < 32 or 0x7F <= o <= 0x9F or c in "\u2028\u2029"


def read_bounded(source: BinaryIO | int, limit: int, *, what: str, rule: str = "max_input_bytes") -> bytes:
    """Read ``source`` (a binary stream or a descriptor) to its end, refusing more than ``limit`` bytes.

    Never holds more than ``limit + 1`` bytes: an endless stream is refused as soon as it passes
    the limit. Raises TooLarge naming ``what`` and the limit.
    """
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        want = min(limit + 1 - total, 1 << 20)
        chunk = os.read(source, want) if isinstance(source, int) else source.read(want)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
    raise TooLarge(
        f"{what}: more than {limit} bytes (refused while reading); nothing was written",
        field=what,
        rule=rule,
        limit=limit,
    )


def read_file_bounded(path: str | os.PathLike[str], limit: int, *, what: str, rule: str = "max_input_bytes") -> bytes:
    """Read a file (or a device, or a FIFO) with :func:`read_bounded`; OSError as the OS reports it."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return read_bounded(fd, limit, what=what, rule=rule)
    finally:
        os.close(fd)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (JSON has no NaN or Infinity)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is too large for a JSON number (it overflows to infinity)")
    return value


def json_loads(data: str | bytes) -> Any:
    """``json.loads`` that refuses NaN, Infinity and numbers overflowing to infinity (ValueError).

    orjson parses first where it gives the very same value (:mod:`phaselog.model._json`).
    """
    value = fast_loads(data)
    if value is not UNDECIDED:
        return value
    return json.loads(data, parse_constant=_no_constant, parse_float=_finite)


#: A JSON string (escapes included), removed before brackets are counted (compiled when first used).
_JSON_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
#: Opening brackets become 1, closing ones 255 (-1 as a signed byte), everything else is deleted.
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[{]}")


def json_depth(data: bytes) -> int:
    """How deeply the JSON text ``data`` nests (brackets outside strings), without parsing it."""
    if data.count(b"[") + data.count(b"{") <= 1:
        return 1 if b"[" in data or b"{" in data else 0
    return _depth(re.sub(_JSON_STRING, b"", data).translate(_BRACKETS, _NOT_BRACKETS), None)


def _depth(marks: bytes, limit: int | None) -> int:
    """The nesting of ``marks`` (1 opens, 255 closes); with ``limit``, any number above it once
    the depth is known to pass it. Each round removes every innermost pair at C speed, so a
    shallow document (the common case) is done in as many rounds as it is deep."""
    rounds = 0
    while limit is not None and marks and rounds <= limit:
        fewer = marks.replace(b"\x01\xff", b"")
        if len(fewer) == len(marks):
            break  # unbalanced: the rest is counted below
        marks, rounds = fewer, rounds + 1
    if not marks or (limit is not None and rounds > limit):
        return rounds
    return rounds + max(0, *itertools.accumulate(memoryview(marks).cast("b")))


def json_loads_bounded(data: str | bytes, *, what: str, max_depth: int = MAX_DEPTH - 2) -> Any:
    """:func:`json_loads` for JSON from outside (a shell phase's payload): a text nested deeper
    than ``max_depth`` is refused before it is parsed (ValueError naming ``what`` and the rule
    ``max_depth``), so a 200,000-level line never reaches a recursive parser."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") > max_depth and _too_deep(raw, max_depth):
        raise TooDeep(f"{what} is nested deeper than {max_depth} levels (rule max_depth: a payload nests at most "
                      f"{max_depth} levels)", max_depth)  # fmt: skip
    return json_loads(raw)


def _too_deep(raw: bytes, max_depth: int) -> bool:
    marks = re.sub(_JSON_STRING, b"", raw).translate(_BRACKETS, _NOT_BRACKETS)
    return _depth(marks, max_depth) > max_depth


class TooDeep(ValueError):
    """JSON text nested deeper than the limit (rule ``max_depth``)."""

    rule = "max_depth"

    def __init__(self, message: str, max_depth: int) -> None:
        super().__init__(message)
        self.message = message
        self.max_depth = max_depth
