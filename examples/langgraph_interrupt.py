"""A LangGraph graph that pauses for a person, checkpointed in a phaselog store.

    python examples/langgraph_interrupt.py [--pause] [STORE]      # default: sqlite://./.demo/langgraph.db

It runs the graph until ``review`` asks "publish this?", stops (as a process that exits would),
then resumes the thread from the store with ``Command(resume="yes")`` and prints the result and
the phaselog commands that show the thread's history. With ``--pause`` it stops at the question
(the thread is then ``awaiting_input`` in ``phaselog status``). Needs ``pip install 'phaselog[langgraph]'``
and ``langgraph``. docs/langgraph.md walks through it.
"""

from __future__ import annotations

import operator
import sys
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from phaselog.integrations.langgraph import PhaselogSaver

THREAD = "REPORT-7"


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
    answer = interrupt({"question": "publish this?", "draft": state["draft"]})  # the graph pauses here
    return {"approved": answer == "yes", "log": [f"review:{answer}"]}


def publish(state: State) -> dict[str, Any]:
    return {"log": ["published" if state["approved"] else "discarded"]}


def build(saver: PhaselogSaver) -> Any:
    """research -> write -> review (interrupt) -> publish."""
    builder = StateGraph(State)
    for name, fn in (("research", research), ("write", write), ("review", review), ("publish", publish)):
        builder.add_node(name, fn)
    builder.add_edge(START, "research")
    builder.add_edge("research", "write")
    builder.add_edge("write", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


def main(store: str, *, pause: bool = False) -> int:
    config: Any = {"configurable": {"thread_id": THREAD}}
    with PhaselogSaver(store) as saver:  # first process: runs until the interrupt
        paused = build(saver).invoke({"topic": "otters", "log": []}, config)
        print("paused:", paused["__interrupt__"][0].value)
    if pause:
        print(f"\nthe thread waits for input: phaselog status --ticket-id {THREAD} --run-id ns: --store {store}")
        return 0
    with PhaselogSaver(store) as saver:  # later, any process with the same store: resume
        graph = build(saver)
        print("waiting at:", graph.get_state(config).next)
        done = graph.invoke(Command(resume="yes"), config)
        print("done:", done["log"])
    print("\nnow try:")
    for cmd in ("history --format table", "verify", "diff --run-id ns: --phase checkpoint --format text"):
        print(f"  phaselog {cmd.split()[0]} --ticket-id {THREAD} --store {store} {' '.join(cmd.split()[1:])}")
    return 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--pause"]
    sys.exit(main(args[0] if args else "sqlite://./.demo/langgraph.db", pause="--pause" in sys.argv[1:]))
