"""``doctor``: find what needs a person's attention, and optionally quarantine damaged records.

Finishes prunes a crash interrupted (they had decided what to remove and noted it first), then
reports damaged records and audit entries, leftover temp files and orphaned sidecars (what a
crash leaves behind), abandoned in-flight attempts, and broken hash links. With ``quarantine``,
damaged records are moved — never deleted — with their original bytes and a note of where they
came from (files: into ``<root>/quarantine/``; SQL: into the table ``phaselog_quarantine``); every
move is reported. Nothing else moves or deletes a record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phaselog.ledger.retention import finish_interrupted
from phaselog.model.errors import Corrupt, PhaselogError, UsageError
from phaselog.model.ids import validate_ticket_id
from phaselog.stores.base import leftover_finder, quarantiner

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger


@dataclass
class DoctorReport:
    """What doctor found, and what it moved."""

    tickets: int = 0
    runs: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)
    moved: list[dict[str, Any]] = field(default_factory=list)
    #: Prunes a crash interrupted, finished now (what they had decided to remove, removed).
    finished: list[dict[str, Any]] = field(default_factory=list)

    def add(self, kind: str, path: str, message: str, **extra: Any) -> None:
        """Record a finding."""
        self.findings.append({"kind": kind, "path": path, "message": message, **extra})

    @property
    def healthy(self) -> bool:
        """True when nothing needs attention (moved files count as handled)."""
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        """The JSON form the CLI prints."""
        return {
            "healthy": self.healthy,
            "tickets": self.tickets,
            "runs": self.runs,
            "findings": self.findings,
            "moved": self.moved,
            "finished": self.finished,
        }


def doctor(
    ledger: Ledger, ticket_id: str | None = None, *, quarantine: bool = False, finish: bool = True
) -> DoctorReport:
    """Examine one ticket (or every ticket) of ``ledger``'s store.

    ``finish=False`` only looks: interrupted prunes are not finished (a read-only reader such as
    the dashboard); what they left is still reported by the store's leftovers.
    """
    store = ledger.store
    keeper = quarantiner(store)
    if quarantine and keeper is None:
        raise UsageError(f"--quarantine: {store.url} cannot move damaged records aside", field="quarantine")
    tickets = [validate_ticket_id(ticket_id)] if ticket_id is not None else store.tickets()
    rep = DoctorReport(tickets=len(tickets))
    damaged_files: list[tuple[str, str]] = []

    for tid in tickets:
        # First finish what an interrupted prune had decided, so what follows sees the result.
        if finish:
            rep.finished.extend(finish_interrupted(ledger, tid))
        if (finder := leftover_finder(store)) is not None:
            for item in finder.leftovers(tid):
                rep.add(item["kind"], item["path"], item["message"], age_sec=item.get("age_sec"))
        runs = store.runs(tid)
        rep.runs += len(runs)
        verify = ledger.verify(tid)
        for p in verify.problems:
            if p.get("damaged"):
                rep.add("damaged", p["path"], p["message"])
                damaged_files.append((p["path"], p["message"]))
            else:
                rep.add("broken_link", p["path"], f"{p['rule']}: {p['message']}")
        for rid in runs:
            try:
                flights = ledger.in_flight(tid, rid)
            except Corrupt:
                continue  # already reported by verify
            for f in flights.values():
                if f.abandoned:
                    rep.add(
                        "abandoned",
                        f"{tid}/{rid}",
                        f"{f.phase} attempt {f.attempt_number} is abandoned: {f.abandoned_reason}",
                        phase=f.phase,
                        attempt_number=f.attempt_number,
                    )
    if quarantine and keeper is not None:
        still: list[dict[str, Any]] = []
        for finding in rep.findings:
            if finding["kind"] != "damaged":
                still.append(finding)
                continue
            try:
                moves = keeper.quarantine(finding["path"], finding["message"])
            except PhaselogError as exc:
                finding["message"] += f" (not moved: {exc.message})"
                still.append(finding)
                continue
            rep.moved.extend(moves)
        rep.findings = still
    return rep
