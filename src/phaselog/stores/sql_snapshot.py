"""The run snapshot on the SQL stores: two or three queries (one more while an attempt is in flight).

1. Every attempt of the run, with the body of only the rows the state depends on: per phase the
   newest attempt and the newest completed one (every body with ``history``). Where a round trip
   is dear (PostgreSQL) one statement does it with window functions, sent together with query 2
   (psycopg's pipeline mode); on SQLite, whose window sorter copies every row's body (50 ms at
   1,000 attempts), a narrow listing of the attempts and then a lookup of the few wanted rows by
   primary key (about 1 ms at 1,000 attempts).
2. The run's audit entries (progress event names, approvals) and the ticket's marker revisions,
   without the bodies of progress events.
3. Only when an attempt is in flight (events newer than its phase's newest record): those events.

It returns exactly what :func:`phaselog.stores.snapshot.build_snapshot` builds from the contract's
primitives (the conformance tests compare them), in far fewer round trips.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phaselog.errors import Corrupt, NotFound, UnsupportedVersion
from phaselog.ids import validate_ticket_id
from phaselog.stores.base import AttemptRef, Damaged, Stored
from phaselog.stores.kernel import damaged_from, entry_location
from phaselog.stores.snapshot import (
    _RETRIES,
    Entry,
    RunSnapshot,
    assemble,
    flight_attempts,
    get_or_damaged,
    load_latest,
)

if TYPE_CHECKING:
    from phaselog.stores.sql import SqlStore

_RECORDS = (
    "SELECT phase_ordinal, attempt, phase, status, content_hash, "
    "CASE WHEN attempt = MAX(attempt) OVER w "
    "OR attempt = MAX(CASE WHEN status = 'completed' THEN attempt END) OVER w THEN body END "
    "FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
    "WINDOW w AS (PARTITION BY phase_ordinal) ORDER BY phase_ordinal, attempt"
)
_REFS = (
    "SELECT phase_ordinal, attempt, phase, status FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
    "ORDER BY phase_ordinal, attempt"
)
_BODIES = (
    "SELECT phase_ordinal, attempt, content_hash, body FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
)
_ALL_RECORDS = (
    "SELECT phase_ordinal, attempt, phase, status, content_hash, body FROM phaselog_checkpoints "
    "WHERE ticket_id = ? AND run_id = ? ORDER BY phase_ordinal, attempt"
)
_ENTRIES = (
    "SELECT kind, name, CASE WHEN kind = 'progress' AND ? = 0 THEN NULL ELSE body END FROM phaselog_entries "
    "WHERE ticket_id = ? AND ((run_id = ? AND kind IN ('progress', 'approvals')) "
    "OR (run_id = '' AND kind = 'markers')) "
)


def sql_snapshot(store: SqlStore, ticket_id: str, run_id: str, *, history: bool = False) -> RunSnapshot:
    """The snapshot of one run, read with two or three queries."""
    validate_ticket_id(ticket_id)
    order = f" ORDER BY kind, name{store.dialect.collate}"  # a fixed collation clause; values are bound
    entry_rows: list[tuple[Any, ...]] | None = None
    if history:
        rows = store._query(_ALL_RECORDS, (ticket_id, run_id))
    elif store.dialect.round_trips_dear:
        rows, entry_rows = _records_and_entries(store, ticket_id, run_id, _ENTRIES + order)
    else:
        rows = _latest_rows(store, ticket_id, run_id)
    refs: list[AttemptRef] = []
    records: dict[tuple[int, int], Stored | Damaged] = {}
    for ordinal, attempt, phase, status, column_hash, body in rows:
        refs.append(AttemptRef(ordinal, attempt, phase, status == "completed"))
        if body is None:
            continue
        try:
            records[(ordinal, attempt)] = store._stored(
                ticket_id, run_id, ordinal, phase, attempt, status, body, column_hash
            )
        except (Corrupt, UnsupportedVersion) as exc:
            records[(ordinal, attempt)] = damaged_from(exc, ticket_id, run_id, ordinal, phase, attempt)
    if not history:  # when a phase's newest completed record is damaged, read down to an intact one
        load_latest(refs, records, lambda ref: get_or_damaged(store, ticket_id, run_id, ref))
    if entry_rows is None:
        entry_rows = store._query(_ENTRIES + order, (1 if history else 0, ticket_id, run_id))
    names: list[str] = []
    events: list[Entry] = []
    approvals: list[Entry] = []
    markers: list[Entry] = []
    for kind, name, body in entry_rows:
        if kind == "progress":
            names.append(name)
            if history:
                events.append((name, entry_location("progress", ticket_id, run_id, name), body.encode("utf-8")))
        elif kind == "approvals":
            approvals.append((name, entry_location("approvals", ticket_id, run_id, name), body.encode("utf-8")))
        else:
            markers.append((name, entry_location("markers", ticket_id, None, name), body.encode("utf-8")))
    if not history:
        events = _flight_events(store, ticket_id, run_id, refs, names)
    return assemble(
        RunSnapshot(
            ticket_id, run_id, tuple(refs), records, tuple(names), tuple(events), tuple(approvals), None, history
        ),
        lambda: markers,
    )


def _records_and_entries(
    store: SqlStore, ticket_id: str, run_id: str, entries_sql: str
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]] | None]:
    """``_RECORDS`` and the entries query in one round trip (psycopg's pipeline mode), where the
    dialect declares one; else the records alone (the caller then reads the entries)."""
    if not (store.dialect.pipelines and store._ready):
        return store._query(_RECORDS, (ticket_id, run_id)), None

    def both() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        conn = store.conn
        with conn.pipeline():
            records = conn.execute(store._sql(_RECORDS), (ticket_id, run_id))
            entries = conn.execute(store._sql(entries_sql), (0, ticket_id, run_id))
        return list(records.fetchall()), list(entries.fetchall())

    result: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]] = store._retry(both)
    return result


def _latest_rows(store: SqlStore, ticket_id: str, run_id: str) -> list[tuple[Any, ...]]:
    """The rows of ``_RECORDS`` in two cheap statements: every attempt, then the wanted bodies.

    Rows are only ever added, or removed by a prune: a wanted row gone between the two
    statements (a prune won the race) makes the listing start again, as ``build_snapshot`` does.
    """
    for _ in range(_RETRIES):
        refs = store._query(_REFS, (ticket_id, run_id))
        wanted: dict[int, tuple[int, int | None]] = {}  # ordinal -> (newest, newest completed)
        for ordinal, attempt, _phase, status in refs:  # sorted: the last of each phase is the newest
            done = wanted.get(ordinal, (0, None))[1]
            wanted[ordinal] = (attempt, attempt if status == "completed" else done)
        keys = {(o, a) for o, (top, done) in wanted.items() for a in (top, done) if a is not None}
        bodies: dict[tuple[int, int], tuple[Any, Any]] = {}
        if keys:
            where = " OR ".join("(phase_ordinal = ? AND attempt = ?)" for _ in keys)
            params = [ticket_id, run_id, *(v for key in sorted(keys) for v in key)]
            for ordinal, attempt, column_hash, body in store._query(_BODIES + f"AND ({where})", params):
                bodies[(ordinal, attempt)] = (column_hash, body)
        if len(bodies) == len(keys):
            return [(o, a, phase, status, *bodies.get((o, a), (None, None))) for o, a, phase, status in refs]
    raise NotFound(f"run {run_id} changed while it was being read; try again", ticket_id=ticket_id)


def _flight_events(
    store: SqlStore, ticket_id: str, run_id: str, refs: list[AttemptRef], names: list[str]
) -> list[Entry]:
    """The bodies of events newer than their phase's newest record (one query, only if any)."""
    wanted = [name for attempt_names in flight_attempts(refs, names).values() for name in attempt_names]
    if not wanted:
        return []
    marks = ", ".join("?" for _ in wanted)
    params: list[Any] = [ticket_id, run_id, *wanted]
    rows = store._query(
        "SELECT name, body FROM phaselog_entries WHERE kind = 'progress' AND ticket_id = ? AND run_id = ? "
        f"AND name IN ({marks}) ORDER BY name{store.dialect.collate}",
        params,
    )
    return [(n, entry_location("progress", ticket_id, run_id, n), b.encode("utf-8")) for n, b in rows]
