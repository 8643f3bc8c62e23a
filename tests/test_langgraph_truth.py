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
        from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

        import Crypto  # noqa: F401  (pycryptodome: what LangGraph's AES serializer needs)
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
    with PhaselogSaver(url) as plain, pytest.raises(Exception):  # noqa: B017, PT011 - the serializer's own error
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
            [sys.executable, "-m", *shlex.split(line)], cwd=tmp_path, env=env(), capture_output=True, text=True
        )
        assert run.returncode == 0, (line, run.stdout, run.stderr)


def test_the_docs_commands_work_as_written_from_the_checkout(tmp_path: Path) -> None:
    """docs/langgraph.md's console block, run line by line in a directory laid out as the
    checkout (examples/ beside it): every command exits 0 and the store is where the URL says."""
    text = (ROOT / "docs" / "langgraph.md").read_text("utf-8")
    block = re.search(r"```console\n(\$ python examples/.*?)```", text, re.S)
    assert block is not None
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    stores = set()
    for raw in block.group(1).splitlines():
        line = raw.removeprefix("$ ").split("  #")[0].strip()
        args = shlex.split(line)
        stores.update(a for a in args if a.startswith("sqlite:"))
        argv = [sys.executable, *args[1:]] if args[0] == "python" else [sys.executable, "-m", *args]
        run = subprocess.run(argv, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, (line, run.stdout, run.stderr)
    assert stores == {"sqlite://./ledger.db"}
    assert (tmp_path / "ledger.db").is_file()


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
