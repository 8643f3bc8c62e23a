"""PhaselogSaver beyond the conformance suite: ids, serialisation, retention that keeps a thread
resumable, several writers, damage, and the phaselog commands on LangGraph threads."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command

import phaselog
from _langgraph import build, phaselog_url
from phaselog.integrations.langgraph import PhaselogSaver, ns_run_id
from phaselog.model.errors import Corrupt, InvalidIdentifier, UsageError
from phaselog.model.ids import normalize_run_id
from phaselog.model.records import SEED_FIELDS

T = "thread-a"


def cfg(thread: str = T, checkpoint_id: str | None = None, ns: str = "") -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint(values: dict[str, Any] | None = None, ts: str | None = None) -> dict[str, Any]:
    values = values if values is not None else {"x": 1}
    return {
        "v": 4,
        "id": str(uuid6(clock_seq=-1)),
        "ts": ts or dt.datetime.now(dt.UTC).isoformat(),
        "channel_values": values,
        "channel_versions": dict.fromkeys(values, 1),
        "versions_seen": {},
        "updated_channels": None,
    }


def put_chain(saver: Any, n: int, thread: str = T, ns: str = "", **md: Any) -> list[str]:
    ids: list[str] = []
    for i in range(n):
        cp = checkpoint({"i": i})
        saver.put(cfg(thread, ids[-1] if ids else None, ns), cp, {"source": "loop", "step": i, **md}, {})
        ids.append(cp["id"])
    return ids


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def test_importing_phaselog_never_imports_langgraph() -> None:
    code = (
        "import sys, phaselog, phaselog.ledger.facade, phaselog.cli, phaselog.integrations; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('langgraph', 'langchain_core')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_missing_thread_id_is_refused_naming_the_field(url: str) -> None:
    """Every thread id LangGraph accepts is accepted (tests/test_langgraph_truth.py); none is refused."""
    with PhaselogSaver(url) as saver:
        with pytest.raises(InvalidIdentifier) as err:
            saver.put({"configurable": {"checkpoint_ns": ""}}, checkpoint(), {"source": "input", "step": -1}, {})
        assert err.value.context["field"] == "thread_id"
        assert saver.store.tickets() == []  # nothing was written


def test_namespaces_are_runs_named_ns_colon(tmp_path: Path) -> None:
    store = str(tmp_path / "files")
    with PhaselogSaver(store) as saver:
        put_chain(saver, 2)
        put_chain(saver, 1, ns="child:abc")
        assert sorted(saver.store.runs(T)) == sorted([ns_run_id(""), ns_run_id("child:abc")])
    assert ns_run_id("") == normalize_run_id("ns:")
    done = cli("verify", "--ticket-id", T, "--run-id", "ns:", "--store", store)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["checked"] >= 2


def test_every_record_validates_and_the_files_store_keeps_seed_files(tmp_path: Path) -> None:
    root = tmp_path / "files"
    with PhaselogSaver(str(root)) as saver:
        ids = put_chain(saver, 3)
        saver.put_writes(cfg(T, ids[-1]), [("x", {"y": [1, 2]})], "task-1")
    ledger = phaselog.open(str(root))
    for attempt in (1, 2, 3):
        _stored, report = ledger.validate(T, "ns:", "checkpoint", attempt)
        assert report.is_valid, [i.text() for i in report.errors]
    import yaml

    files = sorted((root / "checkpoints" / T / ns_run_id("")).glob("phase_1_checkpoint_a*.yaml"))
    assert len(files) == 3
    for f in files:
        assert tuple(yaml.safe_load(f.read_text())) == SEED_FIELDS


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**62), 2**62)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.datetimes(timezones=st.just(dt.UTC))
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        | st.frozensets(st.integers(-(2**62), 2**62), max_size=4)
    ),
    max_leaves=12,
)


@given(channels=st.dictionaries(st.text(min_size=1, max_size=10), values, min_size=1, max_size=4))
def test_every_value_round_trips_as_with_langgraphs_own_saver(tmp_path_factory: Any, channels: dict[str, Any]) -> None:
    db = tmp_path_factory.mktemp("rt") / "x.db"
    cp = checkpoint(channels)
    md = {"source": "input", "step": -1, "note": "ü"}
    reference = InMemorySaver()
    with PhaselogSaver(f"sqlite:///{db}") as saver:
        for s in (saver, reference):
            s.put(cfg(), cp, md, dict(cp["channel_versions"]))
            s.put_writes(cfg(T, cp["id"]), [("w", channels)], "task")
        got, want = saver.get_tuple(cfg()), reference.get_tuple(cfg())
    assert got is not None
    assert want is not None
    # Equal to what LangGraph's own saver gives back (its serializer, not the saver, decides that a
    # top-level tuple comes back as a list).
    assert got.checkpoint["channel_values"] == want.checkpoint["channel_values"]
    assert got.pending_writes == want.pending_writes
    assert got.metadata == want.metadata


def test_no_pickle_by_default_and_a_given_serde_is_used(tmp_path: Path) -> None:
    class Tagged(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            kind, data = super().dumps_typed(obj)
            return f"tagged-{kind}", data

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            return super().loads_typed((data[0].removeprefix("tagged-"), data[1]))

    value = {"when": dt.datetime(2026, 1, 2, tzinfo=dt.UTC), "amount": Decimal("1.50"), "tags": {"a", "b"}}
    for name, serde, prefix in (("plain", None, ""), ("tagged", Tagged(), "tagged-")):
        with PhaselogSaver(f"sqlite:///{tmp_path / name}.db", serde=serde) as saver:
            cp = checkpoint({"v": value})
            saver.put(cfg(), cp, {"source": "input", "step": -1}, {})
            got = saver.get_tuple(cfg())
            assert got is not None
            assert got.checkpoint["channel_values"]["v"] == value
            stored = saver.store.get(T, ns_run_id(""), 1, "checkpoint", 1).record.phase_payload or {}
            kinds = [stored["checkpoint"]["type"]]
            assert stored["channels"] == ["v"]
            assert all(k.startswith(prefix) for k in kinds)
            assert not any("pickle" in k for k in kinds)


def test_a_checkpoint_put_again_is_not_duplicated_and_a_changed_one_supersedes(url: str) -> None:
    with PhaselogSaver(url) as saver:
        cp = checkpoint({"x": 1})
        md = {"source": "loop", "step": 0}
        saver.put(cfg(), cp, md, {})
        saver.put(cfg(), cp, md, {})  # a retried call: nothing new
        assert [r.attempt_number for r in saver.store.attempts(T, ns_run_id(""))] == [1]
        changed = {**cp, "channel_values": {"x": 2}}
        saver.put(cfg(), changed, md, {})
        assert [r.attempt_number for r in saver.store.attempts(T, ns_run_id(""))] == [1, 2]  # nothing overwritten
        got = saver.get_tuple(cfg(T, cp["id"]))
        assert got is not None
        assert got.checkpoint["channel_values"] == {"x": 2}
        assert len(list(saver.list(cfg()))) == 1
        assert phaselog.Ledger(saver.store).verify(T).ok


def test_two_savers_on_one_thread_keep_one_chain(url: str) -> None:
    with PhaselogSaver(url) as a, PhaselogSaver(url) as b:
        ids: list[str] = []
        for i in range(6):
            s = (a, b)[i % 2]  # each saver's cached "latest" is stale every other call
            cp = checkpoint({"i": i})
            s.put(cfg(T, ids[-1] if ids else None), cp, {"source": "loop", "step": i}, {})
            ids.append(cp["id"])
        assert [t.checkpoint["id"] for t in a.list(cfg())] == ids[::-1]
        refs = a.store.attempts(T, ns_run_id(""))
        assert [r.attempt_number for r in refs] == [1, 2, 3, 4, 5, 6]
        assert phaselog.Ledger(a.store).verify(T).ok


@pytest.mark.all_stores
def test_concurrent_put_writes_keep_every_write_and_a_contiguous_chain(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with PhaselogSaver(phaselog_url(backend, tmp_path, request)) as saver:
        (cid,) = put_chain(saver, 1)

        def task(n: int) -> None:
            saver.put_writes(cfg(T, cid), [("ch", n), ("other", str(n))], f"task-{n:02d}", f"~path{n % 3}")

        workers = [threading.Thread(target=task, args=(n,)) for n in range(12)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        got = saver.get_tuple(cfg())
        assert got is not None
        assert got.pending_writes is not None
        assert sorted(w[2] for w in got.pending_writes if w[1] == "ch") == list(range(12))
        order = [(f"~path{int(t.split('-')[1]) % 3}", t) for t, _c, _v in got.pending_writes]
        assert order == sorted(order)  # writes_sort_key: task path, then task id, then idx
        assert phaselog.Ledger(saver.store).verify(T).ok


def test_writes_that_arrive_before_their_checkpoint_are_kept(url: str) -> None:
    with PhaselogSaver(url) as saver:
        cp = checkpoint()
        saver.put_writes(cfg(T, cp["id"]), [("early", 1)], "task")  # LangGraph's async durability
        saver.put(cfg(), cp, {"source": "loop", "step": 0}, {})
        got = saver.get_tuple(cfg())
        assert got is not None
        assert got.pending_writes == [("task", "early", 1)]


def test_an_edited_pending_write_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "files"
    with PhaselogSaver(str(root)) as saver:
        (cid,) = put_chain(saver, 1)
        saver.put_writes(cfg(T, cid), [("ch", "approve")], "task")
        (event,) = (root / "checkpoints" / T / ns_run_id("") / ".progress").glob("*.json")
        doc = json.loads(event.read_text())
        doc["output"] = doc["output"].replace('"task"', '"evil"')
        event.write_text(json.dumps(doc))
        with pytest.raises(Corrupt):
            saver.get_tuple(cfg())
    assert not phaselog.open(str(root)).verify(T).ok


def edit_attempt(url: str, attempt: int, old: str, new: str) -> None:
    """Edit one stored checkpoint of thread ``T`` by hand (files: its seed file; SQLite: its row)."""
    run = ns_run_id("")
    if url.startswith("sqlite:///"):
        import sqlite3

        con = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
        where = "WHERE ticket_id = ? AND run_id = ? AND attempt = ?"
        ((body,),) = con.execute(f"SELECT body FROM phaselog_checkpoints {where}", (T, run, attempt)).fetchall()
        assert old in body
        con.execute(f"UPDATE phaselog_checkpoints SET body = ? {where}", (body.replace(old, new), T, run, attempt))
        con.close()
        return
    (path,) = (Path(url) / "checkpoints" / T / run).glob(f"phase_*_a{attempt}.yaml")
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_an_edited_older_checkpoint_is_corrupt_not_missing(kind: str, tmp_path: Path) -> None:
    # Issue 20: checkpoint 2 of 3 edited by hand; a fresh saver's get_tuple by its id returned None,
    # which LangGraph takes for "no such checkpoint" (D118).
    url = str(tmp_path / "store") if kind == "files" else f"sqlite:///{tmp_path / 'ledger.db'}"
    with PhaselogSaver(url) as saver:
        ids = put_chain(saver, 3)
    old, new = ("step: 1", "step: 7") if kind == "files" else ('"step":1', '"step":7')
    edit_attempt(url, 2, old, new)
    with PhaselogSaver(url) as fresh:
        with pytest.raises(Corrupt) as info:
            fresh.get_tuple(cfg(T, ids[1]))
        assert info.value.context["path"].endswith("_a2.yaml")
        # The others still read, and an id that is nowhere is still missing once the damage is gone.
        assert [fresh.get_tuple(cfg(T, i)).checkpoint["id"] for i in (ids[0], ids[2])] == [ids[0], ids[2]]  # type: ignore[union-attr]
        assert fresh.get_tuple(cfg()).checkpoint["id"] == ids[2]  # type: ignore[union-attr]
    with PhaselogSaver(url) as warm:  # a saver that indexed the thread before asking answers the same
        assert warm.get_tuple(cfg(T, ids[2])) is not None
        with pytest.raises(Corrupt):
            warm.get_tuple(cfg(T, ids[1]))
    from phaselog.ledger.doctor import doctor

    led = phaselog.open(url)
    assert len(doctor(led, T, quarantine=True).moved) >= 1
    led.close()
    with PhaselogSaver(url) as after:
        assert after.get_tuple(cfg(T, ids[1])) is None  # set aside: now it is missing
        assert after.get_tuple(cfg(T, str(uuid6(clock_seq=-1)))) is None


@pytest.mark.all_stores
def test_prune_keep_latest_leaves_an_interrupted_graph_resumable(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    config: Any = {"configurable": {"thread_id": T}}
    reference = build(InMemorySaver())
    reference.invoke({"topic": "otters", "log": []}, config)
    expected = reference.invoke(Command(resume="yes"), config)
    url = phaselog_url(backend, tmp_path, request)
    with PhaselogSaver(url) as saver:
        graph = build(saver)
        graph.invoke({"topic": "otters", "log": []}, config)
        before = len(list(graph.get_state_history(config)))
        saver.prune([T], strategy="keep_latest")
        assert len(list(graph.get_state_history(config))) == 1 < before
        assert phaselog.Ledger(saver.store).verify(T).ok  # the prune note vouches for the removed links
        assert graph.invoke(Command(resume="yes"), config) == expected


def test_keep_latest_keeps_the_ancestors_a_delta_channel_is_rebuilt_from(url: str) -> None:
    with PhaselogSaver(url) as saver:
        ids: list[str] = []
        plan = [{"d": "snapshot"}, {"x": 1}, {"d": "snapshot 2"}, {"x": 2}, {"x": 3}]
        for i, values in enumerate(plan):
            md: dict[str, Any] = {"source": "loop", "step": i}
            if i == len(plan) - 1:
                md["counters_since_delta_snapshot"] = {"d": [2, 2]}  # d last snapshotted two steps back
            cp = checkpoint(values)
            saver.put(cfg(T, ids[-1] if ids else None), cp, md, {})
            ids.append(cp["id"])
        saver.prune([T])
        assert [t.checkpoint["id"] for t in saver.list(cfg())] == ids[:1:-1]  # 5, 4 and 3 (the snapshot)
    with pytest.raises(UsageError):
        PhaselogSaver(url).prune([T], strategy="keep_some")


def test_phaselog_prune_older_than_works_on_langgraph_threads(tmp_path: Path) -> None:
    store = str(tmp_path / "files")
    old = (dt.datetime.now(dt.UTC) - dt.timedelta(days=90)).isoformat()
    with PhaselogSaver(store) as saver:
        ids: list[str] = []
        for i in range(4):  # an active thread: three old checkpoints and a new one
            cp = checkpoint({"i": i}, ts=old if i < 3 else None)
            saver.put(cfg("active", ids[-1] if ids else None), cp, {"source": "loop", "step": i}, {})
            ids.append(cp["id"])
        for i in range(2):  # an idle thread: nothing newer than 90 days
            saver.put(cfg("idle"), checkpoint({"i": i}, ts=old), {"source": "loop", "step": i}, {})
    done = cli("prune", "--older-than", "30d", "--store", store)
    assert done.returncode == 0, done.stdout + done.stderr
    with PhaselogSaver(store) as saver:
        assert [t.checkpoint["id"] for t in saver.list(cfg("active"))] == [ids[-1]]
        assert saver.get_tuple(cfg("idle")) is None  # idle longer than the cutoff: gone whole
    for thread in ("active", "idle"):
        assert cli("verify", "--ticket-id", thread, "--store", store).returncode == 0


def test_phaselog_copy_carries_threads_to_another_store(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "files"), f"sqlite:///{tmp_path / 'copy.db'}"
    with PhaselogSaver(src) as saver:
        ids = put_chain(saver, 3)
        saver.put_writes(cfg(T, ids[-1]), [("ch", {"k": uuid.UUID(int=7)})], "task")
        want = [(t.checkpoint, t.metadata, t.pending_writes) for t in saver.list(cfg())]
    done = cli("copy", "--from", src, "--to", dst)
    assert done.returncode == 0, done.stdout + done.stderr
    with PhaselogSaver(dst) as saver:
        assert [(t.checkpoint, t.metadata, t.pending_writes) for t in saver.list(cfg())] == want


@pytest.mark.all_stores
def test_delete_for_runs_of_the_newest_checkpoint_keeps_verify_passing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with PhaselogSaver(phaselog_url(backend, tmp_path, request)) as saver:
        kept = put_chain(saver, 2, run_id="keep")
        cid = kept[-1]
        saver.put_writes(cfg(T, cid), [("ch", "pending")], "task")
        put_chain_from(saver, cid, 2, run_id="rollback")
        saver.delete_for_runs(["rollback"])
        got = saver.get_tuple(cfg())
        assert got is not None
        assert got.checkpoint["id"] == cid  # the thread resumes from the newest survivor, writes and all
        assert got.pending_writes == [("task", "ch", "pending")]
        assert [t.checkpoint["id"] for t in saver.list(cfg())] == kept[::-1]
        assert phaselog.Ledger(saver.store).verify(T).ok
        put_chain_from(saver, cid, 1, run_id="next")
        assert phaselog.Ledger(saver.store).verify(T).ok


def put_chain_from(saver: Any, parent: str, n: int, **md: Any) -> list[str]:
    ids = [parent]
    for i in range(n):
        cp = checkpoint({"i": 100 + i})
        saver.put(cfg(T, ids[-1]), cp, {"source": "loop", "step": 100 + i, **md}, {})
        ids.append(cp["id"])
    return ids[1:]
