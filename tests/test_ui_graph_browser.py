"""The run page of a branching run in a real headless Chromium: the graph with every phase and every
``needs`` edge, each box coloured by its phase's state, and parallel phases overlapping on the timeline."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import graph_data
from test_ui_browser import ARGS, CHROMIUM, WIDE, require_chromium
from ui_data import Server


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def dag_server(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    root = tmp_path / "store"
    run_id = graph_data.make_store(root)
    srv = Server(str(root))
    yield srv, run_id
    srv.stop()


def test_the_run_page_draws_the_graph_with_each_node_and_edge(
    chromium: Any, dag_server: tuple[Server, str], tmp_path: Path
) -> None:
    server, run_id = dag_server
    context = chromium.new_context(viewport=WIDE)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(f"{server.base}/tickets/{graph_data.TICKET}/runs/{run_id}")
    page.wait_for_selector("#graph svg")

    nodes = page.locator("#graph g.node")
    assert nodes.count() == len(graph_data.PHASES)
    for phase, state in graph_data.STATES.items():
        node = page.locator(f"#graph g.node[data-phase='{phase}']")
        assert node.get_attribute("data-state") == state
        assert f"st-{state}" in (node.get_attribute("class") or "")
        assert node.locator("text.name").text_content() == phase
        box = node.locator("rect").bounding_box()
        assert box is not None
        assert box["width"] > 40  # drawn, at a size a person can read
    fills = {
        p: page.locator(f"#graph g.node[data-phase='{p}'] rect").evaluate("r => getComputedStyle(r).fill")
        for p in ("research", "render", "publish")
    }
    assert len(set(fills.values())) == 3, fills  # completed, in progress and pending look different

    edges = page.locator("#graph path.edge")
    drawn = {
        (edges.nth(i).get_attribute("data-from"), edges.nth(i).get_attribute("data-to")) for i in range(edges.count())
    }
    assert drawn == graph_data.EDGES
    assert edges.count() == len(graph_data.EDGES)
    # every edge runs from its need's box to the box that needs it, on the screen
    for need, phase in graph_data.EDGES:
        edge = page.locator(f"#graph path.edge[data-from='{need}'][data-to='{phase}']").bounding_box()
        a = page.locator(f"#graph g.node[data-phase='{need}'] rect").bounding_box()
        b = page.locator(f"#graph g.node[data-phase='{phase}'] rect").bounding_box()
        assert edge is not None
        assert a is not None
        assert b is not None
        assert abs(edge["x"] - (a["x"] + a["width"])) < 8  # a column gap is 56: no other box is near
        assert abs(edge["x"] + edge["width"] - b["x"]) < 8
    voice = page.locator("#graph g.node[data-phase='voice'] rect").bounding_box()
    broll = page.locator("#graph g.node[data-phase='broll'] rect").bounding_box()
    assert voice is not None
    assert broll is not None
    assert voice["x"] == broll["x"]  # one wave, one column
    assert page.locator("#graph").get_attribute("data-shape") == (
        "research -> script -> {voice, broll} -> render -> publish"
    )

    # the timeline: voice and broll, one row each, their bars overlapping in time
    bars = {
        phase: page.locator(f"#timeline g.bar:has(title:text-matches('^{phase} attempt 1'))").first.bounding_box()
        for phase in ("voice", "broll")
    }
    assert bars["voice"] is not None
    assert bars["broll"] is not None
    assert bars["voice"]["y"] != bars["broll"]["y"]
    assert bars["voice"]["x"] < bars["broll"]["x"] + bars["broll"]["width"]
    assert bars["broll"]["x"] < bars["voice"]["x"] + bars["voice"]["width"]

    page.screenshot(path=str(tmp_path / "dag-run.png"), full_page=True)
    extra = os.environ.get("PHASELOG_UI_SCREENSHOTS")  # how docs/images/ui-graph.png is refreshed
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        page.locator("#graph").screenshot(path=str(Path(extra) / "ui-graph.png"))
    page.locator("#graph g.node[data-phase='broll']").click()  # a box leads to its newest attempt
    page.wait_for_url("**/phases/broll/attempts/2")

    page.go_back()
    overview = page.request.get(f"{server.base}/tickets/{graph_data.TICKET}/runs/{run_id}/overview.json").json()
    shown = {n["phase"]: n["state"] for n in overview["status"]["graph"]["nodes"]}
    assert shown == graph_data.STATES  # the page's JSON carries the graph it drew, as `phaselog status`
    page.click("#explain-link")  # the plan shows what each phase needs, as `phaselog explain` does
    page.wait_for_selector("table#plan")
    needs = {p: page.locator(f"table#plan tr[data-phase='{p}'] td.needs").inner_text() for p in graph_data.PHASES}
    assert needs == {"research": "—", "script": "research", "voice": "script", "broll": "script"} | {
        "render": "voice, broll",
        "publish": "render",
    }
    context.close()
    assert not errors, errors
