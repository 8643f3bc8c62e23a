"""The pages (GET): each reads through the library and renders its JSON views.

No page computes a state, a hash or a verdict of its own: states come from ``Ledger.status``,
spans from :mod:`phaselog.views.timeline`, diffs from ``Ledger.diff``, verdicts from ``validate``,
``verify`` and ``doctor``, guard states from ``Guard.status``. Pages only filter, paginate and lay out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from phaselog.guard import validate_name
from phaselog.ledger.derive import RUN_SUMMARIES
from phaselog.ledger.doctor import doctor
from phaselog.ledger.gates import approval_queue
from phaselog.model import _yaml
from phaselog.model.errors import Corrupt, NotFound
from phaselog.model.ids import normalize_run_id, run_label, validate_ticket_id
from phaselog.model.limits import parse_number
from phaselog.runner.explain import explain as explain_run
from phaselog.ui import charts, urls
from phaselog.ui.context import UI, attempt_param, number_param
from phaselog.views import results as views
from phaselog.views.graph import Node, explanation_json, graph_view, needs_cells
from phaselog.views.guard import guard_board, guard_view
from phaselog.views.run_page import attempts_page, events_page, overview, previous_attempt
from phaselog.views.timeline import run_version as version

if TYPE_CHECKING:
    from phaselog.views.run_page import EventPage
    from phaselog.views.timeline import Span


# -- helpers --------------------------------------------------------------------------------------
def _page_number(request: Request) -> int:
    return number_param(request, "page", 1, minimum=1)


def paginate(items: Sequence[Any], page: int, size: int) -> dict[str, Any]:
    """One page of ``items`` and the numbers around it."""
    total = len(items)
    pages = max(1, -(-total // size))
    page = min(page, pages)
    start = (page - 1) * size
    return {"items": list(items[start : start + size]), "page": page, "pages": pages, "total": total}


def _params(request: Request) -> tuple[str, str]:
    ticket = validate_ticket_id(request.path_params["ticket"])
    run = normalize_run_id(request.path_params["run"], field="run")
    return ticket, run


# -- tickets --------------------------------------------------------------------------------------
def home(ui: UI, request: Request) -> Response:
    """``/`` is the tickets page."""
    return RedirectResponse(urls.tickets(), status_code=303)


def tickets(ui: UI, request: Request) -> Response:
    """Every ticket: pipeline, last activity, runs, state badge; filter by state and text."""
    q = request.query_params.get("q", "").strip()
    state = request.query_params.get("state", "").strip()
    # The state filter is the catalog's (`phaselog tickets --state` uses the same; D104).
    rows = [t.to_json() for t in ui.catalog.tickets(ui.ledger, state=state or None)]
    if q:
        needle = q.lower()
        rows = [
            r for r in rows if any(needle in str(r.get(k) or "").lower() for k in ("ticket_id", "title", "pipeline"))
        ]
    listing = paginate(rows, _page_number(request), ui.settings.page_size)
    return ui.render(
        request, "tickets.html", listing=listing, q=q, state=state, states=_SUMMARY_STATES, title="Tickets"
    )


_SUMMARY_STATES = RUN_SUMMARIES


def ticket(ui: UI, request: Request) -> Response:
    """One ticket: its runs, newest activity first."""
    ticket_id = validate_ticket_id(request.path_params["ticket"])
    ledger = ui.ledger
    runs = ui.catalog.runs(ledger, ticket_id)
    marker = ledger.marker(ticket_id)
    if not runs and marker is None:
        raise NotFound(f"no ticket {ticket_id} in this store", ticket_id=ticket_id)
    listing = paginate([r.to_json() for r in runs], _page_number(request), ui.settings.page_size)
    return ui.render(
        request,
        "ticket.html",
        ticket_id=ticket_id,
        marker=marker.to_json() if marker else None,
        listing=listing,
        title=ticket_id,
    )


# -- a run ----------------------------------------------------------------------------------------
def _attempts_query(ui: UI, request: Request) -> dict[str, Any]:
    """``phase``, ``before`` and ``limit`` of an attempts page, as the library takes them."""
    return {
        "phase": request.query_params.get("phase") or None,
        "before": request.query_params.get("before") or None,
        "limit": number_param(request, "limit", ui.settings.page_size),
    }


def run(ui: UI, request: Request) -> Response:
    """A run: its phases (one row each, newest attempt and state), next phase and blockers — read
    from one snapshot — then a page of its attempts (newest first, with a "more" link), drawn on
    the timeline. Older attempts and progress events are pages of their own, read when asked."""

    ticket_id, run_id = _params(request)
    ledger = ui.ledger
    ov = overview(ledger, ticket_id, run_id, artifacts_root=ui.settings.artifacts_root)
    top = views.run_overview(ov)
    query = _attempts_query(ui, request)
    page = attempts_page(ledger, ticket_id, run_id, **query, status=ov.status, pipeline=ov.pipeline)
    listing = views.span_page(page)
    phase_names = [p.name for p in ov.pipeline.phases]
    shape = graph_view(ov.pipeline, ov.status)  # from the same snapshot as the phases table
    drawn = None if shape.is_chain else charts.dag(shape, lambda n: _node_link(ticket_id, run_id, n))
    chart = charts.timeline(
        page.spans,
        phase_names,
        lambda s: urls.checkpoint(ticket_id, run_id, s.phase, s.attempt) if s.content_hash else None,
    )
    more = (
        urls.run(ticket_id, run_id, phase=query["phase"], before=page.next_before) + "#attempts"
        if page.next_before
        else None
    )
    refs = [(urls.ref(run_id, s.phase, s.attempt), f"{s.phase} a{s.attempt}") for s in reversed(page.spans)]
    return ui.render(
        request,
        "run.html",
        ticket_id=ticket_id,
        run_id=run_id,
        status=top["status"],
        pipeline=top["pipeline"],
        skip=top["skip"],
        chart=chart,
        graph=drawn,
        charted=len(page.spans),
        listing=listing,
        phase_filter=query["phase"],
        paged=query["before"] is not None,
        more=more,
        pick=_default_pair(run_id, page.spans),
        attempt_refs=[(r, label) for r, label in refs if r],
        version=top["version"],
        title=f"{ticket_id} · run {run_label(run_id, top['status']['run_name'], short=True)}",
    )


def _node_link(ticket_id: str, run_id: str, node: Node) -> str | None:
    """Where a graph's box leads: the attempt in flight (its events) or the newest checkpoint."""
    if node.attempt is None:
        return None
    if node.state == "in_progress":
        return urls.events(ticket_id, run_id, node.phase, node.attempt)
    return urls.checkpoint(ticket_id, run_id, node.phase, node.attempt)


def run_json(ui: UI, request: Request) -> Response:
    """The run's overview as JSON (``views.run_overview``: its status is ``phaselog status``'s)."""

    ticket_id, run_id = _params(request)
    overview_ = overview(ui.ledger, ticket_id, run_id, artifacts_root=ui.settings.artifacts_root)
    return JSONResponse(views.run_overview(overview_))


def attempts_json(ui: UI, request: Request) -> Response:
    """A page of the run's attempts as JSON (``views.span_page``); ``before`` continues."""

    ticket_id, run_id = _params(request)
    return JSONResponse(views.span_page(attempts_page(ui.ledger, ticket_id, run_id, **_attempts_query(ui, request))))


def _events(ui: UI, request: Request) -> tuple[str, str, EventPage]:

    ticket_id, run_id = _params(request)
    phase, attempt = request.path_params["phase"], attempt_param(request)
    after = number_param(request, "after", 0)
    limit = number_param(request, "limit", ui.settings.page_size)
    return ticket_id, run_id, events_page(ui.ledger, ticket_id, run_id, phase, attempt, after=after, limit=limit)


def events(ui: UI, request: Request) -> Response:
    """One attempt's progress events, a page at a time (oldest first, a "more" link)."""
    ticket_id, run_id, page = _events(ui, request)
    more = urls.events(ticket_id, run_id, page.phase, page.attempt_number, after=page.next_after)
    return ui.render(
        request,
        "events.html",
        ticket_id=ticket_id,
        run_id=run_id,
        run_name=page.run_name,
        page=views.event_page(page),
        more=more if page.next_after is not None else None,
        title=f"{page.phase} attempt {page.attempt_number} · progress",
    )


def events_json(ui: UI, request: Request) -> Response:
    """A page of one attempt's progress events as JSON (``views.event_page``); ``after`` continues."""
    _, _, page = _events(ui, request)
    return JSONResponse(views.event_page(page))


def event_output(ui: UI, request: Request) -> Response:
    """The whole output text of one progress event (``Ledger.progress_event``), escaped, as it was recorded."""
    ticket_id, run_id = _params(request)
    phase, attempt = request.path_params["phase"], attempt_param(request)
    seq = parse_number(request.path_params["seq"], field="seq")
    event = ui.ledger.progress_event(ticket_id, run_id, phase, attempt, seq)
    return ui.render(
        request,
        "output.html",
        ticket_id=ticket_id,
        run_id=run_id,
        event=views.progress_event(event, with_output=True),
        title=f"{event.phase} attempt {event.attempt_number} · event {event.seq} · output",
    )


def _default_pair(run_id: str, spans: Sequence[Span]) -> tuple[str, str]:
    """The diff picker's preselection: the two newest attempts of the phase that has more than one."""
    by_phase: dict[str, list[int]] = {}
    for s in sorted(spans, key=lambda s: (s.ordinal, s.attempt)):
        if s.content_hash:
            by_phase.setdefault(s.phase, []).append(s.attempt)
    retried = [(name, nums) for name, nums in by_phase.items() if len(nums) > 1]
    if not retried:
        return ("", "")
    name, nums = retried[-1]
    return (urls.ref(run_id, name, nums[-2]), urls.ref(run_id, name, nums[-1]))


def run_version(ui: UI, request: Request) -> Response:
    """The run's fingerprint, polled by the live view (JSON)."""

    ticket_id, run_id = _params(request)
    return JSONResponse({"version": version(ui.ledger, ticket_id, run_id)})  # NotFound: nothing recorded


def explain(ui: UI, request: Request) -> Response:
    """What a runner would do with this run now, phase by phase, and why (``phaselog explain``)."""

    ticket_id, run_id = _params(request)
    result = explain_run(ui.ledger, ticket_id, run_id, workdir=ui.settings.artifacts_root)
    data = explanation_json(views.explanation(result), result.status)  # its shape: the status explain read
    return ui.render(
        request,
        "explain.html",
        ticket_id=ticket_id,
        run_id=run_id,
        run_name=result.run_name,
        data=data,
        needs=needs_cells(data),  # a "needs" column only for a pipeline that is not a chain (D300)
        title=f"explain · {ticket_id} · run {run_label(run_id, result.run_name, short=True)}",
    )


# -- a checkpoint ---------------------------------------------------------------------------------
def _checkpoint_views(ui: UI, ticket_id: str, run_id: str, phase: str, attempt: int) -> dict[str, Any]:
    ledger = ui.ledger
    stored, report = ledger.validate(ticket_id, run_id, phase, attempt, artifacts_root=ui.settings.artifacts_root)
    return {"stored": stored, "validation": views.validation(stored, report), "read": views.read(stored)}


def checkpoint(ui: UI, request: Request) -> Response:
    """One attempt: payload, commit map, artifacts, basis, hash, verify status, approvals, gate form."""
    ticket_id, run_id = _params(request)
    phase, attempt = request.path_params["phase"], attempt_param(request)
    ledger = ui.ledger
    pipeline = ledger.pipeline_for(ticket_id, run_id)
    ph = pipeline.phase(phase)
    try:
        found = _checkpoint_views(ui, ticket_id, run_id, ph.name, attempt)
    except Corrupt as exc:
        return ui.render(
            request,
            "checkpoint.html",
            status_code=409,
            damaged=exc.to_dict(),
            ticket_id=ticket_id,
            run_id=run_id,
            run_name=None,
            phase=ph.name,
            attempt=attempt,
            title=f"{ph.name} attempt {attempt} (damaged)",
        )
    stored = found["stored"]
    cp = stored.record
    st = ledger.status(ticket_id, run_id, artifacts_root=ui.settings.artifacts_root)
    ps = st.phase(ph.name)
    judgements = [a.to_json() for a in ledger.approvals(ticket_id, run_id) if a.checkpoint_hash == cp.content_hash]
    issues_by_field: dict[str, list[dict[str, Any]]] = {}
    for issue in found["validation"]["issues"]:
        issues_by_field.setdefault(str(issue.get("field")), []).append(issue)
    recorded = getattr(cp, "artifact_hashes", None) or {}
    artifacts = [
        {
            "path": path,
            "recorded_hash": recorded.get(path),
            "issues": issues_by_field.get(f"artifact_paths[{i}]", []),
        }
        for i, path in enumerate(cp.artifact_paths)
    ]
    gate = None
    if ph.requires_approval and cp.completed:
        gate = {
            "state": ps.state,
            "is_latest": ps.completed_attempt == attempt,
            "judgeable": ps.completed_attempt == attempt and ps.state == "awaiting_approval",
        }
    basis = [{"phase": name, "attempt": entry.attempt, "hash": entry.hash} for name, entry in (cp.basis or {}).items()]

    previous = previous_attempt(ledger, ticket_id, run_id, ph.ordinal, attempt)
    log = views.log_view(ledger.logs(ticket_id, run_id, ph.name, attempt, pipeline=pipeline))
    return ui.render(
        request,
        "checkpoint.html",
        log=log,
        damaged=None,
        ticket_id=ticket_id,
        run_id=run_id,
        run_name=st.run_name,
        phase=ph.name,
        attempt=attempt,
        view=found["read"],
        validation=found["validation"],
        content_hash=cp.content_hash,
        status_word=cp.status,
        error_text=cp.error,
        payload=cp.phase_payload,
        commit_map=dict(cp.repo_commit_map),
        artifacts=artifacts,
        artifacts_checked=ui.settings.artifacts_root is not None,
        basis=basis,
        previous=previous,
        prev_hash=cp.prev_hash,
        forked_from=cp.forked_from,
        judgements=judgements,
        gate=gate,
        phase_state=ps.to_json(),
        by_cookie=request.cookies.get("phaselog_name", ""),
        title=f"{ph.name} attempt {attempt}",
    )


def raw(ui: UI, request: Request) -> Response:
    """The checkpoint as a download: ``.yaml`` (the seed fields, as the files store keeps them) or
    ``.json`` (the record with phaselog's metadata, as ``phaselog read`` prints it)."""
    ticket_id, run_id = _params(request)
    phase, attempt, fmt = request.path_params["phase"], attempt_param(request), request.path_params["fmt"]
    stored = ui.ledger.read(ticket_id, run_id, phase, attempt)
    name = f"{ticket_id}_{run_id[:8]}_{stored.record.phase}_a{attempt}"
    if fmt == "json":
        body = json.dumps(views.read(stored), indent=2, ensure_ascii=False) + "\n"
        media = "application/json"
    elif fmt == "yaml":
        body = _yaml.dump(stored.record.seed_dict())
        media = "application/x-yaml"
    else:
        raise NotFound(f"no .{fmt} download: use .yaml or .json", rule="format")
    return Response(
        body,
        media_type=media,
        headers={"content-disposition": f'attachment; filename="{name}.{fmt}"'},
    )


# -- diff -----------------------------------------------------------------------------------------
def diff(ui: UI, request: Request) -> Response:
    """Field-level differences of two attempts (or two progress events), side by side."""
    ticket_id = request.query_params.get("ticket", "").strip()
    a = request.query_params.get("a", "").strip()
    b = request.query_params.get("b", "").strip()
    result = None
    if ticket_id and a and b:
        result = ui.ledger.diff(ticket_id, a, b)
    return ui.render(request, "diff.html", ticket_id=ticket_id, a=a, b=b, result=result, title="Diff")


# -- approvals ------------------------------------------------------------------------------------
def approvals(ui: UI, request: Request) -> Response:
    """Everything awaiting approval, across tickets (oldest first)."""

    queue, problems = approval_queue(ui.ledger)
    listing = paginate([a.to_json() for a in queue], _page_number(request), ui.settings.page_size)
    return ui.render(request, "approvals.html", listing=listing, problems=problems, title="Approvals")


# -- guards ---------------------------------------------------------------------------------------
def guards(ui: UI, request: Request) -> Response:
    """Every guard: state, breaker, lock holder, recent passes."""

    rows = [
        {"name": g.name, "status": g.status, "chart": charts.passes(g.history, limit=30, width=520), "error": g.error}
        for g in guard_board(ui.ledger.store)
    ]
    return ui.render(request, "guards.html", rows=rows, title="Guards")


def guard(ui: UI, request: Request) -> Response:
    """One guard: state, breaker, lock holder, a chart of recent passes, history, reset."""

    g = guard_view(ui.ledger.store, validate_name(request.path_params["name"]))
    listing = paginate(list(reversed(g.history)), _page_number(request), ui.settings.page_size)
    return ui.render(
        request,
        "guard.html",
        name=g.name,
        status=g.status,
        chart=charts.passes(g.history),
        listing=listing,
        by_cookie=request.cookies.get("phaselog_name", ""),
        title=f"guard {g.name}",
    )


# -- health ---------------------------------------------------------------------------------------
def health(ui: UI, request: Request) -> Response:
    """``verify`` and ``doctor`` for one ticket, or ``doctor`` for the whole store."""

    ticket_id = request.query_params.get("ticket", "").strip()
    ledger = ui.ledger
    verify = None
    if ticket_id:
        ticket_id = validate_ticket_id(ticket_id)
        verify = views.verify_report(ledger.verify(ticket_id))
    report = doctor(ledger, ticket_id or None, finish=False).to_json()  # look only: never finish a prune
    return ui.render(request, "health.html", ticket_id=ticket_id, verify=verify, doctor=report, title="Health")
