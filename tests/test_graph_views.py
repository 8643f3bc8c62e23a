"""The graph view-model (views/graph.py), its drawing (ui/charts.dag) and parallel phases on the timeline."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import graph_data
import phaselog
from phaselog.model.pipelines import builtin, load_manifest, pipeline_from_dict
from phaselog.ui import charts
from phaselog.views.graph import graph_view, needs_cells, run_graph, shape_fields, shape_lines, status_json
from phaselog.views.live import watch_status
from phaselog.views.timeline import run_timeline


@pytest.fixture
def dag_store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    graph_data.make_store(root)
    return root


def test_a_pipeline_alone_has_nodes_edges_and_waves_but_no_states(tmp_path: Path) -> None:
    view = graph_view(load_manifest(graph_data.write_manifest(tmp_path)))
    assert [n.phase for n in view.nodes] == graph_data.PHASES
    assert {(e.need, e.phase) for e in view.edges} == graph_data.EDGES
    assert view.levels == (("research",), ("script",), ("voice", "broll"), ("render",), ("publish",))
    assert [n.level for n in view.nodes] == [0, 1, 2, 2, 3, 4]
    assert view.node("render").needs == ("voice", "broll")
    assert view.node("publish").requires_approval
    assert all(n.state is None and n.attempt is None for n in view.nodes)
    assert not view.is_chain
    assert view.shape() == "research -> script -> {voice, broll} -> render -> publish"
    with pytest.raises(KeyError):
        view.node("nope")


def test_a_run_gives_each_node_its_state_and_attempt_from_the_status_read(dag_store: Path) -> None:
    ledger = phaselog.Ledger(phaselog.open_store(str(dag_store)))
    st = ledger.status(graph_data.TICKET, graph_data.RUN)
    assert st.pipeline == "video-dag"
    view = run_graph(st)
    assert view == graph_view(ledger.pipeline_for(graph_data.TICKET, graph_data.RUN), st)  # the status carries it all
    assert {n.phase: n.state for n in view.nodes} == graph_data.STATES
    assert view.node("broll").attempt == 2  # the newest recorded
    assert view.node("render").attempt == 1  # the one in flight
    assert view.node("publish").attempt is None
    # the same states as status's own rows: the graph decides nothing about state
    assert {p.phase: p.state for p in st.phases} == {n.phase: n.state for n in view.nodes}
    data = status_json(st)
    assert {k: v for k, v in data.items() if k != "graph"} == st.to_json()
    assert data["graph"]["edges"] == [e.to_json() for e in view.edges]
    assert {(e["from"], e["to"]) for e in data["graph"]["edges"]} == graph_data.EDGES
    assert needs_cells(data) == {
        "research": "—",
        "script": "research",
        "voice": "script",
        "broll": "script",
        "render": "voice, broll",
        "publish": "render",
    }
    ledger.close()


def test_a_chain_adds_nothing_to_a_runs_json() -> None:
    view = graph_view(builtin("ticket-pipeline"))
    assert view.is_chain
    assert shape_fields(view) == {}
    assert needs_cells({"phases": []}) is None
    assert all(len(level) == 1 for level in view.levels)
    assert view.shape() == " -> ".join(p.name for p in builtin("ticket-pipeline").phases)


names = st.text(alphabet="abcdefghij_", min_size=1, max_size=30)


@given(
    levels=st.lists(st.lists(names, min_size=1, max_size=4, unique=True), min_size=1, max_size=12),
    width=st.integers(20, 120),
)
def test_the_shape_breaks_only_after_arrows_and_fits_unless_a_wave_cannot(levels: list[list[str]], width: int) -> None:
    out = shape_lines({"levels": levels}, width)
    joined = " ".join(line.strip() for line in out)
    assert joined == "graph: " + " -> ".join(lv[0] if len(lv) == 1 else "{" + ", ".join(lv) + "}" for lv in levels)
    for line in out[:-1]:
        assert line.endswith(" ->")  # a wave is never cut
    for line in out:
        if len(line) > width:  # only a line holding a single wave too wide to fit anywhere
            assert line.strip().count(" -> ") == 0


def _branching(n_waves: int, width: int, skip: bool) -> dict[str, object]:
    """Waves of 1..width phases, each needing the wave before (and, with ``skip``, the first phase
    two waves back: an edge that skips a wave)."""
    phases: list[dict[str, object]] = []
    waves: list[list[str]] = []
    for w in range(n_waves):
        wave = [f"p{w}_{i}" for i in range(1 + (w * 7) % width)]
        for name in wave:
            needs = list(waves[-1]) if waves else []
            if skip and len(waves) > 1:
                needs.append(waves[-2][0])
            phases.append({"name": name, "needs": needs})
        waves.append(wave)
    return {"name": "wide", "version": "1", "phases": phases}


@given(n_waves=st.integers(1, 7), width=st.integers(1, 4), skip=st.booleans())
def test_the_drawing_puts_each_wave_in_a_column_without_overlap_and_joins_every_edge(
    n_waves: int, width: int, skip: bool
) -> None:
    view = graph_view(pipeline_from_dict(_branching(n_waves, width, skip)))
    drawn = charts.dag(view, lambda n: None)
    boxes = {n["phase"]: n for n in drawn["nodes"]}
    assert set(boxes) == {n.phase for n in view.nodes}
    for node in view.nodes:
        box = boxes[node.phase]
        assert box["x"] == charts.PAD + node.level * (charts.NODE_W + charts.COL_GAP)
        assert box["y"] >= 0
        assert box["y"] + box["h"] <= drawn["height"]
        assert box["x"] + box["w"] <= drawn["width"]
    items = list(boxes.values())
    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            apart_x = a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"]
            apart_y = a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"]
            assert apart_x or apart_y, (a, b)
    assert {(e["from"], e["to"]) for e in drawn["edges"]} == {(e.need, e.phase) for e in view.edges}
    for e in drawn["edges"]:
        start = e["d"].split(" C ")[0].split()
        end = e["d"].rsplit(", ", 1)[1].split()
        need, phase = boxes[e["from"]], boxes[e["to"]]
        assert float(start[1]) == pytest.approx(need["x"] + need["w"], abs=0.1)  # leaves the need's right side
        assert float(start[2]) == pytest.approx(need["y"] + need["h"] / 2, abs=0.1)
        assert float(end[0]) == pytest.approx(phase["x"] - 4, abs=0.1)  # arrives at the phase's left side
        assert float(end[1]) == pytest.approx(phase["y"] + phase["h"] / 2, abs=0.1)
        if " L " in e["d"]:  # an edge that skips a wave runs above every box, not through them
            lane_y = float(e["d"].split(" L ")[1].split()[1])
            assert lane_y < min(b["y"] for b in items)
            assert view.node(e["to"]).level - view.node(e["from"]).level > 1
        else:
            assert view.node(e["to"]).level - view.node(e["from"]).level == 1


def test_the_drawing_colours_each_box_by_its_state_and_links_its_attempt(dag_store: Path) -> None:
    ledger = phaselog.Ledger(phaselog.open_store(str(dag_store)))
    view = run_graph(ledger.status(graph_data.TICKET, graph_data.RUN))
    drawn = charts.dag(view, lambda n: f"/{n.phase}/{n.attempt}" if n.attempt else None)
    boxes = {n["phase"]: n for n in drawn["nodes"]}
    assert {p: b["cls"] for p, b in boxes.items()} == {p: f"st-{s}" for p, s in graph_data.STATES.items()}
    assert boxes["broll"]["href"] == "/broll/2"
    assert boxes["publish"]["href"] is None
    assert boxes["publish"]["gated"]
    assert boxes["broll"]["sub"] == "completed · a2"
    ledger.close()


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_parallel_phases_overlap_on_the_timeline(dag_store: Path) -> None:
    ledger = phaselog.Ledger(phaselog.open_store(str(dag_store)))
    spans = run_timeline(ledger, graph_data.TICKET, graph_data.RUN)
    chart = charts.timeline(spans, graph_data.PHASES, lambda s: None)
    assert chart is not None
    rows = {r["label"]: r for r in chart["rows"]}
    assert [r["label"] for r in chart["rows"]] == graph_data.PHASES  # one row per phase
    by_phase: dict[str, list[tuple[float, float]]] = {}
    for bar, span in zip(chart["bars"], [s for s in spans if s.started_at and s.ended_at], strict=True):
        assert rows[span.phase]["y"] <= bar["y"] < rows[span.phase]["y"] + charts.ROW_H  # in its phase's row
        by_phase.setdefault(span.phase, []).append((bar["x"], bar["x"] + bar["w"]))
    voice = by_phase["voice"][0]
    broll_first, broll_second = by_phase["broll"]
    assert _overlap(voice, broll_first)  # voice and broll a1 overlap in x
    assert _overlap(voice, broll_second)  # and broll a2
    assert broll_first[1] <= broll_second[0]  # one phase's attempts follow each other
    script = by_phase["script"][0]
    assert script[1] <= voice[0] + 0.1  # a phase starts after what it needs ended
    ledger.close()


def test_status_watch_sends_the_graph_with_each_status(dag_store: Path) -> None:
    ledger = phaselog.Ledger(phaselog.open_store(str(dag_store)))
    changes = watch_status(ledger, graph_data.TICKET, graph_data.RUN, interval=0.1, stop=threading.Event())
    first = next(changes)
    changes.close()
    assert first == status_json(ledger.status(graph_data.TICKET, graph_data.RUN))
    assert {n["phase"]: n["state"] for n in first["graph"]["nodes"]} == graph_data.STATES
    ledger.close()
