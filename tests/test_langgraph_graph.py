"""A real LangGraph graph on PhaselogSaver gives what LangGraph's own savers give.

A StateGraph with four nodes, an ``interrupt()`` resumed with ``Command(resume=...)``,
``get_state_history``, and a fork made with ``update_state`` from an older checkpoint: the states
and the history match InMemorySaver's and SqliteSaver's, on every store. Afterwards ``phaselog
verify --ticket-id THREAD`` passes, and after a checkpoint is edited in the store it fails and
``get_tuple`` refuses the checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from _langgraph import THREAD, build, phaselog_url
from phaselog.integrations.langgraph import PhaselogSaver, ns_run_id
from phaselog.model.errors import Corrupt


def snapshot_view(snap: Any, index: dict[str, int]) -> dict[str, Any]:
    """What a user sees of a state snapshot, with checkpoint ids replaced by history positions."""
    parent = snap.parent_config["configurable"]["checkpoint_id"] if snap.parent_config else None
    return {
        "values": snap.values,
        "next": snap.next,
        "source": snap.metadata.get("source"),
        "step": snap.metadata.get("step"),
        "parent": index.get(parent) if parent else None,
        "interrupts": [i.value for t in snap.tasks for i in t.interrupts],
    }


def scenario(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """Run the graph to its interrupt, resume it, fork from an older checkpoint, resume that."""
    graph = build(saver)
    config: Any = {"configurable": {"thread_id": THREAD}}
    out: dict[str, Any] = {}
    first = graph.invoke({"topic": "otters", "log": []}, config)
    out["interrupt"] = [i.value for i in first["__interrupt__"]]
    out["paused"] = graph.get_state(config).next
    out["resumed"] = graph.invoke(Command(resume="yes"), config)
    # Fork: from the checkpoint that was waiting for review, with an edited draft.
    waiting = next(s for s in graph.get_state_history(config) if s.next == ("review",))
    fork_config = graph.update_state(waiting.config, {"draft": "edited by hand"})
    second = graph.invoke(None, fork_config)
    out["fork_interrupt"] = [i.value for i in second["__interrupt__"]]
    out["fork_resumed"] = graph.invoke(Command(resume="no"), config)
    out["final"] = graph.get_state(config).values
    history = list(graph.get_state_history(config))
    index = {s.config["configurable"]["checkpoint_id"]: n for n, s in enumerate(history)}
    out["history"] = [snapshot_view(s, index) for s in history]
    out["filtered"] = [s.metadata.get("step") for s in graph.get_state_history(config, filter={"source": "update"})]
    return out


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The scenario on LangGraph's InMemorySaver, checked against its SqliteSaver too."""
    expected = scenario(InMemorySaver())
    conn = sqlite3.connect(tmp_path_factory.mktemp("lg") / "lg.db", check_same_thread=False)
    try:
        assert scenario(SqliteSaver(conn)) == expected
    finally:
        conn.close()
    return expected


@pytest.mark.all_stores
def test_graph_matches_langgraph_savers_and_verifies(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, reference: dict[str, Any]
) -> None:
    url = phaselog_url(backend, tmp_path, request)
    with PhaselogSaver(url) as saver:
        got = scenario(saver)
    assert got == reference
    assert reference["interrupt"] == [{"question": "publish this?", "draft": "notes on otters -> draft"}]
    assert reference["final"]["log"][-1] == "discarded"  # the fork's path, not the first one's

    ok = cli("verify", "--ticket-id", THREAD, "--store", url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    history = cli("history", "--ticket-id", THREAD, "--store", url)
    assert history.returncode == 0, history.stderr
    kinds = {e["kind"] for e in json.loads(history.stdout)["history"]}
    assert {"checkpoint", "progress"} <= kinds  # checkpoints and their pending writes

    edit_a_checkpoint(backend, url, tmp_path)
    bad = cli("verify", "--ticket-id", THREAD, "--store", url)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "content_hash" in bad.stdout
    with PhaselogSaver(url) as saver, pytest.raises(Corrupt):
        saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})


def edit_a_checkpoint(backend: str, url: str, tmp_path: Path) -> None:
    """Change the newest checkpoint's step in the store, behind phaselog's back."""
    rid = ns_run_id("")
    if backend == "files":
        run_dir = tmp_path / "store" / "checkpoints" / THREAD / rid
        newest = max(run_dir.glob("phase_1_checkpoint_a*.yaml"), key=lambda p: int(p.stem.rsplit("_a", 1)[1]))
        text = newest.read_text()
        assert "step: " in text
        newest.write_text(text.replace("step: ", "step: 10", 1))
        return
    if backend == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite://"))
        try:
            conn.execute(
                "UPDATE phaselog_checkpoints SET body = replace(body, '\"step\":', '\"step\":10') "
                "WHERE ticket_id = ? AND attempt = (SELECT MAX(attempt) FROM phaselog_checkpoints WHERE ticket_id = ? "
                "AND run_id = ?) AND run_id = ?",
                (THREAD, THREAD, rid, rid),
            )
            conn.commit()
        finally:
            conn.close()
        return
    import psycopg

    base, _, query = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{query}".phaselog_checkpoints SET body = replace(body, \'"step":\', \'"step":10\') '
            "WHERE ticket_id = %s AND run_id = %s AND attempt = "
            f'(SELECT MAX(attempt) FROM "{query}".phaselog_checkpoints WHERE ticket_id = %s AND run_id = %s)',
            (THREAD, rid, THREAD, rid),
        )


def test_async_graph_matches_langgraph(tmp_path: Path, reference: dict[str, Any]) -> None:
    """The same scenario through the async methods (ainvoke, aget_state_history, aupdate_state)."""

    async def run() -> dict[str, Any]:
        async with PhaselogSaver(f"sqlite:///{tmp_path / 'a.db'}") as saver:
            graph = build(saver)
            config: Any = {"configurable": {"thread_id": THREAD}}
            first = await graph.ainvoke({"topic": "otters", "log": []}, config)
            await graph.ainvoke(Command(resume="yes"), config)
            waiting = None
            async for s in graph.aget_state_history(config):
                if s.next == ("review",) and waiting is None:
                    waiting = s
            assert waiting is not None
            fork = await graph.aupdate_state(waiting.config, {"draft": "edited by hand"})
            await graph.ainvoke(None, fork)
            await graph.ainvoke(Command(resume="no"), config)
            history = [s async for s in graph.aget_state_history(config)]
            index = {s.config["configurable"]["checkpoint_id"]: n for n, s in enumerate(history)}
            return {
                "interrupt": [i.value for i in first["__interrupt__"]],
                "final": (await graph.aget_state(config)).values,
                "history": [snapshot_view(s, index) for s in history],
            }

    got = asyncio.run(run())
    assert got == {k: reference[k] for k in ("interrupt", "final", "history")}


def test_the_documented_example_runs_and_its_commands_work(tmp_path: Path) -> None:
    """examples/langgraph_interrupt.py (docs/langgraph.md's example) and the commands it suggests."""
    example = Path(__file__).resolve().parent.parent / "examples" / "langgraph_interrupt.py"
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = subprocess.run(
        [sys.executable, str(example), store], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "paused: {'question': 'publish this?', 'draft': 'notes on otters -> draft'}" in done.stdout
    assert "waiting at: ('review',)" in done.stdout
    assert "done: ['research', 'write', 'review:yes', 'published']" in done.stdout
    history = cli("history", "--ticket-id", "REPORT-7", "--store", store, "--format", "table")
    assert history.returncode == 0, history.stderr
    assert "checkpoint" in history.stdout
    diff = cli("diff", "--ticket-id", "REPORT-7", "--store", store, "--run-id", "ns:", "--phase", "checkpoint")
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert "metadata" in diff.stdout
    assert cli("verify", "--ticket-id", "REPORT-7", "--store", store).returncode == 0
