"""The dashboard end to end in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

Each test starts a real ``phaselog ui`` process over a store written through the library, acts
as a person would (click, type, submit) and checks both the page and the store. Screenshots of
every page go to the test's temp folder (and to ``$PHASELOG_UI_SCREENSHOTS`` when set, which is
how the README's images are refreshed).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import phaselog
import ui_data
from phaselog.guard import Guard
from ui_data import Server

CHROMIUM = os.environ.get("PHASELOG_TEST_CHROMIUM", "/usr/bin/chromium")
REBIND = "rebind.test"  # resolves to 127.0.0.1 inside the browser: a DNS-rebinding page's name
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    f"--host-resolver-rules=MAP {REBIND} 127.0.0.1",
]
WIDE = {"width": 1280, "height": 900}
NARROW = {"width": 390, "height": 844}


def require_chromium() -> None:
    """Skip without Chromium locally; under CI=true fail instead (a browser test is never skipped in CI)."""
    if not Path(CHROMIUM).exists():
        reason = f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true and {reason}: browser tests must not be skipped in CI")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Shots:
    """Saves full-page screenshots under the test's temp folder (and $PHASELOG_UI_SCREENSHOTS)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.extra = os.environ.get("PHASELOG_UI_SCREENSHOTS")

    def __call__(self, page: Any, name: str) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000
        if self.extra:
            Path(self.extra).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(self.extra) / path.name)
        return path


@pytest.fixture
def shots(tmp_path: Path) -> Shots:
    return Shots(tmp_path / "screenshots")


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context; any script error on any page fails the test."""
    context = browser.new_context(viewport=WIDE)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # A refused request (400/403) is what some tests provoke; a resource whose connection is refused
    # is the live refresh polling while the test's server stops (a network failure, not a script
    # error); anything else logged as an error is a bug.
    refused = ("status of 400", "status of 403", "net::ERR_CONNECTION_REFUSED")
    pg.on(
        "console",
        lambda msg: (
            errors.append(msg.text) if msg.type == "error" and not any(r in msg.text for r in refused) else None
        ),
    )
    pg.errors = errors
    yield pg
    context.close()
    assert not errors, f"script errors in the browser: {errors}"


def _row(page: Any, table: str, key: str, value: str) -> Any:
    return page.locator(f"table#{table} tr[{key}='{value}']")


# -- tickets → run → timeline ------------------------------------------------------------------------
def test_tickets_page_then_a_run_with_its_timeline(
    page: Any, server: Server, built: tuple[Path, dict[str, str]], shots: Shots
) -> None:
    page.goto(server.url)
    assert page.title().startswith("Tickets")
    rows = page.locator("table#tickets tbody tr")
    assert rows.count() == 3
    vid = _row(page, "tickets", "data-ticket", "VID-7")
    assert vid.locator(".badge").inner_text() == "waiting for approval"
    assert _row(page, "tickets", "data-ticket", "PROJ-1234").locator(".badge").inner_text() == "stuck"
    shots(page, "tickets")

    page.select_option("select[name=state]", "awaiting_approval")
    page.click("form.filters button[type=submit]")
    assert page.locator("table#tickets tbody tr").count() == 1
    page.fill("input[name=q]", "nothing-matches")
    page.click("form.filters button[type=submit]")
    assert "No ticket matches" in page.inner_text("main")

    page.goto(server.url)
    page.click("table#tickets a:text('PROJ-1234')")
    page.wait_for_selector("#timeline svg")
    assert "/runs/" in page.url
    bars = page.locator("#timeline g.bar")
    assert bars.count() == 4  # implement a1 (failed), a2; local_review a1; create_pr a1 (in flight)
    assert page.locator("#timeline g.bar.st-failed").count() == 1
    assert page.locator("#timeline g.bar.st-failed title").text_content().startswith("implement attempt 1: failed")
    phases = page.locator("table#phases tbody tr")
    assert [phases.nth(i).get_attribute("data-state") for i in range(phases.count())] == [
        "completed",
        "completed",
        "in_progress",
        "pending",
        "pending",
    ]
    assert "tests failed: 3 of 40" in page.inner_text("table#attempts")
    shots(page, "run")
    page.click("#explain-link")
    from phaselog.runner.explain import explain

    plan = explain(phaselog.open(str(built[0])), "PROJ-1234", built[1]["proj"], workdir=os.getcwd())
    for p in plan.phases:  # the page shows the library's plan, phase by phase
        assert page.locator(f"table#plan tr[data-phase='{p.phase}']").get_attribute("data-action") == p.action
    shots(page, "explain")


def test_a_run_page_refreshes_by_itself_when_a_record_arrives(
    page: Any, server: Server, built: tuple[Path, dict[str, str]]
) -> None:
    root, runs = built
    page.goto(f"{server.base}/tickets/PROJ-1234/runs/{runs['proj']}")
    create_pr = page.locator("table#phases tr[data-phase='create_pr']")
    assert create_pr.get_attribute("data-state") == "in_progress"
    ledger = phaselog.Ledger(phaselog.open_store(str(root)))
    ledger.write(
        "PROJ-1234",
        runs["proj"],
        "create_pr",
        {"pr_url": "https://github.com/o/r/pull/1", "pr_number": 1, "head_sha": "a1b2c3d"},
    )
    ledger.close()
    # No reload from the test: the page's own polling must bring the new state in.
    page.wait_for_selector("table#phases tr[data-phase='create_pr'][data-state='completed']", timeout=30_000)
    assert page.locator("#timeline g.bar").count() == 4


# -- approvals ---------------------------------------------------------------------------------------
def test_approve_a_gated_phase_in_the_browser(
    page: Any, server: Server, built: tuple[Path, dict[str, str]], shots: Shots
) -> None:
    root, runs = built
    page.goto(f"{server.base}/approvals")
    queue = page.locator("table#queue tbody tr")
    assert queue.count() == 1
    shots(page, "approvals")
    queue.locator("a.button").click()
    page.wait_for_selector("#gate form")
    shown = page.inner_text("#content-hash").strip()
    assert shown == phaselog.open(str(root)).read("VID-7", runs["vid"], "proposal", 2).record.content_hash
    assert page.inner_text("#verify-status").startswith("✓")
    shots(page, "checkpoint")
    page.fill("#gate input[name=by]", "ana")
    page.fill("#gate textarea[name=comment]", "reads well; ship it")
    page.click("#gate button[value=approve]")
    page.wait_for_selector(".flash")
    assert page.inner_text(".flash").startswith("approved")
    assert page.locator("#gate form").count() == 0  # judged: nothing left to approve
    assert "reads well; ship it" in page.inner_text("table#judgements")
    page.click(".crumbs a:text('run')")
    row = page.locator("table#phases tr[data-phase='proposal']")
    assert row.get_attribute("data-state") == "completed"
    assert page.locator("#timeline g.bar.ap-approved").count() == 1
    approval = phaselog.open(str(root)).approvals("VID-7", runs["vid"])[-1]
    assert (approval.decision, approval.by, approval.checkpoint_hash) == ("approve", "ana", shown)
    page.goto(f"{server.base}/approvals")
    assert "Nothing is waiting for approval" in page.inner_text("main")


def test_reject_needs_a_comment_and_records_it(page: Any, server: Server, built: tuple[Path, dict[str, str]]) -> None:
    root, runs = built
    page.goto(f"{server.base}/tickets/VID-7/runs/{runs['vid']}/phases/proposal/attempts/2")
    page.fill("#gate input[name=by]", "ben")
    page.click("#gate button[value=reject]")  # no comment: the browser refuses to submit
    assert page.locator("#gate textarea[name=comment]").evaluate("el => el.validity.valueMissing")
    assert len(phaselog.open(str(root)).approvals("VID-7", runs["vid"])) == 1
    page.fill("#gate textarea[name=comment]", "the intro is too long")
    page.click("#gate button[value=reject]")
    page.wait_for_selector(".flash")
    assert page.inner_text(".flash").startswith("rejected")
    assert "the intro is too long" in page.inner_text("table#judgements")
    ledger = phaselog.open(str(root))
    last = ledger.approvals("VID-7", runs["vid"])[-1]
    assert (last.decision, last.by, last.comment) == ("reject", "ben", "the intro is too long")
    assert ledger.status("VID-7", runs["vid"]).phase("proposal").state == "rejected"


# -- diff ----------------------------------------------------------------------------------------------
def test_diff_two_attempts_side_by_side(
    page: Any, server: Server, built: tuple[Path, dict[str, str]], shots: Shots
) -> None:
    _, runs = built
    page.goto(f"{server.base}/tickets/PROJ-1234/runs/{runs['proj']}")
    page.select_option("form.diff-pick select[name=a]", f"{runs['proj']}:implement:1")
    page.select_option("form.diff-pick select[name=b]", f"{runs['proj']}:implement:2")
    page.click("form.diff-pick button")
    page.wait_for_selector("table#diff")
    status_row = page.locator("table#diff tr", has=page.locator("td.field:text('status')"))
    assert status_row.locator("td.a").inner_text().strip() == "failed"
    assert status_row.locator("td.b").inner_text().strip() == "completed"
    assert page.locator("table#diff tr.ch-added td.field:text('repo_commit_map.app')").count() == 1
    shots(page, "diff")


# -- guards --------------------------------------------------------------------------------------------
def test_a_guards_open_breaker_is_shown_and_reset(
    page: Any, server: Server, built: tuple[Path, dict[str, str]], shots: Shots
) -> None:
    root, _ = built
    page.goto(f"{server.base}/guards")
    card = page.locator("section[data-guard='closeout']")
    assert "breaker open" in card.inner_text()
    assert card.locator("svg.passes g.bar.out-failure").count() == 3
    shots(page, "guards")
    card.locator("h2 a").click()
    assert page.inner_text("#breaker") == "breaker open"
    shots(page, "guard")
    page.fill("#reset input[name=by]", "ops-oncall")
    page.click("#reset button")
    page.wait_for_selector(".flash")
    assert page.inner_text("#breaker") == "breaker closed"
    assert page.locator("#reset").count() == 0
    assert "ops-oncall" in page.inner_text("table#history tr.k-reset")
    status = Guard(str(root), "closeout").status()
    assert status["breaker"] == "closed"
    assert status["state"]["consecutive_failures"] == 0


# -- health ------------------------------------------------------------------------------------------
def test_health_shows_verify_and_doctor(page: Any, server: Server, shots: Shots) -> None:
    page.goto(f"{server.base}/health")
    page.fill("input[name=ticket]", "PROJ-1234")
    page.click("form.filters button")
    assert "verify" in page.inner_text("#verify h2")
    assert "ok" in page.inner_text("#verify h2")
    assert "abandoned" in page.inner_text("#doctor")  # create_pr's writer (a finished process) is gone
    shots(page, "health")


# -- safety --------------------------------------------------------------------------------------------
def test_a_script_in_a_payload_is_shown_as_text_and_never_runs(
    page: Any, server: Server, built: tuple[Path, dict[str, str]], shots: Shots
) -> None:
    _, runs = built
    for path in ("/tickets", f"/tickets/XSS-1/runs/{runs['xss']}/phases/implement/attempts/1", "/tickets/XSS-1"):
        page.goto(server.base + path)
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.title() != "pwned"
    assert ui_data.SCRIPT in page.inner_text("body") or ui_data.SCRIPT in page.content().replace("&lt;", "<")
    page.goto(f"{server.base}/tickets/XSS-1/runs/{runs['xss']}/phases/implement/attempts/1")
    assert ui_data.SCRIPT in page.inner_text("#payload")
    assert ui_data.IMG in page.inner_text("#payload")
    assert page.locator("#payload script, #payload img").count() == 0
    shots(page, "xss")


def test_forged_posts_and_foreign_hosts_are_refused_in_the_browser(
    page: Any, server: Server, built: tuple[Path, dict[str, str]]
) -> None:
    root, runs = built
    page.goto(f"{server.base}/tickets/VID-7/runs/{runs['vid']}/phases/proposal/attempts/2")
    judge = f"/tickets/VID-7/runs/{runs['vid']}/phases/proposal/attempts/2/judge"
    forged = page.evaluate(
        """async (url) => {
            const r = await fetch(url, {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
                                        body: 'decision=approve&by=mallory&comment=x'});
            return r.status;
        }""",
        judge,
    )
    assert forged == 403  # same browser, same cookies, but no CSRF token
    response = page.goto(f"http://{REBIND}:{server.port}/tickets")
    assert response is not None
    assert response.status == 400
    assert "not allowed" in page.inner_text("body")
    assert len(phaselog.open(str(root)).approvals("VID-7", runs["vid"])) == 1


def test_read_only_shows_no_button_and_refuses_a_forged_post(
    page: Any, built: tuple[Path, dict[str, str]], shots: Shots
) -> None:
    root, runs = built
    srv = Server(str(root), "--read-only")
    try:
        page.goto(f"{srv.base}/tickets/VID-7/runs/{runs['vid']}/phases/proposal/attempts/2")
        assert page.locator("button").count() == 0
        assert page.locator("form[method=post]").count() == 0
        assert "read-only" in page.inner_text("header")
        shots(page, "checkpoint-read-only")
        page.goto(f"{srv.base}/guards/closeout")
        assert page.locator("button").count() == 0
        assert page.locator("#reset").count() == 0
        status = page.evaluate(
            """async (url) => (await fetch(url, {method: 'POST', body: 'by=x',
                headers: {'Content-Type': 'application/x-www-form-urlencoded'}})).status""",
            f"{srv.base}/guards/closeout/reset",
        )
        assert status == 403
    finally:
        srv.stop()
    assert Guard(str(root), "closeout").status()["breaker"] == "open"


def test_pages_fit_a_narrow_window(
    browser: Any, server: Server, built: tuple[Path, dict[str, str]], shots: Shots
) -> None:
    _, runs = built
    context = browser.new_context(viewport=NARROW)
    page = context.new_page()
    try:
        for name, path in (
            ("tickets-narrow", "/tickets"),
            ("run-narrow", f"/tickets/PROJ-1234/runs/{runs['proj']}"),
            ("checkpoint-narrow", f"/tickets/VID-7/runs/{runs['vid']}/phases/proposal/attempts/2"),
        ):
            page.goto(server.base + path)
            # The page itself never scrolls sideways; wide tables and the chart scroll in their own box.
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), name
            shots(page, name)
    finally:
        context.close()


# -- a long run: one row per phase, history and progress paged ---------------------------------------
def _pages_of(page: Any, rows: str, more: str, key: str) -> list[list[str]]:
    """Follow the "more" links from the current page; each page's row keys."""
    seen = []
    while True:
        seen.append([r.get_attribute(key) for r in page.locator(rows).all()])
        link = page.locator(more)
        if link.count() == 0:
            return seen
        link.click()
        page.wait_for_load_state()


def test_a_long_run_shows_one_row_per_phase_and_pages_its_history(
    page: Any, long_server: Server, long_built: tuple[Path, str], shots: Shots
) -> None:
    root, run = long_built
    ledger = phaselog.open(str(root))
    st = ledger.status(ui_data.LONG_TICKET, run)
    page.goto(f"{long_server.base}/tickets/{ui_data.LONG_TICKET}/runs/{run}")
    phases = page.locator("table#phases tbody tr")
    assert phases.count() == len(st.phases) == 5  # one row per phase, not per attempt
    implement = page.locator("table#phases tr[data-phase='implement']")
    assert implement.get_attribute("data-state") == st.phase("implement").state == "completed"
    assert implement.locator("td.newest").inner_text() == f"attempt {ui_data.LONG_IMPLEMENT}"
    assert "in flight" in page.locator("table#phases tr[data-phase='create_pr'] td.newest").inner_text()
    assert page.locator("table#attempts tbody tr").count() == 50  # one page, bounded
    shots(page, "run-long")

    # Every attempt, newest first, a page at a time, down to the oldest.
    pages = _pages_of(page, "table#attempts tbody tr", "#attempts-more", "data-ref")
    keys = [k for p in pages for k in p]
    expected = (
        ["create_pr:1"]
        + [f"local_review:{a}" for a in range(ui_data.LONG_REVIEW, 0, -1)]
        + [f"implement:{a}" for a in range(ui_data.LONG_IMPLEMENT, 0, -1)]
    )
    assert keys == expected
    assert [len(p) for p in pages] == [50, 50, 24]
    assert page.locator("table#attempts tr[data-ref='implement:1']").count() == 1  # reached the oldest

    # One phase's history, from its row in the phase table.
    page.goto(f"{long_server.base}/tickets/{ui_data.LONG_TICKET}/runs/{run}")
    page.locator("table#phases tr[data-phase='local_review'] a.history-link").click()
    page.wait_for_load_state()
    assert _pages_of(page, "table#attempts tbody tr", "#attempts-more", "data-ref") == [
        [f"local_review:{a}" for a in range(ui_data.LONG_REVIEW, 0, -1)]
    ]

    # The attempt in flight's progress events, a page at a time, oldest first.
    page.goto(f"{long_server.base}/tickets/{ui_data.LONG_TICKET}/runs/{run}")
    page.locator("table#phases tr[data-phase='create_pr'] td.newest a").click()
    page.wait_for_selector("table#events")
    shots(page, "events")
    seqs = _pages_of(page, "table#events tbody tr", "#events-more", "data-seq")
    assert [int(s) for p in seqs for s in p] == list(range(1, ui_data.LONG_EVENTS + 1))
    assert [len(p) for p in seqs] == [50, 50, 30]
    events = ledger.progress_events(ui_data.LONG_TICKET, run, "create_pr", 1)
    assert page.locator("table#events tbody tr").last.locator("td").nth(3).inner_text() == str(events[-1].tokens)


# -- a killed runner's attempt, and an event's output --------------------------------------------------
def test_a_sigkilled_attempt_is_abandoned_and_an_events_output_is_shown_as_text(
    page: Any, tmp_path: Path, shots: Shots
) -> None:
    from killed_run import OUTPUT, killed_then_completed
    from phaselog.model.ids import normalize_run_id

    store = tmp_path / "killed"
    pid = killed_then_completed(str(store), "KILL-1", "r1", tmp_path / "work")
    run = normalize_run_id("r1")
    server = Server(str(store))
    try:
        page.goto(f"{server.base}/tickets/KILL-1/runs/{run}")
        shots(page, "run-killed")
        killed = _row(page, "attempts", "data-ref", "gather:1")
        assert killed.locator(".badge").first.inner_text() == "abandoned"
        assert page.locator("#timeline g.bar.st-abandoned").count() == 1  # the legend's colour, used
        gather = _row(page, "phases", "data-phase", "gather")
        assert gather.locator("td.num").nth(1).inner_text() == "2"  # two attempts: "newest: attempt 2"
        assert "attempt 2" in gather.locator("td.newest").inner_text()
        ticks = page.locator("#timeline text.tick").all_text_contents()
        assert len(ticks) >= 2
        assert len(set(ticks)) == len(ticks), ticks  # every tick says another time
        body = page.request.get(f"{server.base}/tickets/KILL-1/runs/{run}/attempts.json").json()
        states = {(a["phase"], a["attempt_number"]): (a["state"], a["reason"]) for a in body["attempts"]}
        assert states[("gather", 1)][0] == "abandoned"
        assert f"process {pid} " in states[("gather", 1)][1]

        # The killed attempt's events: its output as text, escaped and cut short, whole on its own page.
        killed.locator("a.events-link").click()
        cell = page.locator("table#events tr[data-seq='2'] .output-text")
        assert cell.inner_text() == OUTPUT[:200] + "…"
        assert page.locator("table#events b").count() == 0  # the output's markup is text, never HTML
        shots(page, "events-output")
        page.locator("table#events tr[data-seq='2'] a.output-link").click()
        assert page.locator("pre#output").inner_text() == OUTPUT
    finally:
        server.stop()
