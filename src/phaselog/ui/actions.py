"""The actions (POST): approve or reject a checkpoint, reset a guard. Nothing else writes.

Each checks the CSRF token and the required fields, opens a writable ledger for this request
only, and calls the library (``Ledger.approve`` / ``Ledger.reject`` bound to the content hash
the person was shown, ``Guard.reset`` recording who). The answer is a redirect to the page that
shows the new state, or the form again with the error.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from phaselog.guard import Guard, validate_name
from phaselog.model.entries import DECISIONS
from phaselog.model.errors import PhaselogError, UsageError
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.ui import urls
from phaselog.ui.context import UI, attempt_param
from phaselog.ui.security import CSRF_FIELD

NAME_COOKIE = "phaselog_name"


def _form(ui: UI, request: Request, body: bytes) -> dict[str, str] | Response:
    """The posted fields, or a refusal (403) when the CSRF token is missing or wrong.

    ``body`` is at most ``security.MAX_FORM_BYTES``: the middleware refused anything larger
    before it was read."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return PlainTextResponse("send the form as application/x-www-form-urlencoded\n", status_code=415)
    try:
        fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False))
    except UnicodeDecodeError:
        return PlainTextResponse("the form is not UTF-8\n", status_code=400)
    cookie = request.state.csrf_cookie if request.state.csrf_known else None
    if not ui.guarding.csrf_ok(cookie, fields.get(CSRF_FIELD)):
        return PlainTextResponse(
            "refused: the CSRF token is missing or does not match this browser (reload the page and submit again)\n",
            status_code=403,
        )
    return fields


def _required(fields: dict[str, str], name: str, label: str) -> str:
    value = fields.get(name, "").strip()
    if not value:
        raise UsageError(f"{label} is required", field=name, rule="required")
    return value


def _remember(response: Response, by: str) -> Response:
    # Only a convenience (the form is filled in next time); the name is not a credential.
    response.set_cookie(NAME_COOKIE, by, max_age=30 * 86400, httponly=True, samesite="strict")
    return response


def judge(ui: UI, request: Request, body: bytes) -> Response:
    """Approve or reject one checkpoint of a gated phase (name and comment required)."""
    fields = _form(ui, request, body)
    if isinstance(fields, Response):
        return fields
    ticket_id = validate_ticket_id(request.path_params["ticket"])
    run_id = normalize_run_id(request.path_params["run"], field="run")
    phase, attempt = request.path_params["phase"], attempt_param(request)
    page = urls.checkpoint(ticket_id, run_id, phase, attempt)
    try:
        decision = fields.get("decision", "")
        if decision not in DECISIONS:
            raise UsageError("decision: choose approve or reject", field="decision", rule="enum")
        by = _required(fields, "by", "your name")
        comment = _required(fields, "comment", "a comment")
        shown = _required(fields, "content_hash", "the content hash you judged")
        with ui.ledgers.writer() as ledger:
            approval, warnings = ledger.approve(
                ticket_id,
                run_id,
                phase,
                by=by,
                comment=comment,
                attempt=attempt,
                decision=decision,
                checkpoint_hash=shown,
            )
    except PhaselogError as exc:
        return ui.error(request, exc, status=400 if exc.exit_code == 2 else 409)
    done = "approved" if approval.approved else "rejected"
    if warnings:
        done += ": " + "; ".join(warnings)
    return _remember(RedirectResponse(urls.with_query(page, done=done), status_code=303), by)


def guard_reset(ui: UI, request: Request, body: bytes) -> Response:
    """Close a guard's breaker; the reset is recorded in its history with who did it."""

    fields = _form(ui, request, body)
    if isinstance(fields, Response):
        return fields
    name = validate_name(request.path_params["name"])
    try:
        by = _required(fields, "by", "your name")
        with ui.ledgers.writer() as ledger:
            Guard(ledger.store, name).reset(by=by)
    except PhaselogError as exc:
        return ui.error(request, exc)
    return _remember(RedirectResponse(urls.with_query(urls.guard(name), done=f"reset by {by}"), status_code=303), by)
