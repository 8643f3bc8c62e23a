"""Rendering for the command line: JSON text, tables and error objects, built in memory.

Every function here returns text; nothing is printed until a command's whole output is ready
(a command that succeeded must not fail half-way through printing its result).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

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


def error_text(err: PhaselogError, correlation_id: str | None = None) -> str:
    """The JSON error object of ``err``."""
    out = err.to_dict()
    if correlation_id:
        out["correlation_id"] = correlation_id
    return json_text(out)


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    title: str | None = None,
    empty: str = "nothing to show",
) -> str:
    """A table as text (rich), or ``title: empty`` when there are no rows."""
    if not rows:
        return (": ".join(x for x in (title, empty) if x) or "nothing to show") + "\n"
    import io

    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_lines=False, header_style="bold")
    for i, h in enumerate(headers):
        last = i == len(headers) - 1
        t.add_column(h, overflow="fold", no_wrap=not last)  # only the last column wraps
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    terminal = Console()
    buf = io.StringIO()
    Console(
        file=buf,
        width=max(120, terminal.width),
        soft_wrap=False,
        force_terminal=terminal.is_terminal,
        color_system=terminal.color_system,  # type: ignore[arg-type]  # a name rich gave us itself
    ).print(t)
    return buf.getvalue()


def lines(*items: str) -> str:
    """Join rendered pieces and plain lines (each line gets its newline)."""
    return "".join(x if x.endswith("\n") else x + "\n" for x in items if x)
