"""A whole listing, streamed: every record of a ticket (or run) after a cursor, read once.

``Ledger.list`` returns one page (``--limit``); :func:`iter_listing` yields every record in the
same order, in bounded memory, for ``phaselog list`` without ``--limit`` (and views.page_stream).
"""

from __future__ import annotations

from collections.abc import Iterator

from phaselog.ledger.reads import parse_cursor
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.stores.base import Damaged, Store, Stored


def cursor_of(entry: Stored | Damaged) -> str:
    """The ``--after`` cursor that continues after ``entry``: ``RUN_UUID:ORDINAL:ATTEMPT``."""
    if isinstance(entry, Damaged):
        return f"{entry.run_id}:{entry.phase_ordinal}:{entry.attempt_number}"
    r = entry.record
    return f"{r.run_id}:{r.phase_ordinal}:{r.attempt_number}"


def iter_listing(
    store: Store, ticket_id: str, run_id: str | None = None, *, after: str | None = None
) -> Iterator[Stored | Damaged]:
    """Every record (and damaged entry) ordered by (run, phase ordinal, attempt), after ``after``.

    Ids and the cursor are checked before the first record is read (a bad one raises at once).
    """

    ticket_id = validate_ticket_id(ticket_id)
    run = normalize_run_id(run_id) if run_id is not None else None
    cursor = parse_cursor(after)
    return _after(store.iter_records(ticket_id, run), cursor)


def _after(entries: Iterator[Stored | Damaged], cursor: tuple[str, int, int] | None) -> Iterator[Stored | Damaged]:
    for entry in entries:
        if cursor is not None:
            if isinstance(entry, Damaged):
                key = (entry.run_id, entry.phase_ordinal, entry.attempt_number)
            else:
                key = (entry.record.run_id, entry.record.phase_ordinal, entry.record.attempt_number)
            if key <= cursor:
                continue
        yield entry
