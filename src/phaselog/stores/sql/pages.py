"""Reading many rows in pages, so that a listing's memory does not grow with the store.

A query ordered by (run_id, phase_ordinal, attempt) is read ``PAGE_ROWS`` rows at a time, each
page starting after the last key of the one before (keyset paging). Each page is one short read
of its own: it is retried like any read, holds no transaction open while the caller works on the
rows, and leaves the connection free for other reads in between (a server-side cursor would pin
a snapshot, and on PostgreSQL would not survive the rollback that ends each read).

Records are append-only and the key is unique, so paging neither repeats nor skips a record that
existed when the listing began; one appended meanwhile appears if its key is after the page
being read (see docs/decisions.md, "streamed output").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

PAGE_ROWS = 500

Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


def paged_by_key(
    query: Query,
    select: str,
    params: Sequence[Any],
    collate: str,
    *,
    key: tuple[int, int, int],
    page: int | None = None,
) -> Iterator[tuple[Any, ...]]:
    """Rows of ``select`` (a ``SELECT … WHERE …`` without ORDER BY) in (run_id, phase_ordinal,
    attempt) order, ``page`` (default :data:`PAGE_ROWS`) at a time; ``key`` gives those columns'
    positions in a row."""
    page = PAGE_ROWS if page is None else page
    order = f" ORDER BY run_id{collate}, phase_ordinal, attempt LIMIT {int(page)}"
    after = f" AND (run_id{collate} > ? OR (run_id = ? AND (phase_ordinal > ? OR (phase_ordinal = ? AND attempt > ?))))"
    rows = query(select + order, list(params))
    while rows:
        yield from rows
        if len(rows) < page:
            return
        last = rows[-1]
        run, ordinal, attempt = last[key[0]], last[key[1]], last[key[2]]
        rows = query(select + after + order, [*params, run, run, ordinal, ordinal, attempt])
