"""Summaries for listings: every ticket and every run in a line each (the dashboard's Tickets page).

A run's summary is its derived state in one word (``RunStatus.summary``), its next phase, its
last activity and how many attempts it holds; a ticket's is its marker's title, its runs, and
the summary of its most recently active run. They are computed from ``Ledger.status`` like
everything else.

A :class:`Catalog` remembers each run's summary in memory until the run's change stamp
(:mod:`phaselog.stores.stamps`) moves, so a long-lived reader (``phaselog ui``) re-reads only
the runs that changed: a ticket with 1,000 runs costs one folder listing and a few stats per run
once its runs are known. Nothing is written anywhere; a new Catalog starts empty.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from phaselog.ledger.derive import RUN_SUMMARIES
from phaselog.model.errors import PhaselogError, UsageError
from phaselog.model.records import format_timestamp
from phaselog.stores.stamps import run_stamps, ticket_stamp

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger

#: Summaries kept per Catalog (runs); beyond it the memo starts over.
MAX_REMEMBERED = 200_000


@dataclass(frozen=True)
class RunSummary:
    """One run in a line."""

    ticket_id: str
    run_id: str
    pipeline: str | None
    #: ``RunStatus.summary`` (running, stuck, awaiting_approval, awaiting_input, failed, pending, complete), or
    #: ``damaged`` when the run cannot be read at all (``error`` says why).
    state: str
    next_phase: str | None
    last_activity: datetime | None
    attempts: int
    error: str | None = None
    #: The run id as the user gave it (``nightly-1``); None when it was given as a UUID.
    run_name: str | None = None
    #: The run's parameters as recorded (None: none; D260).
    params: Mapping[str, Any] | None = None

    @property
    def label(self) -> str:
        """What people call the run: its given name, else its UUID."""
        return self.run_name or self.run_id

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "ticket_id": self.ticket_id,
            "run_id": self.run_id,
            "run_name": self.run_name,
            "pipeline": self.pipeline,
            "state": self.state,
            "next_phase": self.next_phase,
            "last_activity": format_timestamp(self.last_activity) if self.last_activity else None,
            "attempts": self.attempts,
            "error": self.error,
            **({"params": dict(self.params)} if self.params is not None else {}),
        }


@dataclass(frozen=True)
class TicketSummary:
    """One ticket in a line: the state is its most recently active run's."""

    ticket_id: str
    title: str | None
    pipeline: str | None
    runs: int
    last_activity: datetime | None
    state: str
    latest_run: str | None
    #: The latest run's given name (``nightly-1``), if it had one.
    latest_run_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "ticket_id": self.ticket_id,
            "title": self.title,
            "pipeline": self.pipeline,
            "runs": self.runs,
            "last_activity": format_timestamp(self.last_activity) if self.last_activity else None,
            "state": self.state,
            "latest_run": self.latest_run,
            "latest_run_name": self.latest_run_name,
        }


def summarize_run(ledger: Ledger, ticket_id: str, run_id: str) -> RunSummary:
    """A run's summary, read now."""
    try:
        st = ledger.status(ticket_id, run_id)
    except PhaselogError as exc:
        return RunSummary(ticket_id, run_id, None, "damaged", None, None, 0, exc.message)
    return RunSummary(
        ticket_id,
        run_id,
        st.pipeline,
        st.summary,
        st.next_phase,
        st.last_activity,
        sum(p.attempts for p in st.phases),
        run_name=st.run_name,
        params=st.params,
    )


def _newest_first(items: Iterable[Any]) -> list[Any]:
    return sorted(items, key=lambda s: (s.last_activity is not None, s.last_activity or 0, s.ticket_id), reverse=True)


class Catalog:
    """Ticket and run summaries, remembered per run until the run changes (thread-safe)."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], tuple[str, RunSummary]] = {}
        self._markers: dict[str, tuple[str, Any]] = {}
        self._lock = threading.Lock()

    def runs(self, ledger: Ledger, ticket_id: str) -> list[RunSummary]:
        """Every run of a ticket, most recently active first."""
        out = []
        for run_id, stamp in run_stamps(ledger.store, ticket_id).items():
            key = (ticket_id, run_id)
            with self._lock:
                known = self._runs.get(key)
            if stamp is not None and known is not None and known[0] == stamp:
                out.append(known[1])
                continue
            summary = summarize_run(ledger, ticket_id, run_id)
            if stamp is not None:
                with self._lock:
                    if len(self._runs) >= MAX_REMEMBERED:
                        self._runs.clear()
                    self._runs[key] = (stamp, summary)
            out.append(summary)
        return _newest_first(out)

    def _marker(self, ledger: Ledger, ticket_id: str) -> Any:
        stamp = ticket_stamp(ledger.store, ticket_id)
        with self._lock:
            known = self._markers.get(ticket_id)
        if stamp is not None and known is not None and known[0] == stamp:
            return known[1]
        marker = ledger.marker(ticket_id)
        if stamp is not None:
            with self._lock:
                self._markers[ticket_id] = (stamp, marker)
        return marker

    def ticket(self, ledger: Ledger, ticket_id: str) -> TicketSummary:
        """One ticket's summary."""
        runs = self.runs(ledger, ticket_id)
        marker = self._marker(ledger, ticket_id)
        latest = runs[0] if runs else None
        return TicketSummary(
            ticket_id=ticket_id,
            title=marker.title if marker is not None else None,
            pipeline=(latest.pipeline if latest and latest.pipeline else None)
            or (marker.pipeline if marker is not None else None),
            runs=len(runs),
            last_activity=latest.last_activity if latest else None,
            state=latest.state if latest else "pending",
            latest_run=latest.run_id if latest else None,
            latest_run_name=latest.run_name if latest else None,
        )

    def tickets(self, ledger: Ledger, *, state: str | None = None) -> list[TicketSummary]:
        """Every ticket of the store, most recently active first; with ``state``, only the tickets
        whose shown state (their latest run's, :data:`RUN_STATES`) is that one."""
        wanted = check_run_state(state) if state is not None else None
        found = (self.ticket(ledger, t) for t in ledger.store.tickets())
        return _newest_first(t for t in found if wanted is None or t.state == wanted)


#: The states a listing shows for a run (``RunStatus.summary``), and ``damaged`` (cannot be read).
RUN_STATES = (*RUN_SUMMARIES, "damaged")


def check_run_state(state: str) -> str:
    """``state`` if it is one of :data:`RUN_STATES`, else a UsageError naming the field and the rule."""
    if state not in RUN_STATES:
        raise UsageError(f"state must be one of {', '.join(RUN_STATES)} (got {state!r})", field="state", rule="enum")
    return state
