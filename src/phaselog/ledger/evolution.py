"""Whether a pipeline fits a run's records: the one rule for evolving a manifest (D114).

A run's records name each phase by its position and its name (``phase_2_check_a1.yaml``; the SQL
key is (phase ordinal, attempt), and so are the ``prev_hash`` chains and the attempt numbers). So a
phase is identified across manifest versions by its **position**: a changed manifest with the same
name (D13) fits a run when every position the run has records of still holds the phase of that
name. Changing a recorded phase's schema, command, gate or description, and adding phases after
the recorded ones, fit. Inserting a phase before a recorded one, moving, renaming or removing a
recorded phase do not: :func:`check_fits` refuses them (``pipeline_mismatch``, rule
``phase_layout``) before anything is run or written, naming what changed. Every surface (writes,
the runner, status, progress, approvals, fork, validate) gets its pipeline from
:meth:`phaselog.ledger.resolve.PipelineResolver.for_run`, which calls this once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from phaselog.model.errors import PipelineMismatch
from phaselog.stores.manifests import location
from phaselog.stores.names import parse_event_name

if TYPE_CHECKING:
    from phaselog.model.pipelines import Pipeline
    from phaselog.model.records import PipelineRef
    from phaselog.stores import Store
    from phaselog.stores.base import AttemptRef
    from phaselog.stores.snapshot import RunSnapshot

#: A run's layout: per position with records, the phase name its newest record there carries.
Layout = Mapping[int, str]


def layout(refs: Iterable[AttemptRef], event_names: Iterable[str] = ()) -> dict[int, str]:
    """The run's layout from its committed attempts and its progress events' names.

    The newest committed attempt names a position; a position with only attempts in flight is
    named by its newest event (an attempt started under the old manifest is as much a record).
    """

    newest: dict[int, tuple[int, str]] = {}
    for ref in refs:
        seen = newest.get(ref.phase_ordinal)
        if seen is None or ref.attempt_number > seen[0]:
            newest[ref.phase_ordinal] = (ref.attempt_number, ref.phase)
    flight: dict[int, tuple[int, str]] = {}
    for name in event_names:
        ev = parse_event_name(name)
        if ev is None or ev.ordinal in newest:
            continue
        seen = flight.get(ev.ordinal)
        if seen is None or ev.attempt > seen[0]:
            flight[ev.ordinal] = (ev.attempt, ev.phase)
    return {o: n for o, (_a, n) in sorted({**newest, **flight}.items())}


def run_layout(store: Store, ticket_id: str, run_id: str, snapshot: RunSnapshot | None = None) -> dict[int, str]:
    """The layout of one run: from ``snapshot`` when given (no store call), else from the store's listing."""
    if snapshot is not None:
        return layout((s.newest for s in snapshot.summaries), snapshot.event_names)
    return layout(store.attempts(ticket_id, run_id), store.entry_names("progress", ticket_id, run_id))


def changes(pipeline: Pipeline, recorded: Layout) -> list[str]:
    """What in ``pipeline`` does not fit a run with ``recorded`` layout, one sentence each (empty: fits)."""
    out: list[str] = []
    positions = {p.name: p.ordinal for p in pipeline.phases}
    for ordinal, name in sorted(recorded.items()):
        here = pipeline.phase_by_ordinal(ordinal)
        if here is not None and here.name == name:
            continue
        if name in positions:
            out.append(
                f"phase {name!r} moved from position {ordinal} to {positions[name]} (a phase inserted or removed "
                "before it, or the phases reordered)"
            )
        elif here is not None:
            out.append(f"phase {name!r} at position {ordinal} is gone (position {ordinal} is now {here.name!r})")
        else:
            out.append(f"phase {name!r} at position {ordinal} is gone (the manifest has {len(pipeline.phases)} phases)")
    return out


def check_fits(pipeline: Pipeline, recorded: Layout, *, run_id: str, ref: PipelineRef | None = None) -> None:
    """Refuse ``pipeline`` for a run whose records it does not fit (PipelineMismatch, rule ``phase_layout``)."""
    found = changes(pipeline, recorded)
    if not found:
        return
    last = max(recorded)
    own = ""
    if ref is not None and ref.manifest_hash and ref.manifest_hash != pipeline.manifest_hash:
        own = f"; the manifest the run recorded is in the store at {location(ref.name, ref.manifest_hash)}"
    raise PipelineMismatch(
        f"manifest {pipeline.name!r} ({pipeline.manifest_hash[:12]}) does not fit run {run_id}'s records: "
        f"{'; '.join(found)}. A run's records name each phase by its position, so the phases it has records "
        f"of keep their names and positions: add new phases after position {last}, or start a new run{own}",
        rule="phase_layout",
        pipeline=pipeline.name,
        changes=found,
    )
