"""Attempts ``doctor --quarantine`` moved aside, as the link checks need them (D115).

Quarantine frees an attempt's number (D18): the next attempt of the phase may take it. A later
phase's ``basis`` (or an attempt's ``prev_hash``) may then name the quarantined attempt, whose number
a newer record now holds. :func:`phaselog.model.validation.check_links` says so ("quarantined"), as a
warning, instead of reporting that the attempt "changed after this was written". A store that can
quarantine declares ``Capability.QUARANTINE`` and says what it quarantined with ``quarantined(ticket_id, run_id)``.
"""

from __future__ import annotations

from phaselog.model.errors import PhaselogError
from phaselog.stores.base import Store, quarantiner

#: (phase, attempt) → the content hash the quarantined record carried (None: not known).
Quarantined = dict[tuple[str, int], "str | None"]


def quarantined_attempts(store: Store, ticket_id: str, run_id: str) -> Quarantined:
    """The run's quarantined attempts (empty for a store that keeps no quarantine)."""
    keeper = quarantiner(store)  # declared (Capability.QUARANTINE), never probed
    if keeper is None:
        return {}
    try:
        found = keeper.quarantined(ticket_id, run_id)
    except PhaselogError:
        return {}
    return found
