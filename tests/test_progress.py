"""Progress events inside a running attempt (phaselog.ledger.progress; seed 003's checkpoints).

Real files, real processes: the abandoned-by-death case uses a child process this test started and
reaped; the pid-reuse case goes through ``judge_abandoned`` with a fake ``start_time_of`` (a real
pid cannot be made to come back on demand). Time is an injected clock, never measured.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing as mp
import os
import queue
import socket
import subprocess
import sys
import traceback
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT
from helpers import T0, Clock, tree
from phaselog import Conflict, InvalidRecord, NotFound, TooLarge, UsageError
from phaselog.ledger.attempts import DEFAULT_STALE_AFTER, judge_abandoned, process_start_time
from phaselog.ledger.progress import DEFAULT_MAX_OUTPUT_BYTES, event_name
from phaselog.model.entries import ProgressEvent
from phaselog.model.ids import normalize_run_id
from phaselog.stores.files.store import FilesStore

T = "PROG-1"
R = "run-1"
RUN = normalize_run_id(R)
CTX = mp.get_context("fork")


def progress_dir(root: Path, ticket: str = T, run: str = RUN) -> Path:
    return root / "checkpoints" / ticket / run / ".progress"


def sleeper() -> subprocess.Popen[bytes]:
    """A child process that lives until the test ends it."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


# -- the event record ----------------------------------------------------------------------------
def test_start_event_records_host_pid_and_process_start(led: phaselog.Ledger) -> None:
    ev = led.progress(T, R, "implement", "start")
    assert (ev.attempt_number, ev.seq, ev.event) == (1, 1, "start")
    assert ev.host == socket.gethostname()
    assert ev.pid == os.getpid()
    assert ev.process_start == pytest.approx(process_start_time(os.getpid()), abs=0.01)
    assert ev.timestamp == T0
    assert ev.elapsed_sec == 0.0
    assert ev.prev_hash is None


def test_start_with_explicit_pid_records_that_process(led: phaselog.Ledger) -> None:
    child = sleeper()
    try:
        ev = led.progress(T, R, "implement", "start", pid=child.pid)
        assert ev.pid == child.pid
        assert ev.process_start == pytest.approx(process_start_time(child.pid), abs=0.01)
    finally:
        child.kill()
        child.wait()


def test_step_events_carry_sequence_elapsed_tokens_and_output(led: phaselog.Ledger, clock: Clock) -> None:
    led.progress(T, R, "implement", "start", provider="claude")
    clock.advance(seconds=2.5)
    text = "héllo wörld ✓"
    ev = led.progress(T, R, "implement", "step", step=1, tokens=120, output=text, status="coding")
    assert ev.seq == 2
    assert ev.elapsed_sec == 2.5
    assert ev.tokens == 120
    assert ev.step == 1
    assert ev.status == "coding"
    assert ev.provider == "claude"  # carried from the start event
    assert ev.output == text
    assert ev.output_sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert len(ev.output_sha256) == 64
    assert ev.output_length == len(text.encode("utf-8")) != len(text)  # bytes, not characters
    assert ev.host is None
    assert ev.pid is None
    clock.advance(seconds=1)
    nxt = led.progress(T, R, "implement", "step")
    assert (nxt.seq, nxt.step, nxt.tokens, nxt.elapsed_sec) == (3, 1, 120, 3.5)  # carried forward
    assert nxt.output is None
    assert nxt.output_sha256 is None


def test_events_are_hash_chained(led: phaselog.Ledger) -> None:
    evs = [led.progress(T, R, "implement", "start")]
    evs += [led.progress(T, R, "implement", "step", step=i) for i in range(1, 4)]
    for prev, cur in itertools.pairwise(evs):
        assert cur.prev_hash == prev.content_hash
    assert led.progress_events(T, R, "implement") == evs


def test_stored_event_round_trips_and_is_named_by_phase_attempt_seq(led: phaselog.Ledger, root: Path) -> None:
    led.progress(T, R, "implement", "start")
    ev = led.progress(T, R, "implement", "step", step=4, output="abc", tokens=9)
    path = progress_dir(root) / f"{event_name(1, 'implement', 1, 2)}.json"
    stored = json.loads(path.read_text("utf-8"))
    assert ProgressEvent.from_json(stored) == ev
    assert stored["output_sha256"] == hashlib.sha256(b"abc").hexdigest()
    assert stored["output_length"] == 3
    assert event_name(1, "implement", 1, 2) < event_name(1, "implement", 1, 10) < event_name(1, "implement", 2, 1)


def test_same_instant_events_never_collide(led: phaselog.Ledger, root: Path) -> None:
    # The clock never moves: every event has the same timestamp (seed 003 named files by unix-nano).
    led.progress(T, R, "implement", "start")
    evs = [led.progress(T, R, "implement", "step", step=i) for i in range(20)]
    assert {e.timestamp for e in evs} == {T0}
    assert [e.seq for e in evs] == list(range(2, 22))
    assert len(list(progress_dir(root).glob("*.json"))) == 21
    assert [e.step for e in led.progress_events(T, R, "implement")[1:]] == list(range(20))


def test_tokens_are_cumulative_and_cannot_drop(led: phaselog.Ledger, root: Path) -> None:
    led.progress(T, R, "implement", "start")
    led.progress(T, R, "implement", "step", tokens=100)
    before = tree(root)
    with pytest.raises(InvalidRecord) as err:
        led.progress(T, R, "implement", "step", tokens=99)
    assert err.value.errors[0]["rule"] == "cumulative"
    assert tree(root) == before


@pytest.mark.parametrize(
    ("kw", "exc", "field"),
    [
        ({"step": -1}, InvalidRecord, "step"),
        ({"tokens": -5}, InvalidRecord, "tokens"),
        ({"step": True}, InvalidRecord, "step"),
        ({"tokens": 1.5}, InvalidRecord, "tokens"),
        ({"output": b"\xff\xfe not utf-8"}, InvalidRecord, "output"),
    ],
)
def test_bad_values_are_refused_and_nothing_written(
    led: phaselog.Ledger, root: Path, kw: dict[str, Any], exc: type[Exception], field: str
) -> None:
    led.progress(T, R, "implement", "start")
    before = tree(root)
    with pytest.raises(exc) as err:
        led.progress(T, R, "implement", "step", **kw)
    assert err.value.errors[0]["field"] == field  # type: ignore[attr-defined]
    assert tree(root) == before


def test_unknown_event_name_is_a_usage_error(led: phaselog.Ledger, root: Path) -> None:
    with pytest.raises(UsageError):
        led.progress(T, R, "implement", "started")
    assert tree(root) == {}


# -- output cap ----------------------------------------------------------------------------------
def test_output_over_default_cap_is_refused_and_nothing_written(led: phaselog.Ledger, root: Path) -> None:
    led.progress(T, R, "implement", "start")
    before = tree(root)
    big = b"x" * (DEFAULT_MAX_OUTPUT_BYTES + 1)
    with pytest.raises(TooLarge) as err:
        led.progress(T, R, "implement", "step", step=1, output=big)
    assert err.value.context["limit"] == DEFAULT_MAX_OUTPUT_BYTES == 8 * 1024 * 1024
    assert "nothing was written" in err.value.message
    assert tree(root) == before
    assert [e.seq for e in led.progress_events(T, R, "implement")] == [1]


def test_output_at_the_cap_is_accepted(led: phaselog.Ledger) -> None:
    led.progress(T, R, "implement", "start")
    text = "é" * 8  # 16 bytes
    ev = led.progress(T, R, "implement", "step", output=text, max_output_bytes=16)
    assert ev.output_length == 16
    with pytest.raises(TooLarge):
        led.progress(T, R, "implement", "step", output=text + "x", max_output_bytes=16)


def test_output_is_capped_in_bytes_not_characters(led: phaselog.Ledger) -> None:
    led.progress(T, R, "implement", "start")
    with pytest.raises(TooLarge):
        led.progress(T, R, "implement", "step", output="é" * 9, max_output_bytes=16)  # 9 chars, 18 bytes


def test_output_under_the_cap_is_accepted_whatever_its_characters(led: phaselog.Ledger) -> None:
    led.progress(T, R, "implement", "start")
    ev = led.progress(T, R, "implement", "step", output="\x1b" * (3 * 1024 * 1024))
    assert ev.output_length == 3 * 1024 * 1024


# -- which attempt an event goes to --------------------------------------------------------------
def test_step_without_start_is_refused(led: phaselog.Ledger, root: Path) -> None:
    with pytest.raises(NotFound) as err:
        led.progress(T, R, "implement", "step", step=1)
    assert err.value.context["rule"] == "no_attempt_in_flight"
    assert tree(root) == {}


def test_start_opens_the_next_attempt_after_checkpoints(led: phaselog.Ledger) -> None:
    led.write(T, R, "implement", None, status="failed", error="boom")
    led.write(T, R, "implement", IMPLEMENT)
    ev = led.progress(T, R, "implement", "start")
    assert ev.attempt_number == 3


def test_checkpoint_takes_the_attempt_in_flight(led: phaselog.Ledger) -> None:
    led.progress(T, R, "implement", "start")
    led.progress(T, R, "implement", "step", step=1)
    res = led.write(T, R, "implement", IMPLEMENT)
    assert res.record.attempt_number == 1
    assert led.in_flight(T, R) == {}
    with pytest.raises(NotFound):
        led.progress_latest(T, R, "implement")  # nothing in flight any more
    # ... but the events stay, immutable, under their attempt
    assert [e.seq for e in led.progress_events(T, R, "implement", 1)] == [1, 2]
    with pytest.raises(NotFound):
        led.progress(T, R, "implement", "step")  # no attempt in flight
    with pytest.raises(Conflict) as err:
        led.progress(T, R, "implement", "step", attempt=1)
    assert err.value.context["rule"] == "attempt_finished"


def test_no_event_after_a_terminal_event(led: phaselog.Ledger) -> None:
    led.progress(T, R, "implement", "start")
    led.progress(T, R, "implement", "complete", step=3)
    with pytest.raises(Conflict) as err:
        led.progress(T, R, "implement", "step", step=4)
    assert err.value.context["rule"] == "attempt_ended"


def test_start_twice_on_the_same_attempt_is_refused(led: phaselog.Ledger) -> None:
    led.progress(T, R, "implement", "start")
    with pytest.raises(phaselog.AlreadyExists):
        led.progress(T, R, "implement", "start", attempt=1)


def test_explicit_attempt_below_the_latest_is_refused(led: phaselog.Ledger) -> None:
    led.progress(T, R, "implement", "start", attempt=3)
    with pytest.raises(Conflict) as err:
        led.progress(T, R, "implement", "start", attempt=2)
    assert err.value.context["rule"] == "not_monotonic"


def test_events_of_other_phases_and_attempts_are_kept_apart(led: phaselog.Ledger) -> None:
    led.progress(T, R, "implement", "start")
    led.progress(T, R, "local_review", "start")
    led.progress(T, R, "implement", "step", step=7)
    led.progress(T, R, "local_review", "step", step=1)
    assert [e.step for e in led.progress_events(T, R, "implement")] == [None, 7]
    assert [e.step for e in led.progress_events(T, R, 2)] == [None, 1]
    assert led.progress_event(T, R, "implement", 1, 2).step == 7
    with pytest.raises(NotFound):
        led.progress_event(T, R, "implement", 1, 3)


def test_progress_latest_is_the_newest_event_of_the_attempt_in_flight(led: phaselog.Ledger, clock: Clock) -> None:
    led.progress(T, R, "implement", "start")
    led.write(T, R, "implement", None, status="failed", error="crashed")
    led.progress(T, R, "implement", "start")
    clock.advance(seconds=30)
    led.progress(T, R, "implement", "step", step=5, tokens=50, output="partial")
    latest = led.progress_latest(T, R, "implement")
    assert (latest.attempt_number, latest.seq, latest.step, latest.elapsed_sec) == (2, 2, 5, 30.0)
    assert latest.output == "partial"


# -- status and resume -----------------------------------------------------------------------------
def test_status_shows_in_progress_with_last_step_elapsed_tokens(led: phaselog.Ledger, clock: Clock) -> None:
    led.write(T, R, "implement", IMPLEMENT)
    led.progress(T, R, "local_review", "start")
    clock.advance(seconds=42)
    led.progress(T, R, "local_review", "step", step=3, tokens=900)
    st = led.status(T, R)
    ps = st.phase("local_review")
    assert ps.state == "in_progress"
    assert ps.latest_attempt == 1
    assert st.next_phase == "local_review"
    f = ps.to_json()["in_flight"]
    assert f["last_step"] == 3
    assert f["elapsed_sec"] == 42.0
    assert f["tokens"] == 900
    assert f["events"] == 2
    assert f["abandoned"] is False
    assert f["pid"] == os.getpid()
    assert st.phase("implement").state == "completed"


def test_in_progress_after_a_failed_attempt(led: phaselog.Ledger) -> None:
    led.write(T, R, "implement", None, status="failed", error="x")
    assert led.status(T, R).phase("implement").state == "failed"
    led.progress(T, R, "implement", "start")
    ps = led.status(T, R).phase("implement")
    assert ps.state == "in_progress"
    assert ps.latest_attempt == 2


def test_resume_says_which_step_to_resume_after(led: phaselog.Ledger) -> None:
    led.progress(T, R, "implement", "start")
    led.progress(T, R, "implement", "step", step=4, tokens=10)
    here = led.can_skip_to(T, R, "implement").to_json()
    assert here["allowed"] is True  # nothing before implement
    assert here["in_progress"]["resume_after"] == 4  # step 4 is done: resume after it
    assert here["in_progress"]["resume_from_step"] == 4  # the old name of the same number
    assert here["in_progress"]["attempt_number"] == 1
    later = led.can_skip_to(T, R, "create_pr")
    assert not later.allowed
    blocker = later.blockers[0]
    assert (blocker.phase, blocker.state) == ("implement", "in_progress")
    assert "resume it after step 4, the last step recorded done" in blocker.reason


# -- abandoned -------------------------------------------------------------------------------------
def test_abandoned_when_last_event_is_older_than_the_limit(led: phaselog.Ledger, clock: Clock) -> None:
    led.progress(T, R, "implement", "start")
    led.progress(T, R, "implement", "step", step=2)
    clock.advance(seconds=DEFAULT_STALE_AFTER.total_seconds())
    assert led.in_flight(T, R)["implement"].abandoned is False  # exactly at the limit: not yet
    clock.advance(seconds=1)
    ps = led.status(T, R).phase("implement")
    assert ps.state == "in_progress"
    assert ps.in_flight is not None
    assert ps.in_flight["abandoned"] is True
    assert "no event for 3601 s" in ps.in_flight["abandoned_reason"]
    assert ps.reason is not None
    assert ps.reason.startswith("abandoned")
    blocker = led.can_skip_to(T, R, "local_review").blockers[0]
    assert "resume it after step 2" in blocker.reason
    assert "abandoned" in blocker.reason


def test_stale_after_comes_from_the_environment(
    led: phaselog.Ledger, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    led.progress(T, R, "implement", "start")
    clock.advance(seconds=100)
    assert led.in_flight(T, R)["implement"].abandoned is False  # default limit: 1 h
    monkeypatch.setenv("PHASELOG_PROGRESS_STALE_AFTER", "90s")
    f = led.in_flight(T, R)["implement"]
    assert f.abandoned is True
    assert "limit 90 s" in (f.abandoned_reason or "")
    monkeypatch.setenv("PHASELOG_PROGRESS_STALE_AFTER", "2m")
    assert led.in_flight(T, R)["implement"].abandoned is False
    assert led.in_flight(T, R, stale_after=timedelta(seconds=10))["implement"].abandoned is True


def test_bad_stale_after_in_the_environment_is_a_clear_usage_error(
    led: phaselog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    led.progress(T, R, "implement", "start")
    monkeypatch.setenv("PHASELOG_PROGRESS_STALE_AFTER", "soon")
    with pytest.raises(UsageError, match="PHASELOG_PROGRESS_STALE_AFTER"):
        led.status(T, R)


def test_ended_attempt_waiting_for_its_checkpoint_is_not_abandoned_by_age(led: phaselog.Ledger, clock: Clock) -> None:
    led.progress(T, R, "implement", "start")
    led.progress(T, R, "implement", "complete", step=9)
    clock.advance(hours=5)
    f = led.in_flight(T, R)["implement"]
    assert f.abandoned is False
    assert f.to_json()["last_event"] == "complete"


def test_abandoned_when_its_process_is_gone(led: phaselog.Ledger) -> None:
    child = sleeper()
    try:
        led.progress(T, R, "implement", "start", pid=child.pid)
        led.progress(T, R, "implement", "step", step=1)
        assert led.in_flight(T, R)["implement"].abandoned is False  # alive
    finally:
        child.kill()
        child.wait()  # reaped: the pid no longer exists
    f = led.in_flight(T, R)["implement"]
    assert f.abandoned is True
    assert str(child.pid) in (f.abandoned_reason or "")
    assert led.status(T, R).phase("implement").reason.startswith("abandoned")  # type: ignore[union-attr]


def test_restart_after_abandoned_opens_a_new_attempt(led: phaselog.Ledger, clock: Clock) -> None:
    led.progress(T, R, "implement", "start")
    led.progress(T, R, "implement", "step", step=3)
    clock.advance(hours=2)
    assert led.in_flight(T, R)["implement"].abandoned
    ev = led.progress(T, R, "implement", "start")
    assert ev.attempt_number == 2
    f = led.in_flight(T, R)["implement"]
    assert (f.attempt_number, f.abandoned) == (2, False)
    res = led.write(T, R, "implement", IMPLEMENT)
    assert res.record.attempt_number == 2
    assert led.status(T, R).phase("implement").state == "completed"


def _start(pid: int | None = 4242, host: str = "box", process_start: float | None = 1000.0) -> ProgressEvent:
    return ProgressEvent(
        ticket_id=T,
        run_id=RUN,
        phase="implement",
        phase_ordinal=1,
        attempt_number=1,
        seq=1,
        event="start",
        timestamp=T0,
        host=host,
        pid=pid,
        process_start=process_start,
    )


def _step(event: str = "step", at: datetime = T0) -> ProgressEvent:
    return ProgressEvent(
        ticket_id=T,
        run_id=RUN,
        phase="implement",
        phase_ordinal=1,
        attempt_number=1,
        seq=2,
        event=event,
        timestamp=at,
    )


HOUR = timedelta(hours=1)


def test_judge_pid_gone() -> None:
    reason = judge_abandoned(_start(), _step(), now=T0, stale_after=HOUR, host="box", start_time_of=lambda _: None)
    assert reason == "process 4242 on box is gone"


def test_judge_pid_reused_by_another_process() -> None:
    asked: list[int] = []

    def start_time_of(pid: int) -> float:
        asked.append(pid)
        return 1000.0 + 3600  # same pid, started an hour later: another process

    reason = judge_abandoned(_start(), _step(), now=T0, stale_after=HOUR, host="box", start_time_of=start_time_of)
    assert reason == "pid 4242 on box now belongs to another process"
    assert asked == [4242]


def test_judge_same_process_alive_and_fresh() -> None:
    assert (
        judge_abandoned(
            _start(),
            _step(),
            now=T0 + timedelta(minutes=5),
            stale_after=HOUR,
            host="box",
            start_time_of=lambda _: 1000.4,  # create_time jitter below a second is the same process
        )
        is None
    )


def test_judge_unknown_process_start_only_checks_existence() -> None:
    assert (
        judge_abandoned(
            _start(process_start=None),
            _step(),
            now=T0,
            stale_after=HOUR,
            host="box",
            start_time_of=lambda _: 5.0,
        )
        is None
    )


def test_judge_other_host_is_never_asked_about_its_pid() -> None:
    def boom(_: int) -> float:
        raise AssertionError("a pid on another host says nothing about this host")

    assert (
        judge_abandoned(
            _start(host="elsewhere"),
            _step(),
            now=T0,
            stale_after=HOUR,
            host="box",
            start_time_of=boom,
        )
        is None
    )
    old = judge_abandoned(
        _start(host="elsewhere"),
        _step(),
        now=T0 + 2 * HOUR,
        stale_after=HOUR,
        host="box",
        start_time_of=boom,
    )
    assert old == "no event for 7200 s (limit 3600 s)"


def test_judge_by_age_and_terminal_events() -> None:
    alive = {"host": "box", "start_time_of": lambda _: 1000.0, "stale_after": HOUR}
    assert judge_abandoned(_start(), _step(), now=T0 + HOUR, **alive) is None  # type: ignore[arg-type]
    assert judge_abandoned(_start(), _step(), now=T0 + HOUR + timedelta(seconds=1), **alive)  # type: ignore[arg-type]
    assert judge_abandoned(_start(), _step("complete"), now=T0 + 9 * HOUR, **alive) is None  # type: ignore[arg-type]
    assert judge_abandoned(None, _step(), now=T0 + 9 * HOUR, **alive)  # type: ignore[arg-type]


# -- concurrency -----------------------------------------------------------------------------------
WRITERS = 8
EVENTS_EACH = 6


def _writer(root: str, idx: int, barrier: Any, out: Any) -> None:
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.load_pipeline(None)
    try:
        barrier.wait(60)
        got = []
        for k in range(EVENTS_EACH):
            ev = ledger.progress(
                T,
                R,
                "implement",
                "step",
                step=idx * 100 + k,
                output=f"writer {idx} chunk {k} " * 50,
            )
            got.append(ev.seq)
        out.put((idx, "ok", got))
    except BaseException:
        out.put((idx, "error", traceback.format_exc()))


def test_concurrent_writers_get_distinct_gap_free_seqs_and_readers_see_whole_events(
    root: Path,
) -> None:
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.progress(T, R, "implement", "start")
    barrier = CTX.Barrier(WRITERS + 1)
    out = CTX.Queue()
    procs = [CTX.Process(target=_writer, args=(str(root), i, barrier, out)) for i in range(WRITERS)]
    for p in procs:
        p.start()
    results = []
    views = 0
    try:
        barrier.wait(60)
        pdir = progress_dir(root)
        while len(results) < WRITERS:
            # A reader racing the writers: through the library, and straight from the files.
            seqs = [e.seq for e in ledger.progress_events(T, R, "implement")]
            assert seqs == list(range(1, len(seqs) + 1)), seqs
            for f in sorted(pdir.glob("*.json")):
                ProgressEvent.from_json(json.loads(f.read_bytes()))  # never a partial event
            views += 1
            try:
                results.append(out.get(timeout=0.01))
            except queue.Empty:
                continue
    finally:
        for p in procs:
            p.join(60)
    errors = [r for r in results if r[1] != "ok"]
    assert not errors, errors
    assert all(p.exitcode == 0 for p in procs)
    total = 1 + WRITERS * EVENTS_EACH
    mine = sorted(s for r in results for s in r[2])
    assert mine == list(range(2, total + 1))  # each writer got its own seqs, none lost, none twice
    events = ledger.progress_events(T, R, "implement")
    assert [e.seq for e in events] == list(range(1, total + 1))
    for prev, cur in itertools.pairwise(events):
        assert cur.prev_hash == prev.content_hash
    for e in events[1:]:  # every writer's own events come in its own order
        assert e.output == f"writer {e.step // 100} chunk {e.step % 100} " * 50  # type: ignore[operator]
    assert views >= 1
    assert ledger.verify(T).ok
