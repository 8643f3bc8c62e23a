"""Rendering for the command line: JSON text, tables and error objects, built in memory.

Every function here returns text; nothing is printed until a command's whole output is ready
(a command that succeeded must not fail half-way through printing its result). Streamed output
(see phaselog.views.streams) is written into a spooled buffer first, and printed from it once complete.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from phaselog.model._lazyre import LazyPattern
from phaselog.model.errors import PhaselogError


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
    from phaselog.views.streams import copy_out  # lazy: it imports shutil

    if escape:
        copy_out(out, sys.stdout, sys.stdout.encoding)
    else:
        import shutil  # lazy: shutil (with bz2 and lzma) would cost every command's start

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
#: A column squeezed to fit the terminal keeps at least this many characters (or its header's
#: longest word, or its own width when narrower); below that the table overflows instead.
MIN_COLUMN = 8
#: A column whose unbreakable pieces are at most this wide (a state such as ``awaiting_approval``,
#: a timestamp, a pipeline or phase name) is never squeezed: the long ids give way first.
KEEP_WHOLE = 19
#: A column of free text gets at least this many characters (or its natural width) before a long
#: id beside it keeps its whole width.
TEXT_COLUMN = 24
#: A cell that is one timestamp (``2026-12-01 21:13:22``, ``2026-12-01T21:13``) is kept whole.
_STAMP = LazyPattern(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?Z?")


def terminal_width() -> int:
    """The terminal's width (``COLUMNS`` when set; 80 when not a terminal)."""
    from rich.console import Console  # lazy: rich (~17 ms) loads only for --format table, never for JSON output

    return Console().width


def _whole(line: str) -> bool:
    """Whether a cell's line must never be broken: one word (an id, a state, a hash) or a timestamp."""
    return not any(c.isspace() for c in line) or _STAMP.fullmatch(line) is not None


def _units(line: str) -> list[str]:
    """The pieces of a line that stay whole: the line itself, or the words of free text."""
    return [line] if _whole(line) else line.split()


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its middle replaced by ``…`` (start and end kept)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = (width - 1 + 1) // 2
    tail = width - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


def column_widths(cells: Sequence[Sequence[str]], headers: Sequence[str], width: int) -> list[int]:
    """The width of each column of a table that fits ``width`` characters (borders included).

    Each column gets at least its longest unbreakable piece (a one-word cell, a timestamp, a word
    of free text, a header word); while those do not fit, the widest column gives up a character
    (down to ``MIN_COLUMN``: its long cells are shortened with ``…``; columns no wider than
    ``KEEP_WHOLE`` never give way). Space left over makes whole the columns that want least,
    then goes to the one that wants most.
    """
    n = len(headers)
    natural, least, floor = [], [], []
    for i, h in enumerate(headers):
        col_lines = [ln for r in cells for ln in (r[i].splitlines() or [""])]
        head_word = max((len(w) for w in h.split()), default=0)
        natural.append(max([len(h), *map(len, col_lines)]))
        need = max([head_word, *(len(u) for ln in col_lines for u in _units(ln))])
        if any(not _whole(ln) for ln in col_lines):  # free text: room for a few words per line
            need = max(need, min(natural[-1], TEXT_COLUMN))
        least.append(need)
        floor.append(need if need <= KEEP_WHOLE else max(MIN_COLUMN, head_word))
    room = width - (3 * n + 1)
    widths = list(least)
    while sum(widths) > room:
        squeezable = [i for i in range(n) if widths[i] > floor[i]]
        if not squeezable:
            break  # too narrow even for the floors: overflow rather than squeeze a column away
        widest = max(squeezable, key=lambda i: widths[i])
        widths[widest] -= 1
    spare = room - sum(widths)
    # The columns that want least first, each made whole while it fits (a wrapped header, a
    # squeezed id), then what is left to the one that wants most (free text wraps anyway).
    wanting = sorted((natural[i] - widths[i], i) for i in range(n) if natural[i] > widths[i])
    for want, i in wanting:
        if want <= spare:
            widths[i] += want
            spare -= want
    rest = [(natural[i] - widths[i], i) for i in range(n) if natural[i] > widths[i]]
    if rest and spare > 0:
        widths[max(rest)[1]] += spare
    return widths


def fit_cell(cell: str, width: int) -> str:
    """A cell's text laid out in ``width`` characters: free text wrapped between words; a word,
    an id or a timestamp never broken (shortened with ``…`` when the column is narrower)."""
    import textwrap  # lazy: only tables wrap text; `phaselog read` prints JSON

    out: list[str] = []
    for line in cell.splitlines() or [""]:
        if len(line) <= width or _whole(line):
            out.append(shorten(line, width))
            continue
        words = [shorten(w, width) for w in line.split()]
        out += textwrap.wrap(" ".join(words), width, break_long_words=False, break_on_hyphens=False) or [""]
    return "\n".join(out)


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    title: str | None = None,
    empty: str = "nothing to show",
) -> str:
    """A table as text (rich) that fits the terminal, or ``title: empty`` when there are no rows.

    No cell breaks inside a word, an id, a state or a timestamp: free text wraps between its
    words, and when even the unbreakable pieces do not fit, the widest column's long cells are
    shortened in the middle (``a1b2c3…7890``; the JSON output has them whole).
    """
    if not rows:
        import textwrap  # lazy: only tables wrap text; `phaselog read` prints JSON

        line = ": ".join(x for x in (title, empty) if x) or "nothing to show"
        # A long path in the title folds (it is a heading, not a cell); words stay whole.
        return "\n".join(textwrap.wrap(line, terminal_width(), break_on_hyphens=False)) + "\n"

    from rich.console import Console  # lazy: rich (~17 ms) loads only for --format table, never for JSON output
    from rich.table import Table  # lazy: rich (~17 ms) loads only for --format table, never for JSON output

    cells = [["" if v is None else str(v) for v in r] for r in rows]
    terminal = Console()
    widths = column_widths(cells, headers, terminal.width)
    t = Table(title=title, show_lines=False, header_style="bold")
    for h, w in zip(headers, widths, strict=True):
        t.add_column(fit_cell(h, w), width=w, no_wrap=True, overflow="ignore")
    for r in cells:
        t.add_row(*(fit_cell(c, w) for c, w in zip(r, widths, strict=True)))
    buf = io.StringIO()
    Console(
        file=buf,
        # The widths fit the terminal; on one too narrow for the floors, overflow rather than squeeze.
        width=max(terminal.width, sum(widths) + 3 * len(widths) + 1),
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


def short_time(stamp: str | None, *, today: str | None = None) -> str:
    """An ISO-8601 UTC timestamp for tables: today's as a time (``21:13:22``), another day's to
    the minute (``2026-12-01 21:13``). ``today`` (``YYYY-MM-DD``, UTC) defaults to now's date."""
    if not stamp:
        return ""
    if not (len(stamp) >= 19 and stamp[10] == "T"):
        return stamp
    if today is None:
        today = time.strftime("%Y-%m-%d", time.gmtime())
    return stamp[11:19] if stamp[:10] == today else stamp[:16].replace("T", " ")


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
