"""A checkpoint waiting for input: what a phase marked ``awaits_input`` asks, read from one snapshot.

A LangGraph thread paused at ``interrupt()`` has stored its checkpoint (the attempt is completed)
and then, as a progress event of that attempt, the question it asks. The event's ``output`` is a
JSON object; its producer (``phaselog.integrations.langgraph``) marks the question with
:data:`REQUEST` and the answer, once given, with :data:`ANSWER`:

* ``{"awaiting_input": [{"id": …, "value": <JSON or null>, "shown": true|false}], "resume": "…"}``
  asks (``shown`` false: the value is kept only serialised, e.g. with an encrypting serializer;
  ``resume`` says how the program that asked takes the answer);
* ``{"input_given": true}`` answers every question asked before it on the same attempt.

:func:`open_requests` finds, for each such phase whose newest attempt is completed, the question
still open, so that :func:`phaselog.ledger.derive.derive_status` (the one place a phase's state is
decided) makes it ``awaiting_input``. Only phases that declare ``awaits_input`` are looked at, so
the runs of other pipelines cost nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from phaselog.model.entries import ProgressEvent, parse_entries
from phaselog.model.limits import json_loads
from phaselog.model.records import format_timestamp
from phaselog.stores.names import event_prefix

if TYPE_CHECKING:
    from phaselog.model.pipelines import Pipeline
    from phaselog.stores import Store
    from phaselog.stores.snapshot import RunSnapshot

REQUEST = "awaiting_input"
ANSWER = "input_given"


@dataclass(frozen=True)
class InputRequest:
    """The open question of a phase's newest checkpoint."""

    attempt_number: int
    since: datetime
    #: What is asked: ``{"id", "value", "shown"}`` per question, in the order asked.
    questions: tuple[Mapping[str, Any], ...]
    #: How the program that asked takes the answer (None: it did not say).
    resume: str | None = None

    @property
    def value(self) -> Any:
        """The first question's value (None when it is not shown)."""
        return self.questions[0].get("value") if self.questions else None

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form (``PhaseState.input_request``)."""
        return {
            "attempt_number": self.attempt_number,
            "since": format_timestamp(self.since),
            "questions": [dict(q) for q in self.questions],
            "value": self.value,
            "resume": self.resume,
        }


def _doc(ev: ProgressEvent) -> Mapping[str, Any] | None:
    text = ev.output
    if not text or (REQUEST not in text and ANSWER not in text):
        return None  # the common case: a pending write that asks nothing, not parsed again
    try:
        doc = json_loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, Mapping) else None


def open_request(attempt: int, events: Iterable[ProgressEvent]) -> InputRequest | None:
    """The question still open among one completed attempt's events (None: none is)."""
    found: InputRequest | None = None
    for ev in sorted(events, key=lambda e: e.seq):
        if ev.attempt_number != attempt or (doc := _doc(ev)) is None:
            continue
        if doc.get(ANSWER) is True:
            found = None
        asked = doc.get(REQUEST)
        if isinstance(asked, list) and asked:
            questions = tuple(q for q in asked if isinstance(q, Mapping))
            resume = doc.get("resume")
            found = InputRequest(attempt, ev.timestamp, questions, resume if isinstance(resume, str) else None)
    return found


def open_requests(store: Store, snap: RunSnapshot, pipeline: Pipeline) -> dict[str, InputRequest]:
    """Phase name → the open question of its newest checkpoint, for phases that ``awaits_input``.

    Reads the events of those phases' newest completed attempts (one store call per such phase,
    only when it has events; none with a full-history snapshot, which holds them already).
    """
    out: dict[str, InputRequest] = {}
    for phase in pipeline.phases:
        if not phase.awaits_input:
            continue
        newest = snap.latest(phase.ordinal)
        if newest is None or not newest.completed:
            continue
        prefix = event_prefix(phase.ordinal, newest.phase, newest.attempt_number)
        if not any(n.startswith(prefix) for n in snap.event_names):
            continue
        entries = snap.events if snap.history else tuple(store.entries("progress", snap.ticket_id, snap.run_id, prefix))
        events, _damaged = parse_entries(ProgressEvent, [e for e in entries if e[0].startswith(prefix)])
        found = open_request(newest.attempt_number, events)
        if found is not None:
            out[phase.name] = found
    return out
