"""The run snapshot on the SQL stores: two queries (a third only while an attempt is in flight).

1. Per phase, an aggregate over the run's attempts (``GROUP BY phase_ordinal, phase``: how many,
   the newest, the newest completed), joined with the bodies of only the rows the state depends
   on: the newest attempt and the newest completed one. No row per attempt travels; with the
   covering index ``phaselog_checkpoints_summary`` (migration 5) the aggregate reads the index
   alone. With ``history`` every row and body is read instead. On PostgreSQL the statement is
   sent together with query 2 (psycopg's pipeline mode): one round trip.
2. The run's audit entries (progress event names, approvals) and the ticket's marker revisions,
   without the bodies of progress events.
3. Only when an attempt is in flight (events newer than their phase's newest record): those events.

It returns exactly what :func:`phaselog.stores.snapshot.build_snapshot` builds from the contract's
primitives (the conformance tests compare them), in far fewer round trips.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phaselog.model.errors import Corrupt, UnsupportedVersion
from phaselog.model.ids import validate_ticket_id
from phaselog.stores.base import AttemptRef, Damaged, Stored
from phaselog.stores.kernel import damaged_from, entry_location
from phaselog.stores.snapshot import (
    Entry,
    Group,
    PhaseSummary,
    RunSnapshot,
    assemble,
    flight_attempts,
    get_or_damaged,
    load_latest,
    summarize,
    summarize_groups,
)
from phaselog.stores.sql.carried import RUN_STAMP, run_stamp_params
from phaselog.stores.sql.carried import run_stamp as make_run_stamp
from phaselog.stores.sql.runcheck import Body, Row, RunCheck, run_check

if TYPE_CHECKING:
    from phaselog.stores.base import Store
    from phaselog.stores.sql.checkpoints import SqlCheckpoints

#: What a snapshot read saw, for a run check: the checkpoint rows decoded, the entry bodies read.
Seen = tuple[list[Row], list[Body]]

# One statement, so the aggregate and the bodies are one consistent read (no race with a prune).
# Per (phase, name): how many attempts and the newest from the covering index; the newest completed
# by walking that index down from the top (a correlated ``LIMIT 1``: it stops at the first completed
# attempt, cheaper than a CASE per row); then the bodies of the phase's newest and newest completed.
_SUMMARY = (
    "WITH g AS (SELECT a.phase_ordinal, a.phase, COUNT(*) AS n, MAX(a.attempt) AS top, "
    "(SELECT d.attempt FROM phaselog_checkpoints d WHERE d.ticket_id = ? AND d.run_id = ? "
    "AND d.phase_ordinal = a.phase_ordinal AND d.phase = a.phase AND d.status = 'completed' "
    "ORDER BY d.attempt DESC LIMIT 1) AS done "
    "FROM phaselog_checkpoints a WHERE a.ticket_id = ? AND a.run_id = ? "
    "GROUP BY a.phase_ordinal, a.phase), "
    "w AS (SELECT phase_ordinal, phase, n, top, done, MAX(top) OVER p AS p_top, MAX(done) OVER p AS p_done "
    "FROM g WINDOW p AS (PARTITION BY phase_ordinal)) "
    "SELECT w.phase_ordinal, w.phase, w.n, w.top, w.done, c.attempt, c.status, c.content_hash, c.body "
    "FROM w LEFT JOIN phaselog_checkpoints c ON c.ticket_id = ? AND c.run_id = ? "
    "AND c.phase_ordinal = w.phase_ordinal AND c.phase = w.phase AND c.attempt IN (w.p_top, w.p_done)"
)
#: ``_SUMMARY`` for a run whose every ordinal holds one phase name (every run phaselog writes): the
#: ordinal's newest attempts are then the group's own, so no window over the groups is needed (a
#: quarter of the statement's time). A run with an ordinal holding two names (damage) is read again
#: with ``_SUMMARY`` (``_one_name_per_ordinal``), so both give the same rows. D193.
_SUMMARY_ONE = (
    "WITH g AS (SELECT a.phase_ordinal, a.phase, COUNT(*) AS n, MAX(a.attempt) AS top, "
    "(SELECT d.attempt FROM phaselog_checkpoints d WHERE d.ticket_id = ? AND d.run_id = ? "
    "AND d.phase_ordinal = a.phase_ordinal AND d.phase = a.phase AND d.status = 'completed' "
    "ORDER BY d.attempt DESC LIMIT 1) AS done "
    "FROM phaselog_checkpoints a WHERE a.ticket_id = ? AND a.run_id = ? "
    "GROUP BY a.phase_ordinal, a.phase) "
    "SELECT g.phase_ordinal, g.phase, g.n, g.top, g.done, c.attempt, c.status, c.content_hash, c.body "
    "FROM g LEFT JOIN phaselog_checkpoints c ON c.ticket_id = ? AND c.run_id = ? "
    "AND c.phase_ordinal = g.phase_ordinal AND c.phase = g.phase AND c.attempt IN (g.top, g.done)"
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


def stamped_snapshot(
    store: Store, cps: SqlCheckpoints, ticket_id: str, run_id: str
) -> tuple[RunSnapshot, Any, RunCheck | None]:
    """The snapshot of one run and the stamp to carry it with (stores/sql/carried.py), taken before
    the run is read: the database's where the dialect has one, else the run's, read in the same
    round trip as the snapshot (None: nothing to carry). With the database's stamp, also the run
    check (stores/sql/runcheck.py): the rows and bodies as read, the fingerprint the snapshot implies."""
    stamp = cps.carried.stamp()
    if stamp is not None:
        seen: Seen = ([], [])
        snap = sql_snapshot(store, cps, ticket_id, run_id, seen=seen)
        return snap, stamp, run_check(snap, *seen)
    if not cps.session.pipelined:
        return sql_snapshot(store, cps, ticket_id, run_id), stamp, None
    found: list[Any] = []
    snap = sql_snapshot(store, cps, ticket_id, run_id, run_stamp=found)
    return snap, (make_run_stamp(found[0]) if found else None), None


def sql_snapshot(
    store: Store,
    cps: SqlCheckpoints,
    ticket_id: str,
    run_id: str,
    *,
    history: bool = False,
    run_stamp: list[Any] | None = None,
    seen: Seen | None = None,
) -> RunSnapshot:
    """The snapshot of one run (``cps``: its store's checkpoint rows), read with two or three queries.

    ``run_stamp``: a list that gets the row of :data:`~phaselog.stores.sql.carried.RUN_STAMP`, read
    first in the same round trip (only where the session pipelines). ``seen``: lists that get the
    checkpoint rows decoded and the entry bodies read (a run check's, stores/sql/runcheck.py)."""
    validate_ticket_id(ticket_id)
    session = cps.session
    order = f" ORDER BY kind, name{session.dialect.collate}"  # a fixed collation clause; values are bound
    entry_rows: list[tuple[Any, ...]] | None = None
    records: dict[tuple[int, int], Stored | Damaged] = {}
    refs: tuple[AttemptRef, ...] = ()
    if history:
        refs_list: list[AttemptRef] = []
        for ordinal, attempt, phase, status, column_hash, body in session.query(_ALL_RECORDS, (ticket_id, run_id)):
            refs_list.append(AttemptRef(ordinal, attempt, phase, status == "completed"))
            _decode(cps, records, ticket_id, run_id, (ordinal, attempt, phase, status, column_hash, body))
        refs = tuple(refs_list)
        summaries = summarize(refs)
    else:
        rows, entry_rows = _summary_and_entries(cps, ticket_id, run_id, _ENTRIES + order, run_stamp)
        if not _one_name_per_ordinal(rows):
            rows = session.query(_SUMMARY, (ticket_id, run_id) * 3)  # the windowed form (D193)
        summaries = _summaries(cps, records, ticket_id, run_id, rows, seen)
        # When a phase's newest completed record is damaged, read down to an intact one (rare).
        load_latest(
            summaries,
            records,
            lambda ref: get_or_damaged(store, ticket_id, run_id, ref),
            lambda ordinal: [r for r in store.attempts(ticket_id, run_id) if r.phase_ordinal == ordinal],
        )
    if entry_rows is None:
        entry_rows = session.query(_ENTRIES + order, (1 if history else 0, ticket_id, run_id))
    names: list[str] = []
    events: list[Entry] = []
    approvals: list[Entry] = []
    markers: list[Entry] = []
    for kind, name, body in entry_rows:
        if seen is not None and kind != "progress":
            seen[1].append((kind, name, body))
        if kind == "progress":
            names.append(name)
            if history:
                events.append((name, entry_location("progress", ticket_id, run_id, name), body.encode("utf-8")))
        elif kind == "approvals":
            approvals.append((name, entry_location("approvals", ticket_id, run_id, name), body.encode("utf-8")))
        else:
            markers.append((name, entry_location("markers", ticket_id, None, name), body.encode("utf-8")))
    if not history:
        events = _flight_events(cps, ticket_id, run_id, summaries, names)
    snap = RunSnapshot(
        ticket_id, run_id, summaries, records, tuple(names), tuple(events), tuple(approvals), None, history, refs
    )
    return assemble(snap, lambda: markers)


def _decode(
    cps: SqlCheckpoints,
    records: dict[tuple[int, int], Stored | Damaged],
    ticket_id: str,
    run_id: str,
    row: tuple[Any, ...],
    *,
    shared: bool = False,
    seen: Seen | None = None,
) -> None:
    """Decode one row into ``records``. ``shared``: the memo keeps the very record (no copy; a
    snapshot that is not a history one reaches readers detached, D192)."""
    ordinal, attempt, phase, status, column_hash, body = row
    if seen is not None:
        seen[0].append((ordinal, attempt, phase, status, column_hash, body))
    try:
        records[(ordinal, attempt)] = cps.stored(
            ticket_id, run_id, ordinal, phase, attempt, status, body, column_hash, shared=shared
        )
    except (Corrupt, UnsupportedVersion) as exc:
        records[(ordinal, attempt)] = damaged_from(exc, ticket_id, run_id, ordinal, phase, attempt)


def _one_name_per_ordinal(rows: list[tuple[Any, ...]]) -> bool:
    """Does every ordinal among ``_SUMMARY_ONE``'s rows hold one phase name (so its rows are ``_SUMMARY``'s)?"""
    names: dict[int, str] = {}
    return all(names.setdefault(row[0], row[1]) == row[1] for row in rows)


def _summaries(
    cps: SqlCheckpoints,
    records: dict[tuple[int, int], Stored | Damaged],
    ticket_id: str,
    run_id: str,
    rows: list[tuple[Any, ...]],
    seen: Seen | None = None,
) -> tuple[PhaseSummary, ...]:
    """The phases' summaries from ``_SUMMARY``'s rows (a group's row once per body it joined), and
    the joined bodies decoded into ``records``."""
    groups: dict[tuple[int, str], Group] = {}
    for ordinal, phase, n, top, done, attempt, status, column_hash, body in rows:
        groups[(ordinal, phase)] = (ordinal, phase, n, top, done)
        if attempt is not None:
            row = (ordinal, attempt, phase, status, column_hash, body)
            _decode(cps, records, ticket_id, run_id, row, shared=True, seen=seen)
    return summarize_groups(groups.values())


def _summary_and_entries(
    cps: SqlCheckpoints, ticket_id: str, run_id: str, entries_sql: str, run_stamp: list[Any] | None = None
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]] | None]:
    """``_SUMMARY_ONE`` and the entries query in one round trip (psycopg's pipeline mode), where the
    dialect declares one; else the summary alone (the caller then reads the entries). With
    ``run_stamp``, the run stamp is read first in the same round trip (a write between them makes
    the stamp older than the rows: the append that checks it then refuses, never the reverse)."""
    params = (ticket_id, run_id) * 3  # the walk down, the aggregate, the bodies
    session = cps.session
    if not session.pipelined:
        return session.query(_SUMMARY_ONE, params), None
    statements: list[tuple[str, Any]] = [(_SUMMARY_ONE, params), (entries_sql, (0, ticket_id, run_id))]
    if run_stamp is not None:
        statements.insert(0, (RUN_STAMP, run_stamp_params(ticket_id, run_id)))
    found = session.query_together(statements)
    if run_stamp is not None:
        run_stamp.extend(found.pop(0)[:1])
    return found[0], found[1]


def _flight_events(
    cps: SqlCheckpoints, ticket_id: str, run_id: str, summaries: tuple[PhaseSummary, ...], names: list[str]
) -> list[Entry]:
    """The bodies of events newer than their phase's newest record (one query, only if any)."""
    wanted = [name for attempt_names in flight_attempts(summaries, names).values() for name in attempt_names]
    if not wanted:
        return []
    marks = ", ".join("?" for _ in wanted)
    params: list[Any] = [ticket_id, run_id, *wanted]
    rows = cps.session.query(
        "SELECT name, body FROM phaselog_entries WHERE kind = 'progress' AND ticket_id = ? AND run_id = ? "
        f"AND name IN ({marks}) ORDER BY name{cps.session.dialect.collate}",
        params,
    )
    return [(n, entry_location("progress", ticket_id, run_id, n), b.encode("utf-8")) for n, b in rows]
