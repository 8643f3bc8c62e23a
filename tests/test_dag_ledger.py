"""The ledger judges a phase by its own ancestors (issue 25): strict order, readiness, skips,
staleness, forks and run completion over a DAG manifest, on files, SQLite and PostgreSQL.

The graph: research -> script -> {voice, broll} -> render (voice and broll each need script; render
needs both). Nothing here is positional: a completed voice needs no broll, and the other way round.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaselog.ledger.facade import Ledger
from phaselog.model import events
from phaselog.model.errors import Prerequisite
from phaselog.model.events import Event
from phaselog.model.pipelines import Pipeline, pipeline_from_dict
from phaselog.stores import Store
from test_graph import dag_needs, manifest

pytestmark = pytest.mark.all_stores

T = "DAG-1"


def video(*, gated: str | None = None, sinks: bool = False) -> Pipeline:
    """The DAG pipeline (``gated``: that phase requires approval; ``sinks``: no render, so voice and
    broll are the two sinks)."""
    phases: list[dict[str, Any]] = [
        {"name": "research"},
        {"name": "script"},
        {"name": "voice", "needs": ["script"]},
        {"name": "broll", "needs": ["script"]},
    ]
    if not sinks:
        phases.append({"name": "render", "needs": ["voice", "broll"]})
    for p in phases:
        if p["name"] == gated:
            p["requires_approval"] = True
    return pipeline_from_dict({"name": "video-dag", "version": "1", "order": "strict", "phases": phases})


def _upto_script(led: Ledger, pl: Pipeline, run: str = "r") -> None:
    led.write(T, run, "research", {}, pipeline=pl)
    led.write(T, run, "script", {}, pipeline=pl)


def test_a_completed_voice_needs_script_not_broll(led: Ledger) -> None:
    pl = video()
    _upto_script(led, pl)
    voice = led.write(T, "r", "voice", {}, pipeline=pl)  # broll has nothing yet: not a prerequisite
    assert set(voice.record.basis or {}) == {"research", "script"}
    broll = led.write(T, "r", "broll", {}, pipeline=pl)  # listed after voice, needs no voice either
    assert set(broll.record.basis or {}) >= {"research", "script"}
    st = led.status(T, "r", pipeline=pl)
    assert [p.state for p in st.phases] == ["completed"] * 4 + ["pending"]


def test_render_before_broll_is_refused_naming_broll_only(led: Ledger) -> None:
    pl = video()
    _upto_script(led, pl)
    led.write(T, "r", "voice", {}, pipeline=pl)
    with pytest.raises(Prerequisite) as caught:
        led.write(T, "r", "render", {}, pipeline=pl)
    err = caught.value
    assert "broll is pending" in err.message
    assert "voice" not in err.message
    assert [b["phase"] for b in err.context["blockers"]] == ["broll"]
    assert led.status(T, "r", pipeline=pl).phase("render").state == "pending"  # nothing written
    led.write(T, "r", "broll", {}, pipeline=pl)
    led.write(T, "r", "render", {}, pipeline=pl)
    assert led.status(T, "r", pipeline=pl).done


def test_a_voice_before_its_script_is_refused_naming_script_and_research(led: Ledger) -> None:
    pl = video()
    with pytest.raises(Prerequisite) as caught:
        led.write(T, "r", "voice", {}, pipeline=pl)
    assert [b["phase"] for b in caught.value.context["blockers"]] == ["research", "script"]


def test_ready_phases_are_every_phase_whose_needs_are_completed(led: Ledger) -> None:
    pl = video()
    st = led.status(T, "r", pipeline=pl)
    assert (st.ready_phases, st.next_phase) == (["research"], "research")
    _upto_script(led, pl)
    st = led.status(T, "r", pipeline=pl)
    assert (st.ready_phases, st.next_phase) == (["voice", "broll"], "voice")
    led.write(T, "r", "broll", {}, pipeline=pl)
    st = led.status(T, "r", pipeline=pl)
    assert (st.ready_phases, st.next_phase) == (["voice"], "voice")  # render still needs voice
    assert st.to_json()["ready_phases"] == ["voice"]
    led.write(T, "r", "voice", {}, pipeline=pl)
    st = led.status(T, "r", pipeline=pl)
    assert (st.ready_phases, st.next_phase) == (["render"], "render")
    led.write(T, "r", "render", {}, pipeline=pl)
    st = led.status(T, "r", pipeline=pl)
    assert (st.ready_phases, st.next_phase, st.done) == ([], None, True)
    assert st.to_json()["ready_phases"] == []


def test_can_skip_to_a_branch_judges_only_its_ancestors(led: Ledger) -> None:
    pl = video()
    _upto_script(led, pl)
    led.write(T, "r", "voice", None, pipeline=pl, status="failed", error="tts quota")
    decision = led.can_skip_to(T, "r", "broll", pipeline=pl)
    assert decision.allowed, decision.to_json()  # a failed voice is no ancestor of broll
    decision = led.can_skip_to(T, "r", "render", pipeline=pl)
    assert not decision.allowed
    assert [(b.phase, b.state) for b in decision.blockers] == [("voice", "failed"), ("broll", "pending")]
    assert "tts quota" in decision.blockers[0].reason


def test_a_new_voice_makes_render_stale_but_not_broll(led: Ledger, clock: Any) -> None:
    pl = video()
    _upto_script(led, pl)
    for phase in ("voice", "broll", "render"):
        clock.tick()
        led.write(T, "r", phase, {}, pipeline=pl)
    clock.tick()
    led.write(T, "r", "voice", {"take": 2}, pipeline=pl)
    st = led.status(T, "r", pipeline=pl)
    states = {p.phase: p.state for p in st.phases}
    assert states == {
        "research": "completed",
        "script": "completed",
        "voice": "completed",
        "broll": "completed",  # built beside voice 1, not on it
        "render": "stale",
    }
    assert "voice attempt 1" in (st.phase("render").reason or "")
    assert (st.ready_phases, st.next_phase) == (["render"], "render")
    assert led.can_skip_to(T, "r", "render", pipeline=pl).allowed


def collect(into: list[Event]) -> Any:
    """A subscriber that appends every event to ``into``."""
    return lambda event, origin: into.append(event)


def _completed_events(led: Ledger, run: str) -> list[tuple[str, str | None]]:
    return [(e.type, e.phase) for e in led.feed(ticket_id=T, run_id=run).events if e.type == "run.completed"]


def test_run_completed_comes_once_with_the_sink(led: Ledger) -> None:
    seen: list[Event] = []
    stop = events.subscribe(lambda event, origin: seen.append(event))
    pl = video()
    try:
        _upto_script(led, pl)
        led.write(T, "r", "broll", {}, pipeline=pl)
        led.write(T, "r", "voice", {}, pipeline=pl)
        led.write(T, "r", "render", {}, pipeline=pl)
    finally:
        stop()
    raised = [(e.type, getattr(e, "phase", None)) for e in seen if e.type == "run.completed"]
    assert raised == [("run.completed", "render")]
    assert _completed_events(led, "r") == raised  # the feed decides it the same way
    assert sorted(e.id for e in seen) == sorted(e.event_id for e in led.feed(ticket_id=T, run_id="r").events)


@pytest.mark.parametrize("last", ["voice", "broll"])
def test_with_two_sinks_the_last_one_completed_completes_the_run(led: Ledger, last: str) -> None:
    seen: list[Event] = []
    stop = events.subscribe(lambda event, origin: seen.append(event))
    pl = video(sinks=True)
    first = "broll" if last == "voice" else "voice"
    try:
        _upto_script(led, pl)
        led.write(T, "r", first, {}, pipeline=pl)
        assert not led.status(T, "r", pipeline=pl).done
        led.write(T, "r", last, {}, pipeline=pl)
    finally:
        stop()
    assert led.status(T, "r", pipeline=pl).done
    raised = [(e.type, getattr(e, "phase", None)) for e in seen if e.type == "run.completed"]
    assert raised == [("run.completed", last)]  # not the last-listed phase: the last outstanding sink
    assert _completed_events(led, "r") == raised


def test_approving_a_gated_sink_completes_the_run(led: Ledger) -> None:
    pl = video(gated="render")
    _upto_script(led, pl)
    led.write(T, "r", "voice", {}, pipeline=pl)
    led.write(T, "r", "broll", {}, pipeline=pl)
    led.write(T, "r", "render", {}, pipeline=pl)
    assert _completed_events(led, "r") == []
    led.approve(T, "r", "render", by="ana", pipeline=pl)
    assert _completed_events(led, "r") == [("run.completed", "render")]
    assert led.status(T, "r", pipeline=pl).done


def test_a_gated_branch_blocks_only_its_dependents(led: Ledger) -> None:
    pl = video(gated="voice")
    _upto_script(led, pl)
    led.write(T, "r", "voice", {}, pipeline=pl)
    led.write(T, "r", "broll", {}, pipeline=pl)  # voice awaits approval: broll does not need it
    with pytest.raises(Prerequisite) as caught:
        led.write(T, "r", "render", {}, pipeline=pl)
    assert [(b["phase"], b["state"]) for b in caught.value.context["blockers"]] == [("voice", "awaiting_approval")]
    st = led.status(T, "r", pipeline=pl)
    assert st.ready_phases == ["voice"]  # not completed: a person must act
    assert st.next_phase == "voice"
    led.approve(T, "r", "voice", by="ana", pipeline=pl)
    assert led.status(T, "r", pipeline=pl).ready_phases == ["render"]


def test_a_fork_through_a_branch_copies_the_manifest_prefix(led: Ledger, store: Store) -> None:
    pl = video()
    _upto_script(led, pl)
    led.write(T, "r", "voice", {}, pipeline=pl)
    led.write(T, "r", "broll", None, pipeline=pl, status="failed", error="no footage")
    with pytest.raises(Prerequisite) as caught:  # through broll: broll itself is copied, so it must be done
        led.fork(T, "r", through="broll", new_run_id="f1")
    assert [b["phase"] for b in caught.value.context["blockers"]] == ["broll"]
    new, written = led.fork(T, "r", through="voice", new_run_id="f2")
    assert [w.record.phase for w in written] == ["research", "script", "voice"]
    st = led.status(T, new, pipeline=pl)
    assert st.ready_phases == ["broll"]


def test_a_sink_written_beside_a_stale_sink_does_not_complete_the_run(led: Ledger, clock: Any) -> None:
    pl = video(sinks=True)
    _upto_script(led, pl)
    for phase in ("voice", "broll"):
        clock.tick()
        led.write(T, "r", phase, {}, pipeline=pl)
    assert _completed_events(led, "r") == [("run.completed", "broll")]
    seen: list[Event] = []
    stop = events.subscribe(lambda event, origin: seen.append(event))
    try:
        clock.tick()
        led.write(T, "r", "script", {"draft": 2}, pipeline=pl)  # voice and broll are stale now
        clock.tick()
        led.write(T, "r", "voice", {"take": 2}, pipeline=pl)  # its basis names broll 1, still stale
        assert not led.status(T, "r", pipeline=pl).done
        assert [e.type for e in seen if e.type == "run.completed"] == []
        clock.tick()
        led.write(T, "r", "broll", {"take": 2}, pipeline=pl)  # the last outstanding sink
    finally:
        stop()
    assert led.status(T, "r", pipeline=pl).done
    assert [(e.type, getattr(e, "phase", None)) for e in seen if e.type == "run.completed"] == [
        ("run.completed", "broll")
    ]
    assert _completed_events(led, "r") == [("run.completed", "broll")] * 2  # the first run, then this one
    fresh = Ledger(led.store)  # another reader derives the very same events
    assert [e.to_json() for e in fresh.feed(ticket_id=T).events] == [e.to_json() for e in led.feed(ticket_id=T).events]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dag_needs(), st.lists(st.tuples(st.integers(0, 8), st.booleans()), max_size=14))
def test_over_random_graphs_a_strict_write_needs_exactly_its_ancestors(
    store: Store, needs: list[list[str] | None], steps: list[tuple[int, bool]]
) -> None:
    pl = pipeline_from_dict({**manifest(needs), "order": "strict"})
    g, names = pl.graph, pl.phase_names
    led, run = Ledger(store), f"h-{uuid.uuid4().hex[:12]}"
    wrote, announced = 0, set[str]()
    for index, ok in steps:
        phase = names[index % len(names)]
        before = led.status(T, run, pipeline=pl)
        blocking = [a for a in g.ancestors(phase) if before.phase(a).state != "completed"]
        seen: list[Event] = []
        stop = events.subscribe(collect(seen))
        try:
            if ok and blocking:
                with pytest.raises(Prerequisite) as caught:
                    led.write(T, run, phase, {}, pipeline=pl)
                assert [b["phase"] for b in caught.value.context["blockers"]] == blocking
            elif ok:
                led.write(T, run, phase, {}, pipeline=pl)
                wrote += 1
            else:
                led.write(T, run, phase, None, pipeline=pl, status="failed", error="boom")
                wrote += 1
        finally:
            stop()
        st_ = led.status(T, run, pipeline=pl)
        states = {p.phase: p.state for p in st_.phases}
        ready = [n for n in names if states[n] != "completed" and all(states[d] == "completed" for d in g.needs[n])]
        assert st_.ready_phases == ready
        assert st_.next_phase == (ready[0] if ready else None)
        for p in st_.phases:  # stale only because of an ancestor
            if p.state == "stale":
                assert any(f"{a} " in (p.reason or "") for a in g.ancestors(p.phase)), p.reason
        completed = [e for e in seen if e.type == "run.completed"]
        announced |= {e.id for e in completed}
        assert all(getattr(e, "phase", None) == phase and phase in g.sinks for e in completed)
        if st_.done and not before.done:  # the write that completed the run says so, once
            assert len(completed) == 1
    if wrote:  # (a PostgreSQL schema nothing was ever written to has no queue table for the feed to read)
        feed = [e for e in led.feed(ticket_id=T, run_id=run).events if e.type == "run.completed"]
        assert {e.event_id for e in feed} == announced  # the feed derives what the writer raised
