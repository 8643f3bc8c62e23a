"""The shape of a run: its pipeline's dependency graph with each phase's state (issue 25, D300).

One view-model, :class:`GraphView`, built by :func:`graph_view` from the pipeline's
:class:`~phaselog.model.graph.Graph` and — for a run — the :class:`~phaselog.ledger.derive.RunStatus` the
caller already read (a command or a page reads the run once). Every surface shows the shape from it:
``phaselog pipelines NAME`` (text and JSON), ``phaselog status`` and ``explain`` (a ``needs`` column and a
``graph`` object), the MCP server's status, and the dashboard's run page (its SVG drawing,
:func:`phaselog.ui.charts.dag`).

A chain — every phase needs the one before it, a manifest without ``needs:`` — has nothing to show
beyond the order the phase numbers already give, so :func:`shape_fields` adds nothing for one and a
linear pipeline's ``status``, ``explain`` and run page are what they were (D300). ``pipelines NAME``,
the command that exists to show the shape, shows it for a chain too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from phaselog.model.graph import Graph, default_needs

if TYPE_CHECKING:
    from phaselog.ledger.derive import PhaseState, RunStatus
    from phaselog.model.pipelines import Pipeline


@dataclass(frozen=True)
class Node:
    """One phase in the graph: what it needs, its wave, and (for a run) its state."""

    phase: str
    ordinal: int
    #: The phases it needs directly, in manifest order.
    needs: tuple[str, ...]
    #: Its wave (0-based, :meth:`phaselog.model.graph.Graph.levels`): it needs only earlier waves.
    level: int
    requires_approval: bool = False
    #: The phase's derived state (``status``'s); None when no run is shown (a pipeline alone).
    state: str | None = None
    #: The attempt the state is about: the one in flight, else the newest recorded (None: none yet).
    attempt: int | None = None
    #: An in-flight attempt whose process is gone or silent (``status`` flags it ``abandoned``).
    abandoned: bool = False

    @property
    def shown_state(self) -> str | None:
        """The state as a badge shows it: ``abandoned`` for an abandoned attempt in flight."""
        return "abandoned" if self.abandoned else self.state

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "phase": self.phase,
            "ordinal": self.ordinal,
            "needs": list(self.needs),
            "level": self.level,
            "requires_approval": self.requires_approval,
            "state": self.state,
            "attempt": self.attempt,
            "abandoned": self.abandoned,
        }


@dataclass(frozen=True)
class Edge:
    """``phase`` needs ``need``: work flows from ``need`` to ``phase``."""

    need: str
    phase: str

    def to_json(self) -> dict[str, str]:
        """Return the JSON form: ``{"from": need, "to": phase}``."""
        return {"from": self.need, "to": self.phase}


@dataclass(frozen=True)
class GraphView:
    """A pipeline's phases as a graph: nodes in manifest order, edges, waves."""

    pipeline: str
    nodes: tuple[Node, ...]
    levels: tuple[tuple[str, ...], ...]
    #: Every phase needs exactly the one before it (nothing to show beyond the order).
    is_chain: bool

    @property
    def edges(self) -> tuple[Edge, ...]:
        """Every ``needs`` as an edge, by dependent phase then need, in manifest order."""
        return tuple(Edge(need, n.phase) for n in self.nodes for need in n.needs)

    def node(self, phase: str) -> Node:
        """The node of ``phase``; KeyError if there is none."""
        for n in self.nodes:
            if n.phase == phase:
                return n
        raise KeyError(phase)

    def shape(self) -> str:
        """The waves on one line: ``research -> script -> {voice, broll} -> render``."""
        return " -> ".join(_waves(self.levels))

    def to_json(self) -> dict[str, Any]:
        """``{"is_chain", "shape", "levels", "nodes", "edges"}`` (docs/pipelines.md "Seeing the graph")."""
        return {
            "is_chain": self.is_chain,
            "shape": self.shape(),
            "levels": [list(level) for level in self.levels],
            "nodes": [n.to_json() for n in self.nodes],
            "edges": [e.to_json() for e in self.edges],
        }


def _waves(levels: Sequence[Sequence[str]]) -> list[str]:
    return [level[0] if len(level) == 1 else "{" + ", ".join(level) + "}" for level in levels]


def shape_lines(graph: Mapping[str, Any], width: int = 78) -> list[str]:
    """A graph's JSON (:meth:`GraphView.to_json`) as ``graph: a -> b -> {c, d} -> e``, broken after an
    arrow so that no line is wider than ``width`` (a phase name is never cut)."""
    parts = _waves(graph["levels"])
    out: list[str] = []
    line = "graph:"
    for i, part in enumerate(parts):
        piece = part + (" ->" if i < len(parts) - 1 else "")
        if len(line) + 1 + len(piece) > width and line.strip() != "graph:":
            out.append(line)
            line = "  " + piece
        else:
            line = f"{line} {piece}"
    out.append(line)
    return out


def _run_facts(p: PhaseState) -> tuple[str, int | None, bool]:
    flight = p.in_flight or {}
    attempt = flight.get("attempt_number") if flight else None
    return p.state, attempt if isinstance(attempt, int) else p.latest_attempt, bool(flight.get("abandoned"))


def graph_view(pipeline: Pipeline, status: RunStatus | None = None) -> GraphView:
    """The graph of ``pipeline``; with ``status`` (of a run of it, already read) each node's state."""
    gated = {ph.name: ph.requires_approval for ph in pipeline.phases}
    return _view(pipeline.name, pipeline.graph, [(ph.name, ph.ordinal) for ph in pipeline.phases], gated, status)


def run_graph(status: RunStatus) -> GraphView:
    """The graph of the run ``status`` describes, from the status alone: it carries its pipeline's
    :class:`~phaselog.model.graph.Graph` (a status built without one is a chain), so a command that read
    the status has read everything its shape needs (the run is read once)."""
    names = [p.phase for p in status.phases]
    graph = status.graph or Graph.of(names, [default_needs(names, i) for i in range(len(names))])
    gated = {p.phase: p.requires_approval for p in status.phases}
    return _view(status.pipeline, graph, [(p.phase, p.ordinal) for p in status.phases], gated, status)


def _view(
    name: str,
    graph: Graph,
    phases: Sequence[tuple[str, int]],
    gated: Mapping[str, bool],
    status: RunStatus | None,
) -> GraphView:
    levels = graph.levels()
    wave = {phase: i for i, level in enumerate(levels) for phase in level}
    states: Mapping[str, PhaseState] = {p.phase: p for p in status.phases} if status is not None else {}
    nodes = []
    for phase, ordinal in phases:
        known = states.get(phase)
        state, attempt, abandoned = _run_facts(known) if known is not None else (None, None, False)
        nodes.append(
            Node(
                phase=phase,
                ordinal=ordinal,
                needs=graph.needs[phase],
                level=wave[phase],
                requires_approval=gated.get(phase, False),
                state=state,
                attempt=attempt,
                abandoned=abandoned,
            )
        )
    return GraphView(name, tuple(nodes), levels, graph.is_chain)


def shape_fields(view: GraphView) -> dict[str, Any]:
    """What a run's JSON (``status``, ``explain``, the run page's) adds for its shape: ``{"graph": …}``
    when the pipeline is not a chain, nothing for a chain (its output stays what it was, D300)."""
    return {} if view.is_chain else {"graph": view.to_json()}


def needs_cells(d: Mapping[str, Any]) -> dict[str, str] | None:
    """Per phase, its needs as a table cell (``script, voice``; ``—`` for none), from a JSON view that
    carries ``graph`` (:func:`shape_fields`); None when it has none (a chain: no needs column)."""
    graph = d.get("graph")
    if not graph:
        return None
    return {n["phase"]: ", ".join(n["needs"]) or "—" for n in graph["nodes"]}


def status_json(status: RunStatus) -> dict[str, Any]:
    """``phaselog status``'s JSON (the status's own, ``views.run_status``) and, for a pipeline that is not
    a chain, its graph."""
    return {**status.to_json(), **shape_fields(run_graph(status))}


def explanation_json(explained: Mapping[str, Any], status: RunStatus | None) -> dict[str, Any]:
    """``phaselog explain``'s JSON (``views.explanation``, given) and, for a pipeline that is not a chain,
    its graph with each phase's state as the explanation saw it (``status``: the state it planned from)."""
    return {**explained, **(shape_fields(run_graph(status)) if status is not None else {})}
