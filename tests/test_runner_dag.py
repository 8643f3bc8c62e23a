"""A DAG run by `phaselog run`: phases whose needs are met run side by side (issue 25).

The pipeline: ``a``; ``b`` and ``c`` need ``a``; ``d`` and ``e`` need ``b`` and ``c`` (two pairs in
parallel). Every shell phase appends ``start``/``end`` lines with a timestamp to effects.log; the
pairs also wait for each other to have started (a barrier with a generous deadline), so they
can only finish when they really ran at the same time, and the log's intervals overlap. The
tests compare the intervals in the log; they never time anything.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phaselog
from helpers import Result, cli_env, wait_for
from phaselog.model.errors import PhaseFailed, UsageError
from zygote_support import Zygote

NEEDS: dict[str, list[str]] = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"], "e": ["b", "c"]}
PAIRS = {"b": "c", "c": "b", "d": "e", "e": "d"}
#: The barrier: mark that this phase started, then wait (at most ~60 s) for its partner to start.
BARRIER = (
    'touch "started.$PHASELOG_PHASE"; n=0; while [ ! -e "started.{other}" ]; do sleep 0.01; n=$((n+1)); '
    '[ "$n" -gt 6000 ] && exit 9; done; '
)


def command(name: str, body: str = "", *, barrier: bool = True) -> str:
    stamp = 'echo "{what} $PHASELOG_PHASE $(date +%s.%N) $$-$PHASELOG_ATTEMPT" >> effects.log'
    wait = BARRIER.format(other=PAIRS[name]) if barrier and name in PAIRS else ""
    return f"{stamp.format(what='start')}; {wait}{body}{stamp.format(what='end')}"


def manifest(
    path: Path,
    bodies: Mapping[str, str] | None = None,
    *,
    barrier: bool = True,
    gated: tuple[str, ...] = (),
    needs: Mapping[str, list[str]] = NEEDS,
) -> Path:
    phases: list[dict[str, Any]] = []
    for name, wants in needs.items():
        ph: dict[str, Any] = {"name": name, "run": command(name, (bodies or {}).get(name, ""), barrier=barrier)}
        if wants or name != "a":
            ph["needs"] = wants
        if name in gated:
            ph["requires_approval"] = True
        phases.append(ph)
    path.write_text(json.dumps({"name": "dag5", "version": "1", "phases": phases}))
    return path


def effects(workdir: Path) -> list[tuple[str, str, float, str]]:
    """(event, phase, time, execution) per line of the effects log."""
    log = workdir / "effects.log"
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        event, phase, at, exec_id = line.split()
        out.append((event, phase, float(at), exec_id))
    return out


def intervals(workdir: Path) -> dict[str, list[tuple[float, float | None]]]:
    """Per phase, each execution's (start, end) from the log (end None: it never ended)."""
    starts: dict[str, float] = {}
    out: dict[str, list[tuple[float, float | None]]] = {}
    ends: dict[str, float] = {}
    for event, _phase, at, exec_id in effects(workdir):
        if event == "start":
            starts[exec_id] = at
        else:
            ends[exec_id] = at
    for event, phase, _at, exec_id in effects(workdir):
        if event == "start":
            out.setdefault(phase, []).append((starts[exec_id], ends.get(exec_id)))
    return out


def overlap(x: tuple[float, float | None], y: tuple[float, float | None]) -> bool:
    return x[0] < (y[1] or float("inf")) and y[0] < (x[1] or float("inf"))


def cli(cwd: Path, store: str, *args: str) -> Result:
    """``phaselog ARGS`` in a subprocess, in ``cwd`` (the runner's working folder), on ``store``."""
    proc = subprocess.run(
        [sys.executable, "-m", "phaselog", *args],
        cwd=cwd,
        env=cli_env(PHASELOG_STORE=store),
        capture_output=True,
        timeout=120,  # a guard against a hang, not a measurement
        check=False,
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert "Traceback" not in out + err, out + err
    return Result(proc.returncode, out, err)


def run(tmp_path: Path, store: str, *args: str) -> Result:
    return cli(tmp_path, store, "run", "--ticket-id", "VID-1", *args)


@pytest.fixture(params=["files", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "store") if request.param == "files" else f"sqlite:///{tmp_path}/ledger.db"


def records(store: str, run_id: str) -> dict[str, list[Any]]:
    with phaselog.open(store) as led:
        out: dict[str, list[Any]] = {}
        for s in led.list("VID-1", run_id).items:
            out.setdefault(s.record.phase, []).append(s.record)
        return out


def test_the_pairs_run_side_by_side_each_phase_once(tmp_path: Path, store: str) -> None:
    m = manifest(tmp_path / "dag.json")
    r = run(tmp_path, store, "--pipeline-file", str(m), "--run-id", "r1", "--max-parallel", "4")
    assert r.rc == 0, r.err
    assert r.json["states"] == dict.fromkeys(NEEDS, "completed")  # the state after the run, from its writes
    spans = intervals(tmp_path)
    assert {p: len(s) for p, s in spans.items()} == dict.fromkeys(NEEDS, 1)  # each phase executed once
    (a,), (b,), (c,), (d,), (e,) = (spans[p] for p in "abcde")
    assert overlap(b, c)
    assert overlap(d, e)
    for later, earlier in ((b, a), (c, a), (d, b), (d, c), (e, b), (e, c)):
        assert earlier[1] is not None
        assert later[0] > earlier[1]
    assert all(len(rs) == 1 and rs[0].completed for rs in records(store, "r1").values())
    assert cli(tmp_path, store, "verify", "--ticket-id", "VID-1", "--run-id", "r1").rc == 0
    again = run(tmp_path, store, "--pipeline-file", str(m), "--run-id", "r1", "--max-parallel", "4")
    assert again.rc == 0
    assert len(effects(tmp_path)) == 10
    assert [p["outcome"] for p in again.json["phases"]] == ["skipped"] * 5


def test_max_parallel_1_is_the_default_one_phase_at_a_time(tmp_path: Path) -> None:
    m = manifest(tmp_path / "dag.json", barrier=False)
    r = run(tmp_path, str(tmp_path / "store"), "--pipeline-file", str(m), "--run-id", "r1")
    assert r.rc == 0, r.err
    spans = [s for p in "abcde" for s in intervals(tmp_path)[p]]
    assert [e for e, *_ in effects(tmp_path)] == ["start", "end"] * 5  # in manifest order, one at a time
    assert not any(overlap(x, y) for i, x in enumerate(spans) for y in spans[i + 1 :])


def test_a_failure_starts_nothing_new_and_lets_the_running_phase_finish(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/ledger.db"
    bodies = {
        "c": "touch c.failing; exit 3; ",
        "b": "while [ ! -e c.failing ]; do sleep 0.01; done; sleep 0.2; ",
    }
    m = manifest(tmp_path / "dag.json", bodies)
    r = run(tmp_path, store, "--pipeline-file", str(m), "--run-id", "r1", "--max-parallel", "4")
    assert r.rc == 1, r.err
    spans = intervals(tmp_path)
    assert set(spans) == {"a", "b", "c"}  # d and e never started
    assert spans["b"][0][1] is not None  # b, running when c failed, finished
    recs = records(store, "r1")
    assert recs["b"][-1].completed
    assert recs["c"][-1].status == "failed"
    outcomes = {p["phase"]: p["outcome"] for p in r.json["phases"]}
    assert outcomes == {"a": "completed", "b": "completed", "c": "failed", "d": "not_reached", "e": "not_reached"}


def test_fail_fast_interrupts_the_running_phase(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    bodies = {"c": "touch c.failing; exit 3; ", "b": "sleep 60; "}
    m = manifest(tmp_path / "dag.json", bodies)
    args = ("--pipeline-file", str(m), "--run-id", "r1", "--max-parallel", "4", "--fail-fast")
    r = run(tmp_path, store, *args)
    assert r.rc == 1, r.err
    spans = intervals(tmp_path)
    assert spans["b"] == [(spans["b"][0][0], None)]  # b was stopped: it never ended
    b = records(store, "r1")["b"][-1]
    assert b.status == "failed"
    assert "interrupted" in (b.error or "")
    assert {p["phase"]: p["outcome"] for p in r.json["phases"]}["b"] == "interrupted"


def test_sigterm_interrupts_every_running_phase_then_the_rerun_finishes(tmp_path: Path, store: str) -> None:
    # The first attempts of b and c hang (once both started); their second attempts do not.
    hang = '[ "$PHASELOG_ATTEMPT" = 1 ] && sleep 60; '
    m = manifest(tmp_path / "dag.json", {"b": hang, "c": hang})
    argv = [sys.executable, "-m", "phaselog", "run", "--ticket-id", "VID-1", "--pipeline-file", str(m)]
    argv += ["--run-id", "r1", "--max-parallel", "4"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=cli_env(PHASELOG_STORE=store), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    wait_for(lambda: (tmp_path / "started.b").exists() and (tmp_path / "started.c").exists(), "b and c to start")
    wait_for(lambda: len([e for e in effects(tmp_path) if e[1] in "bc"]) == 2, "both in their bodies")
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    recs = records(store, "r1")
    for phase in "bc":
        assert recs[phase][-1].status == "failed"
        assert "interrupted by SIGTERM" in (recs[phase][-1].error or "")
    assert "d" not in recs
    assert "e" not in recs
    for f in ("started.b", "started.c"):
        (tmp_path / f).unlink()
    r = run(tmp_path, store, "--pipeline-file", str(m), "--run-id", "r1", "--max-parallel", "4")
    assert r.rc == 0, r.err
    spans = intervals(tmp_path)
    assert len(spans["a"]) == 1
    assert len(spans["d"]) == 1
    assert len(spans["e"]) == 1
    assert [s[1] is None for s in spans["b"]] == [True, False]  # interrupted once, then done
    assert cli(tmp_path, store, "verify", "--ticket-id", "VID-1", "--run-id", "r1").rc == 0


@pytest.mark.parametrize("max_parallel", ["1", "3"])
def test_a_gate_holds_only_what_needs_it(tmp_path: Path, max_parallel: str) -> None:
    store = str(tmp_path / "store")
    needs = {"a": [], "b": ["a"], "c": ["a"], "d": ["b"], "e": ["c"]}
    m = manifest(tmp_path / "dag.json", barrier=False, gated=("b",), needs=needs)
    r = run(tmp_path, store, "--pipeline-file", str(m), "--run-id", "r1", "--max-parallel", max_parallel)
    assert r.rc == 3, r.err  # waiting for approval
    outcomes = {p["phase"]: p["outcome"] for p in r.json["phases"]}
    assert outcomes == {"a": "completed", "b": "waiting", "c": "completed", "d": "not_reached", "e": "completed"}
    plan = cli(tmp_path, store, "explain", "--ticket-id", "VID-1", "--run-id", "r1", "--pipeline-file", str(m))
    actions = {p["phase"]: (p["action"], p["needs"]) for p in plan.json["phases"]}
    assert actions == {
        "a": ("skip", []),
        "b": ("wait", ["a"]),
        "c": ("skip", ["a"]),
        "d": ("not_reached", ["b"]),
        "e": ("skip", ["c"]),
    }
    approve = ("approve", "--ticket-id", "VID-1", "--run-id", "r1", "--phase", "b", "--by", "ana")
    assert cli(tmp_path, store, *approve, "--pipeline-file", str(m)).rc == 0
    r = run(tmp_path, store, "--pipeline-file", str(m), "--run-id", "r1", "--max-parallel", max_parallel)
    assert r.rc == 0, r.err
    assert {p: len(s) for p, s in intervals(tmp_path).items()} == dict.fromkeys("abcde", 1)  # d ran; nothing again


def test_explain_says_what_each_phase_waits_for(tmp_path: Path) -> None:
    m = manifest(tmp_path / "dag.json", barrier=False)
    with phaselog.open(tmp_path / "store") as led:
        plan = phaselog.pipeline(m).explain("VID-1", "r1", store=led)
    rows = {p.phase: (p.action, p.waits_for) for p in plan.phases}
    assert rows == {"a": ("run", ()), "b": ("run", ("a",)), "c": ("run", ("a",)), "d": ("run", ("b", "c")),
                    "e": ("run", ("b", "c"))}  # fmt: skip


def test_a_worker_runs_a_dag_run_side_by_side(pg_schema_url: str, tmp_path: Path) -> None:
    from queue_support import cli_json, start_worker

    cli_json("store", "migrate", "--store", pg_schema_url)
    m = manifest(tmp_path / "dag5.json")
    work = tmp_path / "work"
    work.mkdir()
    run_id = cli_json("submit", "--store", pg_schema_url, "--pipeline-file", str(m), "--ticket-id", "VID-1")["run_id"]
    proc = start_worker(pg_schema_url, tmp_path, work, "--burst", "--max-parallel", "4")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert json.loads(out)["outcomes"] == {"done": 1}
    spans = intervals(work)
    assert {p: len(s) for p, s in spans.items()} == dict.fromkeys(NEEDS, 1)
    assert overlap(spans["b"][0], spans["c"][0])
    assert overlap(spans["d"][0], spans["e"][0])
    assert all(len(rs) == 1 and rs[0].completed for rs in records(pg_schema_url, run_id).values())


# -- Python phases run on threads ------------------------------------------------------------------
def python_dag(
    tmp_path: Path, fail_c: bool = False, timeout_b: float | None = None
) -> tuple[phaselog.PipelineRunner, list[str]]:
    doc = {"name": "pydag", "version": "1", "phases": [{"name": n, "needs": w} for n, w in NEEDS.items()]}
    (tmp_path / "pydag.json").write_text(json.dumps(doc))
    pipe = phaselog.pipeline(tmp_path / "pydag.json")
    meet = threading.Barrier(2, timeout=30)
    seen: list[str] = []

    def make(name: str) -> Any:
        def phase(ctx: Any) -> dict[str, Any]:
            seen.append(f"start {name} {threading.current_thread().name}")
            if name in "bc":
                meet.wait()  # both on threads at once, or this times out
                if name == "c" and fail_c:
                    raise RuntimeError("c breaks")
                if name == "b" and fail_c:
                    for _ in range(6000):  # interrupted by fail-fast at its next instruction
                        threading.Event().wait(0.01)
            seen.append(f"end {name}")
            return {"by": threading.current_thread().name}

        return phase

    for n in NEEDS:
        pipe.phase(n, timeout=timeout_b if n == "b" else None)(make(n))
    return pipe, seen


def test_python_phases_run_on_threads_side_by_side(tmp_path: Path) -> None:
    pipe, seen = python_dag(tmp_path)
    with phaselog.open(tmp_path / "store") as led:
        result = pipe.run("VID-1", "r1", store=led, workdir=tmp_path, quiet=True, max_parallel=2)
        assert result.done
        assert led.verify("VID-1", "r1").ok
    starts = [s for s in seen if s.startswith("start")]
    assert len(starts) == 5
    assert all("phaselog-phase-" in s for s in starts)


def test_fail_fast_interrupts_a_python_phase_on_its_thread(tmp_path: Path) -> None:
    pipe, seen = python_dag(tmp_path, fail_c=True)
    with phaselog.open(tmp_path / "store") as led:
        with pytest.raises(PhaseFailed) as info:
            pipe.run("VID-1", "r1", store=led, workdir=tmp_path, quiet=True, max_parallel=2, fail_fast=True)
        b = led.read("VID-1", "r1", "b", 1).record
    assert info.value.context["phase"] == "c"
    assert b.status == "failed"
    assert "interrupted" in (b.error or "")
    assert "end b" not in seen
    assert {o.phase: o.outcome for o in info.value.result.phases}["b"] == "interrupted"


PY_RUNNER = """
import json, sys, time
from pathlib import Path
import phaselog

needs = json.loads(sys.argv[3])
doc = {"name": "pydag", "version": "1", "phases": [{"name": n, "needs": w} for n, w in needs.items()]}
Path("pydag.json").write_text(json.dumps(doc))
pipe = phaselog.pipeline("pydag.json")

def make(name):
    def phase(ctx):
        if name in "bc" and ctx.attempt == 1:
            Path(f"started.{name}").touch()
            while True:  # until the runner interrupts it
                time.sleep(0.01)
        return {"attempt": ctx.attempt}
    return phase

for n in needs:
    pipe.phase(n)(make(n))
try:
    pipe.run("VID-1", "r1", store=sys.argv[1], workdir=".", quiet=True, max_parallel=int(sys.argv[2]))
except phaselog.RunInterrupted as exc:
    sys.exit(exc.exit_code)
"""


def test_sigterm_interrupts_python_phases_on_their_threads(tmp_path: Path) -> None:
    script = tmp_path / "pyrun.py"
    script.write_text(PY_RUNNER)
    store = str(tmp_path / "store")
    argv = [sys.executable, str(script), store, "4", json.dumps(NEEDS)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: (tmp_path / "started.b").exists() and (tmp_path / "started.c").exists(), "b and c to start")
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    recs = records(store, "r1")
    for phase in "bc":
        assert recs[phase][-1].status == "failed"
        assert "interrupted by SIGTERM" in (recs[phase][-1].error or "")
    assert "d" not in recs
    again = subprocess.run(argv, cwd=tmp_path, env=cli_env(), capture_output=True, timeout=60, check=False)
    assert again.returncode == 0, again.stderr
    with phaselog.open(store) as led:
        assert led.verify("VID-1", "r1").ok


@st.composite
def dags(draw: st.DrawFn) -> dict[str, list[str]]:
    """A DAG of 2-7 phases, each needing some of the phases listed before it (maybe none)."""
    names = [f"p{i}" for i in range(draw(st.integers(2, 7)))]
    return {n: draw(st.lists(st.sampled_from(names[:i]), unique=True)) if i else [] for i, n in enumerate(names)}


@settings(max_examples=25)
@given(needs=dags(), width=st.integers(1, 4), gated=st.booleans())
def test_every_phase_runs_once_after_what_it_needs(
    tmp_path_factory: pytest.TempPathFactory, needs: dict[str, list[str]], width: int, gated: bool
) -> None:
    """Whatever the graph and the width: each phase runs once, after every phase it needs ended; at
    most ``width`` at a time; a gate holds exactly its descendants."""
    tmp = tmp_path_factory.mktemp("dag")
    gate = next(iter(needs)) if gated else None
    doc = {"name": "prop", "version": "1", "phases": [{"name": n, "needs": w} for n, w in needs.items()]}
    if gate is not None:
        doc["phases"][0]["requires_approval"] = True
    (tmp / "prop.json").write_text(json.dumps(doc))
    pipe = phaselog.pipeline(tmp / "prop.json")
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    now = [0, 0]  # running, most at once

    def make(name: str) -> Any:
        def phase(ctx: Any) -> dict[str, Any]:
            with lock:
                events.append(("start", name))
                now[0] += 1
                now[1] = max(now)
            threading.Event().wait(0.002)
            with lock:
                events.append(("end", name))
                now[0] -= 1
            return {}

        return phase

    for n in needs:
        pipe.phase(n)(make(n))
    with phaselog.open(tmp / "store") as led:
        result = pipe.run("P", "r1", store=led, workdir=tmp, quiet=True, max_parallel=width)
    held = set(pipe.pipeline.graph.descendants(gate)) if gate is not None else set()
    assert [n for e, n in events if e == "start"] == list(dict.fromkeys(n for e, n in events if e == "start"))
    assert {n for e, n in events if e == "start"} == set(needs) - held
    for i, (event, name) in enumerate(events):
        if event == "start":
            ended = {n for e, n in events[:i] if e == "end"}
            assert set(needs[name]) <= ended, f"{name} started before {set(needs[name]) - ended} ended"
    assert now[1] <= width
    assert {o.phase for o in result.phases if o.outcome == "not_reached"} == held
    assert result.waiting == gate


def test_a_python_phase_timeout_needs_one_phase_at_a_time(tmp_path: Path) -> None:
    pipe, _ = python_dag(tmp_path, timeout_b=5)
    with phaselog.open(tmp_path / "store") as led:
        with pytest.raises(UsageError, match="phase b: a Python phase's timeout needs the main thread") as info:
            pipe.run("VID-1", "r1", store=led, workdir=tmp_path, quiet=True, max_parallel=2)
        assert info.value.context["field"] == "max_parallel"
        assert led.list("VID-1", "r1").items == []  # nothing ran, nothing recorded
        with pytest.raises(UsageError, match="max_parallel must be a whole number"):
            pipe.run("VID-1", "r1", store=led, workdir=tmp_path, quiet=True, max_parallel=0)


def test_the_cli_refuses_a_bad_max_parallel(tmp_path: Path) -> None:
    m = manifest(tmp_path / "dag.json")
    r = run(tmp_path, str(tmp_path / "store"), "--pipeline-file", str(m), "--max-parallel", "0")
    assert r.rc == 2
    assert "max-parallel" in r.out
    assert not os.path.exists(tmp_path / "effects.log")


# -- SIGKILL at random moments ----------------------------------------------------------------------
DAG_WORKER = Path(__file__).parent / "dag_worker.py"
KILLS = int(os.environ.get("PHASELOG_DAG_CRASH_KILLS", "100"))  # per store (the bar: >= 100 rounds, files and SQLite)
KILLS_PER_TRIAL = 4


def crash_effects(workdir: Path) -> list[tuple[str, str, str, str]]:
    log = workdir / "effects.log"
    return [tuple(line.split()) for line in log.read_text().splitlines()] if log.exists() else []  # type: ignore[misc]


def check_trial(led: Any, ticket: str, run_id: str, workdir: Path) -> None:
    from dag_worker import NEEDS as CRASH_NEEDS
    from dag_worker import pipeline_of

    assert led.status(ticket, run_id, pipeline=pipeline_of(workdir).pipeline).done
    assert led.verify(ticket, run_id).ok
    lines = crash_effects(workdir)
    recs = [s.record for s in led.list(ticket, run_id).items]
    assert all(r.completed for r in recs), [(r.phase, r.attempt_number, r.error) for r in recs]
    counted_done: dict[str, int] = {}
    for phase in CRASH_NEEDS:
        mine = [r for r in recs if r.phase == phase]
        assert len(mine) == 1, f"{phase} completed {len(mine)} times"
        counted = mine[0].phase_payload["exec"]
        done = [i for i, (p, e, x, _) in enumerate(lines) if p == phase and e == "done" and x == counted]
        assert len(done) == 1, f"{phase}: the counted execution {counted} completed {len(done)} times"
        counted_done[phase] = done[0]
        again = [x for (p, e, x, _) in lines[done[0] + 1 :] if p == phase and e == "start"]
        assert not again, f"{phase} started again after its counted execution completed: {again}"
    for i, (phase, event, exec_id, _) in enumerate(lines):
        if event == "start":
            early = [n for n in CRASH_NEEDS[phase] if counted_done[n] > i]
            assert not early, f"{phase} {exec_id} started before {early} completed"
    # A runner's commands die with it (SIGKILL leaves a start without its done): once a later runner
    # wrote, nothing of an earlier one's commands is written again, and within one runner a phase runs
    # once at a time.
    runners = list(dict.fromkeys(r for (_, _, _, r) in lines))
    for i, (phase, event, exec_id, runner) in enumerate(lines):
        later = [r for (_, _, _, r) in lines[:i] if runners.index(r) > runners.index(runner)]
        assert not later, f"{phase} {event} {exec_id} of runner {runner} after runner {later[0]} began"
    running: dict[tuple[str, str], str] = {}
    for phase, event, exec_id, runner in lines:
        if event == "start":
            assert (runner, phase) not in running, f"{phase} {exec_id} started while {running[runner, phase]} ran"
            running[runner, phase] = exec_id
        elif running.get((runner, phase)) == exec_id:
            del running[runner, phase]


@pytest.mark.slow
@pytest.mark.parametrize("store_kind", ["files", "sqlite"])
def test_sigkill_at_random_moments_then_rerun_until_complete(store_kind: str, tmp_path: Path) -> None:
    import random
    import time
    import uuid

    store = str(tmp_path / "store") if store_kind == "files" else f"sqlite:///{tmp_path}/ledger.db"
    rng = random.Random(int(os.environ.get("PHASELOG_CRASH_SEED", "25")))
    zygote = Zygote(DAG_WORKER, store, "DAG")
    cal = tmp_path / "calibrate"
    cal.mkdir()
    began = time.monotonic()
    assert zygote.wait(zygote.start(str(uuid.uuid4()), cal)) == 0
    # The kill window: a whole run (not a measurement of anything), bounded so that a calibration
    # run slowed by a busy machine does not stretch 100 kills past the test's timeout.
    window = min(time.monotonic() - began, 2.0)
    kills, trial = 0, 0
    try:
        with phaselog.open(store) as led:
            while kills < KILLS:
                trial += 1
                workdir = tmp_path / f"t{trial}"
                workdir.mkdir()
                run_id = str(uuid.uuid4())
                for _ in range(KILLS_PER_TRIAL):
                    pid = zygote.start(run_id, workdir)
                    time.sleep(rng.uniform(0, window))
                    os.kill(pid, signal.SIGKILL)
                    kills += zygote.wait(pid) == -signal.SIGKILL
                for _ in range(100):  # rerun until complete (75: a killed runner's command is still ending)
                    code = zygote.wait(zygote.start(run_id, workdir))
                    if code == 0:
                        break
                    assert code == 75, f"a rerun exited {code}"
                    time.sleep(0.02)
                check_trial(led, "DAG", run_id, workdir)
    finally:
        zygote.close()
    print(f"\n{store_kind}: {kills} SIGKILLs in {trial} trials")
    assert kills >= KILLS


# -- the lease names every running command -----------------------------------------------------------
def test_a_dead_runner_s_groups_side_by_side_are_all_ended_before_a_takeover() -> None:
    import socket

    from phaselog.model.ids import normalize_run_id
    from phaselog.runner import lease as leasing
    from phaselog.stores.base import LeaseState

    run_id = normalize_run_id("r")
    mine = {"PHASELOG_RUN_ID": run_id, "PHASELOG_LEASE_TOKEN": "7"}
    groups = [subprocess.Popen(["sleep", "30"], env={**os.environ, **mine}, start_new_session=True) for _ in "ab"]
    other = subprocess.Popen(
        ["sleep", "30"], env={**os.environ, **mine, "PHASELOG_LEASE_TOKEN": "8"}, start_new_session=True
    )
    try:
        dead = {"host": socket.gethostname(), "pid": 2**22 + 4321, "process_start": 1.0}
        pgids = [p.pid for p in groups]

        def state(holder: dict[str, Any]) -> LeaseState:
            return LeaseState("T", run_id, 7, holder, 100.0, 130.0, 110.0, lock_free=True)

        held = leasing.judge(state({**dead, "child_pgid": pgids[0], "child_pgids": [*pgids, other.pid]}))
        assert not held.take
        assert not isinstance(held, leasing.Orphaned)  # one group is not provably the dead runner's
        assert "not provably its own" in held.reason
        verdict = leasing.judge(state({**dead, "child_pgid": pgids[0], "child_pgids": pgids}))
        assert isinstance(verdict, leasing.Orphaned)
        assert sorted(verdict.pids) == sorted(pgids)
        assert leasing.end_orphans(verdict)
        assert [p.wait(timeout=10) for p in groups] == [-signal.SIGKILL] * 2
        assert other.poll() is None
    finally:
        for p in (*groups, other):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_the_lease_lists_the_groups_of_phases_side_by_side_and_reads_as_before_alone(tmp_path: Path) -> None:
    from phaselog.runner import lease as leasing

    with phaselog.open(tmp_path / "store") as led:
        from phaselog.model.ids import normalize_run_id

        lease = leasing.acquire(led.store, "T", normalize_run_id("r1"))
        try:
            lease.renew(child_pgid=11, phase="b", attempt=1)  # alone: today's holder
            assert (lease.holder["child_pgid"], lease.holder["phase"]) == (11, "b")
            assert "child_pgids" not in lease.holder
            seen: list[dict[str, Any]] = []

            def other() -> None:
                lease.renew(child_pgid=12, phase="c", attempt=1)
                seen.append(dict(lease.holder))
                lease.renew(child_pgid=None, phase=None, attempt=None)

            t = threading.Thread(target=other)
            t.start()
            t.join()
            assert seen[0]["child_pgids"] == [11, 12]
            assert "phase" not in seen[0]
            assert lease.holder["child_pgids"] == [11]
            lease.renew(child_pgid=None, phase=None, attempt=None)
            assert not {"child_pgid", "child_pgids", "phase"} & set(lease.holder)
        finally:
            lease.release()
