"""Rendering for the command line: JSON text, tables and error objects, built in memory.

Every function here returns text; nothing is printed until a command's whole output is ready
(a command that succeeded must not fail half-way through printing its result). Streamed output
(see phaselog.streams) is written into a spooled buffer first, and printed from it once complete.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import IO, Any

from phaselog.errors import PhaselogError


def new_correlation_id() -> str:
    """A random UUID (v4) without importing uuid (which costs the CLI start-up a few ms)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def json_text(data: dict[str, Any]) -> str:
    """``data`` as indented JSON; ASCII escapes when stdout cannot encode the text."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    try:
        text.encode(sys.stdout.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):  # a non-UTF-8 terminal, or undecodable input echoed
        text = json.dumps(data, indent=2, ensure_ascii=True)
    return text + "\n"


def write(text: str) -> None:
    """Print finished output in one piece."""
    sys.stdout.write(text)
    sys.stdout.flush()


def write_spooled(out: IO[str], *, escape: bool) -> None:
    """Print finished output from a spooled buffer; JSON (``escape``) all ASCII-escaped when
    stdout cannot encode it, as :func:`json_text` does."""
    from phaselog.streams import copy_out

    if escape:
        copy_out(out, sys.stdout, sys.stdout.encoding)
    else:
        import shutil  # here: shutil (with bz2 and lzma) would cost every command's start

        out.seek(0)
        shutil.copyfileobj(out, sys.stdout)
    sys.stdout.flush()


def error_text(err: PhaselogError, correlation_id: str | None = None) -> str:
    """The JSON error object of ``err``."""
    out = err.to_dict()
    if correlation_id:
        out["correlation_id"] = correlation_id
    return json_text(out)


#: A table shows at most this many rows (a longer listing says how to see the rest).
TABLE_MAX_ROWS = 1000
#: No column is squeezed below this many characters (or its own width, when narrower).
MIN_COLUMN = 12
#: Columns at most this wide are never wrapped (short hashes, run ids, states, phase names).
SHORT_COLUMN = 16


def terminal_width() -> int:
    """The terminal's width (``COLUMNS`` when set; 80 when not a terminal)."""
    from rich.console import Console

    return Console().width


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    title: str | None = None,
    empty: str = "nothing to show",
) -> str:
    """A table as text (rich) that fits the terminal, or ``title: empty`` when there are no rows.

    Every column keeps at least ``MIN_COLUMN`` characters (or its natural width when narrower), so
    none is squeezed to nothing; wide columns fold their text instead.
    """
    if not rows:
        return (": ".join(x for x in (title, empty) if x) or "nothing to show") + "\n"
    import io

    from rich.console import Console
    from rich.table import Table

    cells = [["" if v is None else str(v) for v in r] for r in rows]
    t = Table(title=title, show_lines=False, header_style="bold")
    least = 1  # the narrowest the table can be without squeezing a column: its minimums and borders
    for i, h in enumerate(headers):
        natural = max([len(h), *(max(map(len, r[i].splitlines() or [""])) for r in cells)])
        short = natural <= SHORT_COLUMN
        # Short columns (ids, hashes, times, states) stay whole; long ones fold their text.
        t.add_column(h, overflow="fold", min_width=min(natural, MIN_COLUMN), no_wrap=short)
        least += (natural if short else min(natural, MIN_COLUMN)) + 3
    for r in cells:
        t.add_row(*r)
    terminal = Console()
    buf = io.StringIO()
    Console(
        file=buf,
        # Fit the terminal; on one too narrow for the minimums, overflow rather than squeeze a column away.
        width=max(terminal.width, least),
        soft_wrap=False,
        force_terminal=terminal.is_terminal,
        color_system=terminal.color_system,  # type: ignore[arg-type]  # a name rich gave us itself
    ).print(t)
    return buf.getvalue()


def without_path(message: str, path: str) -> str:
    """``message`` without a leading or embedded copy of ``path`` (a table shows the path already)."""
    if not path:
        return message
    out = message.replace(f"{path}: ", "").replace(path, "…")
    return out or message


def short_time(stamp: str | None) -> str:
    """An ISO-8601 UTC timestamp to the second, for tables (``2025-01-02 03:04:05``)."""
    if not stamp:
        return ""
    return stamp[:19].replace("T", " ") if len(stamp) >= 19 and stamp[10] == "T" else stamp


def human_error(err: PhaselogError) -> str:
    """The error for people (``--format table``): what went wrong, then its details, one per line."""
    out = [f"error: {err.message}"]
    for key, value in err.to_dict().items():
        if key in ("success", "error", "correlation_id"):
            continue
        if key == "errors" and isinstance(value, list):
            for e in value:
                if isinstance(e, dict):
                    out.append(f"  - {e.get('field', '?')}: {e.get('message', '')} ({e.get('rule', '')})")
            continue
        if isinstance(value, list | tuple):
            shown = ", ".join(map(str, value))
        elif isinstance(value, dict):
            shown = json.dumps(value, ensure_ascii=False)
        else:
            shown = str(value)
        out.append(f"  {key}: {shown}")
    return "\n".join(out) + "\n"


def lines(*items: str) -> str:
    """Join rendered pieces and plain lines (each line gets its newline)."""
    return "".join(x if x.endswith("\n") else x + "\n" for x in items if x)
