"""The run snapshot on the SQL stores: two queries (three while an attempt is in flight).

1. Every attempt of the run, with the body of only the rows the state depends on: per phase the
   newest attempt and the newest completed one (window functions; every body with ``history``).
2. The run's audit entries (progress event names, approvals) and the ticket's marker revisions,
   without the bodies of progress events.
3. Only when an attempt is in flight (events newer than its phase's newest record): those events.

It returns exactly what :func:`phaselog.stores.snapshot.build_snapshot` builds from the contract's
primitives (the conformance tests compare them), in far fewer round trips.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phaselog.errors import Corrupt, UnsupportedVersion
from phaselog.ids import validate_ticket_id
from phaselog.stores.base import AttemptRef, Damaged, Stored
from phaselog.stores.kernel import damaged_from, entry_location
from phaselog.stores.snapshot import Entry, RunSnapshot, assemble, flight_attempts, get_or_damaged, load_latest

if TYPE_CHECKING:
    from phaselog.stores.sql import SqlStore

_RECORDS = (
    "SELECT phase_ordinal, attempt, phase, status, content_hash, "
    "CASE WHEN attempt = MAX(attempt) OVER w "
    "OR attempt = MAX(CASE WHEN status = 'completed' THEN attempt END) OVER w THEN body END "
    "FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
    "WINDOW w AS (PARTITION BY phase_ordinal) ORDER BY phase_ordinal, attempt"
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
    rows = store._query(_ALL_RECORDS if history else _RECORDS, (ticket_id, run_id))
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
    order = f" ORDER BY kind, name{store.dialect.collate}"  # a fixed collation clause; values are bound
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
