"""Sending one event to one destination: a signed webhook POST, or a command.

An attempt either succeeds or raises :class:`DeliveryFailed` with the reason (HTTP status, timeout,
exit code); the deliverer decides about retries. The HTTP client is the standard library's
``urllib.request`` (D217): one POST with a timeout needs nothing more, and redirects are refused
(a 3xx is a failure), since a redirected POST would be re-sent as a GET without its body.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import string
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from phaselog.model.errors import PhaselogError
from phaselog.notify.config import CommandTarget, WebhookTarget

__all__ = ["DeliveryFailed", "body_of", "event_env", "flat_fields", "render", "send", "sign"]

SIGNATURE_HEADER = "X-Phaselog-Signature"
_MAX_REASON = 300


class DeliveryFailed(PhaselogError):
    """One attempt to deliver an event failed (the context says why: status, timeout, exit code)."""

    error_code = "delivery_failed"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:  # a 3xx comes back as an HTTPError
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Phaselog-Signature`` value: ``sha256=`` and the hex HMAC-SHA256 of ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def flat_fields(event: Mapping[str, Any]) -> dict[str, str]:
    """The names a template may use: the event's fields as text (None: empty), ``data_<key>``, ``event_json``."""
    out = {k: "" if v is None else str(v) for k, v in event.items() if k != "data"}
    data = event.get("data") or {}
    for k, v in data.items():
        out[f"data_{k}"] = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    out["event_json"] = json.dumps(event, ensure_ascii=False, sort_keys=True)
    return out


class _Fields(dict[str, str]):
    def __missing__(self, key: str) -> str:  # a data_<key> the event does not carry: empty
        return ""


def render(template: object, fields: Mapping[str, str]) -> object:
    """``template`` with every string formatted from ``fields`` (plain names only: checked at load)."""
    if isinstance(template, Mapping):
        return {k: render(v, fields) for k, v in template.items()}
    if isinstance(template, list):
        return [render(v, fields) for v in template]
    if isinstance(template, str):
        return string.Formatter().vformat(template, (), _Fields(fields))
    return template


def body_of(target: WebhookTarget, event: Mapping[str, Any]) -> bytes:
    """The bytes POSTed: the event's JSON, or the template rendered from its fields."""
    doc = event if target.template is None else render(target.template, flat_fields(event))
    return json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _post(target: WebhookTarget, event: Mapping[str, Any]) -> None:
    body = body_of(target, event)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "phaselog-notify",
        "X-Phaselog-Event": str(event["type"]),
        "X-Phaselog-Event-Id": str(event["event_id"]),
        **target.headers,
    }
    if target.secret is not None:
        headers[SIGNATURE_HEADER] = sign(target.secret, body)
    # S310: the URL was checked to be http(s) when the config was loaded (config._webhook).
    req = urllib.request.Request(target.url, data=body, headers=headers, method="POST")  # noqa: S310
    try:
        with _OPENER.open(req, timeout=target.retry.timeout) as resp:
            resp.read(65536)
    except urllib.error.HTTPError as exc:
        raise DeliveryFailed(f"{target.url} answered HTTP {exc.code}", status=exc.code, rule="http_status") from None
    except TimeoutError:
        raise DeliveryFailed(f"{target.url}: no answer within {target.retry.timeout:g}s", rule="timeout") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DeliveryFailed(f"{target.url}: {reason}"[:_MAX_REASON], rule="connection") from None


def event_env(event: Mapping[str, Any]) -> dict[str, str]:
    """The ``PHASELOG_EVENT_*`` variables of a command: each top-level field, upper-cased (data as JSON)."""
    out = {f"PHASELOG_EVENT_{k.upper()}": "" if v is None else str(v) for k, v in event.items() if k != "data"}
    out["PHASELOG_EVENT_DATA"] = json.dumps(event.get("data") or {}, ensure_ascii=False, sort_keys=True)
    return out


def _run(target: CommandTarget, event: Mapping[str, Any]) -> None:
    stdin = json.dumps(event, ensure_ascii=False, sort_keys=True).encode("utf-8")
    env = {**os.environ, **event_env(event)}
    args: str | list[str] = target.shell if target.shell is not None else list(target.argv or ())
    try:
        proc = subprocess.run(  # the command is the operator's own configuration
            args,
            input=stdin,
            env=env,
            shell=target.shell is not None,  # a command line from the config file, by design
            capture_output=True,
            timeout=target.retry.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DeliveryFailed(f"command did not finish within {target.retry.timeout:g}s", rule="timeout") from None
    except OSError as exc:
        raise DeliveryFailed(f"command could not start: {exc.strerror}", rule="command") from None
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip()[-_MAX_REASON:]
        raise DeliveryFailed(
            f"command exited {proc.returncode}" + (f": {tail}" if tail else ""),
            returncode=proc.returncode,
            rule="exit_code",
        )


def send(target: WebhookTarget | CommandTarget, event: Mapping[str, Any]) -> None:
    """One attempt to deliver ``event`` (its JSON form) to ``target``; DeliveryFailed says why not."""
    if isinstance(target, WebhookTarget):
        _post(target, event)
    else:
        _run(target, event)
