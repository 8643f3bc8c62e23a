"""Where each page lives: one builder per page, so templates and handlers never spell a path twice."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode


def _seg(value: Any) -> str:
    return quote(str(value), safe="")


def with_query(path: str, **params: Any) -> str:
    """``path`` with the non-empty ``params`` as a query string."""
    kept = {k: v for k, v in params.items() if v not in (None, "") and not (k == "page" and v == 1)}
    return f"{path}?{urlencode(kept)}" if kept else path


def tickets(**params: Any) -> str:
    """The tickets page (``q``, ``state``, ``page``)."""
    return with_query("/tickets", **params)


def ticket(ticket_id: str, **params: Any) -> str:
    """One ticket: its runs."""
    return with_query(f"/tickets/{_seg(ticket_id)}", **params)


def run(ticket_id: str, run_id: str, **params: Any) -> str:
    """One run: timeline, phases, next phase, blockers."""
    return with_query(f"/tickets/{_seg(ticket_id)}/runs/{_seg(run_id)}", **params)


def run_version(ticket_id: str, run_id: str) -> str:
    """The run's fingerprint (JSON), polled by the live view."""
    return f"{run(ticket_id, run_id)}/version"


def live(ticket_id: str | None = None, run_id: str | None = None) -> str:
    """The event stream (Server-Sent Events) of the whole store, one ticket or one run."""
    return with_query("/live", ticket=ticket_id, run=run_id)


def run_json(ticket_id: str, run_id: str) -> str:
    """The run's overview as JSON (status, pipeline, blockers, fingerprint)."""
    return f"{run(ticket_id, run_id)}/overview.json"


def attempts_json(ticket_id: str, run_id: str, **params: Any) -> str:
    """A page of the run's attempts as JSON (``phase``, ``before``, ``limit``)."""
    return with_query(f"{run(ticket_id, run_id)}/attempts.json", **params)


def events(ticket_id: str, run_id: str, phase: str, attempt: int, **params: Any) -> str:
    """One attempt's progress events, a page at a time (``after``, ``limit``)."""
    return with_query(f"{checkpoint(ticket_id, run_id, phase, attempt)}/events", **params)


def events_json(ticket_id: str, run_id: str, phase: str, attempt: int, **params: Any) -> str:
    """A page of one attempt's progress events as JSON (``after``, ``limit``)."""
    return with_query(f"{checkpoint(ticket_id, run_id, phase, attempt)}/events.json", **params)


def event_output(ticket_id: str, run_id: str, phase: str, attempt: int, seq: int) -> str:
    """The whole output text of one progress event, on a page of its own."""
    return f"{checkpoint(ticket_id, run_id, phase, attempt)}/events/{int(seq)}/output"


def explain(ticket_id: str, run_id: str) -> str:
    """Why the run stands where it stands (the library's ``explain``)."""
    return f"{run(ticket_id, run_id)}/explain"


def checkpoint(ticket_id: str, run_id: str, phase: str, attempt: int, fmt: str = "") -> str:
    """One attempt's checkpoint page (``fmt``: ``yaml`` / ``json`` for the raw download)."""
    base = f"{run(ticket_id, run_id)}/phases/{_seg(phase)}/attempts/{int(attempt)}"
    return f"{base}.{fmt}" if fmt else base


def judge(ticket_id: str, run_id: str, phase: str, attempt: int) -> str:
    """Where an approval or rejection of one checkpoint is posted."""
    return f"{checkpoint(ticket_id, run_id, phase, attempt)}/judge"


def diff(ticket_id: str = "", a: str = "", b: str = "") -> str:
    """The diff of two attempts or two progress events."""
    return with_query("/diff", ticket=ticket_id, a=a, b=b)


def approvals() -> str:
    """The approval queue."""
    return "/approvals"


def guards() -> str:
    """Every guard."""
    return "/guards"


def guard(name: str) -> str:
    """One guard: state, breaker, lock, recent passes."""
    return f"/guards/{_seg(name)}"


def guard_reset(name: str) -> str:
    """Where a guard reset is posted."""
    return f"{guard(name)}/reset"


def health(ticket_id: str = "") -> str:
    """verify and doctor for a ticket, or the whole store."""
    return with_query("/health", ticket=ticket_id)


def ref(run_id: str, phase: str, attempt: int) -> str:
    """An attempt reference as ``diff`` takes it: ``RUN:PHASE:ATTEMPT``."""
    return f"{run_id}:{phase}:{attempt}"
