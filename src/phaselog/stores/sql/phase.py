"""A read of one phase's checkpoint in one statement (``Capability.PHASE_READ`` on the SQL stores).

``Reads.read`` of the latest checkpoint used to list the run's attempts (to find the phase by name
or ordinal, and its newest completed attempt) and then fetch that row: two store calls. Here one
statement finds the phase as that listing did (the first attempt, in (ordinal, attempt) order,
whose phase name or ordinal is the one asked for), then its newest completed attempt and every
newer one (a failed attempt newer than the checkpoint is read too: if it is damaged, the older
checkpoint is not the latest). Only the plain case is answered: whenever something is missing or
damaged the answer is None and the caller takes its general path, whose errors and hints are
unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from phaselog.model.errors import Corrupt, UnsupportedVersion
from phaselog.model.ids import validate_ticket_id

if TYPE_CHECKING:
    from phaselog.stores.base import Stored
    from phaselog.stores.sql.store import SqlStore

#: The phase's ordinal: its first attempt, in (ordinal, attempt) order, named by name or ordinal.
_ORDINAL = (
    "(SELECT phase_ordinal FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
    "AND (phase = ? OR phase_ordinal = ?) ORDER BY phase_ordinal LIMIT 1)"
)
_ROWS = (
    "SELECT phase_ordinal, attempt, phase, status, content_hash, body FROM phaselog_checkpoints "
    f"WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = {_ORDINAL} AND attempt "
)
# Scalar subqueries, not a WITH clause: SQLite materialises a CTE (twice the time of both reads).
_LATEST = (
    f"{_ROWS}>= (SELECT attempt FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
    f"AND phase_ordinal = {_ORDINAL} AND status = 'completed' ORDER BY attempt DESC LIMIT 1) ORDER BY attempt"
)
_ONE = f"{_ROWS}= ?"


def read_phase(store: SqlStore, ticket_id: str, run_id: str, phase: str | int, attempt: int | None) -> Stored | None:
    """Attempt ``attempt`` of ``phase``, or (None) its latest checkpoint; None unless plainly there and intact."""
    validate_ticket_id(ticket_id)
    text = str(phase)
    ordinal = int(text) if text.isascii() and text.isdigit() and str(int(text)) == text else -1
    name = phase if isinstance(phase, str) else None
    phase_key = (ticket_id, run_id, ticket_id, run_id, name, ordinal)
    if attempt is None:
        rows = store._query(_LATEST, (*phase_key, *phase_key))
        if not rows or rows[0][3] != "completed":
            return None
    else:
        rows = store._query(_ONE, (*phase_key, attempt))
        if not rows:
            return None
    try:
        found = [store._stored(ticket_id, run_id, o, p, a, s, body, h) for o, a, p, s, h, body in rows]
    except (Corrupt, UnsupportedVersion):
        return None  # the caller's general path reads it again and says what is wrong, and where
    return found[0]
