"""Retention (``Capability.RETENTION``): prune removes exactly what no rule protects, says so, and
leaves every link checkable."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from phaselog.ledger.facade import Ledger
from phaselog.ledger.retention import prune
from phaselog.model.errors import UsageError
from phaselog.stores.base import Capability, Store
from phaselog.testing._harness import Fixtures, StoreFactory, cli_json, require
from phaselog.testing.data import LOCAL_REVIEW, R1, R2, RUN1, RUN2, T0, VIDEO, Clock, T, contents, impl


class RetentionTests(Fixtures):
    """prune on the store under test (skipped unless it declares Capability.RETENTION)."""

    def test_prune_keep_last_removes_only_unprotected_attempts(
        self, factory: StoreFactory, led: Ledger, store: Store
    ) -> None:
        require(factory, store, Capability.RETENTION)
        run = led.run(T, R1)
        a1 = run.write("implement", impl(1)).record
        run.write("local_review", LOCAL_REVIEW)  # its basis names implement attempt 1
        run.fail("implement", "x")
        run.write("implement", impl(3))
        run.fail("implement", "y")
        a5 = run.write("implement", impl(5)).record
        run.fail("implement", "z")

        def states() -> list[tuple[str, str, int | None, int | None]]:
            return [(p.phase, p.state, p.latest_attempt, p.completed_attempt) for p in led.status(T, R1).phases]

        states_before = states()
        before = contents(store)
        dry = prune(led, T, keep_last=1, dry_run=True)
        assert contents(store) == before  # a dry run removes nothing
        rep = prune(led, T, keep_last=1)
        removed = sorted((r["phase"], r["attempt_number"]) for r in rep.removed if "attempt_number" in r)
        assert removed == [("implement", 2), ("implement", 3), ("implement", 4)]
        assert dry.removed == rep.removed
        assert rep.bytes_freed > 0
        kept = {k["path"]: k["reason"] for k in rep.kept}
        assert "basis" in kept[f"{T}/{RUN1}/phase_1_implement_a1.yaml"]
        assert "latest completed" in kept[f"{T}/{RUN1}/phase_1_implement_a5.yaml"]
        assert [r.attempt_number for r in store.attempts(T, RUN1) if r.phase_ordinal == 1] == [1, 5, 6]
        assert led.read(T, R1, "implement").record.content_hash == a5.content_hash
        assert led.read(T, R1, "implement", 1).record.content_hash == a1.content_hash
        assert led.verify(T).ok, led.verify(T).problems  # the prune note vouches for a5's prev_hash
        assert states() == states_before  # resume sees the same run
        assert prune(led, T, keep_last=1).removed == []  # nothing more to do

    def test_prune_never_removes_an_approved_attempt(self, factory: StoreFactory, led: Ledger, store: Store) -> None:
        require(factory, store, Capability.RETENTION)
        led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
        led.write(T, R1, "research", VIDEO["research"])
        p1 = led.write(T, R1, "proposal", VIDEO["proposal"]).record
        led.approve(T, R1, "proposal", by="ana")
        led.write(T, R1, "proposal", {**VIDEO["proposal"], "title": "v2"})
        led.write(T, R1, "proposal", {**VIDEO["proposal"], "title": "v3"})
        rep = prune(led, T, keep_last=1)
        assert [(r["phase"], r["attempt_number"]) for r in rep.removed if "attempt_number" in r] == [("proposal", 2)]
        assert any(
            k["path"].endswith("phase_2_proposal_a1.yaml") and "approved by ana" in k["reason"] for k in rep.kept
        )
        assert led.read(T, R1, "proposal", 1).record.content_hash == p1.content_hash
        assert led.verify(T).ok

    def test_prune_older_than_and_whole_runs(
        self, factory: StoreFactory, led: Ledger, store: Store, clock: Clock
    ) -> None:
        require(factory, store, Capability.RETENTION)
        clock.now = T0 + timedelta(days=100)
        old, recent = T0, T0 + timedelta(days=99)
        led.write(T, R1, "implement", impl(1), timestamp=old)
        led.write(T, R1, "implement", None, status="failed", error="x", timestamp=old + timedelta(hours=1))
        led.write(T, R1, "implement", impl(3), timestamp=recent)
        led.write(T, R2, "implement", impl(1), timestamp=old)  # the whole run is old
        led.write(T, R2, "local_review", LOCAL_REVIEW, timestamp=old)
        rep = prune(led, T, older_than=timedelta(days=30))
        paths = [r["path"] for r in rep.removed]
        assert f"{T}/{RUN1}/phase_1_implement_a1.yaml" in paths
        assert f"{T}/{RUN1}/.failed_1_implement_a2.json" in paths
        assert {"path": f"{T}/{RUN2}", "kind": "run"} in rep.removed
        assert store.runs(T) == [RUN1]
        assert [r.attempt_number for r in store.attempts(T, RUN1)] == [3]
        assert rep.bytes_freed > 0
        assert led.verify(T).ok, led.verify(T).problems

    def test_prune_run_id_removes_the_whole_run_but_not_a_fork_source(
        self, factory: StoreFactory, led: Ledger, store: Store
    ) -> None:
        require(factory, store, Capability.RETENTION)
        run = led.run(T, R1)
        run.write("implement", impl(1))
        run.write("local_review", LOCAL_REVIEW)
        led.progress(T, R1, "create_pr", "start")
        led.fork(T, R1, through="implement", new_run_id=R2)
        rep = prune(led, T, run_id=R1)
        assert rep.removed == []
        assert rep.kept == [{"run_id": RUN1, "reason": "another run was forked from this run"}]
        assert len(store.attempts(T, RUN1)) == 2
        rep = prune(led, T, run_id=R2)
        assert {"path": f"{T}/{RUN2}", "kind": "run"} in rep.removed
        assert rep.bytes_freed > 0
        rep = prune(led, T, run_id=R1)
        assert {"path": f"{T}/{RUN1}", "kind": "run"} in rep.removed
        assert any(r.get("kind") == "progress" for r in rep.removed)
        assert store.runs(T) == []
        assert store.entry_names("progress", T, RUN1) == []
        assert led.verify(T).ok
        with pytest.raises(UsageError):
            prune(led, T, keep_last=1, run_id=R1)

    def test_prune_cli_prints_what_it_removed_and_the_space_freed(
        self, factory: StoreFactory, led: Ledger, store: Store, tmp_path: Path
    ) -> None:
        require(factory, store, Capability.RETENTION)
        run = led.run(T, R1)
        for i in range(3):
            run.write("implement", impl(i))
        out = cli_json(factory, store, tmp_path, "prune", "--ticket-id", T, "--keep-last", "1")
        assert out["success"] is True
        assert [r["path"] for r in out["removed"] if "attempt_number" in r] == [
            f"{T}/{RUN1}/phase_1_implement_a1.yaml",
            f"{T}/{RUN1}/phase_1_implement_a2.yaml",
        ]
        assert out["removed_count"] == len(out["removed"])
        assert out["bytes_freed"] > 0
        assert cli_json(factory, store, tmp_path, "verify", "--ticket-id", T)["ok"] is True
