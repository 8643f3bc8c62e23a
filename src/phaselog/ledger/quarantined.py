"""Attempts ``doctor --quarantine`` moved aside, as the link checks need them (D115).

Quarantine frees an attempt's number (D18): the next attempt of the phase may take it. A later
phase's ``basis`` (or an attempt's ``prev_hash``) may then name the quarantined attempt, whose number
a newer record now holds. :func:`phaselog.model.validation.check_links` says so ("quarantined"), as a
warning, instead of reporting that the attempt "changed after this was written". A store that can
quarantine declares ``Capability.QUARANTINE`` and says what it quarantined with ``quarantined(ticket_id, run_id)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from phaselog.model.errors import PhaselogError
from phaselog.stores.base import Capability

if TYPE_CHECKING:
    from phaselog.stores.base import Store

#: (phase, attempt) → the content hash the quarantined record carried (None: not known).
Quarantined = dict[tuple[str, int], "str | None"]


class Quarantining(Protocol):
    """The member a store declaring ``Capability.QUARANTINE`` has for the link checks."""

    def quarantined(self, ticket_id: str, run_id: str) -> Quarantined:
        """(phase, attempt) -> content hash of every attempt of the run moved aside."""
        ...


def quarantined_attempts(store: Store, ticket_id: str, run_id: str) -> Quarantined:
    """The run's quarantined attempts (empty for a store that keeps no quarantine)."""
    if Capability.QUARANTINE not in store.capabilities:  # declared, never probed (CAPABILITY_MEMBERS)
        return {}
    try:
        found = cast(Quarantining, store).quarantined(ticket_id, run_id)  # declared by the capability above
    except PhaselogError:
        return {}
    return found
