"""Retention (``prune``) on every store: what it removes, what it never removes, and that every
link check (validate, resume, fork, verify) honours its notes afterwards.

The races with writers and the crash tests are in tests/test_prune_races.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from conftest import IMPLEMENT, LOCAL_REVIEW
from helpers import T0, Clock
from phaselog.ledger.facade import Ledger
from phaselog.ledger.retention import prune
from phaselog.model.errors import NotFound
from phaselog.model.ids import normalize_run_id
from phaselog.model.pipelines import Pipeline, pipeline_from_dict
from phaselog.stores.base import Store

pytestmark = pytest.mark.all_stores

T = "RET-1"
R1 = "run-a"
RUN1 = normalize_run_id(R1)

DATA = pipeline_from_dict(
    {
        "name": "data-job",
        "version": "1",
        "order": "free",
        "phases": [
            {"name": "data_ingest", "payload_schema": {"type": "object"}},
            {"name": "data_analysis", "payload_schema": {"type": "object"}},
            {"name": "an_a_a", "payload_schema": {"type": "object"}},
        ],
    }
)


def impl(i: int) -> dict[str, Any]:
    return {**IMPLEMENT, "files_changed": [f"src/f{i}.py"]}


def event_names(store: Store) -> list[str]:
    return store.entry_names("progress", T, RUN1)


def test_keep_last_removes_the_events_of_phases_whose_name_holds_a_(led: Ledger, store: Store) -> None:
    # Issue 9: "data_analysis" was split at its first "_a"; its events stayed behind while the
    # checkpoints they belong to went, so status showed a pruned attempt in progress.
    pl: Pipeline = DATA
    for phase in ("data_analysis", "an_a_a"):
        for _ in range(3):
            led.progress(T, R1, phase, "start", pipeline=pl)
            led.progress(T, R1, phase, "step", step=1, pipeline=pl)
            led.write(T, R1, phase, {"rows": 1}, pipeline=pl)
    before = event_names(store)
    assert len(before) == 12
    rep = prune(led, T, keep_last=1)
    gone = sorted((r["phase"], r["attempt_number"]) for r in rep.removed if "attempt_number" in r)
    assert gone == [("an_a_a", 1), ("an_a_a", 2), ("data_analysis", 1), ("data_analysis", 2)]
    left = event_names(store)
    assert len(left) == 4, left
    assert all("_a000003_" in n for n in left), left
    assert {p.phase: p.state for p in led.status(T, R1, pipeline=pl).phases} == {
        "data_ingest": "pending",
        "data_analysis": "completed",
        "an_a_a": "completed",
    }
    assert led.verify(T).ok, led.verify(T).problems


def _chain(led: Ledger) -> None:
    """implement a1, a2 failed, a3, a4 failed, a5; then local_review (built on a5)."""
    run = led.run(T, R1)
    run.write("implement", impl(1))
    run.fail("implement", "flaky test")
    run.write("implement", impl(3))
    run.fail("implement", "again")
    run.write("implement", impl(5))
    run.write("local_review", LOCAL_REVIEW)


def test_after_keep_last_every_link_check_honours_the_prune_notes(led: Ledger, store: Store) -> None:
    # Issue 8: after `prune --keep-last 1`, resume --skip-to, validate and fork failed with
    # "prev_hash names a previous attempt, but none is stored" while verify said ok.
    _chain(led)
    rep = prune(led, T, keep_last=1)
    assert sorted(r["attempt_number"] for r in rep.removed if r.get("phase") == "implement") == [1, 2, 3, 4]
    _stored, report = led.validate(T, R1, "implement")
    assert report.is_valid, [i.text() for i in report.errors]
    decision = led.can_skip_to(T, R1, "create_pr")
    assert decision.allowed, decision.to_json()
    new_run, written = led.fork(T, R1, through="local_review", new_run_id="run-fork")
    assert len(written) == 2
    assert led.verify(T).ok, led.verify(T).problems
    assert led.verify(T, new_run).ok


def test_older_than_never_removes_the_newest_attempt_even_a_failed_one(led: Ledger, store: Store, clock: Clock) -> None:
    # Issue 8: the newest attempt, a failure, was pruned: the phase flipped from failed to
    # completed, resume was wrongly allowed, and the next write reused its attempt number.
    clock.now = T0 + timedelta(days=100)
    run = led.run(T, R1)
    run.write("implement", impl(1), timestamp=T0)
    run.fail("implement", "broke", timestamp=T0 + timedelta(hours=1))
    run.write("local_review", LOCAL_REVIEW, timestamp=T0 + timedelta(days=99))  # the run is not old as a whole
    before = {p.phase: p.state for p in led.status(T, R1).phases}
    assert before["implement"] == "failed"
    rep = prune(led, T, older_than=timedelta(days=30))
    assert [r for r in rep.removed if r.get("attempt_number") == 2] == []
    assert any(k["reason"] == "newest attempt of its phase" for k in rep.kept), rep.kept
    assert {p.phase: p.state for p in led.status(T, R1).phases} == before
    assert not led.can_skip_to(T, R1, "create_pr").allowed
    assert led.write(T, R1, "implement", impl(3)).record.attempt_number == 3
    assert led.verify(T).ok, led.verify(T).problems


def test_prune_of_an_unknown_run_is_a_typed_not_found(led: Ledger, store: Store) -> None:
    led.write(T, R1, "implement", impl(1))
    with pytest.raises(NotFound) as info:
        prune(led, T, run_id="no-such-run")
    assert info.value.error_code == "not_found"
    assert store.runs(T) == [RUN1]


def test_verify_checks_every_link_across_a_pruned_gap(led: Ledger, store: Store) -> None:
    # Before: a record whose predecessor was pruned had none of its links checked, basis included.
    _chain(led)
    led.write(T, R1, "local_review", {**LOCAL_REVIEW, "iteration_count": 2})
    prune(led, T, keep_last=1)
    assert led.verify(T).ok
    # Forge local_review a2's basis (it names implement a5) and re-hash it as a writer would.
    lr = led.read(T, R1, "local_review").record
    forged = lr.evolve(basis={"implement": type(lr.basis["implement"])(5, "f" * 64)})
    _replace_record(store, lr, forged)
    problems = led.verify(T).problems
    assert [p["rule"] for p in problems] == ["basis"], problems


def _replace_record(store: Store, old: Any, new: Any) -> None:
    """Overwrite a stored record with ``new``, re-hashed as a writer would (a careful forger)."""
    import hashlib

    from phaselog.model import _yaml
    from phaselog.stores.files.store import FilesStore
    from phaselog.stores.kernel import record_document

    assert (old.phase, old.attempt_number) == (new.phase, new.attempt_number)
    if isinstance(store, FilesStore):
        run_dir = store.root / "checkpoints" / T / old.run_id
        stem = f"{old.phase_ordinal}_{old.phase}_a{old.attempt_number}"
        seed = _yaml.dump(new.seed_dict()).encode()
        (run_dir / f"phase_{stem}.yaml").write_bytes(seed)
        (run_dir / f".meta_{stem}.json").write_bytes(record_document(new, hashlib.sha256(seed).hexdigest()))
        return
    import sqlite3

    body = record_document(new, None).decode()
    key = (new.content_hash, body, T, old.run_id, old.phase_ordinal, old.attempt_number)
    sql = (
        "UPDATE phaselog_checkpoints SET content_hash = ?, body = ? WHERE ticket_id = ? AND run_id = ? "
        "AND phase_ordinal = ? AND attempt = ?"
    )
    if store.dialect.name == "sqlite":  # type: ignore[attr-defined]
        con = sqlite3.connect(store.path, isolation_level=None)  # type: ignore[attr-defined]
        con.execute(sql, key)
        con.close()
        return
    import psycopg

    from phaselog.stores.sql.postgres import split_url

    dsn, schema = split_url(store.url)
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute(f'SET search_path TO "{schema}"')
        con.execute(sql.replace("?", "%s"), key)
