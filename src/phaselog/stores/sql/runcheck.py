"""The run check: did *this run* move, asked under the write lock when the database did (SQLite).

SQLite's change stamp (``PRAGMA data_version``, stores/sql/carried.py) is the whole database's:
with several writers, each on runs of its own, it moves between any two writes of one process, and
every write read its run again (two statements and the decoding of every phase's newest record)
although nobody touched that run. A :class:`RunCheck`, taken when the snapshot is read and carried
with it, lets the append ask about the run alone, in one statement inside its write transaction:

* **exactly** for every row the snapshot holds (the records a write decides on: each phase's
  newest and newest completed attempt): each must still be there with the very phase name, status,
  content hash and body that were decoded — bytes edited in place are seen;
* **exactly** for each phase's newest completed attempt: no completed attempt above it;
* **exactly** for the entries whose bodies a snapshot reads (approvals, the ticket's markers):
  the same rows, each with the same body, and no other;
* **exactly**, for the rest of the run's rows, that each phase's attempts are 1..newest under one
  name and that there is no other row: per phase its least and greatest attempt and phase name and
  the next ordinal above it (index seeks, O(log n) each), and the count of the run's rows (one pass
  over an index, no sort, no string built per row; D330). With attempts unique per phase, a count of
  the sum of the newest attempts leaves no room for a gap or a stray row. It is implied by the
  snapshot itself where each phase's attempts are 1..newest under one name, as writes leave them;
  elsewhere nothing is checked this way (no check: the database's stamp alone decides, as before);
* by a fingerprint, as PostgreSQL's run stamp does (D163), for the progress events: their count,
  greatest name and total name length.

A check that holds means a fresh read would give the carried snapshot, up to the fingerprint's
limit (compensating edits of progress events' names, which the read path still verifies when it
decodes them). A snapshot that holds a row not seen by its own read (a damaged phase read down by
a second path) or events in flight carries no check. See docs/decisions.md D180, D330.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from phaselog.stores.snapshot import RunSnapshot
    from phaselog.stores.sql.dialect import Transaction

_ROWS = "FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ?"
_PHASE_ROWS = f"{_ROWS} AND phase_ordinal = ?"
_PROGRESS = "FROM phaselog_entries WHERE ticket_id = ? AND run_id = ? AND kind = 'progress'"
_BODIES = (
    "FROM phaselog_entries WHERE ticket_id = ? AND ((run_id = ? AND kind = 'approvals') "
    "OR (run_id = '' AND kind = 'markers'))"
)
#: :attr:`RunCheck.fingerprint`, in its order: the count of the run's rows (one pass over an index),
#: the first ordinal (a seek), the progress events' fingerprint (a derived table, after the select
#: list) and the count of bodied entries.
_FINGERPRINT_HEAD = (
    f"SELECT (SELECT COUNT(*) {_ROWS}), (SELECT MIN(phase_ordinal) {_ROWS}), p.n, p.m, p.l, (SELECT COUNT(*) {_BODIES})"
)
_FINGERPRINT_FROM = (
    f" FROM (SELECT COUNT(*) AS n, COALESCE(MAX(name), '') AS m, COALESCE(SUM(LENGTH(name)), 0) AS l {_PROGRESS}) AS p"
)
#: Per phase, in :attr:`RunCheck.phases`' order: its least and greatest attempt and phase name, and the
#: next ordinal above it (None after the last): each a seek on an index of (ticket, run, ordinal, …).
_PHASE_SHAPE = (
    f", (SELECT MIN(attempt) {_PHASE_ROWS}), (SELECT MAX(attempt) {_PHASE_ROWS}), (SELECT MIN(phase) {_PHASE_ROWS}), "
    f"(SELECT MAX(phase) {_PHASE_ROWS}), (SELECT MIN(phase_ordinal) {_ROWS} AND phase_ordinal > ?)"
)
_PHASE_BOUND = 15  # the values one phase's shape binds
#: The most values one run check binds (SQLite's limit is 32,766; a run of 1,000 phases with two
#: held records each binds ~29,000): above it the run carries no check.
MAX_BOUND = 30_000
_HELD_ROW = "(phase_ordinal = ? AND attempt = ? AND phase = ? AND status = ? AND content_hash = ? AND body = ?)"
_DONE_ABOVE = "(phase_ordinal = ? AND attempt > ?)"

Row = tuple[int, int, str, str, str, str]  # ordinal, attempt, phase, status, content_hash, body
Body = tuple[str, str, str]  # kind, name, body


@dataclass(frozen=True)
class RunCheck:
    """What the append compares under the write lock: the run's fingerprint (as the snapshot
    implies it), each phase's newest completed attempt, the rows the snapshot holds (as read) and
    the entry bodies it read."""

    fingerprint: tuple[Any, ...]
    #: Per phase: its ordinal and newest completed attempt (0: none); no completed attempt above it.
    done: tuple[tuple[int, int], ...]
    #: Per phase, by ordinal: its ordinal, its one name and its newest attempt (its attempts are 1..newest).
    phases: tuple[tuple[int, str, int], ...]
    rows: tuple[Row, ...]
    bodies: tuple[Body, ...]

    def holds(self, tx: Transaction, ticket_id: str, run_id: str) -> bool:
        """Inside the write transaction: is the run still exactly as this check saw it?"""
        text = [_FINGERPRINT_HEAD]
        params: list[Any] = [
            ticket_id,
            run_id,
        ] * 3  # the counts' and the first ordinal's; the derived table's come last
        expected = [*self.fingerprint]
        following: list[int | None] = [p[0] for p in self.phases[1:]]
        if self.phases:
            following.append(None)  # no ordinal above the last phase
        for (ordinal, name, newest), after in zip(self.phases, following, strict=True):
            text.append(_PHASE_SHAPE)
            params += [*(ticket_id, run_id, ordinal) * 4, ticket_id, run_id, ordinal]
            expected += [1, newest, name, name, after]
        for parts, template, kind in ((self.rows, _HELD_ROW, _ROWS), (self.bodies, _BODIES_ROW, _BODIES)):
            if parts:
                text.append(f", (SELECT COUNT(*) {kind} AND ({' OR '.join(template for _ in parts)}))")
                params += [ticket_id, run_id, *(v for part in parts for v in part)]
                expected.append(len(parts))
        if self.done:
            text.append(f", (SELECT COUNT(*) {_ROWS} AND status = 'completed' AND (")
            text.append(" OR ".join(_DONE_ABOVE for _ in self.done) + "))")
            params += [ticket_id, run_id, *(v for pair in self.done for v in pair)]
            expected.append(0)
        text.append(_FINGERPRINT_FROM)
        params += [ticket_id, run_id]
        got = tx.one("".join(text), params)
        return got is not None and tuple(v if v is None or isinstance(v, str) else int(v) for v in got) == tuple(
            expected
        )


_BODIES_ROW = "(kind = ? AND name = ? AND body = ?)"


def run_check(snap: RunSnapshot, rows: Iterable[Row], bodies: Iterable[Body]) -> RunCheck | None:
    """The check of ``snap``, read with ``rows`` (the checkpoint rows it decoded, or more) and
    ``bodies`` (the entry bodies it read); None where the snapshot does not imply the fingerprint: a phase whose
    attempts are not exactly 1..newest under one name (pruned, renamed), a row it holds that was
    not seen here (read by a second path), or events in flight (their bodies were read)."""
    seen_rows = {(r[0], r[1]): r for r in rows}
    if snap.events or not all(k in seen_rows for k in snap.records):
        return None
    held = [seen_rows[k] for k in sorted(snap.records)]  # only what the snapshot holds is compared
    count = 0
    done: list[tuple[int, int]] = []
    phases: list[tuple[int, str, int]] = []
    for summary in sorted(snap.summaries, key=lambda s: s.ordinal):
        if len(summary.counts) != 1:
            return None
        ((phase, n),) = summary.counts
        if n != summary.newest.attempt_number:
            return None
        count += n
        phases.append((summary.ordinal, phase, n))
        finished = summary.newest_completed
        done.append((summary.ordinal, 0 if finished is None else finished.attempt_number))
    events = snap.event_names
    seen = tuple(bodies)
    if 6 * len(held) + 3 * len(seen) + 2 * len(done) + _PHASE_BOUND * len(phases) + 8 > MAX_BOUND:
        return None  # a statement SQLite would refuse (its bound-parameter limit): the database's stamp decides
    fingerprint = (
        count,
        phases[0][0] if phases else None,
        len(events),
        max(events, default=""),
        sum(len(e) for e in events),
        len(seen),
    )
    return RunCheck(fingerprint, tuple(done), tuple(phases), tuple(held), seen)
