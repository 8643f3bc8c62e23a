"""Output that does not grow with the number of records (docs/decisions.md, "streamed output").

Commands that walk a whole ticket (``list``, ``history``, ``copy``) write their JSON item by
item instead of building one list in memory:

* :func:`write_object` writes an object exactly as ``json.dumps(obj, indent=2)`` would, except
  that a value may be :class:`Items` (an iterable written item by item) or :class:`SpooledArray`
  (an array built earlier, item by item, into a temporary file, for when a count must be printed
  before it). The bytes are the same as the whole-list JSON's, so every existing reader works.
* :class:`ExternalSort` orders items that the store cannot iterate in the wanted order (history
  is in time order across runs): sorted chunks of bounded size spill to temporary files, which
  are merged (stable: equal keys keep the order they were added in, as ``list.sort`` does).

Keys are tuples of ints and strings (they pass through JSON in the spill files).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

#: An in-memory buffer goes to a temporary file past this many bytes.
SPOOL_BYTES = 1 << 20
#: ExternalSort keeps at most about this many bytes of serialized items in memory.
SORT_CHUNK_BYTES = 4 << 20
#: ExternalSort merges at most this many spill files at once (open file descriptors).
SORT_FAN_IN = 64

Key = Sequence[int | str]


def spool(size: int = SPOOL_BYTES) -> IO[str]:
    """A text buffer in memory that moves to a temporary file past ``size`` bytes.

    Lone surrogates (undecodable input echoed back) survive the round trip, as they would in a str.
    """
    return tempfile.SpooledTemporaryFile(max_size=size, mode="w+", encoding="utf-8", errors="surrogatepass", newline="")


def _indented(value: Any, depth: int) -> str:
    """``json.dumps(value, indent=2)`` as it appears nested ``depth`` levels deep."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    # JSON text holds no raw newline inside strings, so every newline starts a line to indent.
    return text.replace("\n", "\n" + "  " * depth) if depth else text


class Items:
    """An array value of :func:`write_object`, written item by item as the iterable yields."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items

    def write(self, out: IO[str], depth: int) -> None:
        """Write the array as ``json.dumps(indent=2)`` would at ``depth``."""
        pad = "\n" + "  " * (depth + 1)
        first = True
        for item in self.items:
            out.write(("[" if first else ",") + pad + _indented(item, depth + 1))
            first = False
        out.write("[]" if first else "\n" + "  " * depth + "]")


class SpooledArray:
    """An array built item by item into a spooled temporary file (written later, at depth 1).

    For views that print a count before the array: the items are serialized as they come, and
    only their text is kept (on disk past :data:`SPOOL_BYTES`).
    """

    DEPTH = 1

    def __init__(self) -> None:
        self.count = 0
        self._file = spool()

    def append(self, item: Any) -> None:
        """Add one item."""
        pad = "\n" + "  " * (self.DEPTH + 1)
        self._file.write(("[" if not self.count else ",") + pad + _indented(item, self.DEPTH + 1))
        self.count += 1

    def write(self, out: IO[str], depth: int) -> None:
        """Copy the array into ``out`` (it was formatted for depth 1)."""
        if depth != self.DEPTH:
            raise ValueError(f"a SpooledArray is formatted for depth {self.DEPTH}, not {depth}")
        if not self.count:
            out.write("[]")
            return
        self._file.seek(0)
        shutil.copyfileobj(self._file, out)
        out.write("\n" + "  " * depth + "]")

    def close(self) -> None:
        """Drop the buffer."""
        self._file.close()


def write_object(out: IO[str], fields: Iterable[tuple[str, Any]]) -> None:
    """Write ``{key: value, …}`` exactly as ``json.dumps(dict(fields), indent=2)`` + newline would.

    A value may be :class:`Items` or :class:`SpooledArray` (written in place, item by item).
    """
    first = True
    for key, value in fields:
        out.write(("{" if first else ",") + "\n  " + json.dumps(key, ensure_ascii=False) + ": ")
        first = False
        if isinstance(value, Items | SpooledArray):
            value.write(out, 1)
        else:
            out.write(_indented(value, 1))
    out.write("{}\n" if first else "\n}\n")


def ascii_escaped(text: str) -> str:
    """``text`` with every non-ASCII character (and DEL) as a JSON ``\\uXXXX`` escape.

    Applied to JSON text, this gives exactly what ``json.dumps(…, ensure_ascii=True)`` writes: outside
    strings JSON text is ASCII, and inside them json escapes each non-ASCII code point the same way.
    """
    if text.isascii() and "\x7f" not in text:
        return text
    out = []
    for ch in text:
        n = ord(ch)
        if n < 0x7F:  # json escapes DEL (0x7f) too
            out.append(ch)
        elif n < 0x10000:
            out.append(f"\\u{n:04x}")
        else:
            n -= 0x10000
            out.append(f"\\u{0xD800 | (n >> 10):04x}\\u{0xDC00 | (n & 0x3FF):04x}")
    return "".join(out)


def copy_out(src: IO[str], out: IO[str], encoding: str | None, chunk: int = 1 << 16) -> None:
    """Copy finished JSON text to ``out``; all of it ASCII-escaped if ``encoding`` cannot encode a part.

    The same choice the in-memory renderer makes for a whole text (a non-UTF-8 terminal).
    """
    escape = False
    src.seek(0)
    try:
        while block := src.read(chunk):
            block.encode(encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        escape = True
    src.seek(0)
    while block := src.read(chunk):
        out.write(ascii_escaped(block) if escape else block)


# -- external sort --------------------------------------------------------------------------------
class ExternalSort:
    """Sort items by key in bounded memory; iterate the sorted items once (then :meth:`close`).

    ``add(key, item)`` serializes ``item`` to compact JSON at once; past ``chunk_bytes`` the chunk
    is sorted and spilled to a temporary file. Iterating merges the spills (and what is still in
    memory) and yields the items, parsed back from their JSON. Equal keys keep insertion order.
    """

    def __init__(self, *, chunk_bytes: int | None = None, fan_in: int | None = None) -> None:
        self.count = 0
        self._chunk: list[tuple[list[Any], str]] = []
        self._chunk_bytes = 0
        self._limit = SORT_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        self._fan_in = max(2, SORT_FAN_IN if fan_in is None else fan_in)
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._spills: list[str] = []
        self._files: list[IO[str]] = []
        self._made = 0

    def __enter__(self) -> ExternalSort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, key: Key, item: Any) -> None:
        """Add one item under ``key``."""
        text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        # Keys go through JSON in the spill files; make them lists now so that every comparison
        # (in memory and after a spill) compares the same types.
        self._chunk.append((list(key), text))
        self._chunk_bytes += len(text) + 64
        self.count += 1
        if self._chunk_bytes >= self._limit:
            self._spill()

    def _path(self) -> str:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="phaselog-sort-")
        self._made += 1
        return os.path.join(self._dir.name, f"{self._made:06d}")

    def _spill(self) -> None:
        self._chunk.sort(key=lambda kv: kv[0])  # stable: insertion order among equal keys
        path = self._path()
        with open(path, "w", encoding="utf-8", errors="surrogatepass", newline="\n") as fh:
            for key, text in self._chunk:
                # Compact JSON holds no raw tab or newline: a tab separates the key from the item.
                fh.write(json.dumps(key, ensure_ascii=False) + "\t" + text + "\n")
        self._spills.append(path)
        self._chunk = []
        self._chunk_bytes = 0
        while len(self._spills) > self._fan_in:  # merge the oldest spills first: order is kept
            self._merge_front()

    def _read(self, path: str) -> Iterator[tuple[list[Any], str]]:
        fh = open(path, encoding="utf-8", errors="surrogatepass", newline="\n")  # noqa: SIM115 - closed by close()
        self._files.append(fh)
        for line in fh:
            key, _, text = line.rstrip("\n").partition("\t")
            yield json.loads(key), text

    def _merge_front(self) -> None:
        group, self._spills = self._spills[: self._fan_in], self._spills[self._fan_in :]
        path = self._path()
        with open(path, "w", encoding="utf-8", errors="surrogatepass", newline="\n") as fh:
            for key, text in heapq.merge(*(self._read(p) for p in group), key=lambda kv: kv[0]):
                fh.write(json.dumps(key, ensure_ascii=False) + "\t" + text + "\n")
        for f in self._files:
            f.close()
        self._files = []
        for p in group:
            os.unlink(p)
        self._spills.insert(0, path)

    def __iter__(self) -> Iterator[Any]:
        self._chunk.sort(key=lambda kv: kv[0])
        sources: list[Iterable[tuple[list[Any], str]]] = [self._read(p) for p in self._spills]
        sources.append(self._chunk)  # added last: the newest items, after every spill among equals
        for _, text in heapq.merge(*sources, key=lambda kv: kv[0]):
            yield json.loads(text)

    def close(self) -> None:
        """Remove the spill files."""
        for f in self._files:
            with contextlib.suppress(OSError):
                f.close()
        self._files = []
        self._chunk = []
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
        self._spills = []
