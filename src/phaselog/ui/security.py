"""The dashboard's safety model (docs/ui.md): who may connect, and what a request may change.

* Bind: loopback by default; any other address needs a token (``--token`` or
  ``PHASELOG_UI_TOKEN``), and with a token every request must carry it (``Authorization: Bearer``,
  or the cookie set when the printed ``?token=`` URL is opened once).
* Host header: only the names the server was started for (DNS rebinding: a page on evil.example
  whose name resolves to 127.0.0.1 sends ``Host: evil.example``) — plus ``--allow-host`` names
  for a reverse proxy.
* Changes: POST only, with a CSRF token (an HMAC of a per-browser cookie under a per-process
  secret) and, when the browser sends one, an ``Origin`` naming this server. ``--read-only``
  refuses every POST.
* Every response: a Content-Security-Policy that allows only this server's own script and styles
  (no inline script), ``nosniff``, no framing, no referrer to other sites.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from phaselog.errors import UsageError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSRF_COOKIE = "phaselog_csrf"
TOKEN_COOKIE = "phaselog_ui_token"  # noqa: S105 - the cookie's name, not a secret
CSRF_FIELD = "csrf_token"
MAX_FORM_BYTES = 64 * 1024
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token (UsageError naming the option)."""
    if not is_loopback(host) and not token:
        raise UsageError(
            f"--host {host}: listening beyond this machine needs --token (or PHASELOG_UI_TOKEN); "
            "every request must then carry it",
            field="token",
            rule="required",
        )
    if token is not None and len(token) < 16:
        raise UsageError("--token: use at least 16 characters (e.g. `openssl rand -hex 16`)", field="token")


@dataclass
class Guarding:
    """What the middleware enforces, fixed at start-up."""

    host: str
    port: int
    token: str | None = None
    read_only: bool = False
    allow_hosts: tuple[str, ...] = ()
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def allowed_hosts(self) -> set[str]:
        """Host header values accepted (with and without the port)."""
        names = {"127.0.0.1", "localhost", "[::1]", self.host if ":" not in self.host else f"[{self.host}]"}
        names.update(h.lower() for h in self.allow_hosts)
        out = set()
        for n in names:
            out.add(n.lower())
            if ":" not in n.strip("[]") or n.startswith("["):
                out.add(f"{n.lower()}:{self.port}")
        return out

    def csrf_token(self, cookie: str) -> str:
        """The form token that goes with a browser's CSRF cookie."""
        return hmac.new(self.secret, cookie.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, cookie: str | None, token: str | None) -> bool:
        """Does ``token`` belong to ``cookie``?"""
        if not cookie or not token:
            return False
        return hmac.compare_digest(self.csrf_token(cookie), token)

    def token_ok(self, given: str | None) -> bool:
        """Does ``given`` match the server's token (always true without one)?"""
        if self.token is None:
            return True
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def cookies(scope: Scope) -> dict[str, str]:
    """The request's cookies."""
    jar: SimpleCookie = SimpleCookie()
    raw = _headers(scope).get("cookie", "")
    try:
        jar.load(raw)
    except Exception:
        return {}
    return {k: m.value for k, m in jar.items()}


class SecurityMiddleware:
    """Host check, token, POST rules, security headers and a Server-Timing header (pure ASGI)."""

    def __init__(self, app: ASGIApp, guarding: Guarding) -> None:
        self.app = app
        self.g = guarding
        self.hosts = guarding.allowed_hosts()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = _headers(scope)
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            await _plain(send, 400, f"Host {host!r} is not allowed (start phaselog ui with --allow-host NAME)")
            return
        jar = cookies(scope)
        query = scope.get("query_string", b"").decode("latin-1")
        if self.g.token is not None:
            given = None
            auth = headers.get("authorization", "")
            if auth.lower().startswith("bearer "):
                given = auth[7:].strip()
            elif TOKEN_COOKIE in jar:
                given = jar[TOKEN_COOKIE]
            pairs = parse_qsl(query, keep_blank_values=True)
            from_query = next((v for k, v in pairs if k == "token"), None)
            if from_query is not None and scope["method"] in ("GET", "HEAD") and self.g.token_ok(from_query):
                rest = urlencode([(k, v) for k, v in pairs if k != "token"])
                target = scope.get("path", "/") + (f"?{rest}" if rest else "")
                await _redirect(send, target, [_cookie(TOKEN_COOKIE, from_query)])
                return
            if not self.g.token_ok(given):
                await _plain(
                    send,
                    401,
                    "a token is required: open the URL printed by `phaselog ui`, or send Authorization: Bearer TOKEN",
                )
                return
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            await _plain(send, 405, f"{method} is not allowed")
            return
        if method == "POST":
            if self.g.read_only:
                await _plain(send, 403, "this dashboard is read-only (phaselog ui --read-only): nothing can be changed")
                return
            origin = headers.get("origin")
            if origin is not None and origin.split("://", 1)[-1].lower() not in self.hosts:
                await _plain(send, 403, f"cross-site request refused (Origin {origin!r})")
                return
        new_cookie = None
        csrf = jar.get(CSRF_COOKIE)
        if not csrf or len(csrf) != 64:
            csrf = secrets.token_hex(32)
            new_cookie = _cookie(CSRF_COOKIE, csrf)
        scope.setdefault("state", {})
        scope["state"]["csrf_cookie"] = csrf
        scope["state"]["csrf_known"] = new_cookie is None

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(HEADERS)
                elapsed = (time.perf_counter() - started) * 1000
                extra.append((b"server-timing", f"app;dur={elapsed:.2f}".encode()))
                if new_cookie is not None:
                    extra.append(new_cookie)
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _cookie(name: str, value: str) -> tuple[bytes, bytes]:
    return (b"set-cookie", f"{name}={value}; Path=/; HttpOnly; SameSite=Strict".encode())


async def _plain(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Send, location: str, extra: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0"), *HEADERS, *extra],
        }
    )
    await send({"type": "http.response.body", "body": b""})
