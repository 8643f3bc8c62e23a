"""What phaselog says about LangGraph threads is true (issue 19): a thread waiting at
``interrupt()`` is ``awaiting_input`` everywhere, every thread id LangGraph accepts is accepted,
the saver's current serializer is the one used, and the documented commands work as written."""

from __future__ import annotations

import base64
import datetime as dt
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from phaselog.integrations.langgraph import PhaselogSaver, ns_run_id, thread_ticket

ROOT = Path(__file__).resolve().parent.parent
SRC = str(ROOT / "src")


def cfg(thread: Any, checkpoint_id: str | None = None, ns: str = "") -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "v": 4,
        "id": str(uuid6(clock_seq=-1)),
        "ts": dt.datetime.now(dt.UTC).isoformat(),
        "channel_values": values,
        "channel_versions": dict.fromkeys(values, 1),
        "versions_seen": {},
        "updated_channels": None,
    }


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


# -- the saver's current serializer ------------------------------------------------------------
class Reversed(JsonPlusSerializer):
    """A serializer whose bytes a plain JsonPlusSerializer cannot read (as an encrypted one)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = super().dumps_typed(obj)
        return f"reversed+{kind}", data[::-1]

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, raw = data
        if not kind.startswith("reversed+"):
            raise ValueError(f"not reversed: {kind}")
        return super().loads_typed((kind.removeprefix("reversed+"), raw[::-1]))


def serializers() -> list[Any]:
    out: list[Any] = [pytest.param(Reversed, id="custom")]
    try:
        import Crypto  # noqa: F401  (pycryptodome: what LangGraph's AES serializer needs)
        from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
    except ImportError:
        return out
    out.append(pytest.param(lambda: EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16), id="encrypted"))
    return out


@pytest.mark.parametrize("make", serializers())
def test_a_serde_set_after_construction_is_used_by_writes_and_reads(tmp_path: Path, make: Any) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with PhaselogSaver(url) as saver:
        saver.serde = make()  # as LangGraph's own tests set up their encrypted saver
        cp = checkpoint({"secret": "otters"})
        saver.put(cfg("t"), cp, {"source": "input", "step": -1}, {})
        saver.put_writes(cfg("t", cp["id"]), [("secret", "badgers")], "task-1")
        payload = saver.store.get("t", ns_run_id(""), 1, "checkpoint", 1).record.phase_payload or {}
        kind = payload["checkpoint"]["type"]
        assert kind != "msgpack", "written with the serializer the saver was built with"
        assert b"otters" not in base64.b64decode(payload["checkpoint"]["data"])
        got = saver.get_tuple(cfg("t"))
        assert got is not None
        assert got.checkpoint["channel_values"] == {"secret": "otters"}
        assert got.pending_writes == [("task-1", "secret", "badgers")]
    with PhaselogSaver(url) as plain, pytest.raises(Exception):  # noqa: B017 - the serializer's own error
        plain.get_tuple(cfg("t"))


# -- the documented commands -------------------------------------------------------------------
def test_the_example_writes_where_it_says_from_any_directory(tmp_path: Path) -> None:
    """Run with no argument in a fresh directory, the example writes ./.demo/langgraph.db and
    the commands it prints work from there as printed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langgraph_interrupt.py")],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / ".demo" / "langgraph.db").is_file(), "the example's default store is ./.demo/langgraph.db"
    printed = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("phaselog ")]
    assert len(printed) == 3
    for line in printed:
        run = subprocess.run(
            [sys.executable, "-m", *shlex.split(line)],
            cwd=tmp_path,
            env=env(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0, (line, run.stdout, run.stderr)


def test_the_docs_commands_work_as_written_from_the_checkout(tmp_path: Path) -> None:
    """docs/langgraph.md's console blocks, each run line by line in a fresh directory laid out as
    the checkout (examples/ beside it): every command exits 0 and the store is where its URL says."""
    text = (ROOT / "docs" / "langgraph.md").read_text("utf-8")
    blocks = re.findall(r"```console\n(\$ python examples/.*?)```", text, re.S)
    assert len(blocks) == 2
    outputs = []
    for n, block in enumerate(blocks):
        cwd = tmp_path / f"checkout{n}"
        cwd.mkdir()
        (cwd / "examples").symlink_to(ROOT / "examples")
        stores = set()
        for raw in block.splitlines():
            line = raw.removeprefix("$ ").split("  #")[0].strip()
            args = shlex.split(line)
            stores.update(a for a in args if a.startswith("sqlite:"))
            argv = [sys.executable, *args[1:]] if args[0] == "python" else [sys.executable, "-m", *args]
            run = subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True, timeout=120, check=False)
            assert run.returncode == 0, (line, run.stdout, run.stderr)
            outputs.append(run.stdout)
        assert len(stores) == 1
        (store,) = stores
        assert store.startswith("sqlite://./")
        assert (cwd / store.removeprefix("sqlite://./")).is_file()
    assert "awaiting_input" in outputs[-1]  # the paused thread's status


# -- thread ids ----------------------------------------------------------------------------------
SEEN_REFUSED = ["user:42", "alice@example.com", "a b", "tenant/123", "x" * 65, "é", "../escape", "", ".hidden"]


def contained(saver: PhaselogSaver, url: str) -> None:
    """Every ticket key is a safe path segment; on the files store nothing lies outside its root."""
    for key in saver.store.tickets():
        assert thread_ticket(key) == key or re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}", key)
    if not url.startswith(("sqlite:", "postgresql:")):
        for p in Path(url).rglob("*"):
            assert p.resolve().is_relative_to(Path(url).resolve())


@pytest.mark.parametrize("thread", SEEN_REFUSED)
def test_thread_ids_langgraphs_savers_accept_are_accepted(tmp_path: Path, thread: str) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    reference = InMemorySaver()
    cp = checkpoint({"x": 1})
    reference.put(cfg(thread), cp, {"source": "input", "step": -1}, {})
    with PhaselogSaver(str(tmp_path / "store")) as saver:
        saver.put(cfg(thread), cp, {"source": "input", "step": -1}, {})
        saver.put_writes(cfg(thread, cp["id"]), [("x", 2)], "task")
        got = saver.get_tuple(cfg(thread))
        assert got is not None
        assert got.config["configurable"]["thread_id"] == thread
        assert got.pending_writes == [("task", "x", 2)]
        listed = list(saver.list(None))  # every thread, shown as given
        assert [t.config["configurable"]["thread_id"] for t in listed] == [thread]
        key = thread_ticket(thread)
        assert saver.store.tickets() == [key]
        if thread != key:
            assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]*\.[0-9a-f]{16}|thread\.[0-9a-f]{16}", key)
        contained(saver, str(tmp_path / "store"))


def test_an_id_shaped_like_a_mapped_key_gets_a_key_of_its_own() -> None:
    mapped = thread_ticket("user:42")
    assert mapped.startswith("user_42.")
    assert thread_ticket(mapped) != mapped  # no two thread ids share a ticket
    assert thread_ticket("REPORT-7") == "REPORT-7"  # a ticket id stays its own key (threads written before)
    assert thread_ticket(42) == "42"


@pytest.mark.all_stores
def test_any_string_is_a_thread_id_kept_as_given_and_contained(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from _langgraph import phaselog_url

    url = phaselog_url(backend, tmp_path, request)
    keys: dict[str, str] = {}
    with PhaselogSaver(url) as saver:

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(st.text(max_size=80) | st.sampled_from(SEEN_REFUSED))
        def check(thread: str) -> None:
            key = thread_ticket(thread)
            assert keys.setdefault(key, thread) == thread, "two thread ids share a ticket key"
            cp = checkpoint({"t": thread})
            saver.put(cfg(thread), cp, {"source": "input", "step": -1}, {})
            got = saver.get_tuple(cfg(thread))
            assert got is not None
            assert got.config["configurable"]["thread_id"] == thread
            assert got.checkpoint["id"] == cp["id"]
            assert got.checkpoint["channel_values"] == {"t": thread}

        check()
        shown = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        assert shown == set(keys.values())
        assert sorted(saver.store.tickets()) == sorted(keys)
        contained(saver, url)


# -- a thread waiting at interrupt() ---------------------------------------------------------------
QUESTION = {"question": "publish this?", "draft": "notes on otters -> draft"}


def pause(url: str, thread: str = "lg-thread-1", serde: Any = None) -> None:
    from _langgraph import build

    with PhaselogSaver(url, serde=serde) as saver:
        paused = build(saver).invoke({"topic": "otters", "log": []}, cfg(thread))
        assert paused["__interrupt__"][0].value == QUESTION


def resume(url: str, thread: str = "lg-thread-1") -> None:
    from langgraph.types import Command

    from _langgraph import build

    with PhaselogSaver(url) as saver:
        done = build(saver).invoke(Command(resume="yes"), cfg(thread))
        assert done["log"][-1] == "published"


@pytest.mark.all_stores
def test_a_thread_paused_at_interrupt_is_awaiting_input_until_resumed(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import phaselog
    from _langgraph import phaselog_url
    from phaselog.ledger.gates import approval_queue

    url = phaselog_url(backend, tmp_path, request)
    pause(url, "user:42")
    key = thread_ticket("user:42")
    with phaselog.open(url) as ledger:
        st = ledger.status(key, "ns:")
        ps = st.phase("checkpoint")
        assert (ps.state, st.summary, st.next_phase, st.done) == (
            "awaiting_input",
            "awaiting_input",
            "checkpoint",
            False,
        )
        assert ps.input_request is not None
        assert ps.input_request["value"] == QUESTION
        assert "publish this?" in (ps.reason or "")
        queue, problems = approval_queue(ledger)
        assert problems == []
        assert [(a.ticket_id, a.waiting_for, (a.input_request or {}).get("value")) for a in queue] == [
            (key, "input", QUESTION)
        ]
    resume(url, "user:42")
    with phaselog.open(url) as ledger:
        st = ledger.status(key, "ns:")
        assert (st.phase("checkpoint").state, st.summary, st.done) == ("completed", "complete", True)
        assert approval_queue(ledger)[0] == []


def test_a_question_kept_only_serialised_is_still_awaiting_input(tmp_path: Path) -> None:
    """Under another serializer (an encrypting one) the question is not copied out in plain."""
    import phaselog

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    pause(url, serde=Reversed())
    with phaselog.open(url) as ledger:
        ps = ledger.status("lg-thread-1", "ns:").phase("checkpoint")
        assert ps.state == "awaiting_input"
        assert ps.input_request is not None
        assert [q["shown"] for q in ps.input_request["questions"]] == [False]
        assert "otters" not in json_dump(ps.to_json())


def json_dump(value: Any) -> str:
    import json

    return json.dumps(value)


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args, "--store", url],
        check=False,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_command_says_awaiting_input_and_approve_says_how_to_resume(tmp_path: Path) -> None:
    import json

    url = str(tmp_path / "store")
    pause(url)
    table = cli(url, "status", "--ticket-id", "lg-thread-1", "--run-id", "ns:", "--format", "table")
    assert table.returncode == 0, table.stderr
    assert "awaiting_input" in table.stdout
    assert "done" not in table.stdout
    tickets = json.loads(cli(url, "tickets").stdout)["tickets"]
    assert [t["state"] for t in tickets] == ["awaiting_input"]
    runs = cli(url, "runs", "--ticket-id", "lg-thread-1")
    assert runs.returncode == 0, runs.stderr
    assert '"awaiting_input"' in runs.stdout
    refused = cli(
        url, "approve", "--ticket-id", "lg-thread-1", "--run-id", "ns:", "--phase", "checkpoint", "--by", "me"
    )
    assert refused.returncode != 0
    err = json.loads(refused.stdout)
    assert err["rule"] == "awaits_input"
    assert "Command(resume=" in err["error"]
    assert "Traceback" not in refused.stderr


def test_the_dashboard_lists_a_thread_waiting_for_input_with_its_question(tmp_path: Path) -> None:
    from ui_data import Http, Server

    url = str(tmp_path / "store")
    pause(url)
    srv = Server(url, env={"PYTHONPATH": env()["PYTHONPATH"]})
    try:
        status, _headers, body = Http(srv.base).get("/approvals")
        assert status == 200
        row = re.search(r'<tr [^>]*data-waiting-for="input".*?</tr>', body, re.S)
        assert row is not None, body
        assert "publish this?" in row.group(0)
        assert "waiting for input" in Http(srv.base).get("/tickets")[2]
        from test_ui_browser import CHROMIUM as chromium
        from test_ui_browser import require_chromium

        require_chromium()
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.goto(f"{srv.base}/approvals")
            row = page.locator("#queue tr[data-waiting-for=input]")
            assert row.count() == 1
            assert "publish this?" in row.inner_text()
            assert "waiting for input" in row.inner_text()
            page.goto(f"{srv.base}/tickets")
            assert "waiting for input" in page.locator("body").inner_text()
            browser.close()
    finally:
        srv.stop()
