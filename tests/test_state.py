"""Derived run state: pending/completed/failed/stale, next phase (phaselog.ledger.derive)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaselog.ledger.derive import COMPLETED, FAILED, PENDING, STALE, RunStatus, derive_status
from phaselog.model import _yaml
from phaselog.model.decoding import checkpoint_from_seed
from phaselog.model.pipelines import builtin
from phaselog.model.records import BasisEntry, Checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "seed-tool-files" / "checkpoints"
RUN = "4fa2159f-9c61-5f8b-9ae5-28692b46cbd7"
T0 = datetime(2026, 2, 9, 12, 0, tzinfo=UTC)
TICKET = builtin("ticket-pipeline")
PHASES = TICKET.phase_names


def _cp(
    phase: str,
    attempt: int = 1,
    minutes: int = 0,
    *,
    status: str = "completed",
    basis: dict[str, BasisEntry] | None = None,
    has_metadata: bool = True,
    **changes: Any,
) -> Checkpoint:
    return Checkpoint(
        ticket_id="OMN-1",
        run_id=RUN,
        phase=phase,
        phase_ordinal=TICKET.phase(phase).ordinal if phase in PHASES else 99,
        attempt_number=attempt,
        timestamp_utc=T0 + timedelta(minutes=minutes),
        phase_payload={"phase": phase},
        status=status,  # type: ignore[arg-type]
        error="boom" if status == "failed" else None,
        basis=basis,
        has_metadata=has_metadata,
    ).evolve(**changes)


def _basis(*records: Checkpoint) -> dict[str, BasisEntry]:
    return {r.phase: BasisEntry(r.attempt_number, r.content_hash) for r in records}


def _states(status: RunStatus) -> dict[str, str]:
    return {p.phase: p.state for p in status.phases}


def _seed_run(ticket: str) -> list[Checkpoint]:
    (run_dir,) = (FIXTURES / ticket).iterdir()
    out = []
    for path in sorted(run_dir.glob("phase_*.yaml")):
        cp, _ = checkpoint_from_seed(_yaml.load(path.read_bytes()), phase_ordinal=int(path.name.split("_")[1]))
        out.append(cp)
    return out


# -- basic states --------------------------------------------------------------------------------
def test_no_records_means_everything_pending() -> None:
    s = derive_status(TICKET, [], ticket_id="OMN-1", run_id=RUN)
    assert [p.phase for p in s.phases] == PHASES
    assert [p.ordinal for p in s.phases] == [1, 2, 3, 4, 5]
    assert all(p.state == PENDING for p in s.phases)
    assert all(p.attempts == 0 and p.latest_attempt is None for p in s.phases)
    assert s.next_phase == "implement"
    assert s.completed_phases == []
    assert not s.done
    assert s.warnings == ()
    assert (s.ticket_id, s.run_id, s.pipeline) == ("OMN-1", RUN, "ticket-pipeline")


def test_completed_phases_and_next_phase() -> None:
    impl = _cp("implement")
    review = _cp("local_review", minutes=10, basis=_basis(impl))
    s = derive_status(TICKET, [impl, review])
    assert _states(s) == {
        "implement": COMPLETED,
        "local_review": COMPLETED,
        "create_pr": PENDING,
        "pr_release_ready": PENDING,
        "ready_for_merge": PENDING,
    }
    assert s.completed_phases == ["implement", "local_review"]
    assert s.next_phase == "create_pr"
    assert s.phase("local_review").completed_attempt == 1


def test_all_completed_is_done() -> None:
    records: list[Checkpoint] = []
    for i, name in enumerate(PHASES):
        records.append(_cp(name, minutes=i, basis=_basis(*records)))
    s = derive_status(TICKET, records)
    assert s.done
    assert s.next_phase is None
    assert s.completed_phases == PHASES
    assert s.to_json()["done"] is True


def test_a_failed_latest_attempt_fails_the_phase() -> None:
    s = derive_status(TICKET, [_cp("implement", status="failed")])
    ph = s.phase("implement")
    assert ph.state == FAILED
    assert ph.reason == "boom"
    assert ph.completed_attempt is None
    assert s.next_phase == "implement"


def test_completed_then_failed_is_failed() -> None:
    s = derive_status(TICKET, [_cp("implement", 1), _cp("implement", 2, 5, status="failed")])
    ph = s.phase("implement")
    assert ph.state == FAILED
    assert ph.latest_attempt == 2
    assert ph.attempts == 2
    assert ph.completed_attempt == 1  # the older completed attempt is remembered, not counted
    assert s.completed_phases == []
    assert s.next_phase == "implement"


def test_failed_then_completed_is_completed() -> None:
    s = derive_status(TICKET, [_cp("implement", 1, status="failed"), _cp("implement", 2, 5)])
    assert s.phase("implement").state == COMPLETED
    assert s.phase("implement").completed_attempt == 2


def test_the_latest_attempt_is_by_number_not_by_time_or_order() -> None:
    # attempt 2 carries an older timestamp than attempt 1: the number still decides
    a1 = _cp("implement", 1, 30)
    a2 = _cp("implement", 2, 0, status="failed")
    for records in ([a1, a2], [a2, a1]):
        ph = derive_status(TICKET, records).phase("implement")
        assert ph.state == FAILED
        assert ph.latest_attempt == 2
        assert ph.latest_timestamp == a2.timestamp_utc


def test_a_later_phase_can_complete_while_an_earlier_one_is_pending() -> None:
    s = derive_status(TICKET, [_cp("implement"), _cp("create_pr", minutes=5)])
    assert _states(s)["local_review"] == PENDING
    assert _states(s)["create_pr"] == COMPLETED
    assert s.next_phase == "local_review"


def test_damaged_attempts_are_reported() -> None:
    s = derive_status(TICKET, [_cp("implement")], damaged=[("implement", 3), ("implement", 2)])
    assert s.phase("implement").damaged_attempts == (2, 3)
    assert s.phase("local_review").damaged_attempts == ()


def test_unknown_phase_lookup_on_status() -> None:
    with pytest.raises(KeyError):
        derive_status(TICKET, []).phase("deploy")


# -- stale via basis -----------------------------------------------------------------------------
def test_stale_when_an_earlier_phase_has_a_newer_completed_attempt() -> None:
    impl1 = _cp("implement", 1, 0)
    review = _cp("local_review", 1, 10, basis=_basis(impl1))
    impl2 = _cp("implement", 2, 20, basis={})
    s = derive_status(TICKET, [impl1, review, impl2])
    ph = s.phase("local_review")
    assert ph.state == STALE
    assert ph.completed_attempt == 1
    assert "implement" in (ph.reason or "")
    assert "2" in (ph.reason or "")
    assert s.next_phase == "local_review"
    assert s.completed_phases == ["implement"]


def test_a_newer_failed_attempt_of_an_earlier_phase_does_not_make_later_ones_stale() -> None:
    impl1 = _cp("implement", 1, 0)
    review = _cp("local_review", 1, 10, basis=_basis(impl1))
    impl2 = _cp("implement", 2, 20, status="failed")
    s = derive_status(TICKET, [impl1, review, impl2])
    assert _states(s)["implement"] == FAILED
    assert _states(s)["local_review"] == COMPLETED  # built on the latest *completed* implement
    assert s.next_phase == "implement"


def test_stale_when_the_basis_hash_does_not_match() -> None:
    impl = _cp("implement")
    review = _cp("local_review", minutes=10, basis={"implement": BasisEntry(1, "0" * 64)})
    ph = derive_status(TICKET, [impl, review]).phase("local_review")
    assert ph.state == STALE
    assert "changed" in (ph.reason or "")


def test_stale_when_the_basis_names_an_attempt_that_is_not_a_completed_one() -> None:
    impl1 = _cp("implement", 1)
    impl2 = _cp("implement", 2, 5, status="failed")
    review = _cp("local_review", minutes=10, basis={"implement": BasisEntry(2, impl2.content_hash)})
    ph = derive_status(TICKET, [impl1, impl2, review]).phase("local_review")
    assert ph.state == STALE


def test_stale_when_the_basis_omits_an_earlier_completed_phase() -> None:
    impl = _cp("implement")
    review = _cp("local_review", minutes=10, basis={})
    assert derive_status(TICKET, [impl, review]).phase("local_review").state == STALE


def test_staleness_follows_each_phases_own_basis() -> None:
    impl1 = _cp("implement", 1, 0)
    review = _cp("local_review", 1, 10, basis=_basis(impl1))
    pr = _cp("create_pr", 1, 20, basis=_basis(impl1, review))
    impl2 = _cp("implement", 2, 30, basis={})
    s = derive_status(TICKET, [impl1, review, pr, impl2])
    assert _states(s)["local_review"] == STALE
    assert _states(s)["create_pr"] == STALE  # built on implement 1 as well
    # redo review on implement 2: create_pr is still stale (its basis names review 1)
    review2 = _cp("local_review", 2, 40, basis=_basis(impl2))
    s2 = derive_status(TICKET, [impl1, review, pr, impl2, review2])
    assert _states(s2)["local_review"] == COMPLETED
    assert _states(s2)["create_pr"] == STALE
    assert s2.next_phase == "create_pr"


def test_a_later_phase_is_stale_when_an_earlier_phase_completes_after_it() -> None:
    impl = _cp("implement")
    pr = _cp("create_pr", minutes=10, basis=_basis(impl))
    review = _cp("local_review", minutes=20, basis=_basis(impl))
    # local_review completed after create_pr was written and create_pr's basis lacks it
    s = derive_status(TICKET, [impl, pr, review])
    assert _states(s)["local_review"] == COMPLETED
    assert _states(s)["create_pr"] == STALE


# -- stale via timestamps (seed checkpoints without a basis) -----------------------------------
def test_seed_checkpoints_are_stale_when_an_earlier_phase_completed_later() -> None:
    impl1 = _cp("implement", 1, 0, has_metadata=False)
    review = _cp("local_review", 1, 10, has_metadata=False)
    impl2 = _cp("implement", 2, 20, has_metadata=False)
    s = derive_status(TICKET, [impl1, review, impl2])
    ph = s.phase("local_review")
    assert ph.state == STALE
    assert "timestamps" in (ph.reason or "")
    ok = derive_status(TICKET, [impl1, review])
    assert ok.phase("local_review").state == COMPLETED


def test_equal_timestamps_are_not_stale() -> None:
    impl = _cp("implement", 1, 10, has_metadata=False)
    review = _cp("local_review", 1, 10, has_metadata=False)
    assert derive_status(TICKET, [impl, review]).phase("local_review").state == COMPLETED


# -- the seed tool's own runs -------------------------------------------------------------------
def test_seed_fixture_run_omn_2143_has_phase_4_missing() -> None:
    s = derive_status(TICKET, _seed_run("OMN-2143"), ticket_id="OMN-2143", run_id=RUN)
    assert _states(s) == {
        "implement": COMPLETED,
        "local_review": COMPLETED,
        "create_pr": COMPLETED,
        "pr_release_ready": PENDING,
        "ready_for_merge": COMPLETED,
    }
    assert s.next_phase == "pr_release_ready"
    assert s.completed_phases == ["implement", "local_review", "create_pr", "ready_for_merge"]
    impl = s.phase("implement")
    assert (impl.latest_attempt, impl.attempts, impl.completed_attempt) == (2, 2, 2)
    assert s.warnings == ()
    doc = s.to_json()
    assert doc["next_phase"] == "pr_release_ready"
    assert doc["phases"][0]["latest_timestamp"] == "2026-02-09T15:41:03.512904Z"


def test_seed_fixture_run_omn_2144_waits_for_ready_for_merge() -> None:
    s = derive_status(TICKET, _seed_run("OMN-2144"))
    assert s.completed_phases == PHASES[:4]
    assert s.next_phase == "ready_for_merge"
    review = s.phase("local_review")
    assert (review.latest_attempt, review.attempts) == (2, 2)


# -- purity --------------------------------------------------------------------------------------
@st.composite
def runs(draw: st.DrawFn) -> list[Checkpoint]:
    """A run's records: unique attempts per phase, random status/time, some with a basis."""
    records: list[Checkpoint] = []
    for name in draw(st.lists(st.sampled_from(PHASES), unique=True, max_size=5)):
        for attempt in sorted(draw(st.sets(st.integers(1, 6), min_size=1, max_size=3))):
            done = [r for r in records if r.completed]
            basis = draw(
                st.one_of(
                    st.none(),
                    st.just(_basis(*done)),
                    st.lists(st.sampled_from(done), unique_by=lambda r: r.phase).map(lambda rs: _basis(*rs))
                    if done
                    else st.just({}),
                )
            )
            records.append(
                _cp(
                    name,
                    attempt,
                    draw(st.integers(0, 500)),
                    status=draw(st.sampled_from(["completed", "completed", "failed"])),
                    basis=basis,
                    has_metadata=basis is not None,
                )
            )
    return records


@given(runs(), st.randoms(use_true_random=False))
def test_status_does_not_depend_on_record_order(records: list[Checkpoint], rnd: Any) -> None:
    shuffled = list(records)
    rnd.shuffle(shuffled)
    a = derive_status(TICKET, records, ticket_id="T", run_id=RUN)
    b = derive_status(TICKET, shuffled, ticket_id="T", run_id=RUN)
    assert a == b
    assert a.to_json() == b.to_json()
    assert derive_status(TICKET, iter(shuffled)) == derive_status(TICKET, records)


@given(runs(), st.integers(1, 5), st.sampled_from(["deploy", "rollback", "Implement"]))
def test_an_unknown_phase_record_only_adds_a_warning(records: list[Checkpoint], attempt: int, name: str) -> None:
    base = derive_status(TICKET, records)
    extra = _cp(name, attempt, 1000)
    for at in (0, len(records)):
        with_extra = derive_status(TICKET, [*records[:at], extra, *records[at:]])
        assert with_extra.phases == base.phases
        assert with_extra.next_phase == base.next_phase
        assert len(with_extra.warnings) == len(base.warnings) + 1
        assert name in with_extra.warnings[-1]


@given(runs())
def test_status_invariants(records: list[Checkpoint]) -> None:
    s = derive_status(TICKET, records)
    for ph in s.phases:
        mine = [r for r in records if r.phase == ph.phase]
        assert ph.attempts == len(mine)
        if not mine:
            assert ph.state == PENDING
            continue
        latest = max(mine, key=lambda r: r.attempt_number)
        assert ph.latest_attempt == latest.attempt_number
        assert (ph.state == FAILED) == (not latest.completed)
        if ph.state in (COMPLETED, STALE):
            assert ph.completed_attempt == latest.attempt_number
    first_open = next((p.phase for p in s.phases if p.state != COMPLETED), None)
    assert s.next_phase == first_open
    assert s.completed_phases == [p.phase for p in s.phases if p.state == COMPLETED]
    # the first phase has nothing before it: it is never stale
    assert s.phases[0].state != STALE
