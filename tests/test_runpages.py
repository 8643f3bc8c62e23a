"""A run read for a page (phaselog.views.run_page): the overview from one snapshot, the history in pages.

The overview must be what ``status``, ``can_skip_to`` and ``run_version`` say, read with one
snapshot; the pages, followed to the end, must be exactly the timeline of the whole run (newest
first), while holding only a page of records at a time.
"""

from __future__ import annotations

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW
from helpers import Clock
from phaselog.model.errors import NotFound, UsageError
from phaselog.model.ids import normalize_run_id
from phaselog.stores.base import Store
from phaselog.views import results as views
from phaselog.views import run_page as runpages
from phaselog.views import timeline
from test_streams import Counting

T = "PAGES-1"
R = normalize_run_id("pages-run")


def fill(store: Store, implement: int = 16) -> phaselog.Ledger:
    """implement retried (failures, progress events on some), local_review twice, create_pr in flight."""
    clock = Clock()
    led = phaselog.Ledger(store, clock=clock)
    for i in range(1, implement + 1):
        if i % 3 == 0:
            led.progress(T, R, "implement", "start", pid=None)
            led.progress(T, R, "implement", "step", step=i, tokens=i, pid=None)
        clock.tick()
        if i % 5 == 2:
            led.write(T, R, "implement", None, status="failed", error=f"flaky {i}")
        else:
            led.write(T, R, "implement", {**IMPLEMENT, "commit_sha": f"{i:07x}"})
    led.write(T, R, "local_review", LOCAL_REVIEW)
    led.write(T, R, "local_review", LOCAL_REVIEW)
    for step in range(7):
        led.progress(T, R, "create_pr", "start" if step == 0 else "step", step=step or None, pid=None)
    return led


@pytest.mark.all_stores
def test_the_overview_is_status_skip_and_version_from_one_snapshot(store: Store) -> None:
    led = fill(store)
    counting = Counting(store)
    reader = phaselog.Ledger(counting, clock=led.clock)  # type: ignore[arg-type]  # a proxy of a Store
    ov = runpages.overview(reader, T, R)
    assert counting.calls["snapshot"] == 1  # the run, read once
    for other in ("iter_records", "entry_names", "snapshot(history)"):
        assert counting.calls[other] == 0, counting.calls
    # What a skip relies on is validated as can_skip_to validates it: per completed phase before
    # the next one, its checkpoint and its links (the attempts' names, no record bodies).
    done = len(ov.status.completed_phases)
    assert counting.calls["attempts"] <= done, counting.calls
    assert counting.calls["get"] <= 3 * done, counting.calls
    assert ov.status == led.status(T, R)
    assert ov.status.next_phase == "create_pr"
    assert ov.skip == led.can_skip_to(T, R, "create_pr")
    assert ov.version == timeline.run_version(led, T, R)
    assert views.run_overview(ov)["status"]["phases"][0]["latest_attempt"] == 16
    with pytest.raises(NotFound):
        runpages.overview(led, T, "nobody")


@pytest.mark.all_stores
@pytest.mark.parametrize("limit", [1, 4, 50])
def test_pages_followed_to_the_end_are_the_whole_timeline_newest_first(store: Store, limit: int) -> None:
    led = fill(store)
    whole = sorted(timeline.run_timeline(led, T, R), key=lambda s: (s.ordinal, s.attempt), reverse=True)
    got, before, pages = [], None, 0
    while True:
        page = runpages.attempts_page(led, T, R, before=before, limit=limit)
        assert len(page.spans) <= limit
        got += list(page.spans)
        pages += 1
        if page.next_before is None:
            break
        before = page.next_before
    assert [s.to_json() for s in got] == [s.to_json() for s in whole]
    assert pages == -(-len(whole) // limit)
    one = runpages.attempts_page(led, T, R, phase="implement", limit=50)
    assert [s.attempt for s in one.spans] == list(range(16, 0, -1))
    assert list(one.previous) == [*range(15, 0, -1), None]  # the attempt before each one


@pytest.mark.all_stores
def test_a_page_of_attempts_is_one_store_call_and_holds_only_the_page(store: Store) -> None:
    fill(store, implement=40)
    counting = Counting(store)
    reader = phaselog.Ledger(counting)  # type: ignore[arg-type]  # a proxy of a Store
    page = runpages.attempts_page(reader, T, R, limit=5, before="1:30")
    assert [s.attempt for s in page.spans] == [29, 28, 27, 26, 25]
    assert page.next_before == "1:25"
    assert counting.calls["snapshot"] == 1  # where each phase's newest attempt is
    assert counting.calls["iter_records"] == 1  # the page's records: one store call, not one per attempt
    assert counting.calls["get"] == 0
    assert counting.most_alive <= 5 + 3  # the page and one past it, the record just read, the one it displaces
    for whole_run in ("attempts", "entry_names", "snapshot(history)"):
        assert counting.calls[whole_run] == 0, counting.calls
    assert counting.calls["entries"] <= 2 + 1  # events: attempts 20-29 and 30-39 (blocks of ten); approvals


@pytest.mark.all_stores
def test_pruned_attempts_are_skipped_without_walking_the_gap(store: Store) -> None:
    led = fill(store, implement=30)
    led.prune(T, keep_last=3)
    left = sorted((s for s in timeline.run_timeline(led, T, R) if s.phase == "implement"), key=lambda s: -s.attempt)
    assert 3 <= len(left) < 30
    got = runpages.attempts_page(led, T, R, phase="implement", limit=50)
    assert [s.to_json() for s in got.spans] == [s.to_json() for s in left]


@pytest.mark.all_stores
def test_events_come_a_page_at_a_time(store: Store) -> None:
    led = fill(store)
    every = led.progress_events(T, R, "create_pr", 1)
    got, after = [], 0
    while after is not None:
        page = runpages.events_page(led, T, R, "create_pr", 1, after=after, limit=3)
        got += list(page.events)
        after = page.next_after
    assert got == every
    assert runpages.events_page(led, T, R, "implement", 2, limit=3).events == ()


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda led: runpages.attempts_page(led, T, R, before="x"), "before"),
        (lambda led: runpages.attempts_page(led, T, R, before="1"), "before"),
        (lambda led: runpages.attempts_page(led, T, R, limit=0), "limit"),
        (lambda led: runpages.attempts_page(led, T, R, limit=runpages.MAX_PAGE + 1), "limit"),
        (lambda led: runpages.events_page(led, T, R, "create_pr", 1, after=-1), "after"),
        (lambda led: runpages.events_page(led, T, R, "create_pr", 0), "attempt"),
    ],
)
def test_bad_cursors_and_sizes_are_refused_naming_the_field(store: Store, call: object, field: str) -> None:
    led = fill(store, implement=2)
    with pytest.raises(UsageError) as err:
        call(led)  # type: ignore[operator]
    assert err.value.context["field"] == field
