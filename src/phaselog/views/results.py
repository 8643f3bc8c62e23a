"""The JSON views of library results: what the CLI prints and what a dashboard renders.

Each function turns one library result (a stored record, a run's status, a pipeline, a listing
page, an audit record…) into plain JSON data (dicts, lists, strings, numbers, booleans, None).
The views hold no logic of their own beyond shaping: the library computes, a view shows. The CLI
adds only its envelope (``"success": true`` and the ``correlation_id``).

Imports are for type checking only, so the CLI can import this module at start-up for free.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from phaselog.model.ids import run_name_of
from phaselog.stores.base import Damaged

if TYPE_CHECKING:
    from phaselog.ledger.derive import RunStatus
    from phaselog.ledger.gates import Awaiting
    from phaselog.ledger.logs import PhaseLog
    from phaselog.ledger.reads import Page
    from phaselog.ledger.status import SkipDecision
    from phaselog.ledger.verify import VerifyReport
    from phaselog.ledger.writes import WriteResult
    from phaselog.model.entries import Approval, Marker, ProgressEvent
    from phaselog.model.pipelines import Pipeline
    from phaselog.model.validation import Report
    from phaselog.stores.base import Stored
    from phaselog.views.catalog import RunSummary, TicketSummary
    from phaselog.views.run_page import EventPage, RunOverview, SpanPage
    from phaselog.views.streams import ExternalSort


# -- checkpoints ----------------------------------------------------------------------------------
def record(stored: Stored) -> dict[str, Any]:
    """A stored checkpoint: its seed fields (``checkpoint``) and phaselog's metadata."""
    rec = stored.record
    meta = rec.meta_dict()
    meta.update(
        has_metadata=rec.has_metadata,
        content_hash=rec.content_hash,
        recorded_hash=stored.recorded_hash,
    )
    return {"checkpoint": rec.seed_dict(), "metadata": meta}


def read(stored: Stored) -> dict[str, Any]:
    """A checkpoint as ``read`` shows it: the record, where it lives, and read warnings."""
    return {**record(stored), "checkpoint_path": stored.location, "warnings": list(stored.warnings)}


def written(result: WriteResult) -> dict[str, Any]:
    """What a write produced: where, which attempt, its status and hash, and warnings."""
    rec = result.record
    return {
        "checkpoint_path": result.location,
        "run_id": rec.run_id,
        "phase": rec.phase,
        "attempt_number": rec.attempt_number,
        "status": rec.status,
        "content_hash": rec.content_hash,
        "warnings": list(result.warnings),
    }


def validation(stored: Stored, report: Report) -> dict[str, Any]:
    """A validation report beside the record it judged."""
    return {
        "is_valid": report.is_valid,
        "errors": [i.text() for i in report.errors],
        "warnings": [i.text() for i in report.warnings],
        "issues": [i.to_json() for i in report.issues],
        **record(stored),
        "checkpoint_path": stored.location,
    }


def page(listing: Page) -> dict[str, Any]:
    """A listing page: completed checkpoints, failed attempts, damaged entries, the next cursor."""
    completed = listing.completed
    return {
        "count": len(completed),
        "checkpoints": [listed_checkpoint(s) for s in completed],
        "failed_attempts": [failed_attempt(s) for s in listing.failed],
        "warnings": [damaged_warning(d) for d in listing.damaged],
        "next_after": listing.next_after,
    }


def listed_checkpoint(stored: Stored) -> dict[str, Any]:
    """A completed checkpoint in a listing: its seed fields."""
    return stored.record.seed_dict()


def failed_attempt(stored: Stored) -> dict[str, Any]:
    """A failed attempt in a listing: its seed fields, status and error."""
    return {**stored.record.seed_dict(), "status": "failed", "error": stored.record.error}


def damaged_warning(entry: Damaged) -> dict[str, Any]:
    """A damaged entry in a listing (reported, never used)."""
    return {**entry.to_json(), "message": f"skipped damaged file: {entry.message}"}


def page_stream(entries: Iterable[Stored | Damaged]) -> Iterator[tuple[str, Any]]:
    """The fields of :func:`page` for a whole listing, read once and held on disk past a MiB.

    Written with :func:`phaselog.views.streams.write_object`, the bytes are those of ``page``'s JSON.
    """
    from phaselog.views.streams import SpooledArray  # lazy: streams loads shutil and tempfile; a read prints no stream

    completed, failed, warnings = SpooledArray(), SpooledArray(), SpooledArray()
    try:
        for e in entries:
            if isinstance(e, Damaged):
                warnings.append(damaged_warning(e))
            elif e.record.completed:
                completed.append(listed_checkpoint(e))
            else:
                failed.append(failed_attempt(e))
        yield "count", completed.count
        yield "checkpoints", completed
        yield "failed_attempts", failed
        yield "warnings", warnings
        yield "next_after", None
    finally:
        for arr in (completed, failed, warnings):
            arr.close()


# -- runs -----------------------------------------------------------------------------------------
def run_status(status: RunStatus) -> dict[str, Any]:
    """A run's derived state: every phase's state and the next phase."""
    return status.to_json()


def run_overview(ov: RunOverview) -> dict[str, Any]:
    """The top of a run page (``runpages.overview``): the run's status as ``phaselog status``
    shows it (one row per phase, with its newest attempt), the pipeline, the next phase's blockers."""
    from phaselog.views.graph import status_json  # lazy: `phaselog read` loads these views, not a run's shape

    return {
        "status": status_json(ov.status),  # `phaselog status`'s, with a graph unless a chain
        "pipeline": pipeline(ov.pipeline, full=False),
        "skip": skip_decision(ov.skip) if ov.skip is not None else None,
        "version": ov.version,
    }


def span_page(page: SpanPage) -> dict[str, Any]:
    """A page of a run's attempts as spans, newest first, and the cursor to the next (older) page."""
    return {
        "attempts": [{**s.to_json(), "previous": prev} for s, prev in zip(page.spans, page.previous, strict=False)],
        "next_before": page.next_before,
    }


#: How much of a progress event's output a page of events shows (characters); the rest is on its own page.
OUTPUT_PREVIEW_CHARS = 200


def event_page(page: EventPage) -> dict[str, Any]:
    """A page of one attempt's progress events (each as ``progress show`` prints it, with the first
    :data:`OUTPUT_PREVIEW_CHARS` characters of its output), and the cursor."""
    return {
        "phase": page.phase,
        "attempt_number": page.attempt_number,
        "run_name": page.run_name,
        "events": [progress_event(e, preview=OUTPUT_PREVIEW_CHARS) for e in page.events],
        "next_after": page.next_after,
    }


def tickets(summaries: Sequence[TicketSummary]) -> dict[str, Any]:
    """Every ticket in a line (``phaselog tickets``; the dashboard's Tickets page)."""
    return {"count": len(summaries), "tickets": [t.to_json() for t in summaries]}


def runs(ticket_id: str, summaries: Sequence[RunSummary], *, known: bool = True) -> dict[str, Any]:
    """Every run of a ticket in a line (``phaselog runs``); ``known`` false: the ticket has nothing."""
    out: dict[str, Any] = {"ticket_id": ticket_id, "count": len(summaries), "runs": [r.to_json() for r in summaries]}
    if not known:
        out["message"] = f"nothing is recorded for ticket {ticket_id} (`phaselog tickets` lists the tickets)"
    return out


def approvals(queue: Sequence[Awaiting], problems: Sequence[str]) -> dict[str, Any]:
    """Everything awaiting a person's judgement, oldest first (``phaselog approvals``; the
    dashboard's Approvals page), and the runs that could not be read."""
    return {"count": len(queue), "approvals": [a.to_json() for a in queue], "problems": list(problems)}


def skip_decision(decision: SkipDecision) -> dict[str, Any]:
    """Whether a run may skip to a phase, with every blocker."""
    return decision.to_json()


def verify_report(report: VerifyReport) -> dict[str, Any]:
    """The result of recomputing hashes and links."""
    return {"ok": report.ok, "checked": report.checked, "problems": report.problems}


def history(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A ticket's records in time order."""
    return {"count": len(entries), "history": list(entries)}


def history_stream(entries: ExternalSort) -> Iterator[tuple[str, Any]]:
    """The fields of :func:`history` from a sorted stream (``phaselog.views.history.sorted_history``)."""
    from phaselog.views.streams import Items  # lazy: as in page_stream

    yield "count", entries.count
    yield "history", Items(entries)


def diffs(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Field-level diffs (``phaselog diff``; the dashboard's diff page shows one)."""
    return {"diffs": list(results)}


def diffs_stream(results: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, Any]]:
    """The fields of :func:`diffs`, written one diff at a time (``Ledger.phase_diffs``)."""
    from phaselog.views.streams import Items  # lazy: as in page_stream

    yield "diffs", Items(results)


def forked(new_run_id: str, from_run_id: str, written_records: Iterable[WriteResult]) -> dict[str, Any]:
    """A fork: the new run (its UUID and the name it was given), its origin and the checkpoints it reuses."""
    written_records = list(written_records)
    return {
        "run_id": new_run_id,
        "run_name": run_name_of(new_run_id, *(w.record.run_name for w in written_records)),
        "forked_from": from_run_id,
        "checkpoints": [
            {"checkpoint_path": w.location, "phase": w.record.phase, "content_hash": w.record.content_hash}
            for w in written_records
        ],
    }


# -- audit records --------------------------------------------------------------------------------
def progress_event(event: ProgressEvent, *, with_output: bool = False, preview: int | None = None) -> dict[str, Any]:
    """A progress event; its output text (up to 8 MiB) only on request (hash and length name it).

    ``preview``: also the output's first ``preview`` characters (``output_preview``, None without
    output) and whether that is all of it (``output_truncated``).
    """
    d: dict[str, Any] = event.to_json()
    output = d.pop("output", None)
    d["content_hash"] = event.content_hash
    if with_output:
        d["output"] = output
    if preview is not None:
        d["output_preview"] = output[:preview] if output is not None else None
        d["output_truncated"] = output is not None and len(output) > preview
    return d


def approval(judgement: Approval, phase_state: str | None, warnings: Sequence[str]) -> dict[str, Any]:
    """An approval or rejection, and the state of its phase afterwards."""
    return {
        "approval": {**judgement.to_json(), "content_hash": judgement.content_hash},
        "phase_state": phase_state,
        "warnings": list(warnings),
    }


def marker(ticket_marker: Marker, changed: bool) -> dict[str, Any]:
    """A ticket marker, and whether this call recorded a new revision."""
    return {"changed": changed, "marker": {**ticket_marker.to_json(), "content_hash": ticket_marker.content_hash}}


# -- pipelines ------------------------------------------------------------------------------------
def pipeline(p: Pipeline, *, full: bool = True) -> dict[str, Any]:
    """A pipeline: its phases and gates (and with ``full`` their payload schemas)."""
    return {
        "name": p.name,
        "version": p.version,
        "description": p.description,
        "order": p.order,
        "manifest_hash": p.manifest_hash,
        "source": p.source,
        "phases": [
            {
                "ordinal": ph.ordinal,
                "name": ph.name,
                "description": ph.description,
                "requires_approval": ph.requires_approval,
                **({"payload_schema": ph.payload_schema} if full else {}),
            }
            for ph in p.phases
        ],
        **({"params": dict(p.params)} if p.params is not None else {}),  # the run parameters' schema
    }


# -- the runner -----------------------------------------------------------------------------------
class RunnerOutcome(Protocol):
    """A runner's answer (``phaselog.runner``'s Explanation, RunResult): views never import an edge."""

    def to_json(self) -> dict[str, Any]:
        """Its JSON form."""
        ...


def explanation(e: RunnerOutcome) -> dict[str, Any]:
    """What a run would do with each phase and why (``phaselog explain``; the dashboard links here)."""
    return e.to_json()


def run_result(r: RunnerOutcome) -> dict[str, Any]:
    """What ``phaselog run`` did: per phase, and the exit code."""
    return r.to_json()


#: The most of a kept log a page shows (its tail); ``phaselog logs`` prints all the store kept.
PAGE_LOG_BYTES = 256 * 1024


def log_view(log: PhaseLog | None, limit: int = PAGE_LOG_BYTES) -> dict[str, Any] | None:
    """An attempt's log for a page: its JSON view with ``text`` cut to its last ``limit`` bytes
    (``shown_bytes`` says how many); None when the attempt kept no log."""
    if log is None or (not log.text and log.complete):
        return None
    view = log.to_json()
    data = log.text.encode("utf-8")
    if len(data) > limit:
        cut = len(data) - limit
        while cut < len(data) and (data[cut] & 0xC0) == 0x80:  # start at a whole character
            cut += 1
        view["text"] = data[cut:].decode("utf-8")
    view["shown_bytes"] = len(view["text"].encode("utf-8"))
    return view
