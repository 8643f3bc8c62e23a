"""The queue of runs on PostgreSQL: submit, claim (SKIP LOCKED), fencing, recovery, cancel, retry.

Library level, on a real PostgreSQL (a schema per test). Worker processes are in test_workers.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from phaselog.model.errors import Conflict, NotFound, QueueRefused, UsageError
from phaselog.model.ids import normalize_run_id
from phaselog.runner import queue
from phaselog.stores import open_store
from phaselog.stores.sql.queue import claim as flow
from phaselog.stores.sql.queue.rows import SqlQueue
from queue_support import cli, manifest, queue_states


@pytest.fixture
def store(pg_schema_url: str) -> Any:
    s = open_store(pg_schema_url, migrate=True)
    yield s
    s.close()


@pytest.fixture
def job(tmp_path: Path) -> Path:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(manifest("job", [{"name": "one", "run": "true"}, {"name": "two", "run": "true"}])))
    return path


def claim(store: Any, worker: str = "w1", **kw: Any) -> flow.Claim | None:
    q = SqlQueue(store)
    q.register(worker, "default", "elsewhere", 1, None, 30.0)
    return flow.claim(q, worker, queue="default", **kw)


def test_files_and_sqlite_stores_refuse_the_queue_with_a_clear_message(tmp_path: Path) -> None:
    for url in (str(tmp_path / "files"), f"sqlite:///{tmp_path / 'x.db'}"):
        for args in (
            ("submit", "--pipeline", "job", "--ticket-id", "T-1"),
            ("worker", "--burst"),
            ("queue", "list"),
        ):
            done = cli(*args, "--store", url)
            assert done.returncode == 2, (args, done.stdout, done.stderr)
            err = json.loads(done.stdout)
            assert err["error_code"] == "queue_refused"
            assert "phaselog run" in err["error"]
            assert "PostgreSQL" in err["error"]
            assert "Traceback" not in done.stderr
    assert not (tmp_path / "files").exists()
    with pytest.raises(QueueRefused):
        queue.submit(open_store(str(tmp_path / "f2")), ticket_id="T", pipeline="job")


def test_submit_is_idempotent_by_run_id_and_dedup_key_and_orders_by_priority(store: Any, job: Path) -> None:
    first = queue.submit(store, ticket_id="T-1", pipeline_file=job, run_id="r1")
    assert first["created"]
    assert first["state"] == "queued"
    assert first["position"] == 1
    assert first["manifest_hash"]
    assert first["pipeline"] == "job"
    again = queue.submit(store, ticket_id="T-1", pipeline_file=job, run_id="r1")
    assert not again["created"]
    assert again["run_id"] == first["run_id"] == normalize_run_id("r1")
    with pytest.raises(Conflict, match="already in the queue with pipeline job"):
        queue.submit(store, ticket_id="T-1", pipeline="other", run_id="r1")
    urgent = queue.submit(store, ticket_id="T-2", pipeline="job", priority=5)
    assert urgent["position"] == 1
    later = queue.submit(store, ticket_id="T-3", pipeline="job", dedup_key="nightly")
    assert later["position"] == 3
    same = queue.submit(store, ticket_id="T-4", pipeline="job", dedup_key="nightly")
    assert not same["created"]
    assert same["run_id"] == later["run_id"]
    listed = queue.list_view(store)
    assert [r["ticket_id"] for r in listed["runs"]] == ["T-1", "T-2", "T-3"]
    assert listed["counts"]["queued"] == 3
    assert set(listed["runs"][0]) >= {"ticket_id", "run_id", "state", "worker", "phase", "since"}
    # Claim order: priority first, then age.
    got = [claim(store, f"w{i}").entry.ticket_id for i in range(3)]  # type: ignore[union-attr]
    assert got == ["T-2", "T-1", "T-3"]
    assert claim(store, "w9") is None
    # A worker claiming again gets back its own running run (a claim whose answer it lost).
    assert claim(store, "w1").entry.ticket_id == "T-1"  # type: ignore[union-attr]


def test_bad_submissions_name_the_field(store: Any, job: Path) -> None:
    cases = [
        ({"pipeline": None}, "pipeline"),
        ({"pipeline": "job", "pipeline_file": job}, "pipeline"),
        ({"pipeline": "../etc"}, "pipeline"),
        ({"pipeline": "job", "not_before": "tomorrow"}, "not_before"),
        ({"pipeline": "job", "not_before": "2026-12-01T06:00:00"}, "not_before"),
        ({"pipeline": "job", "priority": 10**9}, "priority"),
        ({"pipeline": "job", "dedup_key": ""}, "dedup_key"),
        ({"pipeline": "job", "queue": "a b"}, "queue"),
    ]
    for kw, field in cases:
        with pytest.raises(UsageError) as info:
            queue.submit(store, ticket_id="T-1", **kw)
        assert info.value.context.get("field") == field, (kw, info.value)
    assert queue.list_view(store)["runs"] == []


def test_not_before_holds_a_run_back(store: Any) -> None:
    queue.submit(store, ticket_id="T-1", pipeline="job", not_before="1h")
    queue.submit(store, ticket_id="T-2", pipeline="job", not_before="2000-01-01T00:00:00Z")
    got = claim(store)
    assert got is not None
    assert got.entry.ticket_id == "T-2"
    assert claim(store, "w2") is None


def test_concurrent_claims_take_each_run_exactly_once(store: Any, pg_schema_url: str) -> None:
    for i in range(60):
        queue.submit(store, ticket_id=f"T-{i}", pipeline="job")
    taken: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        s = open_store(pg_schema_url)
        try:
            q = SqlQueue(s)
            q.register(f"w{n}", "default", "elsewhere", n, None, 30.0)
            while (c := flow.claim(q, f"w{n}", queue="default")) is not None:
                taken.setdefault(f"w{n}", []).append(c.entry.run_id)
                assert flow.finish(q, c, "done")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            s.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    all_taken = [r for runs in taken.values() for r in runs]
    assert len(all_taken) == len(set(all_taken)) == 60
    assert set(queue_states(pg_schema_url).values()) == {"done"}


def test_a_recovered_row_fences_its_old_worker(store: Any) -> None:
    queue.submit(store, ticket_id="T-1", pipeline="job")
    first = claim(store, "w1")
    assert first is not None
    q = SqlQueue(store)
    assert flow.mark_phase(q, first, "one") is False
    # w1's heartbeat row expires (it is presumed dead): w2 recovers the run.
    store.session.write(
        lambda tx: tx.execute("UPDATE phaselog_queue_workers SET expires_at = 0 WHERE worker_id = 'w1'")
    )
    second = claim(store, "w2")
    assert second is not None
    assert second.entry.run_id == first.entry.run_id
    assert second.token == first.token + 1
    assert second.entry.recoveries == 1
    assert "w1" in (second.recovered_from or "")
    assert "heartbeat expired" in (second.recovered_from or "")
    # w1 cannot touch the row any more.
    assert flow.mark_phase(q, first, "two") is None
    assert flow.finish(q, first, "done") is False
    assert q.get("T-1", first.entry.run_id).state == "running"
    assert flow.finish(q, second, "done") is True
    assert q.get("T-1", first.entry.run_id).state == "done"


def test_a_run_whose_workers_keep_dying_goes_dead_with_the_reason(store: Any) -> None:
    queue.submit(store, ticket_id="T-1", pipeline="job")
    queue.submit(store, ticket_id="T-2", pipeline="job")
    q = SqlQueue(store)
    first = claim(store, "w0", max_recoveries=1)
    assert first is not None
    assert first.entry.ticket_id == "T-1"
    # w0 vanishes without a trace (its heartbeat row is gone): recovery 1 is allowed ...
    store.session.write(lambda tx: tx.execute("DELETE FROM phaselog_queue_workers"))
    again = claim(store, "w1", max_recoveries=1)
    assert again is not None
    assert again.entry.ticket_id == "T-1"
    assert again.entry.recoveries == 1
    # ... w1 dies too (a dead process on this host): recovery 2 exceeds the limit.
    nxt = flow.claim(q, "w2", queue="default", dead_local=["w1"], max_recoveries=1)
    assert nxt is not None
    assert nxt.entry.ticket_id == "T-2"
    dead = q.get("T-1", first.entry.run_id)
    assert dead.state == "dead"
    assert dead.recoveries == 2
    assert dead.worker is None
    assert "died 2 times" in (dead.reason or "")
    assert "--max-recoveries 1" in (dead.reason or "")
    # retry starts it over.
    again_view = queue.retry(store, "T-1", first.entry.run_id)
    assert again_view["state"] == "queued"
    assert again_view["recoveries"] == 0
    assert again_view["reason"] is None


def test_cancel_and_retry_follow_the_states(store: Any) -> None:
    a = queue.submit(store, ticket_id="T-1", pipeline="job")
    b = queue.submit(store, ticket_id="T-2", pipeline="job")
    out = queue.cancel(store, "T-1", a["run_id"], by="ana")
    assert out["state"] == "cancelled"
    assert out["stops"] == "now"
    assert out["reason"] == "cancelled by ana"
    with pytest.raises(Conflict, match="cancelled already"):
        queue.cancel(store, "T-1", a["run_id"])
    running = claim(store)
    assert running is not None
    assert running.entry.ticket_id == "T-2"
    asked = queue.cancel(store, "T-2", b["run_id"])
    assert asked["state"] == "running"
    assert asked["stops"] == "between phases"
    assert asked["cancel_requested"]
    assert flow.mark_phase(SqlQueue(store), running, "two") is True
    with pytest.raises(Conflict, match="only dead or cancelled"):
        queue.retry(store, "T-2", b["run_id"])
    assert queue.retry(store, "T-1", a["run_id"])["state"] == "queued"
    with pytest.raises(NotFound):
        queue.show_view(store, "T-9", "nope")


def test_cli_submit_list_show_cancel_retry(pg_schema_url: str, job: Path) -> None:
    url = ("--store", pg_schema_url)
    sub = json.loads(cli("submit", "--pipeline-file", str(job), "--ticket-id", "T-1", "--run-id", "r1", *url).stdout)
    assert sub["success"]
    assert sub["position"] == 1
    assert sub["created"]
    listed = json.loads(cli("queue", "list", *url).stdout)
    assert [(r["ticket_id"], r["state"]) for r in listed["runs"]] == [("T-1", "queued")]
    shown = json.loads(cli("queue", "show", "--ticket-id", "T-1", "--run-id", "r1", *url).stdout)
    assert shown["run_id"] == sub["run_id"]
    assert shown["lease_holder"] is None
    table = cli("queue", "list", "--format", "table", *url)
    assert table.returncode == 0
    assert "T-1" in table.stdout
    assert "queued" in table.stdout
    cancelled = json.loads(cli("queue", "cancel", "--ticket-id", "T-1", "--run-id", "r1", *url).stdout)
    assert cancelled["state"] == "cancelled"
    again = cli("queue", "cancel", "--ticket-id", "T-1", "--run-id", "r1", *url)
    assert again.returncode == 1
    assert json.loads(again.stdout)["error_code"] == "conflict"
    assert json.loads(cli("queue", "retry", "--ticket-id", "T-1", "--run-id", "r1", *url).stdout)["state"] == "queued"
    # Tables for people, every command.
    key = ("--ticket-id", "T-1", "--run-id", "r1", "--format", "table", *url)
    shown_t = cli("queue", "show", *key)
    assert shown_t.returncode == 0
    assert "position" in shown_t.stdout
    assert sub["run_id"] in shown_t.stdout
    cancel_t = cli("queue", "cancel", *key)
    assert cancel_t.returncode == 0
    assert "cancelled" in cancel_t.stdout
    retry_t = cli("queue", "retry", *key)
    assert retry_t.returncode == 0
    assert "queued" in retry_t.stdout
    sub_t = cli("submit", "--pipeline", "job", "--ticket-id", "T-2", "--format", "table", *url)
    assert sub_t.returncode == 0
    assert "T-2" in sub_t.stdout
    assert "created" in sub_t.stdout
    bad = cli("queue", "list", "--state", "sleeping", *url)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
