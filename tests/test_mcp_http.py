"""`phaselog mcp --http`: Streamable HTTP with the dashboard's rules, a real server on 127.0.0.1.

The SDK's own client talks to it with the token; a request without the token, with a foreign Host
(DNS rebinding) or from a foreign Origin is refused before the MCP layer sees it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import PAYLOADS
from helpers import cli_env, run_cli

TOKEN = "t0ken-for-the-tests-0123456789"
T, R = "PROJ-1234", "a1b2c3d4"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "store"
    res = run_cli(
        root,
        "write",
        "--ticket-id",
        T,
        "--run-id",
        R,
        "--phase",
        "implement",
        "--payload",
        json.dumps(PAYLOADS["implement"]),
    )
    assert res.rc == 0, res.out
    env = cli_env(root, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen(
        [sys.executable, "-m", "phaselog", "mcp", "--http", "--port", "0", "--token", TOKEN],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # blocks until the server says where it listens (or dies)
        found = re.search(r"serving (http://\S+)", line)
        assert found, line + proc.stderr.read() if proc.poll() is not None else line
        yield found.group(1)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()


def test_the_sdk_client_works_with_the_token_and_nothing_without(served: str) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with httpx2.Client(timeout=30) as http:
        assert http.post(served, json=init, headers=accept).status_code == 401
        wrong = http.post(served, json=init, headers={**accept, "authorization": "Bearer " + "x" * 30})
        assert wrong.status_code == 401
        port = served.rsplit(":", 1)[1].split("/", 1)[0]
        rebind = http.post(
            served, json=init, headers={**accept, "authorization": f"Bearer {TOKEN}", "host": f"evil.example:{port}"}
        )
        assert rebind.status_code == 400
        cross = http.post(
            served, json=init, headers={**accept, "authorization": f"Bearer {TOKEN}", "origin": "http://evil.example"}
        )
        assert cross.status_code == 403

    async def main() -> None:
        client = create_mcp_http_client(headers={"authorization": f"Bearer {TOKEN}"})
        async with (
            client,
            streamable_http_client(served, http_client=client) as (read, write, *_),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            assert "run_status" in names
            res = await s.call_tool("run_status", {"ticket_id": T, "run_id": R})
            assert not res.is_error
            assert res.structured_content["next_phase"] == "local_review"

    anyio.run(main)
