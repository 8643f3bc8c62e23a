"""Shared by the LangGraph integration's tests: a small graph with an interrupt, store URLs."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

THREAD = "lg-thread-1"


class State(TypedDict):
    topic: str
    draft: str
    approved: bool
    log: Annotated[list[str], operator.add]


def research(state: State) -> dict[str, Any]:
    return {"draft": f"notes on {state['topic']}", "log": ["research"]}


def write(state: State) -> dict[str, Any]:
    return {"draft": state["draft"] + " -> draft", "log": ["write"]}


def review(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "publish this?", "draft": state["draft"]})
    return {"approved": answer == "yes", "log": [f"review:{answer}"]}


def publish(state: State) -> dict[str, Any]:
    return {"log": ["published" if state["approved"] else "discarded"]}


def build(saver: BaseCheckpointSaver[Any]) -> Any:
    g = StateGraph(State)
    for name, fn in (("research", research), ("write", write), ("review", review), ("publish", publish)):
        g.add_node(name, fn)
    g.add_edge(START, "research")
    g.add_edge("research", "write")
    g.add_edge("write", "review")
    g.add_edge("review", "publish")
    g.add_edge("publish", END)
    return g.compile(checkpointer=saver)


def phaselog_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "files":
        return str(tmp_path / "store")
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_schema_url"))
