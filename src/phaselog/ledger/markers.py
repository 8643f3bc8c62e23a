"""The ticket marker (seed 002's project.json): a ticket's identity, recorded once.

``init`` with the same identity is a no-op that returns the marker; another pipeline is refused;
a new title or new metadata is appended as a revision (nothing is overwritten).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from phaselog.model.entries import MARKERS, Marker, current_marker, entry_bytes, read_markers
from phaselog.model.errors import AlreadyExists, Conflict, Corrupt, PipelineMismatch, UsageError
from phaselog.model.ids import validate_ticket_id
from phaselog.model.limits import check_text
from phaselog.stores.names import marker_name

if TYPE_CHECKING:
    from phaselog.ledger.resolve import PipelineArg
    from phaselog.model.pipelines import Pipeline
    from phaselog.stores import Store

_KIND = MARKERS
MAX_TITLE = 500
MAX_META_VALUE = 10_000


class Markers:
    """Ticket markers over one store: read the revisions, record (or confirm) a ticket's identity.

    ``load_pipeline`` resolves the pipeline named at ``init`` (the Ledger's pipeline resolver).
    """

    def __init__(
        self, store: Store, clock: Callable[[], datetime], load_pipeline: Callable[[PipelineArg], Pipeline]
    ) -> None:
        self.store = store
        self.clock = clock
        self.load_pipeline = load_pipeline

    def markers(self, ticket_id: str) -> list[Marker]:
        """Every revision of a ticket's marker, oldest first (empty if never initialised)."""
        return read_markers(self.store, validate_ticket_id(ticket_id))[0]

    def damaged_markers(self, ticket_id: str) -> list[Corrupt]:
        """Marker revisions that exist but cannot be used (damaged or edited after writing)."""
        return read_markers(self.store, validate_ticket_id(ticket_id))[1]

    def marker(self, ticket_id: str) -> Marker | None:
        """The current revision of a ticket's marker, or None."""
        return current_marker(self.store, validate_ticket_id(ticket_id))

    def init_ticket(
        self,
        ticket_id: str,
        *,
        title: str,
        pipeline: PipelineArg = None,
        meta: Mapping[str, str] | None = None,
    ) -> tuple[Marker, bool]:
        """Record (or confirm) a ticket's identity; returns the marker and whether it changed."""
        ticket_id = validate_ticket_id(ticket_id)
        if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE:
            raise UsageError(f"--title: 1-{MAX_TITLE} characters", field="title", rule="required")
        check_text(title, field="title", max_chars=MAX_TITLE)
        for k, v in (meta or {}).items():
            if not isinstance(k, str) or not k or not isinstance(v, str):
                raise UsageError(f"--meta: keys and values must be strings (got {k!r})", field="meta")
            check_text(k, field="meta", max_chars=MAX_TITLE)
            check_text(v, field="meta", max_chars=MAX_META_VALUE)
        for _ in range(1000):
            current = self.marker(ticket_id)
            if current is None:
                pl = self.load_pipeline(pipeline)
                new = Marker(ticket_id, 1, title, pl.name, dict(meta or {}), self.clock())
            else:
                if pipeline is not None:
                    wanted = pipeline if isinstance(pipeline, str) else pipeline.name
                    if wanted != current.pipeline:
                        raise PipelineMismatch(
                            f"ticket {ticket_id} follows pipeline {current.pipeline!r}, not {wanted!r}; "
                            "a ticket's pipeline is part of its identity",
                            recorded=current.pipeline,
                            requested=wanted,
                        )
                merged = {**current.meta, **(meta or {})}
                if title == current.title and merged == dict(current.meta):
                    return current, False
                new = Marker(
                    ticket_id,
                    current.revision + 1,
                    title,
                    current.pipeline,
                    merged,
                    self.clock(),
                    prev_hash=current.content_hash,
                )
            try:
                self.store.put_entry(_KIND, ticket_id, None, marker_name(new.revision), entry_bytes(new))
            except AlreadyExists:
                continue
            return new, True
        raise Conflict("could not record the ticket marker")
