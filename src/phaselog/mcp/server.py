"""The MCP server: the tools of :mod:`phaselog.mcp.tools` and two resources, over the official SDK's
low-level ``Server`` (mcp 2.x), served on stdio or Streamable HTTP (:mod:`phaselog.mcp.http`).

One Ledger for the server's life, opened read-only under ``--read-only``. A call is answered on the
event loop's thread, one at a time (the SQL stores' connections belong to the thread that opened
them, and a phaselog call is short). Every failure of a call is a tool result with ``isError`` and
phaselog's JSON error object (``error``, ``error_code``, ``field`` …): never a traceback, and the
server goes on serving.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from phaselog.ledger.facade import Ledger
from phaselog.mcp import tools as catalogue
from phaselog.model.errors import NotFound, PhaselogError, UsageError
from phaselog.stores import open_store
from phaselog.views import results as views
from phaselog.views.catalog import Catalog

INSTRUCTIONS = """phaselog records durable checkpoints of a multi-phase pipeline (ticket → run → phase → attempt).
Before working on a run, call run_status (next_phase is where to resume) or explain. Record a phase with
write_checkpoint only after it FINISHED; inside a long phase use record_progress (start, then step N).
A phase awaiting_approval waits for a PERSON: tell the user; never approve your own work.
Errors come back as tool errors with error_code and field: fix that argument and call again."""

RUN_URI = "phaselog://tickets/{ticket_id}/runs/{run_id}"
CHECKPOINT_URI = "phaselog://tickets/{ticket_id}/runs/{run_id}/phases/{phase}"
#: How many runs ``resources/list`` offers (each ticket's latest run, newest first).
MAX_LISTED = 200


@dataclass(frozen=True)
class Options:
    """How the server was started (``phaselog mcp`` options)."""

    store: str | None = None
    read_only: bool = False
    allow_judgements: bool = False


def error_result(err: PhaselogError) -> types.CallToolResult:
    """A tool error: ``isError`` with phaselog's JSON error object, as text and as structured content."""
    data = err.to_dict()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
        structured_content=data,
        is_error=True,
    )


def answer(ledger: Ledger, offered: Mapping[str, catalogue.Tool], name: str, arguments: Any) -> types.CallToolResult:
    """Answer one tool call; every failure becomes a tool error (the server keeps serving)."""
    try:
        data = catalogue.call(ledger, offered, name, arguments)
    except PhaselogError as exc:
        return error_result(exc)
    except Exception as exc:  # a bug of ours: say so without a traceback, and go on serving
        sys.stderr.write(f"phaselog mcp: internal error in {name}: {type(exc).__name__}: {exc}\n")
        return error_result(PhaselogError(f"internal error: {type(exc).__name__}: {exc}", tool=name))
    text = json.dumps(data, ensure_ascii=False, default=str)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=data)


def parse_uri(uri: str) -> tuple[str, str, str | None]:
    """(ticket, run, phase or None) of a ``phaselog://tickets/T/runs/R[/phases/P]`` URI."""
    prefix = "phaselog://tickets/"
    parts = uri[len(prefix) :].split("/") if uri.startswith(prefix) else []
    if len(parts) == 3 and parts[1] == "runs":
        return unquote(parts[0]), unquote(parts[2]), None
    if len(parts) == 5 and parts[1] == "runs" and parts[3] == "phases":
        return unquote(parts[0]), unquote(parts[2]), unquote(parts[4])
    raise UsageError(
        f"not a phaselog resource: {uri[:200]!r} (phaselog://tickets/T/runs/R[/phases/P])", field="uri", rule="format"
    )


def read_resource(ledger: Ledger, uri: str) -> dict[str, Any]:
    """A run's status, or a phase's latest completed checkpoint (the views of the tools)."""
    ticket_id, run_id, phase = parse_uri(uri)
    if phase is None:
        return views.run_status(ledger.status(ticket_id, run_id))
    return views.read(ledger.read(ticket_id, run_id, phase))


def run_uri(ticket_id: str, run_id: str) -> str:
    """The resource URI of a run."""
    return f"phaselog://tickets/{quote(ticket_id, safe='')}/runs/{quote(run_id, safe='')}"


def build(options: Options) -> tuple[Server[Any], Ledger]:
    """The SDK server for ``options`` and the Ledger it answers from (the caller closes it)."""
    store = open_store(options.store, create=not options.read_only, read_only=options.read_only)
    ledger = Ledger(store)
    offered = catalogue.offered(read_only=options.read_only, allow_judgements=options.allow_judgements)
    listed = [
        types.Tool(
            name=t.name,
            description=t.description,
            input_schema=t.input_schema,
            output_schema=t.output_schema,
            annotations=types.ToolAnnotations(
                read_only_hint=not t.writes, destructive_hint=False, idempotent_hint=not t.writes
            ),
        )
        for t in offered.values()
    ]

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        return answer(ledger, offered, params.name, params.arguments)

    async def list_resources(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        try:
            tickets = Catalog().tickets(ledger)
        except PhaselogError:
            tickets = []
        found = [
            types.Resource(
                name=f"{t.ticket_id} {t.latest_run_name or t.latest_run}",
                uri=run_uri(t.ticket_id, t.latest_run),
                description=f"status of the latest run of {t.ticket_id} ({t.state})",
                mime_type="application/json",
            )
            for t in tickets[:MAX_LISTED]
            if t.latest_run
        ]
        return types.ListResourcesResult(resources=found)

    async def list_templates(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="run",
                    uri_template=RUN_URI,
                    description="A run's status: every phase's state and next_phase (as run_status).",
                    mime_type="application/json",
                ),
                types.ResourceTemplate(
                    name="checkpoint",
                    uri_template=CHECKPOINT_URI,
                    description="A phase's latest completed checkpoint (as read_checkpoint).",
                    mime_type="application/json",
                ),
            ]
        )

    async def read(ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> Any:
        try:
            data = read_resource(ledger, str(params.uri))
        except PhaselogError as exc:
            code = -32002 if isinstance(exc, NotFound) else types.INVALID_PARAMS  # -32002: resource not found
            raise MCPError(code=code, message=exc.message, data=exc.to_dict()) from None
        text = json.dumps(data, ensure_ascii=False, default=str)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=str(params.uri), mime_type="application/json", text=text)]
        )

    server: Server[Any] = Server(
        "phaselog",
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read,
    )
    return server, ledger


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # lazy: only the server reports its version

    try:
        return version("phaselog")
    except PackageNotFoundError:
        return "0"


async def serve_stdio(options: Options) -> None:
    """Serve on this process's stdin and stdout until the client closes them."""
    server, ledger = build(options)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        ledger.close()
