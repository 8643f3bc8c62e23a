"""Run leases: one holder per run, rising fencing tokens, fenced writes, who may take over."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import IMPLEMENT, LOCAL_REVIEW

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.runner import lease as leasing
from phaselog.stores import open_store
from phaselog.stores.base import LeaseState, Verdict

TICKET, RUN = "LEASE-1", "6f1c2d3e-0000-4000-8000-000000000001"


def _other(store: Any) -> Any:
    """A second handle on the same store (another process would have its own)."""
    return open_store(store.url)


@pytest.mark.all_stores
def test_a_second_runner_is_refused_while_the_first_holds_the_run(store: Any) -> None:
    first = leasing.acquire(store, TICKET, RUN)
    other = _other(store)
    try:
        with pytest.raises(phaselog.RunHeld) as info:
            leasing.acquire(other, TICKET, RUN)
        assert info.value.exit_code == 75
        assert f"pid {os.getpid()}" in info.value.message
        assert "--wait" in info.value.message
        first.release()
        second = leasing.acquire(other, TICKET, RUN)
        assert second.token == first.token + 1
        second.release()
    finally:
        other.close()


@pytest.mark.all_stores
def test_a_fenced_writer_writes_nothing(store: Any, tmp_path: Path) -> None:
    ledger = Ledger(store)
    mine = leasing.acquire(store, TICKET, RUN)
    ledger.write(TICKET, RUN, "implement", IMPLEMENT, fence=mine.fence)  # holds: written
    other = _other(store)
    try:
        if hasattr(store, "root"):
            # files: the lease lives with its lock; someone removing the lease file lets a new
            # runner in on a new inode — the old holder's writes must then be refused.
            (Path(store.root) / "checkpoints" / TICKET / RUN / ".lease").unlink()
        thief = other.run_leases().acquire(
            TICKET, RUN, leasing.holder_info(), ttl=30, judge=lambda s: Verdict(True, "test takes it")
        )
        assert thief.token == mine.token + 1 or hasattr(store, "root")  # files: a new file starts at 1
        with pytest.raises(phaselog.Fenced) as info:
            ledger.write(TICKET, RUN, "local_review", LOCAL_REVIEW, fence=mine.fence)
        assert info.value.error_code == "fenced"
        assert [s.record.phase for s in ledger.list(TICKET, RUN).items] == ["implement"]
        with pytest.raises(phaselog.Fenced):
            mine.renew()
        ledger.write(TICKET, RUN, "local_review", LOCAL_REVIEW, fence=thief_fence(thief))
    finally:
        other.close()


def thief_fence(state: LeaseState) -> Any:
    from phaselog.stores.base import RunFence

    return RunFence(state.ticket_id, state.run_id, state.token, (state.holder or {}).get("runner_id"))


@pytest.mark.all_stores
def test_a_killed_runner_is_taken_over_at_once(store: Any, tmp_path: Path) -> None:
    """A runner SIGKILLed while holding the lease: the next one takes over without waiting."""
    script = tmp_path / "hold.py"
    script.write_text(
        "import sys, time\n"
        "from phaselog.stores import open_store\n"
        "from phaselog.runner import lease\n"
        f"held = lease.acquire(open_store(sys.argv[1]), {TICKET!r}, {RUN!r}, ttl=3600)\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script), store.url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(phaselog.RunHeld):
            leasing.acquire(store, TICKET, RUN)
        proc.kill()
        proc.wait()
        taken = leasing.acquire(store, TICKET, RUN)  # ttl was an hour: liveness decides, not expiry
        assert taken.took_over is not None
        assert "gone" in taken.took_over["reason"]
        assert taken.took_over["holder"]["pid"] == proc.pid
        taken.release()
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.all_stores
def test_wait_waits_for_the_holder_to_finish(store: Any) -> None:
    first = leasing.acquire(store, TICKET, RUN)
    other = _other(store)
    import threading

    timer = threading.Timer(0.8, first.release)
    timer.start()
    try:
        second = leasing.acquire(other, TICKET, RUN, wait=10)
        assert second.token == first.token + 1
        second.release()
    finally:
        timer.cancel()
        other.close()


def _state(holder: dict[str, Any] | None, **kw: Any) -> LeaseState:
    base: dict[str, Any] = {"renewed_at": 100.0, "expires_at": 130.0, "now": 110.0, "lock_free": None}
    base.update(kw)
    return LeaseState(TICKET, RUN, 7, holder, **base)


def test_judge_takes_over_only_from_the_provably_gone_or_the_expired() -> None:
    me = {"host": "here", "pid": 42, "process_start": 1000.0, "acquired_at": "2026-11-30T10:00:00Z"}
    alive = lambda pid: 1000.0
    gone = lambda pid: None
    reused = lambda pid: 5000.0
    no_group = lambda g: False

    def verdict(state: LeaseState, start: Any, group: Any = no_group) -> Verdict:
        return leasing.judge(state, host="here", start_time_of=start, group_alive_of=group)

    assert verdict(_state(None), alive).take
    assert not verdict(_state(me), alive).take
    assert verdict(_state(me), gone).take
    assert "gone" in verdict(_state(me), gone).reason
    assert verdict(_state(me), reused).take
    assert "another process" in verdict(_state(me), reused).reason
    # alive on this host but silent past its expiry: never displaced (it is provably running)
    late = _state(me, now=200.0)
    assert not verdict(late, alive).take
    assert "hung" in verdict(late, alive).reason
    # another host: liveness cannot be checked, so expiry decides
    remote = {**me, "host": "elsewhere"}
    assert not verdict(_state(remote), gone).take
    assert verdict(_state(remote, now=131.0), alive).take
    # the phase command a dead runner started is still running: held
    with_child = {**me, "child_pgid": 777}
    held = verdict(_state(with_child), gone, group=lambda g: g == 777)
    assert not held.take
    assert "process group 777" in held.reason
    # files store: the lock decides
    assert not verdict(_state(me, lock_free=False), gone).take
    assert verdict(_state(me, lock_free=True), alive).take


def test_a_lease_on_sqlite_expires_without_heartbeats_for_a_remote_holder(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/l.db")
    try:
        leases = store.run_leases()  # type: ignore[attr-defined]
        remote = {**leasing.holder_info(), "host": "another-machine"}
        first = leases.acquire(TICKET, RUN, remote, ttl=0.3, judge=leasing.judge)
        with pytest.raises(phaselog.RunHeld, match="expires in"):
            leasing.acquire(store, TICKET, RUN)
        import time

        time.sleep(0.5)
        taken = leasing.acquire(store, TICKET, RUN)
        assert taken.token == first.token + 1
        assert "expired" in (taken.took_over or {}).get("reason", "")
    finally:
        store.close()


def test_the_heartbeat_keeps_a_long_phase_s_sql_lease_alive(tmp_path: Path) -> None:
    """A phase that runs past the lease's ttl without a step: the heartbeat renews the lease, so a
    runner on another machine would still see it held (not expired) halfway through."""
    url = f"sqlite:///{tmp_path}/l.db"
    pipe = phaselog.pipeline("long", phases=["wait"])
    seen: list[Any] = []

    @pipe.phase("wait")
    def wait(ctx: Any) -> Any:
        import time

        time.sleep(1.5)  # five ttls of 0.3 s, no ctx.step
        other = open_store(url)
        try:
            seen.append(other.run_leases().read(ctx.ticket_id, ctx.run_id))  # type: ignore[attr-defined]
        finally:
            other.close()
        return {}

    pipe.run("HB-1", "r", store=url, workdir=tmp_path, ttl=0.3, handle_signals=False)
    state = seen[0]
    assert state.holder is not None
    assert state.expires_at is not None
    assert state.expires_at > state.now  # renewed within the last ttl
    assert state.renewed_at is not None
    assert state.now - state.renewed_at < 0.3
    remote = leasing.judge(state, host="another-machine")
    assert not remote.take  # a runner elsewhere would wait for it
