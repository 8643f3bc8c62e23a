"""``blockers_before``: the one walk behind ``can_skip_to`` and a strict pipeline's write.

The two walks it replaced are kept here, as they were, as the reference: over any run state the
shared walk gives the same blockers, in the same order, with the same words.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from phaselog.ledger.derive import COMPLETED, PhaseState, RunStatus
from phaselog.ledger.status import Blocker, _skip_reason, blockers_before
from phaselog.ledger.writes import strict_reason

STATES = ("pending", "completed", "failed", "stale", "in_progress", "awaiting_approval", "rejected", "damaged")


def old_skip_blockers(st_: RunStatus, ordinal: int, check: dict[str, Blocker | None]) -> list[Blocker]:
    """``RunStates.can_skip_to``'s walk before the refactor (the completed-phase checks as ``check``)."""
    blockers: list[Blocker] = []
    for ps in st_.phases:
        if ps.ordinal >= ordinal:
            break
        if ps.state != COMPLETED:
            reason = {
                "pending": "no checkpoint yet",
                "failed": f"latest attempt {ps.latest_attempt} failed: {ps.reason}",
            }.get(ps.state, ps.reason or ps.state)
            if ps.in_flight is not None:
                reason = (
                    f"attempt {ps.in_flight['attempt_number']} is in progress; resume it after step "
                    f"{ps.in_flight['resume_after']}, the last step recorded done"
                    + (f" ({ps.reason})" if ps.in_flight.get("abandoned") else "")
                )
            blockers.append(Blocker(ps.phase, ps.state, reason))
            continue
        found = check[ps.phase]
        if found is not None:
            blockers.append(found)
    return blockers


def old_strict_blockers(st_: RunStatus, ordinal: int) -> list[Blocker]:
    """``Writes._check_prerequisites``'s walk before the refactor."""
    blockers = []
    for ps in st_.phases:
        if ps.ordinal >= ordinal:
            break
        if ps.state != COMPLETED:
            reason = {
                "pending": "missing: no checkpoint yet",
                "awaiting_approval": f"unapproved: attempt {ps.completed_attempt} awaits approval",
            }.get(ps.state, ps.reason or ps.state)
            blockers.append(Blocker(ps.phase, ps.state, reason))
    return blockers


@st.composite
def run_states(draw: Any) -> tuple[RunStatus, dict[str, Blocker | None]]:
    n = draw(st.integers(min_value=0, max_value=6))
    phases = []
    check: dict[str, Blocker | None] = {}
    for i in range(1, n + 1):
        name = f"p{i}"
        flight = draw(
            st.none()
            | st.fixed_dictionaries(
                {"attempt_number": st.integers(1, 9), "resume_after": st.integers(0, 9), "abandoned": st.booleans()}
            )
        )
        phases.append(
            PhaseState(
                phase=name,
                ordinal=i,
                state=draw(st.sampled_from(STATES)),
                latest_attempt=draw(st.none() | st.integers(1, 9)),
                completed_attempt=draw(st.none() | st.integers(1, 9)),
                reason=draw(st.none() | st.sampled_from(["", "why", "process gone"])),
                in_flight=flight,
            )
        )
        check[name] = draw(st.none() | st.just(Blocker(name, "invalid", "artifact missing")))
    return RunStatus("T", "r", "p", tuple(phases)), check


@given(run_states(), st.integers(min_value=0, max_value=8))
def test_the_shared_walk_words_blockers_as_both_old_walks_did(given_state: Any, ordinal: int) -> None:
    status, check = given_state
    assert blockers_before(status, ordinal, strict_reason) == old_strict_blockers(status, ordinal)
    assert blockers_before(status, ordinal, _skip_reason, lambda ps: check[ps.phase]) == old_skip_blockers(
        status, ordinal, check
    )


def test_only_earlier_phases_block_and_completed_ones_only_when_checked() -> None:
    phases = (
        PhaseState("a", 1, "completed", completed_attempt=1),
        PhaseState("b", 2, "failed", latest_attempt=2, reason="boom"),
        PhaseState("c", 3, "pending"),
    )
    status = RunStatus("T", "r", "p", phases)
    assert blockers_before(status, 1, strict_reason) == []
    assert blockers_before(status, 3, strict_reason) == [Blocker("b", "failed", "boom")]
    flagged = blockers_before(status, 4, _skip_reason, lambda ps: Blocker(ps.phase, "invalid", "x"))
    assert flagged == [
        Blocker("a", "invalid", "x"),
        Blocker("b", "failed", "latest attempt 2 failed: boom"),
        Blocker("c", "pending", "no checkpoint yet"),
    ]
