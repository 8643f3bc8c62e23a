"""Ticket and run summaries (phaselog.views.catalog) and the change stamps that let a reader remember them."""

from __future__ import annotations

from typing import Any

import pytest

import phaselog
import ui_data
from phaselog.ledger.facade import Ledger
from phaselog.stores import stamps
from phaselog.stores.base import Store
from phaselog.views.catalog import Catalog, summarize_run


class Counting:
    """A real ledger whose status() calls are counted (to see what a Catalog re-reads)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.store = ledger.store
        self.calls: list[tuple[str, str]] = []

    def status(self, ticket_id: str, run_id: str) -> Any:
        self.calls.append((ticket_id, run_id))
        return self.ledger.status(ticket_id, run_id)

    def marker(self, ticket_id: str) -> Any:
        return self.ledger.marker(ticket_id)


@pytest.fixture
def sample(store: Store) -> tuple[Ledger, dict[str, str]]:
    ledger = phaselog.Ledger(store, clock=ui_data.Clock())
    return ledger, ui_data.build(ledger)


@pytest.mark.all_stores
def test_summaries_are_the_library_state(sample: tuple[Ledger, dict[str, str]]) -> None:
    ledger, runs = sample
    cat = Catalog()
    tickets = {t.ticket_id: t for t in cat.tickets(ledger)}
    assert set(tickets) == {"VID-7", "PROJ-1234", "XSS-1"}
    vid = tickets["VID-7"]
    assert (vid.title, vid.pipeline, vid.runs, vid.state, vid.latest_run) == (
        "Launch video",
        "video-pipeline",
        1,
        "awaiting_approval",
        runs["vid"],
    )
    st = ledger.status("VID-7", runs["vid"])
    assert vid.last_activity == st.last_activity
    (run,) = cat.runs(ledger, "PROJ-1234")
    assert run == summarize_run(ledger, "PROJ-1234", runs["proj"])
    assert run.attempts == 4  # implement a1 (failed), a2, local_review a1, and create_pr a1 in flight
    assert run.next_phase == "create_pr"
    # newest activity first
    order = [t.ticket_id for t in cat.tickets(ledger)]
    assert order == sorted(tickets, key=lambda t: tickets[t].last_activity, reverse=True)


@pytest.mark.all_stores
def test_a_catalog_rereads_only_the_runs_that_changed(
    sample: tuple[Ledger, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stamps, "RACY_WINDOW_S", -1.0)  # the test writes faster than a timestamp tick
    ledger, runs = sample
    other = ledger.run("PROJ-1234", "second-run")
    other.write("implement", ui_data.IMPLEMENT)
    counting = Counting(ledger)
    cat = Catalog()
    first = cat.runs(counting, "PROJ-1234")
    assert len(counting.calls) == 2
    counting.calls.clear()
    assert cat.runs(counting, "PROJ-1234") == first
    assert counting.calls == []  # nothing changed: nothing re-read
    other.write("local_review", ui_data.LOCAL_REVIEW)
    again = {r.run_id: r for r in cat.runs(counting, "PROJ-1234")}
    assert counting.calls == [("PROJ-1234", phaselog.normalize_run_id("second-run"))]
    assert again[phaselog.normalize_run_id("second-run")].attempts == 2
    counting.calls.clear()
    ledger.progress("PROJ-1234", runs["proj"], "create_pr", "step", step=2)  # a progress event counts too
    cat.runs(counting, "PROJ-1234")
    assert counting.calls == [("PROJ-1234", runs["proj"])]
    counting.calls.clear()
    ledger.init_ticket("PROJ-1234", title="renamed", pipeline="ticket-pipeline")
    assert cat.ticket(counting, "PROJ-1234").title == "renamed"


def test_a_folder_changed_within_the_racy_window_is_never_remembered(tmp_path: Any) -> None:
    ledger = phaselog.Ledger(phaselog.open_store(str(tmp_path / "s")))
    ledger.run("T-1", "r").write("implement", ui_data.IMPLEMENT)
    counting = Counting(ledger)
    cat = Catalog()
    cat.runs(counting, "T-1")
    cat.runs(counting, "T-1")
    assert len(counting.calls) == 2  # written just now: its stamp is None, so it is read each time
    assert stamps.run_stamps(ledger.store, "T-1") == {phaselog.normalize_run_id("r"): None}
