"""The library calls the edges are thin over (issue 21): judging with a report, opening a ledger for
an edge, a worker pool's children, and the guard's views.

Each was logic inside a CLI command or a dashboard module; the commands' own tests (test_audit_cli,
test_workers, test_guard_cli, test_ui_http) show that behaviour did not change, these the calls.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW
from phaselog.ledger.judging import judge_and_report
from phaselog.ledger.pool import LedgerPool, ledger_for, sibling
from phaselog.model.durations import parse_duration
from phaselog.model.errors import NotFound
from phaselog.runner.pool import child_args
from phaselog.runner.worker import WorkerOptions
from phaselog.stores.base import Store
from phaselog.views import guard as guard_views

T = "EDGE-1"
R = "r1"
PROPOSAL = {"title": "Launch", "concept": "Ninety seconds, one idea"}
RESEARCH = {"summary": "Who watches", "sources": ["https://example.org/a"]}


def test_judge_and_report_records_the_judgement_and_says_the_state_after(ledger: phaselog.Ledger) -> None:
    ledger.init_ticket(T, title="video", pipeline="video-pipeline")
    ledger.write(T, R, "research", RESEARCH)
    ledger.write(T, R, "proposal", PROPOSAL)
    ledger.write(T, R, "proposal", PROPOSAL)  # attempt 2 supersedes attempt 1
    stale = judge_and_report(ledger, T, R, "proposal", by="ana", attempt=1)
    assert (stale.approval.attempt_number, stale.phase_state) == (1, "awaiting_approval")
    assert stale.warnings  # approving superseded work is recorded, and does not count
    done = judge_and_report(ledger, T, R, "proposal", by="ana", comment="good")
    assert (done.approval.attempt_number, done.phase_state, done.warnings) == (2, "completed", ())
    no = judge_and_report(ledger, T, R, "proposal", by="bo", decision="reject", attempt=2)
    assert no.approval.decision == "reject"


@pytest.mark.all_stores
def test_ledger_for_opens_only_what_it_was_not_handed(store: Store, tmp_path: Path) -> None:
    ledger = phaselog.Ledger(store)
    assert ledger_for(ledger) == (ledger, False)
    wrapped, owned = ledger_for(store)
    assert (wrapped.store, owned) == (store, False)
    opened, owned = ledger_for(tmp_path / "other")
    assert owned
    opened.close()


@pytest.mark.all_stores
def test_a_sibling_is_the_same_store_on_a_connection_of_its_own(store: Store) -> None:
    ledger = phaselog.Ledger(store)
    ledger.write(T, R, "implement", IMPLEMENT)
    other = sibling(ledger)
    try:
        assert other.store is not ledger.store
        assert other.store.url == ledger.store.url
        assert other.read(T, R, "implement").record == ledger.read(T, R, "implement").record
    finally:
        other.close()


def test_the_pool_reads_through_a_read_only_ledger_and_writes_through_a_short_lived_one(tmp_path: Path) -> None:
    root = tmp_path / "store"
    phaselog.open(root).write(T, R, "implement", IMPLEMENT)
    pool = LedgerPool(str(root))
    reader = pool.reader()
    assert pool.reader() is reader  # one per thread
    with pool.writer() as writer:
        assert writer is not reader
        writer.write(T, R, "local_review", LOCAL_REVIEW)
    assert reader.status(T, R).phase("local_review").state == "completed"
    pool.close()


def test_a_pool_child_gets_back_exactly_the_options_of_the_pool(tmp_path: Path) -> None:
    grace, ttl, poll = (parse_duration(t).total_seconds() for t in ("1m30s", "0.5s", "2.25s"))
    options = WorkerOptions(
        queue="nightly",
        pipelines=tmp_path / "pipelines",
        workdir=tmp_path,
        log_dir=None,
        ttl=ttl,
        grace=grace,
        max_recoveries=5,
        poll=poll,
        burst=True,
        max_runs=7,
    )
    args = child_args("postgresql://db/x", options, quiet=True)
    given = dict(zip(args[1::2], args[2::2], strict=False))
    assert args[0] == "worker"
    assert given["--store"] == "postgresql://db/x"
    assert given["--queue"] == "nightly"
    # Every duration reads back as the very same number of seconds.
    assert parse_duration(given["--grace"]).total_seconds() == grace
    assert parse_duration(given["--lease-ttl"]).total_seconds() == ttl
    assert parse_duration(given["--poll"]).total_seconds() == poll
    assert "--log-dir" not in args
    assert {"--burst", "--quiet"} <= set(args)
    assert args[args.index("--max-runs") + 1] == "7"
    assert args[args.index("--workdir") + 1] == str(tmp_path.absolute())
    assert "--log-cap" not in args  # the default: the child's own default, the same
    capped = child_args("postgresql://db/x", dataclasses.replace(options, log_cap=4096), quiet=True)
    assert capped[capped.index("--log-cap") + 1] == "4096"


def test_guard_views_read_a_guard_through_its_api(tmp_path: Path) -> None:
    from phaselog.guard import Guard

    root = str(tmp_path / "store")
    Guard(root, "nightly").reset(by="ana")
    view = guard_views.guard_view(root, "nightly")
    assert view.name == "nightly"
    assert view.status is not None
    assert view.status["breaker"] == "closed"
    assert [e["kind"] for e in view.history] == ["reset"]
    assert [g.name for g in guard_views.guard_board(root)] == ["nightly"]
    assert guard_views.guard_history(view.history) == {"count": 1, "history": view.history}
    with pytest.raises(NotFound):
        guard_views.guard_view(root, "other")
