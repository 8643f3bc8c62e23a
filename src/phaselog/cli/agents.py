"""Agent commands: ``phaselog mcp`` (the MCP server, :mod:`phaselog.mcp`) and ``phaselog skill``.

The SDK is the ``mcp`` extra, imported only inside ``phaselog mcp``: no other command pays for it.
Guide: docs/agents.md.
"""

from __future__ import annotations

import sys

import click

from phaselog.cli._scaffold import Call, Result, cli, command
from phaselog.model.errors import UsageError


def _require_extra() -> None:
    try:
        import mcp.server.lowlevel  # noqa: F401  # lazy: the mcp extra may be absent (this import is the check)
    except ImportError as exc:
        raise UsageError(
            f"phaselog mcp needs the 'mcp' extra ({exc.name or 'a dependency'} is not installed): "
            "pip install 'phaselog[mcp]'",
            field="mcp",
            rule="missing_dependency",
        ) from None


@command(cli, "mcp", formats=None, correlation=False, section="Agents")
@click.option("--read-only", is_flag=True, help="Open the store read-only and list no tool that writes.")
@click.option(
    "--allow-judgements",
    is_flag=True,
    help="Also offer approve and reject (recorded with via: mcp). Off: a gate waits for a person.",
)
@click.option("--http", "use_http", is_flag=True, help="Serve Streamable HTTP at /mcp instead of stdio.")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="With --http: address; beyond loopback needs --token."
)
@click.option("--port", default=8766, show_default=True, type=click.IntRange(0, 65535), help="With --http: port.")
@click.option(
    "--token",
    envvar="PHASELOG_MCP_TOKEN",
    metavar="TOKEN",
    help="With --http: require Authorization: Bearer TOKEN on every request. Env: PHASELOG_MCP_TOKEN.",
)
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME", help="With --http: also accept this Host.")
def mcp_cmd(
    call: Call,
    read_only: bool,
    allow_judgements: bool,
    use_http: bool,
    host: str,
    port: int,
    token: str | None,
    allow_hosts: tuple[str, ...],
) -> Result | None:
    """Serve the store to an agent over the Model Context Protocol (stdio by default).

    Tools: list_tickets, list_runs, run_status, explain, read/validate/list checkpoints,
    write_checkpoint, record_progress, history, diff, approvals, verify, can_skip_to; approve and
    reject only with --allow-judgements. Resources: phaselog://tickets/T/runs/R[/phases/P].

    \b
    Examples:
      claude mcp add phaselog -- phaselog mcp
      phaselog mcp --store sqlite:///ledger.db --read-only
      phaselog mcp --http --port 8766
    """
    _require_extra()
    import anyio  # lazy: the mcp extra may be absent (anyio comes with it)

    from phaselog.mcp.server import Options, serve_stdio  # lazy: the mcp extra may be absent

    if not use_http and (token or allow_hosts or host != "127.0.0.1"):
        raise UsageError("--host, --token and --allow-host go with --http", field="http", rule="required")
    call.check_root_and_store()
    options = Options(store=call.store_url or call.root, read_only=read_only, allow_judgements=allow_judgements)
    if use_http:
        from phaselog.mcp.http import serve_http  # lazy: the mcp extra may be absent (uvicorn, starlette)

        def announce(url: str) -> None:
            sys.stderr.write(f"phaselog mcp: serving {url}{' (read-only)' if read_only else ''}\n")
            sys.stderr.flush()

        serve_http(options, host=host, port=port, token=token, allow_hosts=allow_hosts, announce=announce)
        return None
    anyio.run(serve_stdio, options)
    return None


@command(cli, "skill", store=False, formats=None, correlation=False, section="Agents")
@click.option("--print", "print_it", is_flag=True, help="Print SKILL.md (the default).")
@click.option(
    "--install",
    "directory",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Write the skill's folder DIR/phaselog/ (SKILL.md and reference/), e.g. ~/.claude/skills.",
)
def skill(call: Call, print_it: bool, directory: str | None) -> Result | None:
    """Print or install the Agent Skill that teaches an agent to checkpoint a pipeline with phaselog.

    \b
    Examples:
      phaselog skill --print
      phaselog skill --install ~/.claude/skills
    """
    from phaselog.mcp import skill as agent_skill  # lazy: only `phaselog skill` reads the skill's files

    if print_it and directory:
        raise UsageError("give --print or --install, not both", field="install")
    if directory is None:
        sys.stdout.write(agent_skill.skill_text())
        sys.stdout.flush()
        return None
    written = agent_skill.install(directory)
    return Result({"installed": written[0], "files": written})
