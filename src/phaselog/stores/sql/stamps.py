"""Change stamps on the SQL stores (see :mod:`phaselog.stores.stamps`): per run, the count and the
sum of attempt numbers of its checkpoints and the count and the greatest name of its entries — one
query per kind for the whole ticket.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phaselog.stores.sql.session import Session


def ticket_stamp(session: Session, ticket_id: str) -> str | None:
    """A SQL store's ticket stamp: the count and greatest name of its marker revisions."""
    rows = session.query(
        "SELECT COUNT(*), MAX(name) FROM phaselog_entries WHERE kind = ? AND ticket_id = ?",
        ("markers", ticket_id),
    )
    return f"{rows[0][0]}:{rows[0][1]}" if rows else "0"


def run_stamps(session: Session, runs: list[str], ticket_id: str) -> dict[str, str | None]:
    """A SQL store's run stamps (see the module docstring)."""
    stamps: dict[str, list[str]] = {run_id: [] for run_id in runs}
    for run_id, count, total in session.query(
        "SELECT run_id, COUNT(*), SUM(attempt) FROM phaselog_checkpoints WHERE ticket_id = ? GROUP BY run_id",
        (ticket_id,),
    ):
        stamps.setdefault(str(run_id), []).append(f"c{count}.{total}")
    for run_id, kind, count, last in session.query(
        "SELECT run_id, kind, COUNT(*), MAX(name) FROM phaselog_entries WHERE ticket_id = ? AND run_id <> '' "
        "GROUP BY run_id, kind",
        (ticket_id,),
    ):
        stamps.setdefault(str(run_id), []).append(f"{kind}{count}.{last}")
    return {run_id: "|".join(sorted(parts)) for run_id, parts in stamps.items()}
