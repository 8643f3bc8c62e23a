"""The SQL stores' change stamps, guard storage and quarantine (optional capabilities, declared by SqlStore).

Kept apart from the append/read path in :mod:`phaselog.stores.sql.store`; see
:class:`phaselog.stores.base.Capability`.
"""

from __future__ import annotations

from typing import Any

from phaselog.model.ids import validate_ticket_id
from phaselog.stores.base import Capability

#: What the SQL stores have beyond the contract (no LEFTOVERS: a transaction leaves nothing behind;
#: no LOCAL_ROOT: a database is not a folder). QUARANTINE moves a damaged row aside (sql_quarantine).
SQL_CAPABILITIES = frozenset(
    {
        Capability.LEASES,
        Capability.RETENTION,
        Capability.MIGRATE,
        Capability.GUARD_STORAGE,
        Capability.STAMPS,
        Capability.MANIFESTS,
        Capability.PHASE_READ,
        Capability.QUARANTINE,
    }
)


class SqlAdminMixin:
    """Stamps, guard storage and quarantine for :class:`phaselog.stores.sql.store.SqlStore`."""

    def quarantine(self, location: str, reason: str) -> list[dict[str, Any]]:
        """Move the damaged row at ``location`` into ``phaselog_quarantine`` (``doctor --quarantine``)."""
        from phaselog.stores.sql.quarantine import quarantine

        return quarantine(self, location, reason)  # type: ignore[arg-type]  # self is the SqlStore

    def quarantined(self, ticket_id: str, run_id: str) -> dict[tuple[str, int], str | None]:
        """The run's attempts ``doctor --quarantine`` moved into ``phaselog_quarantine``: (phase, attempt)
        → the content hash their row recorded at write (D115)."""
        from phaselog.stores.sql.quarantine import quarantined

        return quarantined(self, ticket_id, run_id)  # type: ignore[arg-type]  # self is the SqlStore

    def run_stamps(self, ticket_id: str) -> dict[str, str | None]:
        """Every run of a ticket with its change stamp (see :mod:`phaselog.stores.stamps`)."""
        from phaselog.stores.stamps import sql_run_stamps

        return sql_run_stamps(self, validate_ticket_id(ticket_id))

    def ticket_stamp(self, ticket_id: str) -> str | None:
        """The change stamp of the ticket's own entries (its marker revisions)."""
        from phaselog.stores.stamps import sql_ticket_stamp

        return sql_ticket_stamp(self, validate_ticket_id(ticket_id))

    def guard_storage(self, name: str) -> Any:
        """Where guard ``name`` keeps its lock, state and history: rows in this database."""
        from phaselog.guard.sql import SqlGuardStore

        return SqlGuardStore(self, name)

    def guard_names(self) -> list[str]:
        """Every guard with state, a lease or history in this database."""
        from phaselog.guard.sql import sql_guard_names

        return sql_guard_names(self)
