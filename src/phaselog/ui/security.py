"""The dashboard's safety model (docs/ui.md): who may connect, and what a request may change.

* Bind: loopback by default; any other address needs a token (``--token`` or
  ``PHASELOG_UI_TOKEN``), and with a token every request must carry it (``Authorization: Bearer``,
  or the cookie set when the printed ``?token=`` URL is opened once).
* Host header: only the names the server was started for (DNS rebinding: a page on evil.example
  whose name resolves to 127.0.0.1 sends ``Host: evil.example``) — plus ``--allow-host`` names
  for a reverse proxy.
* Changes: POST only, with a CSRF token (an HMAC of a per-browser cookie under a per-process
  secret) and, when the browser sends one, an ``Origin`` that is one of this server's own
  (scheme, host and port: ``own_origins``). ``--read-only`` refuses every POST. A form is at most
  MAX_FORM_BYTES: a larger ``Content-Length`` is refused before anything is read, and a body
  without one is cut off at the cap (the bytes past it are never read).
* The ``?token=`` redirect goes to a path on this server (``same_origin_location``): ASCII,
  percent-encoded, one leading slash.
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
from urllib.parse import parse_qsl, quote_from_bytes, unquote_plus, urlsplit

from phaselog.model.errors import UsageError
from phaselog.model.limits import is_digits

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


def check_bind(host: str, token: str | None, *, variable: str = "PHASELOG_UI_TOKEN") -> None:
    """Refuse to listen beyond loopback without a token (UsageError naming the option and its
    environment variable, ``variable``)."""
    if not is_loopback(host) and not token:
        raise UsageError(
            f"--host {host}: listening beyond this machine needs --token (or {variable}); "
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

    def own_origins(self) -> set[str]:
        """The origins this server is reached at, as a browser writes them in ``Origin``: ``http`` on
        its port for the loopback names and the bind address; for an ``--allow-host`` name (a
        reverse proxy, which may terminate TLS) ``http`` and ``https`` on its port, or the
        scheme's default port when it names none, and ``http`` on this server's port."""
        out = {origin_of("http", n, self.port) for n in ("127.0.0.1", "localhost", "[::1]", _bracketed(self.host))}
        for entry in self.allow_hosts:
            try:
                parts = urlsplit(f"//{entry}")
                name, port = parts.hostname, parts.port
            except ValueError:
                continue  # not a host[:port]: no browser can send it either
            if not name:
                continue
            for scheme in ("http", "https"):
                out.add(origin_of(scheme, name, DEFAULT_PORTS[scheme] if port is None else port))
            out.add(origin_of("http", name, self.port))
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


DEFAULT_PORTS = {"http": 80, "https": 443}


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def origin_of(scheme: str, host: str, port: int) -> str:
    """An origin as browsers serialize it (the scheme's default port left out)."""
    host = _bracketed(host.lower())
    return f"{scheme}://{host}" if DEFAULT_PORTS.get(scheme) == port else f"{scheme}://{host}:{port}"


def normalize_origin(value: str) -> str | None:
    """``value`` as ``scheme://host[:port]`` (lower case, default port dropped), or None when it
    is not an http(s) origin (``null``, a path, credentials, a bad port)."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.username is not None or parts.password is not None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return origin_of(scheme, parts.hostname, DEFAULT_PORTS[scheme] if port is None else port)


#: Characters left as they are in a redirect's path and query (RFC 3986 pchar and delimiters, and
#: ``%`` of the escapes the client sent); every other byte is percent-encoded, so it is ASCII.
_PATH_SAFE = "/:@!$&'()*+,;=-._~%"
_QUERY_SAFE = _PATH_SAFE + "?"


def same_origin_location(raw_path: bytes, raw_query: bytes, drop: str) -> str:
    """A ``Location`` for this server's ``raw_path`` with ``raw_query`` minus the ``drop`` parameter:
    percent-encoded ASCII that starts with exactly one ``/`` (``//evil.example`` and ``/\\evil``
    would leave the server), never anything a header cannot carry."""
    path = quote_from_bytes(raw_path, safe=_PATH_SAFE)
    path = "/" + path.lstrip("/")  # a backslash is %5C by now: only slashes can start an authority
    kept = [
        piece
        for piece in raw_query.split(b"&")
        if piece and unquote_plus(piece.split(b"=", 1)[0].decode("latin-1"), encoding="latin-1") != drop
    ]
    query = quote_from_bytes(b"&".join(kept), safe=_QUERY_SAFE)
    return path + (f"?{query}" if query else "")


def request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers, names lower-cased (the dashboard's and ``phaselog mcp --http``'s checks)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def bearer(headers: dict[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, or None."""
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def cookies(scope: Scope) -> dict[str, str]:
    """The request's cookies."""
    jar: SimpleCookie = SimpleCookie()
    raw = request_headers(scope).get("cookie", "")
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
        self.origins = guarding.own_origins()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = request_headers(scope)
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            await plain(send, 400, f"Host {host!r} is not allowed (start phaselog ui with --allow-host NAME)")
            return
        jar = cookies(scope)
        query = scope.get("query_string", b"").decode("latin-1")
        if self.g.token is not None:
            given = bearer(headers)
            if given is None and TOKEN_COOKIE in jar:
                given = jar[TOKEN_COOKIE]
            pairs = parse_qsl(query, keep_blank_values=True)
            from_query = next((v for k, v in pairs if k == "token"), None)
            if from_query is not None and scope["method"] in ("GET", "HEAD") and self.g.token_ok(from_query):
                raw_path = scope.get("raw_path") or scope.get("path", "/").encode("utf-8", "surrogateescape")
                target = same_origin_location(raw_path, scope.get("query_string", b""), "token")
                await _redirect(send, target, [_cookie(TOKEN_COOKIE, from_query)])
                return
            if not self.g.token_ok(given):
                await plain(
                    send,
                    401,
                    "a token is required: open the URL printed by `phaselog ui`, or send Authorization: Bearer TOKEN",
                )
                return
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            await plain(send, 405, f"{method} is not allowed")
            return
        if method == "POST":
            if self.g.read_only:
                await plain(send, 403, "this dashboard is read-only (phaselog ui --read-only): nothing can be changed")
                return
            origin = headers.get("origin")
            if origin is not None and normalize_origin(origin) not in self.origins:
                await plain(send, 403, f"cross-site request refused (Origin {origin[:200]!r} is not this server's)")
                return
            body = await _read_form(headers, receive)
            if isinstance(body, tuple):
                status, text = body
                await plain(send, status, text, close=True)
                return
            receive = _replay(body, receive)
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


async def _read_form(headers: dict[str, str], receive: Receive) -> bytes | tuple[int, str]:
    """A POST's body, at most MAX_FORM_BYTES, or the refusal (status, text): by ``Content-Length``
    before anything is read, else as soon as the bytes received pass the cap (the rest is never
    read: memory stays at the cap whatever is sent)."""
    too_large = (413, f"form too large (over {MAX_FORM_BYTES} bytes)")
    length = headers.get("content-length")
    if length is not None:
        if not is_digits(length.strip()):
            return 400, f"Content-Length {length[:40]!r} is not a number of bytes"
        if int(length) > MAX_FORM_BYTES:
            return too_large
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return 400, "the request ended before its body"
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then waits on the real one."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _cookie(name: str, value: str) -> tuple[bytes, bytes]:
    return (b"set-cookie", f"{name}={value}; Path=/; HttpOnly; SameSite=Strict".encode())


async def plain(send: Send, status: int, text: str, *, close: bool = False) -> None:
    """Answer with ``status`` and a plain-text ``text`` (a refusal)."""
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *HEADERS,
                # a body left unread: the connection cannot carry another request
                *([(b"connection", b"close")] if close else []),
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
