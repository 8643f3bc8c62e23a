"""Attempts that end in an unusual way are recorded like any failure, and nothing of a phase
outlives the runner's hold on the run. Real `phaselog run` processes, real signals, real
subprocesses; an flock in the phase shows whether two copies of it ever ran at once.

* a phase's ``sys.exit(4)`` / ``raise KeyboardInterrupt`` / a 200,000-level JSON payload line:
  a recorded failed attempt with its reason, the CLI's JSON result naming the phase (exit 1);
* a real SIGINT to the runner during a Python phase: recorded as interrupted (exit 130), not as
  the phase's own KeyboardInterrupt;
* a real SIGTERM: the result's ``phases`` lists the interrupted phase;
* an exception on the output path of an embedded ``pipe.run`` (the log's file system refuses the
  write): the command's whole process group is ended before the lease is released, so a second
  runner never overlaps it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import phaselog

REPO = Path(__file__).resolve().parent.parent

PHASES_PY = """
import os, sys, time

def leave(ctx):
    sys.exit(4)

def ctrl_c(ctx):
    raise KeyboardInterrupt()

def slow(ctx):
    open(os.path.join(str(ctx.workdir), "started"), "w").close()
    time.sleep(60)
    return {"late": True}
"""

DEEP = "python3 -c \"print('{\\\\\"a\\\\\":' * 200000 + '1' + '}' * 200000)\""

# Takes an flock for its whole life: a second copy that finds it taken notes an overlap.
GUARDED = (
    'exec 9>>"$WORK/phase.lock"; '
    'if ! flock -n 9; then echo "overlap attempt $PHASELOG_ATTEMPT" >> "$WORK/overlaps.log"; exit 9; fi; '
    'echo "start $PHASELOG_ATTEMPT" >> "$WORK/starts.log"; '
)


def _env(store: str, workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env.update(PHASELOG_STORE=store, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{workdir}", WORK=str(workdir))
    return env


def _manifest(workdir: Path, phases: list[dict[str, Any]]) -> Path:
    (workdir / "rphases.py").write_text(PHASES_PY)
    path = workdir / "job.yaml"
    path.write_text(json.dumps({"name": "errs", "version": "1", "phases": phases}))
    return path


def _run(store: str, workdir: Path, run: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "phaselog", "run", "--pipeline-file", str(workdir / "job.yaml"), "--quiet",
         "--ticket-id", "E-1", "--run-id", run],
        cwd=workdir, env=_env(store, workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw,
    )  # fmt: skip


def _attempts(store: str, workdir: Path, run: str) -> list[tuple[str, int, str, dict[str, Any]]]:
    ledger = phaselog.Ledger(phaselog.open_store(store))
    try:
        got = ledger.list("E-1", run).items
        return [(s.record.phase, s.record.attempt_number, s.record.status, dict(s.record.phase_payload)) for s in got]
    finally:
        ledger.close()


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, f"{path.name} never appeared"
        time.sleep(0.05)


@pytest.fixture(params=["files", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "store") if request.param == "files" else f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.mark.parametrize(
    ("phase", "said", "detail"),
    [
        ({"call": "rphases:leave"}, "SystemExit: the phase called sys.exit(4)", {"type": "SystemExit", "exit_code": 4}),
        (
            {"call": "rphases:ctrl_c"},
            "KeyboardInterrupt: raised by the phase itself (no signal reached the runner)",
            {"type": "KeyboardInterrupt"},
        ),
        (
            {"run": DEEP},
            "nested deeper than 62 levels (rule max_depth",
            {"rule": "bad_result", "max_depth": 62},
        ),
    ],
    ids=["sys_exit", "keyboard_interrupt", "payload_too_deep"],
)
def test_an_unusual_end_of_a_phase_is_a_recorded_failed_attempt(
    store: str, tmp_path: Path, phase: dict[str, Any], said: str, detail: dict[str, Any]
) -> None:
    _manifest(tmp_path, [{"name": "one", **phase}, {"name": "two", "run": "echo '{}'"}])
    proc = _run(store, tmp_path, "r")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)
    assert "Traceback" not in err
    assert "internal error" not in out
    result = json.loads(out)
    assert result["success"] is False
    assert result["failed"] == "one"
    assert result["error_code"] == "phase_failed"
    assert said in result["error"]
    assert [(p["phase"], p["outcome"]) for p in result["phases"]] == [("one", "failed"), ("two", "not_reached")]
    assert said in result["phases"][0]["error"]
    [(name, number, status, payload)] = _attempts(store, tmp_path, "r")
    assert (name, number, status) == ("one", 1, "failed")
    failure = payload["failure"]
    assert said in failure["message"]
    assert detail.items() <= failure.items()


def test_a_real_sigint_during_a_python_phase_is_an_interruption_not_the_phase_s_own(store: str, tmp_path: Path) -> None:
    _manifest(tmp_path, [{"name": "one", "call": "rphases:slow"}])
    proc = _run(store, tmp_path, "r")
    _wait_for(tmp_path / "started", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    result = json.loads(out)
    assert result["interrupted"] == signal.SIGINT
    assert [(p["phase"], p["outcome"]) for p in result["phases"]] == [("one", "interrupted")]
    [(_, _, status, payload)] = _attempts(store, tmp_path, "r")
    assert status == "failed"
    assert payload["failure"]["rule"] == "interrupted"
    assert payload["failure"]["signal"] == "SIGINT"


@pytest.mark.parametrize("kind", ["shell", "python"])
def test_a_sigtermed_run_s_result_names_the_interrupted_phase(store: str, tmp_path: Path, kind: str) -> None:
    slow = {"run": 'touch started; sleep 60; echo "{}"'} if kind == "shell" else {"call": "rphases:slow"}
    _manifest(tmp_path, [{"name": "first", "run": "echo '{\"n\": 1}'"}, {"name": "one", **slow}])
    proc = _run(store, tmp_path, "r")
    _wait_for(tmp_path / "started", proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    result = json.loads(out)
    assert result["interrupted"] == signal.SIGTERM
    assert [(p["phase"], p["outcome"]) for p in result["phases"]] == [("first", "completed"), ("one", "interrupted")]
    assert result["phases"][1]["attempts"] == [1]
    assert "SIGTERM" in result["phases"][1]["error"]
    recorded = [(n, a, s) for n, a, s, _ in _attempts(store, tmp_path, "r")]
    assert recorded == [("first", 1, "completed"), ("one", 1, "failed")]


EMBEDDED = """
import json, resource, signal, sys, time
import phaselog

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
pipe = phaselog.pipeline(sys.argv[1])
try:
    pipe.run("E-1", "r", store=sys.argv[2], log_dir=sys.argv[4], quiet=True)
    print(json.dumps({"raised": None}), flush=True)
except BaseException as exc:
    print(json.dumps({"raised": type(exc).__name__, "message": str(exc)}), flush=True)
time.sleep(120)  # a long-lived process: its phase's command would not die with it
"""


@pytest.mark.parametrize("how", ["log_write_fails", "deep_line"])
def test_an_error_on_the_output_path_ends_the_command_before_the_lease_is_released(
    store: str, tmp_path: Path, how: str
) -> None:
    limit = 4 << 20
    # log_write_fails: more output than the runner may write to its log (EFBIG, as a full disk);
    # deep_line: a 200,000-level JSON line, which a recursive parse could not take.
    output = f"head -c {2 * limit} /dev/zero | tr '\\0' 'x'; echo" if how == "log_write_fails" else DEEP
    command = GUARDED + textwrap.dedent(
        f"""
        if [ "$PHASELOG_ATTEMPT" = 1 ]; then
          {output}
          sleep {60 if how == "log_write_fails" else 8}
          exit 0
        fi
        echo '{{"ok": 1}}'
        """
    )
    manifest = _manifest(tmp_path, [{"name": "one", "run": command}])
    (tmp_path / "embedded.py").write_text(EMBEDDED)
    embedded = subprocess.Popen(
        [sys.executable, str(tmp_path / "embedded.py"), str(manifest), store, str(limit), str(tmp_path / "logs")],
        cwd=tmp_path, env=_env(store, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert embedded.stdout is not None
        said = json.loads(embedded.stdout.readline() or "{}")
        # pipe.run returned while its process lives on: a second runner takes the run now
        second = _run(store, tmp_path, "r")
        out, err = second.communicate(timeout=120)
        assert not (tmp_path / "overlaps.log").exists(), (tmp_path / "overlaps.log").read_text()
        assert second.returncode == 0, (out, err, said)
        assert (tmp_path / "starts.log").read_text().split("\n")[:2] == ["start 1", "start 2"], out
    finally:
        embedded.kill()
        embedded.communicate()
    assert said.get("raised") == "PhaseFailed", said
    recorded = _attempts(store, tmp_path, "r")
    assert [(n, a, s) for n, a, s, _ in recorded] == [("one", 1, "failed"), ("one", 2, "completed")]
    failure = recorded[0][3]["failure"]
    if how == "log_write_fails":
        assert "the runner failed while running the attempt: OSError" in said["message"]
        assert "File too large" in said["message"]
        assert (failure["rule"], failure["type"]) == ("runner_error", "OSError")
    else:
        assert (failure["rule"], failure["max_depth"]) == ("bad_result", 62)
