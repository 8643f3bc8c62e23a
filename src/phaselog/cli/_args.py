"""Parsing of option values shared by several commands (JSON options, attempts, output files)."""

from __future__ import annotations

import json
import sys
from typing import Any

from phaselog.model.errors import PhaselogError, UsageError
from phaselog.model.limits import (
    MAX_INPUT_BYTES,
    MAX_OUTPUT_BYTES,
    check_attempt,
    json_loads,
    read_bounded,
    read_file_bounded,
)


def json_opt(value: str | None, option: str, kind: type, items: type | None = None) -> Any:
    """Parse a JSON option given inline, as ``@FILE`` or as ``-`` (standard input)."""
    if value is None:
        return None
    text = value
    source = "stdin" if value == "-" else value[1:]
    try:
        # At most MAX_INPUT_BYTES + 1 bytes are read: a huge file or an endless stream is refused
        # while it is read, not after it filled memory.
        if value == "-":
            text = read_bounded(sys.stdin.buffer, MAX_INPUT_BYTES, what=option).decode("utf-8")
        elif value.startswith("@"):
            text = read_file_bounded(value[1:], MAX_INPUT_BYTES, what=option).decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{option}: cannot read {source}: {exc.strerror}", field=option) from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{option}: {source} is not UTF-8 text ({exc.reason} at byte {exc.start})",
            field=option,
            rule="utf-8",
        ) from None
    if len(text) > MAX_INPUT_BYTES:  # given inline
        raise UsageError(f"{option}: more than {MAX_INPUT_BYTES} bytes", field=option, rule="max_input_bytes")
    try:
        data = json_loads(text)  # NaN and Infinity are not JSON: refused here, not by a crash later
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # lone surrogates (\ud800) fail here
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"{option}: contains a lone surrogate escape ({exc.object[exc.start : exc.end]!r}); "
            "strings must be valid Unicode",
            field=option,
            rule="utf-8",
        ) from None
    except RecursionError:
        raise UsageError(f"{option}: JSON nested too deeply", field=option, rule="json") from None
    except ValueError as exc:
        raise UsageError(f"{option}: not valid JSON ({exc})", field=option, rule="json") from None
    if not isinstance(data, kind):
        want = "a JSON object" if kind is dict else "a JSON array"
        raise UsageError(f"{option}: must be {want}", field=option, rule="type")
    if items is not None:
        values: Any = data.values() if isinstance(data, dict) else data
        bad = [v for v in values if not isinstance(v, items)]
        if bad:
            what = "value" if kind is dict else "item"
            raise UsageError(
                f"{option}: every {what} must be a JSON string (got {json.dumps(bad[0])})",
                field=option,
                rule="type",
            )
    return data


def attempt(value: int | None) -> int | None:
    """Check an ``--attempt`` value (1 to limits.MAX_ATTEMPT, the same on every store)."""
    return None if value is None else check_attempt(value)


def read_output(output_file: str | None, output: str | None) -> bytes | None:
    """The bytes of ``--output-file FILE`` or ``--output -`` (standard input), if either is given."""
    if output_file and output:
        raise UsageError("give --output-file or --output, not both", field="output")
    if output is not None:
        if output != "-":
            raise UsageError("--output takes '-' (read standard input); use --output-file for a file", field="output")
        return read_bounded(sys.stdin.buffer, MAX_OUTPUT_BYTES, what="--output", rule="max_output_bytes")
    if output_file is not None:
        try:
            # Bounded while reading: /dev/zero or a growing log is refused once past the cap.
            return read_file_bounded(output_file, MAX_OUTPUT_BYTES, what="--output-file", rule="max_output_bytes")
        except OSError as exc:
            raise UsageError(f"--output-file: cannot read {output_file}: {exc.strerror}", field="output_file") from None
    return None


def duration(value: str | None, option: str) -> Any:
    """Parse a duration option such as ``45m`` (None stays None)."""
    if value is None:
        return None
    from phaselog.model.durations import parse_duration  # lazy: `phaselog read` parses no duration

    return parse_duration(value, field=option)


def timestamp_opt(value: str | None, option: str) -> Any:
    """Parse an ISO-8601 option with a timezone such as ``2026-11-30T10:00:00Z`` (None stays None)."""
    if value is None:
        return None

    from phaselog.model.records import parse_timestamp  # lazy: `--help` loads no record model

    try:
        return parse_timestamp(value, field=option)
    except PhaselogError as exc:
        raise UsageError(exc.message, field=option.strip("-").replace("-", "_"), rule="datetime") from None
