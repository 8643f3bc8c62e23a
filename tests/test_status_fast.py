"""The shortcuts a status takes (D192, D193, D194) build exactly what the slow way builds."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaselog.ledger.derive import PhaseState, _phase
from phaselog.model.errors import PipelineError
from phaselog.model.pipelines import builtin

_VALUES: dict[str, Any] = {
    "latest_attempt": st.none() | st.integers(1, 9),
    "latest_timestamp": st.none() | st.just(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    "completed_attempt": st.none() | st.integers(1, 9),
    "attempts": st.integers(0, 9),
    "reason": st.none() | st.text(max_size=5),
    "damaged_attempts": st.lists(st.integers(1, 9), max_size=3).map(tuple),
    "requires_approval": st.booleans(),
    "approval": st.sampled_from([None, "approved", "rejected"]),
    "in_flight": st.none() | st.just({"attempt_number": 2}),
    "input_request": st.none() | st.just({"attempt_number": 1, "questions": []}),
    "approval_from": st.none() | st.just({"inherited": True}),
}


@given(chosen=st.fixed_dictionaries({}, optional=_VALUES), state=st.sampled_from(["pending", "completed", "stale"]))
def test_a_phase_state_built_without_init_equals_the_constructed_one(chosen: dict[str, Any], state: str) -> None:
    fast = _phase(phase="implement", ordinal=3, state=state, **chosen)
    slow = PhaseState(phase="implement", ordinal=3, state=state, **chosen)
    assert fast == slow
    assert fast.to_json() == slow.to_json()
    assert {f.name: getattr(fast, f.name) for f in fields(PhaseState)} == vars(slow)


def test_a_builtin_pipeline_is_found_once_and_is_the_manifests() -> None:
    first = builtin("ticket-pipeline")
    assert builtin("ticket-pipeline") is first
    assert builtin() is first  # the default pipeline is ticket-pipeline
    assert builtin("video-pipeline").name == "video-pipeline"
    with pytest.raises(PipelineError, match="no built-in pipeline 'nope'"):
        builtin("nope")  # a name that is not built in is refused every time, never remembered
    with pytest.raises(PipelineError):
        builtin("nope")
