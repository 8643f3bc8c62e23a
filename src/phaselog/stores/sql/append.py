"""An append in one statement, where a round trip is dear (PostgreSQL).

The transaction of :meth:`SqlStore.append` costs four round trips (``BEGIN``, the read of the
phase's latest attempt, the ``INSERT``, ``COMMIT``). Without a fence to check, one autocommitted
statement does the same: it inserts only while the phase's latest attempt is still the one the
writer read, and ``ON CONFLICT DO NOTHING`` turns a duplicate attempt or a second successor of the
same attempt into "nothing inserted". Only then does the store run the transaction, whose read
says why (AlreadyExists or Conflict) exactly as before. The constraints are the same either way:
the primary key and the one-successor rule decide, the first writer wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phaselog.model.records import Checkpoint
    from phaselog.stores.sql.store import SqlStore

_INSERT_AT_ONCE = (
    "INSERT INTO phaselog_checkpoints (ticket_id, run_id, phase_ordinal, phase, attempt, prev_attempt, status, "
    "content_hash, body) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE COALESCE((SELECT MAX(attempt) FROM "
    "phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ?), 0) = ? "
    "ON CONFLICT DO NOTHING RETURNING 1"
)


def insert_at_once(store: SqlStore, record: Checkpoint, body: str, expected_latest: int) -> bool:
    """Insert ``record`` in one autocommitted statement; False when nothing was inserted."""
    store._ensure_ready()
    store.dialect.check_writable()
    key = (record.ticket_id, record.run_id, record.phase_ordinal)
    params: tuple[Any, ...] = (
        *key,
        record.phase,
        record.attempt_number,
        expected_latest,
        record.status,
        record.content_hash,
        body,
        *key,
        expected_latest,
    )
    try:
        row = store.conn.execute(store._sql(_INSERT_AT_ONCE), params).fetchone()
    except Exception as exc:
        typed = store._translate(exc)
        if typed is not None:
            raise typed from None
        raise
    return row is not None
