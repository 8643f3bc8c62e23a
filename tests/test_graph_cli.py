"""The graph in the CLI: ``pipelines NAME`` prints it; ``status`` and ``explain`` show what each phase
needs when the pipeline branches, and nothing new for a chain (real subprocesses over a real store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import graph_data
from conftest import IMPLEMENT
from helpers import Result, cli_env, run_cli

RUN = ["--ticket-id", graph_data.TICKET, "--run-id", graph_data.RUN]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    graph_data.make_store(root)
    return root


def run(root: Path, *args: str, columns: int = 80) -> Result:
    res = run_cli(root, *args, env={**cli_env(root), "COLUMNS": str(columns)})
    assert res.rc == 0, res.err
    return res


def _needs_column(out: str) -> dict[str, str]:
    """phase -> needs cell of a rich table whose 2nd and 3rd columns are phase and needs."""
    rows: dict[str, str] = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 3 and cells[2] in graph_data.PHASES:
            rows[cells[2]] = cells[3]
    return rows


NEEDS = {
    "research": "—",
    "script": "research",
    "voice": "script",
    "broll": "script",
    "render": "voice, broll",
    "publish": "render",
}


def test_pipelines_name_prints_the_graph_as_text_and_json(root: Path) -> None:
    table = run(root, "pipelines", "video-dag", "--format", "table")
    assert "graph: research -> script -> {voice, broll} -> render -> publish" in table.out
    assert any("┃" in line and "needs" in line for line in table.out.splitlines())
    assert _needs_column(table.out) == NEEDS
    assert max(map(len, table.out.splitlines())) <= 80
    graph = run(root, "pipelines", "video-dag").json["pipeline"]["graph"]
    assert graph["is_chain"] is False
    assert graph["levels"] == [["research"], ["script"], ["voice", "broll"], ["render"], ["publish"]]
    assert {(e["from"], e["to"]) for e in graph["edges"]} == graph_data.EDGES
    assert [n["phase"] for n in graph["nodes"]] == graph_data.PHASES
    assert all(n["state"] is None for n in graph["nodes"])  # a pipeline alone: no run, no state


def test_pipelines_name_of_a_chain_prints_its_line_in_80_columns_without_a_needs_column(root: Path) -> None:
    table = run(root, "pipelines", "video-pipeline", "--format", "table")
    assert "needs" not in table.out
    assert max(map(len, table.out.splitlines())) <= 80
    text = " ".join(line.strip() for line in table.out.split("graph:", 1)[1].splitlines())
    assert text == "research -> proposal -> script -> scene_plan -> assets -> edit -> compose -> publish"
    assert run(root, "pipelines", "video-pipeline").json["pipeline"]["graph"]["is_chain"] is True


def test_status_shows_each_phases_needs_and_the_graph_with_states(root: Path) -> None:
    table = run(root, "status", *RUN, "--format", "table")
    assert _needs_column(table.out) == NEEDS
    assert "graph: research -> script -> {voice, broll} -> render -> publish" in table.out
    assert max(map(len, table.out.splitlines())) <= 80
    data = run(root, "status", *RUN).json
    nodes = {n["phase"]: n for n in data["graph"]["nodes"]}
    assert {p: n["state"] for p, n in nodes.items()} == graph_data.STATES
    assert {p["phase"]: p["state"] for p in data["phases"]} == graph_data.STATES  # the same decision
    assert nodes["broll"]["attempt"] == 2
    assert {(e["from"], e["to"]) for e in data["graph"]["edges"]} == graph_data.EDGES


def test_explain_shows_each_phases_needs(root: Path) -> None:
    args = ["explain", *RUN, "--workdir", str(root.parent)]
    table = run(root, *args, "--format", "table")
    assert _needs_column(table.out) == NEEDS
    assert "graph: research -> script -> {voice, broll} -> render -> publish" in table.out
    assert max(map(len, table.out.splitlines())) <= 80
    data = run(root, *args).json
    assert {(e["from"], e["to"]) for e in data["graph"]["edges"]} == graph_data.EDGES
    planned = {p["phase"]: p["state"] for p in data["phases"]}
    assert {n["phase"]: n["state"] for n in data["graph"]["nodes"]} == planned


def test_a_chains_status_and_explain_carry_no_graph(root: Path) -> None:
    chain = ["--ticket-id", "T-1", "--run-id", "r1"]
    run(root, "write", *chain, "--phase", "implement", "--payload", json.dumps(IMPLEMENT))
    table = run(root, "status", *chain, "--format", "table")
    assert "needs" not in table.out
    assert "graph:" not in table.out
    assert "graph" not in run(root, "status", *chain).json
    assert "graph" not in run(root, "explain", *chain).json
    assert "needs" not in run(root, "explain", *chain, "--format", "table").out


def test_pipelines_reads_a_manifest_file_given_as_a_path(tmp_path: Path) -> None:
    example = Path(__file__).parent.parent / "examples" / "video-dag.yaml"
    table = run(tmp_path / "store", "pipelines", str(example), "--format", "table")
    assert "graph: research -> script -> {voice_over, b_roll} -> render" in table.out
    data = run(tmp_path / "store", "pipelines", str(example)).json["pipeline"]
    assert data["name"] == "video-dag"
    missing = run_cli(tmp_path / "store", "pipelines", str(tmp_path / "nope.yaml"), env=cli_env(tmp_path / "store"))
    assert missing.rc != 0
    assert "pipeline manifest not found" in missing.json["error"]
    assert "Traceback" not in missing.err
