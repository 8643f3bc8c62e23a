"""Logs kept with the run: real runs on every store, `phaselog logs` from other processes (issue 25)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.model.errors import UsageError
from phaselog.model.logs import DEFAULT_LOG_CAP, parse_log_cap
from phaselog.runner.logsink import LogSink
from phaselog.stores import open_store
from phaselog.stores.base import Store
from phaselog.stores.files.store import FilesStore
from queue_support import BIN, base_env, cli, cli_json, start_worker, stop, wait_for

RUN = "5f0c7d38-7d7e-4b8a-9a0c-2d4f6c1b9e01"
# Prints 10 MB (10**5 lines of 100 bytes) on stdout, deterministically.
GEN = "import sys\nw = sys.stdout.write\nfor i in range(100000):\n    w('line %07d ' % i + 'x' * 87 + '\\n')\n"
TEN_MB = b"".join(b"line %07d " % i + b"x" * 87 + b"\n" for i in range(100000))


def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "files":
        return str(tmp_path / "store")
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


def manifest(tmp_path: Path, phases: list[dict[str, Any]], name: str = "logjob") -> Path:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"name": name, "version": "1", "phases": phases}))
    return path


@pytest.mark.all_stores
def test_a_phase_printing_10_mb_keeps_the_tail_and_logs_prints_it_from_another_process(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = store_url(backend, tmp_path, request)
    (tmp_path / "gen.py").write_text(GEN)
    job = manifest(
        tmp_path, [{"name": "big", "run": "python3 gen.py"}, {"name": "small", "run": "echo hi; echo oops >&2"}]
    )
    base = ("--store", url, "--ticket-id", "T-1", "--run-id", RUN)
    done = cli("run", *base, "--pipeline-file", str(job), "--quiet", "--log-cap", "256KiB", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    cap = 256 * 1024
    shown = cli("logs", *base, "--phase", "big", cwd=tmp_path)  # another process, a store handle of its own
    assert shown.returncode == 0, shown.stdout
    assert shown.stdout.encode() == TEN_MB[-cap:]
    assert f"the last {cap} of {len(TEN_MB)} bytes" in shown.stderr
    doc = cli_json("logs", *base, "--phase", "big", "--attempt", "1", "--json", cwd=tmp_path)
    assert (doc["total_bytes"], doc["dropped_bytes"], doc["kept_bytes"]) == (len(TEN_MB), len(TEN_MB) - cap, cap)
    assert doc["complete"] is True
    assert doc["chunks"] >= 1
    small = cli("logs", *base, "--phase", "small", cwd=tmp_path)
    assert sorted(small.stdout.splitlines()) == ["hi", "oops"]  # stdout and stderr, as they came
    verified = cli_json("verify", "--store", url, "--ticket-id", "T-1", cwd=tmp_path)
    assert verified["ok"] is True
    read = cli_json("read", *base, "--phase", "big", cwd=tmp_path)  # the attempt's record is intact
    assert read["metadata"]["status"] == "completed"
    assert read["checkpoint"]["phase_payload"] == {"phase": "big"}
    valid = cli("validate", *base, "--phase", "big", cwd=tmp_path)
    assert valid.returncode == 0, valid.stdout
    store = open_store(url)
    try:  # what the store holds of the attempt is bounded: live part + kept tail, each ≤ the cap
        held = sum(len(body) for _n, _l, body in store.entries("logs", "T-1", RUN) if isinstance(body, bytes))
        assert held < 2 * cap + 64 * 1024
    finally:
        store.close()


def test_unknown_run_phase_and_attempt_are_clear_errors(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    job = manifest(tmp_path, [{"name": "one", "run": "echo one"}])
    base = ("--store", url, "--ticket-id", "T-1")
    assert cli("run", *base, "--run-id", RUN, "--pipeline-file", str(job), "--quiet", cwd=tmp_path).returncode == 0
    other = cli("logs", *base, "--run-id", "nope", "--phase", "one", cwd=tmp_path)
    assert other.returncode != 0
    assert "run nope of ticket T-1 not found" in json.loads(other.stdout)["error"]
    phase = cli("logs", *base, "--run-id", RUN, "--phase", "two", cwd=tmp_path)
    assert phase.returncode != 0
    assert "unknown phase 'two'" in json.loads(phase.stdout)["error"]
    attempt = cli("logs", *base, "--run-id", RUN, "--phase", "one", "--attempt", "3", cwd=tmp_path)
    assert attempt.returncode != 0
    assert "attempt 3 of phase one not found" in json.loads(attempt.stdout)["error"]
    assert "(attempts: 1)" in json.loads(attempt.stdout)["error"]
    cap = cli("run", *base, "--run-id", "r2", "--pipeline-file", str(job), "--log-cap", "lots", cwd=tmp_path)
    assert cap.returncode != 0
    assert "log_cap: must be a size" in cap.stdout


def test_a_python_phase_keeps_what_ctx_logger_wrote(tmp_path: Path) -> None:
    pipe = phaselog.pipeline("pylog", phases=["work", "quiet"])

    @pipe.phase("work")
    def work(ctx: Any) -> dict[str, Any]:
        ctx.logger.info("reading %d rows", 3)
        ctx.logger.warning("row <2> looks odd")
        return {}

    @pipe.phase("quiet")
    def quiet(ctx: Any) -> dict[str, Any]:
        return {}

    ledger = Ledger(FilesStore(tmp_path / "store"))
    try:
        pipe.run("T-1", RUN, store=ledger, workdir=tmp_path, quiet=True)
        log = ledger.run("T-1", RUN).logs("work")
        lines = log.text.splitlines()
        assert [ln.split(" ", 1)[1] for ln in lines] == ["INFO reading 3 rows", "WARNING row <2> looks odd"]
        assert log.complete
        assert log.dropped_bytes == 0
        assert log.cap_bytes == DEFAULT_LOG_CAP
        empty = ledger.logs("T-1", RUN, "quiet")  # printed nothing: an empty log, and no entry written
        assert (empty.text, empty.complete) == ("", True)
        assert all("quiet" not in n for n in ledger.store.entry_names("logs", "T-1", RUN))
    finally:
        ledger.close()
    shown = cli("logs", "--store", str(tmp_path / "store"), "--ticket-id", "T-1", "--run-id", RUN, "--phase", "work")
    assert shown.stdout.splitlines() == lines


def test_a_workers_logs_are_read_from_a_second_store_handle_on_the_same_postgres(
    tmp_path: Path, pg_schema_url: str
) -> None:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "talk.yaml").write_text(
        json.dumps(
            {
                "name": "talk",
                "version": "1",
                "phases": [{"name": "say", "run": "echo from the worker; echo and its stderr >&2"}],
            }
        )
    )
    work = tmp_path / "work"
    work.mkdir()
    sub = ("--pipeline-file", str(pipelines / "talk.yaml"), "--ticket-id", "T-1", "--run-id", RUN)
    cli_json("submit", "--store", pg_schema_url, *sub)
    worker = start_worker(pg_schema_url, pipelines, work, "--burst", "--quiet", "--log-cap", "1MiB")
    assert worker.wait(timeout=120) == 0
    stop(worker)
    other = Ledger(open_store(pg_schema_url))  # "another machine": a store handle of its own
    try:
        log = other.logs("T-1", RUN, "say")
        assert sorted(log.text.splitlines()) == ["and its stderr", "from the worker"]
        assert log.complete
    finally:
        other.close()


def test_a_python_phases_lines_go_live_at_each_step_done(tmp_path: Path) -> None:
    import threading

    go = threading.Event()
    pipe = phaselog.pipeline("pylive", phases=["work"])

    @pipe.phase("work")
    def work(ctx: Any) -> dict[str, Any]:
        ctx.logger.info("downloaded part 1")
        ctx.step_done(1)
        assert go.wait(60)
        return {}

    url = str(tmp_path / "store")
    runner = threading.Thread(target=lambda: pipe.run("T-1", RUN, store=url, quiet=True, handle_signals=False))
    runner.start()
    try:

        def live() -> bool:
            ledger = Ledger(open_store(url))  # a handle of its own, as another machine's
            try:
                log = ledger.logs("T-1", RUN, "work", pipeline=pipe.pipeline)
                return "downloaded part 1" in log.text and not log.complete
            except phaselog.PhaselogError:
                return False
            finally:
                ledger.close()

        wait_for(live, 60, "the line logged before step 1 was done, in the store while the phase runs")
    finally:
        go.set()
        runner.join(60)
    final = Ledger(open_store(url))
    try:
        assert final.logs("T-1", RUN, "work").complete
    finally:
        final.close()


def _run_chatty(url: str, tmp_path: Path) -> None:
    job = manifest(tmp_path, [{"name": "talk", "run": "for i in 1 2 3; do echo line $i; done; echo warn >&2"},
                              {"name": "after", "run": "echo done"}])  # fmt: skip
    run = ("run", "--store", url, "--ticket-id", "T-1", "--run-id", RUN, "--pipeline-file", str(job), "--quiet")
    done = cli(*run, cwd=tmp_path)  # the local log files go to <workdir>/.phaselog on SQL stores
    assert done.returncode == 0, done.stderr


@pytest.mark.all_stores
def test_logs_survive_export_import_and_copy(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = store_url(backend, tmp_path, request)
    _run_chatty(url, tmp_path)
    exported = cli("export", "--store", url, "--ticket-id", "T-1")
    assert exported.returncode == 0, exported.stderr
    kinds = [json.loads(line).get("kind") for line in exported.stdout.splitlines()]
    assert kinds.count("logs") == 2  # a kept log per phase (each ended within a second: no live chunk)
    imported_into = tmp_path / "imported"
    done = subprocess.run([str(BIN), "import", "--store", str(imported_into)], input=exported.stdout,
                          capture_output=True, text=True, env=base_env(), check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout
    again = subprocess.run([str(BIN), "import", "--store", str(imported_into)], input=exported.stdout,
                           capture_output=True, text=True, env=base_env(), check=False)  # fmt: skip
    assert json.loads(again.stdout)["added"] == 0  # idempotent
    copied_into = f"sqlite:///{tmp_path / 'copy.db'}"
    assert cli("copy", "--from", url, "--to", copied_into).returncode == 0
    want = _logs(url)
    for target in (str(imported_into), copied_into):
        assert _logs(target) == want
        assert cli_json("verify", "--store", target, "--ticket-id", "T-1")["ok"] is True


def _logs(url: str) -> dict[str, Any]:
    ledger = Ledger(open_store(url))
    try:
        return {p: ledger.logs("T-1", RUN, p).to_json() for p in ("talk", "after")}
    finally:
        ledger.close()


def test_follow_prints_a_running_phases_output_and_ends_with_the_attempt(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    job = manifest(
        tmp_path, [{"name": "wait", "run": "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second"}]
    )
    base = ("--store", url, "--ticket-id", "T-1", "--run-id", RUN)
    runner = subprocess.Popen([str(BIN), "run", *base, "--pipeline-file", str(job), "--quiet"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=base_env())  # fmt: skip
    follower: subprocess.Popen[str] | None = None
    try:

        def first_chunk() -> bool:
            store = open_store(url)
            try:
                return "first" in Ledger(store).logs("T-1", RUN, "wait").text
            except phaselog.PhaselogError:  # no run, or no entry naming the phase, yet
                return False
            finally:
                store.close()

        wait_for(first_chunk, 60, "the running phase's first line in the store")
        follow = [str(BIN), "logs", *base, "--phase", "wait", "--follow", "--poll", "0.05s"]
        follower = subprocess.Popen(follow, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base_env())
        assert follower.stdout is not None
        assert follower.stdout.readline() == "first\n"  # while the phase still runs
        assert runner.poll() is None
        (tmp_path / "go").touch()
        out, err = follower.communicate(timeout=60)
        assert follower.returncode == 0, err
        assert out == "second\n"
        assert runner.wait(timeout=60) == 0
    finally:
        (tmp_path / "go").touch()
        for proc in (runner, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_checkpoint_page_shows_the_kept_log_escaped_and_a_large_one_as_its_tail(tmp_path: Path) -> None:
    from ui_data import Http, Server

    url = str(tmp_path / "store")
    big = "import sys\nsys.stdout.write('<script>alert(1)</script>\\n' + 'y' * 400000 + '\\nlast line\\n')\n"
    (tmp_path / "big.py").write_text(big)
    job = manifest(tmp_path, [{"name": "loud", "run": "python3 big.py"}, {"name": "calm", "run": "echo '<b>hi</b>'"}])
    base = ("--store", url, "--ticket-id", "T-1", "--run-id", RUN)
    done = cli("run", *base, "--pipeline-file", str(job), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    srv = Server(url)
    try:
        http = Http(srv.base)
        _, _, calm = http.get(f"/tickets/T-1/runs/{RUN}/phases/calm/attempts/1")
        shown = calm.split('id="log-text">', 1)[1].split("</pre>", 1)[0]
        assert shown == "&lt;b&gt;hi&lt;/b&gt;\n"  # escaped, never markup
        _, _, loud = http.get(f"/tickets/T-1/runs/{RUN}/phases/loud/attempts/1")
        text = loud.split('id="log-text">', 1)[1].split("</pre>", 1)[0]
        assert text.endswith("y\nlast line\n")
        assert "<script>alert" not in loud
        assert len(text) == 256 * 1024  # the page shows the kept log's last 256 KiB
        assert "phaselog logs</code> prints all" in loud
    finally:
        srv.stop()


def test_an_interrupted_attempt_keeps_its_log_with_its_record(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    job = manifest(tmp_path, [{"name": "long", "run": "echo started; sleep 60"}])
    base = ("--store", url, "--ticket-id", "T-1", "--run-id", RUN)
    runner = subprocess.Popen([str(BIN), "run", *base, "--pipeline-file", str(job), "--quiet"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=base_env())  # fmt: skip
    try:

        def started() -> bool:
            ledger = Ledger(open_store(url))
            try:
                return "started" in ledger.logs("T-1", RUN, "long").text
            except phaselog.PhaselogError:
                return False
            finally:
                ledger.close()

        wait_for(started, 60, "the phase's first line in the store")
        runner.terminate()
        assert runner.wait(timeout=60) == 143
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    doc = cli_json("logs", *base, "--phase", "long", "--json")
    assert (doc["text"], doc["complete"], doc["attempt"]) == ("started\n", True, 1)
    read = cli("read", *base, "--phase", "long", "--attempt", "1")
    assert json.loads(read.stdout)["metadata"]["status"] == "failed"
    assert cli_json("verify", "--store", url, "--ticket-id", "T-1")["ok"] is True


# -- the sink: bounded, and exact ----------------------------------------------------------------------
def _sink(store: Store, cap: int) -> LogSink:
    return LogSink(store, ticket_id="T-1", run_id=RUN, phase="p", ordinal=1, attempt=1, cap=cap)


@given(
    pieces=st.lists(st.binary(max_size=300) | st.text(max_size=100).map(str.encode), max_size=30),
    cap=st.integers(min_value=1, max_value=400),
)
def test_the_kept_log_is_the_outputs_tail_and_the_chunks_its_start(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[bytes], cap: int
) -> None:
    store = FilesStore(tmp_path_factory.mktemp("s"))
    sink = _sink(store, cap)
    for piece in pieces:
        sink.write(piece)
    kept = sink.close()
    text = b"".join(pieces).decode("utf-8", "replace").encode("utf-8")
    if not text:
        assert kept is None
        assert store.entry_names("logs", "T-1", RUN) == []
        return
    assert kept is not None
    assert kept.total_bytes == len(text)
    data = kept.text.encode("utf-8")
    assert text.endswith(data)
    assert kept.dropped_bytes == len(text) - len(data)
    assert (len(data) <= cap and len(data) > cap - 4) or kept.dropped_bytes == 0
    led = Ledger(store)
    live = "".join(c.text for c in _chunks(store))
    assert text.startswith(live.encode("utf-8"))
    assert len(live.encode("utf-8")) <= cap
    led.close()


def _chunks(store: Store) -> list[Any]:
    from phaselog.model.entries import parse_entry
    from phaselog.model.logs import LogChunk

    return [parse_entry(LogChunk, b, loc) for n, loc, b in store.entries("logs", "T-1", RUN) if not n.endswith("end")
            and isinstance(b, bytes)]  # fmt: skip


def test_follow_says_where_the_live_output_stopped_and_then_prints_the_kept_tail(tmp_path: Path) -> None:
    store = FilesStore(tmp_path / "s")
    output = b"".join(b"row %04d\n" % i for i in range(500))  # 4500 bytes; the cap is 1000
    sink = LogSink(store, ticket_id="T-1", run_id=RUN, phase="implement", ordinal=1, attempt=1, cap=1000)
    sink.write(output)
    sink.close()
    ledger = Ledger(store)
    try:
        pieces = list(ledger.logs_reader.follow("T-1", RUN, "implement", pipeline="ticket-pipeline", poll=0))
    finally:
        ledger.close()
    assert pieces[0].encode() == output[:1000]  # the live part: the output's start, up to the cap
    assert "live output stops here, at the cap of 1000 bytes" in pieces[1]
    assert pieces[2] == "[phaselog: 2500 bytes not kept; the last 1000 follow]\n"
    assert pieces[3].encode() == output[-1000:]
    assert len(pieces) == 4


def test_a_damaged_log_entry_is_reported_and_never_used(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    job = manifest(tmp_path, [{"name": "one", "run": "echo the real output"}])
    base = ("--store", url, "--ticket-id", "T-1", "--run-id", RUN)
    assert cli("run", *base, "--pipeline-file", str(job), "--quiet", cwd=tmp_path).returncode == 0
    (kept,) = (tmp_path / "store").rglob(".logs/001_one_a000001_end.json")
    doc = json.loads(kept.read_text())
    doc["text"] = "forged output\n"  # edited after it was written: its hash no longer fits
    kept.write_text(json.dumps(doc))
    shown = cli("logs", *base, "--phase", "one")
    assert shown.returncode == 0
    assert "forged" not in shown.stdout
    assert "damaged log entry" in shown.stderr
    assert "content changed after it was written" in shown.stderr
    assert json.loads(cli("logs", *base, "--phase", "one", "--json").stdout)["complete"] is False


def test_10_mb_through_the_sink_stays_within_the_cap(tmp_path: Path) -> None:
    store = FilesStore(tmp_path / "s")
    sink = _sink(store, 64 * 1024)
    for i in range(0, len(TEN_MB), 65536):
        sink.write(TEN_MB[i : i + 65536])
        assert len(sink.tail) <= 64 * 1024
        assert len(sink.pending) <= 64 * 1024
    kept = sink.close()
    assert kept is not None
    assert kept.text.encode() == TEN_MB[-64 * 1024 :]


def test_a_log_cap_reads_as_a_size() -> None:
    assert parse_log_cap("1MiB") == 1024 * 1024
    assert parse_log_cap("512KiB") == 512 * 1024
    assert parse_log_cap("0") == 0
    assert parse_log_cap(None) == DEFAULT_LOG_CAP
    for bad in ("-1", "1GiB", "x", True):
        with pytest.raises(UsageError, match="log_cap"):
            parse_log_cap(bad)  # type: ignore[arg-type]  # a bool on purpose


def test_cap_zero_keeps_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    job = manifest(tmp_path, [{"name": "one", "run": "echo one"}])
    done = cli(
        "run",
        "--store",
        url,
        "--ticket-id",
        "T-1",
        "--run-id",
        RUN,
        "--pipeline-file",
        str(job),
        "--log-cap",
        "0",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout
    store = open_store(url)
    try:
        assert store.entry_names("logs", "T-1", RUN) == []
    finally:
        store.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


@pytest.mark.all_stores
def test_an_attempt_run_again_after_its_runner_died_keeps_the_new_executions_log(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # A runner SIGKILLed after the kept log and before the record: the attempt number is run again,
    # and its log must neither collide with the dead execution's nor be mixed with it (D319).
    store = open_store(store_url(backend, tmp_path, request))
    for said in (b"the dead execution\n" * 3, b"the one that was recorded\n"):
        sink = LogSink(store, ticket_id="T-1", run_id=RUN, phase="implement", ordinal=1, attempt=1, cap=1000)
        sink.write(said)
        assert sink.close() is not None  # kept: not refused as "already exists"
    names = store.entry_names("logs", "T-1", RUN)
    assert sorted(names) == ["001_implement_a000001_end", "001_implement_a000001_r002_end"]
    ledger = Ledger(store)
    try:
        log = ledger.logs("T-1", RUN, "implement", pipeline="ticket-pipeline")
        assert log.text == "the one that was recorded\n"
        pieces = list(ledger.logs_reader.follow("T-1", RUN, "implement", pipeline="ticket-pipeline", poll=0))
        assert "".join(pieces) == "the one that was recorded\n"
    finally:
        ledger.close()
