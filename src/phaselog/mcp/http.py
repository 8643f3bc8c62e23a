"""``phaselog mcp --http``: the server over Streamable HTTP, with the dashboard's safety rules.

The rules are :mod:`phaselog.ui.security`'s, reused rather than restated: ``check_bind`` (loopback by
default; any other bind needs a token of at least 16 characters) and ``Guarding`` (the Host names this
server answers to, its own origins, the token compared in constant time). Every request must carry
``Authorization: Bearer TOKEN`` when a token is set; a ``Host`` not this server's (DNS rebinding) and
a browser ``Origin`` not its own are refused. The SDK's own DNS-rebinding check is switched off so
that one set of rules decides (``--allow-host`` names included).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from phaselog.mcp.server import Options, build
from phaselog.ui.security import (
    ASGIApp,
    Guarding,
    Receive,
    Scope,
    Send,
    bearer,
    check_bind,
    normalize_origin,
    plain,
    request_headers,
)

PATH = "/mcp"


class Guard:
    """Host, token and Origin checks in front of the SDK's ASGI app (lifespan passes through)."""

    def __init__(self, app: ASGIApp, guarding: Guarding) -> None:
        self.app = app
        self.guarding = guarding
        self.hosts = guarding.allowed_hosts()
        self.origins = guarding.own_origins()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = request_headers(scope)
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            await plain(send, 400, f"Host {host[:200]!r} is not allowed (start phaselog mcp with --allow-host NAME)")
            return
        if not self.guarding.token_ok(bearer(headers)):
            await plain(send, 401, "a token is required: send Authorization: Bearer TOKEN")
            return
        origin = headers.get("origin")
        if origin is not None and normalize_origin(origin) not in self.origins:
            await plain(send, 403, f"cross-site request refused (Origin {origin[:200]!r} is not this server's)")
            return
        await self.app(scope, receive, send)


def serve_http(
    options: Options,
    *,
    host: str,
    port: int,
    token: str | None,
    allow_hosts: tuple[str, ...] = (),
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted (Ctrl-C); refuse a bind beyond loopback without a token first."""
    check_bind(host, token, variable="PHASELOG_MCP_TOKEN")
    server, ledger = build(options)
    try:
        app = server.streamable_http_app(
            streamable_http_path=PATH,
            host=host,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        userver = uvicorn.Server(config)
        guarding = Guarding(host=host, port=port, token=token, allow_hosts=allow_hosts)

        original_startup = userver.startup

        async def startup(sockets: object = None) -> None:
            await original_startup(sockets=sockets)  # type: ignore[arg-type]  # uvicorn's own signature
            bound = port
            for srv in getattr(userver, "servers", []):
                for sock in srv.sockets:
                    bound = sock.getsockname()[1]
            if bound != guarding.port:  # --port 0: the Host header names the port the OS chose
                guarding.port = bound
                guard.hosts = guarding.allowed_hosts()
                guard.origins = guarding.own_origins()
            if announce is not None:
                announce(f"http://{host if ':' not in host else f'[{host}]'}:{bound}{PATH}")

        guard = Guard(app, guarding)
        config.app = guard
        userver.startup = startup  # type: ignore[method-assign]  # to learn the port the OS chose
        config.loaded = False
        userver.run()
    finally:
        ledger.close()
        sys.stderr.flush()
