"""Which pipeline a run follows: the one it recorded, else its ticket's marker, else the default.

:class:`PipelineResolver` is the Ledger's pipeline lookup. Every service that needs a run's
pipeline (writes, reads, status, progress, approvals, audit) is handed this object; it holds the
store and the folder manifests are looked up in, and remembers each run's recorded pipeline
(a run's pipeline never changes once recorded).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, TypeAlias

from phaselog.model.errors import Corrupt, NotFound, PipelineError, PipelineMismatch, UnsupportedVersion
from phaselog.model.ids import normalize_run_id
from phaselog.model.records import PipelineRef
from phaselog.stores import Store

if TYPE_CHECKING:
    from phaselog.model.pipelines import Phase, Pipeline
    from phaselog.stores.snapshot import RunSnapshot

# lazy: pipelines, entries, the manifest shelf and evolution are imported where a pipeline is resolved:
# a read whose phase the stored names already give resolves none (phaselog read's start, D77).

#: A pipeline as callers name it: the object, a manifest name, or None (the run's own / the default).
PipelineArg: TypeAlias = "Pipeline | str | None"
_CACHE_LIMIT = 1_000  # bounded: a copy of 100k runs must not grow with them


class PipelineResolver:
    """Resolve pipeline names and find the pipeline a run follows."""

    def __init__(self, store: Store, pipelines_root: str | os.PathLike[str] | None) -> None:
        self.store = store
        self.pipelines_root = pipelines_root
        self._recorded: dict[tuple[str, str], PipelineRef] = {}

    def load(self, pipeline: PipelineArg, *, manifest_hash: str | None = None) -> Pipeline:
        """Resolve a Pipeline object, a name, or None (the default pipeline).

        A name the pipeline folders lack is looked up in the store's recorded manifests (the one
        with ``manifest_hash`` when given): see phaselog.ledger.recorded_pipelines.
        """
        from phaselog.model.pipelines import DEFAULT_PIPELINE, Pipeline, builtin, find_pipeline  # lazy: see above

        if isinstance(pipeline, Pipeline):
            return pipeline
        name = pipeline or DEFAULT_PIPELINE
        if name == DEFAULT_PIPELINE and self.pipelines_root is None:
            return builtin(name)
        try:
            return find_pipeline(name, self.pipelines_root)
        except PipelineError as exc:
            if exc.context.get("pipeline") != name:
                raise  # a manifest that is there but broken: say so, do not look elsewhere
            from phaselog.ledger import recorded_pipelines as pipeline_shelf  # lazy: see above

            return pipeline_shelf.fallback(self.store, name, manifest_hash, exc)

    def recorded(self, ticket_id: str, run_id: str) -> PipelineRef | None:
        """The pipeline a run recorded with its first phaselog checkpoint (None: none yet)."""
        cached = self._recorded.get((ticket_id, run_id))
        if cached is not None:
            return cached
        found = self._find_recorded(ticket_id, run_id)
        if found is not None:
            if len(self._recorded) > _CACHE_LIMIT:
                self._recorded.clear()
            self._recorded[(ticket_id, run_id)] = found
        return found

    def _find_recorded(self, ticket_id: str, run_id: str) -> PipelineRef | None:
        for ref in self.store.attempts(ticket_id, run_id):
            try:
                stored = self.store.get(ticket_id, run_id, ref.phase_ordinal, ref.phase, ref.attempt_number)
            except (Corrupt, UnsupportedVersion, NotFound):
                continue
            if stored.record.pipeline is not None:
                return stored.record.pipeline
        return None

    def for_run(
        self, ticket_id: str, run_id: str, requested: PipelineArg = None, *, snapshot: RunSnapshot | None = None
    ) -> Pipeline:
        """The run's pipeline; refuse one that differs from what the run recorded.

        With ``snapshot`` the recorded pipeline (and the ticket's marker) come from it: no store call.
        """
        from phaselog.model.entries import Marker, current_marker, parse_entries  # lazy: see above
        from phaselog.model.pipelines import DEFAULT_PIPELINE  # lazy: see above

        run_id = normalize_run_id(run_id)  # a short id (nightly-1) names its UUID's run
        if snapshot is not None:
            recorded = snapshot.pipeline_ref()
            if recorded is None and snapshot.markers:
                revs = sorted(parse_entries(Marker, snapshot.markers)[0], key=lambda m: m.revision)
                if revs:
                    recorded = PipelineRef(revs[-1].pipeline, "", "")
        else:
            recorded = self.recorded(ticket_id, run_id)
            if recorded is None:
                marker = current_marker(self.store, ticket_id)
                if marker is not None:
                    recorded = PipelineRef(marker.pipeline, "", "")
        if requested is None:
            if recorded is None:  # nothing says which pipeline: the default, and say so if a phase is unknown
                default = self.load(None)
                noted = dataclasses.replace(
                    default,
                    fallback_note=(
                        f"run {run_id} has no checkpoint and ticket {ticket_id} no marker, so the default "
                        f"pipeline {DEFAULT_PIPELINE} was used: name the pipeline (--pipeline NAME or "
                        f"--pipeline-file FILE; Python: pipeline=...), or record it for the ticket once with "
                        f"`phaselog init --ticket-id {ticket_id} --title TEXT --pipeline NAME`"
                    ),
                )
                # The note is no part of the manifest (compare=False): keep the hash already taken
                # instead of hashing the manifest again for every new run's first write.
                noted.__dict__["manifest_hash"] = default.manifest_hash
                return noted
            pipeline = self.load(recorded.name, manifest_hash=recorded.manifest_hash or None)
        else:
            known = recorded.manifest_hash if recorded is not None and requested == recorded.name else None
            pipeline = self.load(requested, manifest_hash=known or None)
            if recorded is not None and recorded.name != pipeline.name:
                raise PipelineMismatch(
                    f"run {run_id} follows pipeline {recorded.name!r}, not {pipeline.name!r}: use "
                    f"{recorded.name!r} (or name no pipeline, and the run's own is used), or start a new run",
                    recorded=recorded.name,
                    requested=pipeline.name,
                )
        if recorded is not None or requested is not None:
            # an evolved manifest (D13) must fit the run's records before anything runs or is written (D114)
            from phaselog.ledger.evolution import check_fits, run_layout  # lazy: see above

            check_fits(pipeline, run_layout(self.store, ticket_id, run_id, snapshot), run_id=run_id, ref=recorded)
        return pipeline

    def phase(self, ticket_id: str, run_id: str, phase: str | int, pipeline: PipelineArg = None) -> Phase:
        """One phase of the run's pipeline (by name or ordinal); the pipeline's error lists the valid ones."""
        return self.for_run(ticket_id, run_id, pipeline).phase(phase)
