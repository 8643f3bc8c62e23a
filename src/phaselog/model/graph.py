"""The phases' dependency graph: each phase's ``needs`` (issue 25).

A phase needs the phases named in its manifest's ``needs:`` list; without one, it needs the phase
listed before it (the first phase needs nothing), so a manifest without ``needs`` is the chain it
always was. The manifest lists phases in an order where each comes after what it needs, so a phase's
ordinal stays a valid order to run them in; a cycle, a self-dependency, an unknown or repeated name
and a phase listed before one it needs are manifest errors naming the phase (D277).

Everything here is a pure function of the pipeline: a phase's *ancestors* (what it needs, directly or
not) are what resume, ``--skip-to``, strict order, staleness and gates judge it by.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phaselog.model.errors import PipelineError


def default_needs(names: Sequence[str], index: int) -> tuple[str, ...]:
    """What the phase at ``index`` (0-based) needs when its manifest says nothing: the one before it."""
    return (names[index - 1],) if index > 0 else ()


def parse_needs(raw_phases: Sequence[Mapping[str, Any]], where: str) -> list[tuple[str, ...] | None]:
    """Every phase's ``needs:`` as given (None where there is none), checked against the whole graph;
    PipelineError naming the phase, the field and the rule.

    ``raw_phases`` are the manifest's phase mappings, their names already checked and unique.
    """
    names = [str(raw["name"]) for raw in raw_phases]
    position = {n: i for i, n in enumerate(names)}
    given: list[tuple[str, ...] | None] = []
    out: list[tuple[str, ...]] = []
    for i, raw in enumerate(raw_phases):
        at, name = f"phases[{i}].needs", names[i]
        if "needs" not in raw:
            given.append(None)
            out.append(default_needs(names, i))
            continue
        value = raw["needs"]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise _bad(where, at, "type", f"phase {name}: needs must be a list of phase names (got {value!r:.60})")
        seen: set[str] = set()
        for need in value:
            if need == name:
                raise _bad(where, at, "self_dependency", f"phase {name} needs itself")
            if need not in position:
                valid = ", ".join(names)
                raise _bad(where, at, "unknown_phase", f"phase {name} needs {need!r}, which is not a phase ({valid})")
            if need in seen:
                raise _bad(where, at, "duplicate", f"phase {name} names {need!r} twice in needs")
            seen.add(need)
        given.append(tuple(value))
        out.append(tuple(value))
    cycle = find_cycle(names, out)
    if cycle:
        i = position[cycle[0]]
        raise _bad(where, f"phases[{i}].needs", "cycle", f"phase {cycle[0]} is in a cycle: {' -> '.join(cycle)}")
    for i, needs in enumerate(out):
        later = [n for n in needs if position[n] > i]
        if later:
            raise _bad(
                where,
                f"phases[{i}].needs",
                "order",
                f"phase {names[i]} needs {later[0]!r}, which is listed after it: list each phase after the phases "
                "it needs (their order is the order the runner starts them in when it must choose)",
            )
    return given


def find_cycle(names: Sequence[str], needs: Sequence[Sequence[str]]) -> list[str]:
    """A cycle of the graph as ``[a, b, …, a]`` (each needs the next), or ``[]`` when there is none."""
    edges = dict(zip(names, needs, strict=True))
    colour: dict[str, int] = {}  # 1: on the path, 2: done
    for start in names:
        if colour.get(start):
            continue
        path: list[str] = [start]
        stack = [iter(edges[start])]
        colour[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = 2
                stack.pop()
            elif colour.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not colour.get(nxt):
                colour[nxt] = 1
                path.append(nxt)
                stack.append(iter(edges[nxt]))
    return []


def _bad(where: str, field: str, rule: str, message: str) -> PipelineError:
    return PipelineError(f"{where}: {message}", field=field, rule=rule)


@dataclass(frozen=True)
class Graph:
    """The needs of a pipeline's phases, by name, and what follows from them."""

    names: tuple[str, ...]  #: in manifest order (a valid order to run them in)
    needs: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, names: Sequence[str], needs: Sequence[tuple[str, ...]]) -> Graph:
        return cls(tuple(names), dict(zip(names, needs, strict=True)))

    @property
    def is_chain(self) -> bool:
        """Whether every phase needs exactly the one before it (a manifest without ``needs``)."""
        return all(self.needs[n] == default_needs(self.names, i) for i, n in enumerate(self.names))

    def ancestors(self, name: str) -> tuple[str, ...]:
        """What ``name`` needs, directly or not, in manifest order."""
        found: set[str] = set()
        todo = list(self.needs[name])
        while todo:
            n = todo.pop()
            if n not in found:
                found.add(n)
                todo.extend(self.needs[n])
        return tuple(n for n in self.names if n in found)

    def dependents(self, name: str) -> tuple[str, ...]:
        """The phases that need ``name`` directly, in manifest order."""
        return tuple(n for n in self.names if name in self.needs[n])

    def descendants(self, name: str) -> tuple[str, ...]:
        """The phases that need ``name``, directly or not, in manifest order."""
        return tuple(n for n in self.names if name in self.ancestors(n))

    @property
    def sinks(self) -> tuple[str, ...]:
        """The phases nothing needs: the run is complete when they (and so all) are."""
        needed = {n for ns in self.needs.values() for n in ns}
        return tuple(n for n in self.names if n not in needed)

    def ready(self, done: Collection[str]) -> tuple[str, ...]:
        """The phases not in ``done`` whose needs all are, in manifest order."""
        return tuple(n for n in self.names if n not in done and all(d in done for d in self.needs[n]))

    def levels(self) -> tuple[tuple[str, ...], ...]:
        """The phases in waves: each wave needs only earlier waves (what could run side by side)."""
        depth: dict[str, int] = {}
        for n in self.names:  # manifest order is a topological order
            depth[n] = 1 + max((depth[d] for d in self.needs[n]), default=-1)
        top = max(depth.values(), default=-1)
        return tuple(tuple(n for n in self.names if depth[n] == k) for k in range(top + 1))

    def to_json(self) -> dict[str, Any]:
        """``{"phases": [{"name", "needs"}], "levels": [[…]]}``: the shape views print."""
        return {
            "phases": [{"name": n, "needs": list(self.needs[n])} for n in self.names],
            "levels": [list(level) for level in self.levels()],
        }
