"""model/graph.py: a pipeline's ``needs`` and what follows from them (issue 25).

Over random DAG manifests (hypothesis): ancestors are the transitive needs, in manifest order;
levels are a topological layering; ``ready`` is sound and complete; descendants mirror ancestors;
a manifest without ``needs`` is the chain it always was (the old positional semantics). Every bad
manifest rule raises a PipelineError naming the field and the rule.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaselog.model.errors import PipelineError
from phaselog.model.graph import Graph, find_cycle
from phaselog.model.pipelines import Pipeline, pipeline_from_dict


def manifest(needs: list[list[str] | None], **extra: Any) -> dict[str, Any]:
    """A manifest of phases p0, p1, … where phase i needs ``needs[i]`` (None: no ``needs`` key)."""
    phases: list[dict[str, Any]] = []
    for i, given_needs in enumerate(needs):
        phase: dict[str, Any] = {"name": f"p{i}"}
        if given_needs is not None:
            phase["needs"] = given_needs
        phases.append(phase)
    return {"name": "g", "version": "1", "phases": phases, **extra}


@st.composite
def dag_needs(draw: Any, min_size: int = 1) -> list[list[str] | None]:
    """Each phase needs a random subset of the phases before it, or has no ``needs`` at all."""
    n = draw(st.integers(min_value=min_size, max_value=9))
    out: list[list[str] | None] = []
    for i in range(n):
        if draw(st.booleans()) and i > 0 and draw(st.booleans()):
            out.append(None)  # the default: the phase before it
        else:
            earlier = [f"p{j}" for j in range(i)]
            picked = draw(st.lists(st.sampled_from(earlier), unique=True) if earlier else st.just([]))
            out.append(sorted(picked, key=lambda n: int(n[1:])) if draw(st.booleans()) else picked)
    return out


def closure(pl: Pipeline, name: str) -> set[str]:
    """What ``name`` needs, directly or not, computed the slow way (a fixpoint over direct needs)."""
    direct = pl.graph.needs
    found = set(direct[name])
    while True:
        more = found | {m for n in found for m in direct[n]}
        if more == found:
            return found
        found = more


@given(dag_needs())
def test_ancestors_are_the_transitive_needs_in_manifest_order(needs: list[list[str] | None]) -> None:
    pl = pipeline_from_dict(manifest(needs))
    names = pl.phase_names
    for i, phase in enumerate(pl.phases):
        expected = default if (default := needs[i]) is not None else ([names[i - 1]] if i else [])
        assert list(pl.graph.needs[phase.name]) == expected
        anc = pl.graph.ancestors(phase.name)
        assert set(anc) == closure(pl, phase.name)
        assert list(anc) == [n for n in names if n in anc]  # in manifest order
        assert all(names.index(a) < i for a in anc)  # every one listed before the phase
        assert pl.earlier(phase) == tuple(p for p in pl.phases if p.name in anc)
        assert set(pl.graph.descendants(phase.name)) == {n for n in names if phase.name in closure(pl, n)}
        assert set(pl.graph.dependents(phase.name)) == {n for n in names if phase.name in pl.graph.needs[n]}


@given(dag_needs())
def test_levels_are_a_topological_layering(needs: list[list[str] | None]) -> None:
    g = pipeline_from_dict(manifest(needs)).graph
    levels = g.levels()
    flat = [n for level in levels for n in level]
    assert sorted(flat) == sorted(g.names)  # every phase once
    wave = {n: k for k, level in enumerate(levels) for n in level}
    for n in g.names:
        assert all(wave[d] < wave[n] for d in g.needs[n])  # a wave needs only earlier waves
        if wave[n]:
            assert any(wave[d] == wave[n] - 1 for d in g.needs[n])  # as early as it can be
        else:
            assert g.needs[n] == ()
    for level in levels:
        assert list(level) == [n for n in g.names if n in level]
    assert g.to_json()["levels"] == [list(level) for level in levels]
    assert [p["name"] for p in g.to_json()["phases"]] == list(g.names)


@given(dag_needs(), st.data())
def test_ready_is_sound_and_complete(needs: list[list[str] | None], data: st.DataObject) -> None:
    g = pipeline_from_dict(manifest(needs)).graph
    done = set(data.draw(st.lists(st.sampled_from(g.names), unique=True)))
    ready = g.ready(done)
    assert list(ready) == [n for n in g.names if n in ready]
    for n in g.names:
        assert (n in ready) == (n not in done and set(g.needs[n]) <= done)
    assert g.ready(set(g.names)) == ()
    assert g.ready(set()) == tuple(n for n in g.names if not g.needs[n])


@given(dag_needs())
def test_sinks_are_what_nothing_needs_and_every_phase_reaches_one(needs: list[list[str] | None]) -> None:
    g = pipeline_from_dict(manifest(needs)).graph
    assert g.names[-1] in g.sinks
    for n in g.names:
        assert (n in g.sinks) == (not g.dependents(n))
        assert n in g.sinks or any(n in g.ancestors(s) for s in g.sinks)


@given(st.integers(min_value=1, max_value=12))
def test_a_manifest_without_needs_is_the_chain_it_always_was(n: int) -> None:
    pl = pipeline_from_dict(manifest([None] * n))
    g, names = pl.graph, pl.phase_names
    assert g.is_chain
    assert all(p.needs is None for p in pl.phases)
    for i, phase in enumerate(pl.phases):
        assert g.ancestors(phase.name) == tuple(names[:i])
        assert pl.earlier(phase) == pl.phases[:i]  # every phase before it: the old positional rule
        assert g.descendants(phase.name) == tuple(names[i + 1 :])
    assert g.sinks == (names[-1],)
    assert g.levels() == tuple((name,) for name in names)
    for k in range(n + 1):
        assert g.ready(set(names[:k])) == tuple(names[k : k + 1])  # the first phase not done
    same = pipeline_from_dict(manifest([[names[i - 1]] if i else [] for i in range(n)]))
    assert same.graph.is_chain  # spelled out, the chain is still a chain
    assert same.manifest_hash != pl.manifest_hash  # but the manifest says more: its hash differs


def test_a_single_name_is_a_list_of_one() -> None:
    pl = pipeline_from_dict(manifest([[], "p0"]))  # type: ignore[list-item]
    assert pl.graph.needs["p1"] == ("p0",)


# -- bad manifests: each rule names the phase, the field and the rule --------------------------------
@pytest.mark.parametrize(
    ("needs", "field", "rule", "said"),
    [
        ([[], ["p1"]], "phases[1].needs", "self_dependency", "phase p1 needs itself"),
        ([[], ["nope"]], "phases[1].needs", "unknown_phase", "phase p1 needs 'nope', which is not a phase"),
        ([[], ["p0", "p0"]], "phases[1].needs", "duplicate", "phase p1 names 'p0' twice"),
        ([["p1"], ["p0"]], "phases[0].needs", "cycle", "phase p0 is in a cycle: p0 -> p1 -> p0"),
        ([["p1"], []], "phases[0].needs", "order", "phase p0 needs 'p1', which is listed after it"),
        ([[], {"p0": 1}], "phases[1].needs", "type", "phase p1: needs must be a list of phase names"),
        ([[], [3]], "phases[1].needs", "type", "phase p1: needs must be a list of phase names"),
    ],
)
def test_each_bad_needs_raises_naming_field_and_rule(needs: list[Any], field: str, rule: str, said: str) -> None:
    with pytest.raises(PipelineError) as caught:
        pipeline_from_dict(manifest(needs))
    assert caught.value.context["field"] == field
    assert caught.value.context["rule"] == rule
    assert said in caught.value.message


@given(dag_needs(min_size=2), st.data())
def test_a_forward_need_is_a_cycle_or_an_order_error(needs: list[list[str] | None], data: st.DataObject) -> None:
    base = pipeline_from_dict(manifest(needs))
    names = base.phase_names
    i = data.draw(st.integers(0, len(names) - 2))
    j = data.draw(st.integers(i + 1, len(names) - 1))
    bad = [list(base.graph.needs[n]) for n in names]
    bad[i].append(names[j])  # phase i now needs a phase listed after it
    with pytest.raises(PipelineError) as caught:
        pipeline_from_dict(manifest(list(bad)))
    ctx = caught.value.context
    if names[i] in base.graph.ancestors(names[j]):  # j already needed i: a cycle through both
        assert ctx["rule"] == "cycle"
        cycle = find_cycle(names, bad)
        assert cycle
        assert cycle[0] == cycle[-1]
        assert ctx["field"] == f"phases[{names.index(cycle[0])}].needs"
    else:
        assert ctx["rule"] == "order"
        assert ctx["field"] == f"phases[{i}].needs"
        assert names[j] in caught.value.message


def test_find_cycle_finds_none_in_a_dag_and_one_in_a_loop() -> None:
    assert find_cycle(["a", "b"], [[], ["a"]]) == []
    assert find_cycle(["a", "b", "c"], [["c"], ["a"], ["b"]]) == ["a", "c", "b", "a"]
    g = Graph.of(["a", "b"], [(), ("a",)])
    assert g.is_chain
    assert not Graph.of(["a", "b"], [(), ()]).is_chain
