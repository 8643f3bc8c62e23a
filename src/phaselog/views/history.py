"""History, streamed: the ledger's history entries (:mod:`phaselog.ledger.history`) in time order.

They are ordered across runs with :class:`phaselog.views.streams.ExternalSort`, so memory does not
grow with the number of records; equal keys stay in the order they were read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from phaselog.ledger.history import history_items
from phaselog.views.streams import ExternalSort

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger


def sorted_history(ledger: Ledger, ticket_id: str, run_id: str | None = None, phase: str | None = None) -> ExternalSort:
    """Every history entry, sorted, ready to iterate once (close it afterwards).

    Everything is read (and every error raised) here, before the caller prints anything.
    """
    out = ExternalSort()
    try:
        items = history_items(
            ledger.store,
            ticket_id,
            run_id,
            phase,
            markers=ledger.markers,
            pipeline_for=ledger.pipeline_for,
            event_index=ledger.event_index,
            approvals=ledger.approvals,
        )
        for key, entry in items:
            out.add(key, entry)
    except BaseException:
        out.close()
        raise
    return out
