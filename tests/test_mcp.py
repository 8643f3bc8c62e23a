"""`phaselog mcp` (issue 24), driven by the SDK's own client over stdio: a real server subprocess.

Every tool is asked the same question as the CLI, on files, SQLite and PostgreSQL, and must answer
the CLI's JSON without its envelope (one views layer). Bad arguments are tool errors naming the
argument while the server keeps serving; judgements exist only with --allow-judgements (and record
``via: mcp``); --read-only lists no writing tool; an agent session survives a SIGKILLed server.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from conftest import PAYLOADS
from helpers import cli_env, run_cli

T, R = "PROJ-1234", "a1b2c3d4"
READ_TOOLS = {
    "list_tickets",
    "list_runs",
    "run_status",
    "explain",
    "read_checkpoint",
    "read_logs",
    "validate_checkpoint",
    "list_checkpoints",
    "history",
    "diff",
    "phase_diffs",
    "approvals",
    "verify",
    "can_skip_to",
}
WRITE_TOOLS = {"write_checkpoint", "record_progress"}
JUDGE_TOOLS = {"approve", "reject"}


def _env(root: Path) -> dict[str, str]:
    return cli_env(root, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


@asynccontextmanager
async def session(root: Path, *flags: str, pidfile: Path | None = None) -> AsyncIterator[ClientSession]:
    """A ClientSession with `phaselog mcp FLAGS` (a subprocess; its pid written to ``pidfile``)."""
    code = (
        "import os, sys\n"
        + (f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n" if pidfile else "")
        + "from phaselog.cli import main\n"
        + f"main(['mcp', *{list(flags)!r}])\n"
    )
    params = StdioServerParameters(command=sys.executable, args=["-c", code], env=_env(root), cwd=str(root.parent))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        yield s


async def call(s: ClientSession, name: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """(is_error, the JSON of the result): structured content, and the text saying the same."""
    res = await s.call_tool(name, args)
    text = json.loads(res.content[0].text)  # type: ignore[union-attr]  # phaselog answers with text
    assert res.structured_content == text
    assert "Traceback" not in res.content[0].text  # type: ignore[union-attr]
    return res.is_error, text


def cli_json(root: Path, *args: str) -> dict[str, Any]:
    """The CLI's JSON for a question, without its envelope (what the tools return)."""
    out = run_cli(root, *args, env=_env(root)).json
    for key in ("success", "correlation_id", "error", "error_code"):
        out.pop(key, None)
    return out


def _store_url(backend: str, tmp_path: Path) -> str | None:
    if backend == "files":
        return None
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return None  # postgres: set by the test from pg_schema_url


def write(root: Path, store: list[str], phase: str, *more: str) -> None:
    res = run_cli(
        root,
        "write",
        *store,
        "--ticket-id",
        T,
        "--run-id",
        R,
        "--phase",
        phase,
        "--payload",
        json.dumps(PAYLOADS[phase]),
        *more,
        env=_env(root),
    )
    assert res.rc == 0, res.out


# -- every tool answers as the CLI does -------------------------------------------------------------------
@pytest.mark.all_stores
def test_every_tool_answers_as_the_cli_does(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = tmp_path / "store"
    url = request.getfixturevalue("pg_schema_url") if backend == "postgres" else _store_url(backend, tmp_path)
    store = ["--store", url] if url else []
    write(root, store, "implement")
    write(root, store, "local_review")
    write(root, store, "local_review", "--repo-commit-map", '{"app": "b2c3d4e"}')
    questions: list[tuple[str, dict[str, Any], list[str]]] = [
        ("list_tickets", {}, ["tickets"]),
        ("list_runs", {"ticket_id": T}, ["runs", "--ticket-id", T]),
        ("run_status", {"ticket_id": T, "run_id": R}, ["status", "--ticket-id", T, "--run-id", R]),
        ("explain", {"ticket_id": T, "run_id": R}, ["explain", "--ticket-id", T, "--run-id", R]),
        (
            "read_checkpoint",
            {"ticket_id": T, "run_id": R, "phase": "implement"},
            ["read", "--ticket-id", T, "--run-id", R, "--phase", "implement"],
        ),
        (
            "validate_checkpoint",
            {"ticket_id": T, "run_id": R, "phase": 2, "attempt": 1},
            ["validate", "--ticket-id", T, "--run-id", R, "--phase", "2", "--attempt", "1"],
        ),
        ("list_checkpoints", {"ticket_id": T}, ["list", "--ticket-id", T]),
        ("history", {"ticket_id": T, "run_id": R}, ["history", "--ticket-id", T, "--run-id", R]),
        (
            "diff",
            {"ticket_id": T, "a": f"{R}:local_review:1", "b": f"{R}:local_review:2"},
            ["diff", "--ticket-id", T, f"{R}:local_review:1", f"{R}:local_review:2"],
        ),
        (
            "phase_diffs",
            {"ticket_id": T, "run_id": R, "phase": "local_review"},
            ["diff", "--ticket-id", T, "--run-id", R, "--phase", "local_review"],
        ),
        ("approvals", {}, ["approvals"]),
        ("verify", {"ticket_id": T}, ["verify", "--ticket-id", T]),
        (
            "can_skip_to",
            {"ticket_id": T, "run_id": R, "phase": "create_pr"},
            ["resume", "--ticket-id", T, "--run-id", R, "--skip-to", "create_pr"],
        ),
        (
            "can_skip_to",
            {"ticket_id": T, "run_id": R, "phase": "ready_for_merge"},
            ["resume", "--ticket-id", T, "--run-id", R, "--skip-to", "ready_for_merge"],
        ),
    ]
    flags = ["--store", url] if url else []

    async def main() -> None:
        async with session(root, *flags) as s:
            listed = (await s.list_tools()).tools
            assert {t.name for t in listed} == READ_TOOLS | WRITE_TOOLS
            for t in listed:
                assert t.input_schema["type"] == "object", t.name
                assert t.output_schema is not None
                assert t.output_schema["type"] == "object", t.name
                assert len(t.description or "") > 80, t.name
            for name, args, cli in questions:
                is_error, got = await call(s, name, args)
                assert not is_error, (name, got)
                assert got == cli_json(root, cli[0], *store, *cli[1:]), name
            # The resources say what the tools say.
            status = (await call(s, "run_status", {"ticket_id": T, "run_id": R}))[1]
            res = await s.read_resource(f"phaselog://tickets/{T}/runs/{R}")
            assert json.loads(res.contents[0].text) == status  # type: ignore[union-attr]
            res = await s.read_resource(f"phaselog://tickets/{T}/runs/{R}/phases/implement")
            read = (await call(s, "read_checkpoint", {"ticket_id": T, "run_id": R, "phase": "implement"}))[1]
            assert json.loads(res.contents[0].text) == read  # type: ignore[union-attr]
            listed_res = (await s.list_resources()).resources
            assert [str(r.uri) for r in listed_res] == [f"phaselog://tickets/{T}/runs/{status['run_id']}"]
            # Writing tools record what the CLI then reads.
            is_error, prog = await call(
                s, "record_progress", {"ticket_id": T, "run_id": R, "phase": "create_pr", "event": "start"}
            )
            assert not is_error
            assert prog["event"]["event"] == "start"
            is_error, step = await call(
                s, "record_progress", {"ticket_id": T, "run_id": R, "phase": "create_pr", "event": "step", "step": 1}
            )
            assert not is_error
            assert step["event"]["step"] == 1
            is_error, written = await call(
                s,
                "write_checkpoint",
                {"ticket_id": T, "run_id": R, "phase": "create_pr", "payload": PAYLOADS["create_pr"]},
            )
            assert not is_error, written
            assert (
                cli_json(root, "read", *store, "--ticket-id", T, "--run-id", R, "--phase", "create_pr")["metadata"][
                    "content_hash"
                ]
                == written["content_hash"]
            )

    anyio.run(main)


# -- bad arguments -----------------------------------------------------------------------------------------
def test_bad_arguments_are_tool_errors_naming_the_argument(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write(root, [], "implement")
    cases: list[tuple[str, dict[str, Any], str, str | None]] = [
        ("read_checkpoint", {"ticket_id": "NOPE-1", "run_id": R, "phase": "implement"}, "not_found", None),
        ("read_checkpoint", {"ticket_id": T, "run_id": R, "phase": "bogus"}, "unknown_phase", "phase"),
        ("run_status", {"ticket_id": T, "run_id": 5}, "usage", "run_id"),
        ("run_status", {"ticket_id": T}, "usage", "run_id"),
        ("run_status", {"ticket_id": T, "run_id": R, "colour": "red"}, "usage", "colour"),
        ("run_status", {"ticket_id": "x" * 100_000, "run_id": R}, "usage", "ticket_id"),
        ("list_runs", {"ticket_id": "../etc"}, "invalid_id", "ticket_id"),
        ("read_checkpoint", {"ticket_id": T, "run_id": R, "phase": "implement", "attempt": "one"}, "usage", "attempt"),
        ("read_checkpoint", {"ticket_id": T, "run_id": R, "phase": True}, "usage", "phase"),
        (
            "write_checkpoint",
            {"ticket_id": T, "run_id": R, "phase": "local_review", "payload": {"iteration_count": "many"}},
            "invalid",
            None,
        ),
        (
            "write_checkpoint",
            {"ticket_id": T, "run_id": R, "phase": "implement", "attempt": 1, "payload": PAYLOADS["implement"]},
            "already_exists",
            None,
        ),
        ("record_progress", {"ticket_id": T, "run_id": R, "phase": "create_pr", "event": "explode"}, "usage", "event"),
        (
            "record_progress",
            {"ticket_id": T, "run_id": R, "phase": 1, "event": "step", "status": "s" * 10_000},
            "usage",
            "status",
        ),
    ]

    async def main() -> None:
        async with session(root) as s:
            for name, args, code, field in cases:
                is_error, err = await call(s, name, args)
                assert is_error, (name, args, err)
                assert err["error_code"] == code, (name, err)
                if field is not None:
                    assert err["field"] == field, (name, err)
                assert len(err["error"]) < 2_000, err  # a huge argument is not echoed back
                # The server keeps serving.
                is_error, ok = await call(s, "run_status", {"ticket_id": T, "run_id": R})
                assert not is_error
                assert ok["next_phase"] == "local_review"

    anyio.run(main)


# -- judgements and --read-only ------------------------------------------------------------------------------
VIDEO = {"summary": "why", "sources": ["https://example.com/a"]}
PROPOSAL = {"title": "Launch", "concept": "a short film"}


def test_judgements_need_allow_judgements_and_record_their_origin(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for phase, payload in (("research", VIDEO), ("proposal", PROPOSAL)):
        res = run_cli(
            root,
            "write",
            "--pipeline",
            "video-pipeline",
            "--ticket-id",
            "VID-7",
            "--run-id",
            "r1",
            "--phase",
            phase,
            "--payload",
            json.dumps(payload),
            env=_env(root),
        )
        assert res.rc == 0, res.out
    judge = {"ticket_id": "VID-7", "run_id": "r1", "phase": "proposal", "by": "ana"}

    async def main() -> None:
        async with session(root) as s:
            assert not {t.name for t in (await s.list_tools()).tools} & JUDGE_TOOLS
            is_error, err = await call(s, "approve", judge)  # forged: not listed, so refused
            assert is_error
            assert err["error_code"] == "usage"
            assert err["rule"] == "unknown_tool"
            is_error, queue = await call(s, "approvals", {})
            assert queue["count"] == 1
        async with session(root, "--allow-judgements") as s:
            assert {t.name for t in (await s.list_tools()).tools} >= JUDGE_TOOLS
            is_error, judged = await call(s, "approve", {**judge, "comment": "fine"})
            assert not is_error, judged
            assert judged["approval"]["by"] == "ana"
            assert judged["approval"]["via"] == "mcp"
            assert judged["phase_state"] == "completed"

    anyio.run(main)
    hist = cli_json(root, "history", "--ticket-id", "VID-7")["history"]
    approvals = [e for e in hist if e["kind"] == "approval"]
    assert len(approvals) == 1
    assert "mcp" in json.dumps(approvals[0])
    assert cli_json(root, "verify", "--ticket-id", "VID-7")["ok"] is True


def test_read_only_lists_no_writing_tool(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write(root, [], "implement")

    async def main() -> None:
        async with session(root, "--read-only", "--allow-judgements") as s:
            assert {t.name for t in (await s.list_tools()).tools} == READ_TOOLS
            is_error, err = await call(
                s,
                "write_checkpoint",
                {"ticket_id": T, "run_id": R, "phase": "local_review", "payload": PAYLOADS["local_review"]},
            )
            assert is_error
            assert err["rule"] == "unknown_tool"
            assert (await call(s, "run_status", {"ticket_id": T, "run_id": R}))[1]["next_phase"] == "local_review"

    anyio.run(main)
    assert cli_json(root, "list", "--ticket-id", T)["count"] == 1


# -- an agent's session, through MCP only, across a SIGKILL ---------------------------------------------------
@pytest.mark.parametrize("kind", ["files", "sqlite", "postgres"])
def test_an_agent_resumes_after_the_server_is_killed(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = tmp_path / "store"
    url = request.getfixturevalue("pg_schema_url") if kind == "postgres" else _store_url(kind, tmp_path)
    flags = ["--store", url] if url else []
    pidfile = tmp_path / "server.pid"
    order = list(PAYLOADS)

    async def first() -> None:
        async with session(root, *flags, pidfile=pidfile) as s:
            for phase in order[:2]:
                is_error, out = await call(
                    s, "write_checkpoint", {"ticket_id": T, "run_id": R, "phase": phase, "payload": PAYLOADS[phase]}
                )
                assert not is_error, out
            for event, step in (("start", None), ("step", 1)):  # half-way into phase 3
                args = {"ticket_id": T, "run_id": R, "phase": order[2], "event": event}
                is_error, out = await call(s, "record_progress", args | ({"step": step} if step else {}))
                assert not is_error, out
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
            with pytest.raises(Exception):  # noqa: B017  # the server is gone: any transport error
                with anyio.fail_after(30):
                    await s.call_tool("run_status", {"ticket_id": T, "run_id": R})

    async def second() -> None:
        async with session(root, *flags) as s:
            status = (await call(s, "run_status", {"ticket_id": T, "run_id": R}))[1]
            assert status["completed_phases"] == order[:2]
            nxt = status["next_phase"]
            assert nxt == "create_pr"
            flight = status["phases"][2]["in_flight"]
            assert status["phases"][2]["state"] == "in_progress"
            assert flight["last_step"] == 1  # where the killed session got to
            plan = (await call(s, "explain", {"ticket_id": T, "run_id": R}))[1]
            assert plan["next_phase"] == nxt
            assert (await call(s, "can_skip_to", {"ticket_id": T, "run_id": R, "phase": nxt}))[1]["allowed"] is True
            for phase in order[order.index(nxt) :]:
                is_error, out = await call(
                    s, "write_checkpoint", {"ticket_id": T, "run_id": R, "phase": phase, "payload": PAYLOADS[phase]}
                )
                assert not is_error, out
            done = (await call(s, "run_status", {"ticket_id": T, "run_id": R}))[1]
            assert done["done"] is True
            assert done["next_phase"] is None
            verified = (await call(s, "verify", {"ticket_id": T}))[1]
            assert verified["ok"] is True
            assert verified["checked"] == len(order) + 2  # the checkpoints and the two progress events

    try:
        anyio.run(first)
    except AssertionError:
        raise
    except BaseException:  # the client's task group may report the dead pipe on the way out
        if not pidfile.exists():
            raise
    anyio.run(second)
    assert cli_json(root, "list", *flags, "--ticket-id", T)["count"] == len(order)


def test_an_approval_without_via_is_stored_and_hashed_as_before() -> None:
    from datetime import UTC, datetime

    from phaselog.model.entries import Approval

    base = {
        "ticket_id": "VID-7",
        "run_id": "dd692987-7db8-59ac-a1cf-86f0650dadb2",
        "phase": "proposal",
        "phase_ordinal": 2,
        "attempt_number": 1,
        "checkpoint_hash": "a" * 64,
        "decision": "approve",
        "by": "ana",
        "timestamp": datetime(2026, 12, 1, tzinfo=UTC),
        "seq": 1,
    }
    old = Approval(**base)
    doc = old.to_json()
    assert "via" not in doc  # an old record's bytes, hence its content hash, are unchanged
    assert Approval.from_json(doc) == old
    new = Approval(**base, via="mcp")
    assert new.to_json()["via"] == "mcp"
    assert Approval.from_json(new.to_json()) == new
    assert new.content_hash != old.content_hash  # the origin is part of what verify checks


def test_read_logs_answers_as_phaselog_logs_does(tmp_path: Path) -> None:
    root = tmp_path / "store"
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: talk\nversion: '1'\nphases:\n"
        "  - name: say\n    run: 'echo to stdout; echo to stderr >&2'\n"
        "  - name: fail\n    run: 'echo why it failed; exit 3'\n"
    )
    ran = run_cli(root, "run", "--ticket-id", T, "--run-id", R, "--pipeline-file", str(job), "--quiet", env=_env(root))
    assert ran.rc != 0  # the second phase fails: its output is what an agent reads to learn why

    async def main() -> None:
        async with session(root) as s:
            for phase in ("say", "fail"):
                is_error, got = await call(s, "read_logs", {"ticket_id": T, "run_id": R, "phase": phase})
                assert not is_error, got
                assert got == cli_json(root, "logs", "--ticket-id", T, "--run-id", R, "--phase", phase, "--json")
            said = (await call(s, "read_logs", {"ticket_id": T, "run_id": R, "phase": "say"}))[1]
            assert said["complete"]
            assert said["text"].splitlines() == ["to stdout", "to stderr"]
            failed = (await call(s, "read_logs", {"ticket_id": T, "run_id": R, "phase": "fail"}))[1]
            assert "why it failed" in failed["text"]
            is_error, err = await call(s, "read_logs", {"ticket_id": T, "run_id": R, "phase": "say", "attempt": 9})
            assert is_error
            assert err["error_code"] == "not_found"
            is_error, err = await call(s, "read_logs", {"ticket_id": T, "run_id": R, "phase": "nope"})
            assert is_error
            assert err["field"] == "phase"

    anyio.run(main)
