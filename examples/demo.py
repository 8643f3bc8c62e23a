"""`make demo`: phaselog's runner runs a ticket pipeline, is killed (SIGKILL) inside phase 3, and a
rerun finishes without redoing phases 1-2; then a shell data job, a gated video pipeline, and a video
as a DAG whose voice-over and b-roll run side by side.

Everything runs on the default files store, rooted at .demo/ in this checkout.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent / ".demo"
TICKET, RUN = "DEMO-1", "demo-run-1"
ENV = {**os.environ, "PHASELOG_HOME": str(ROOT / "store"), "PYTHONUNBUFFERED": "1"}
BIN = Path(sys.executable).parent
ENV["PATH"] = f"{BIN}{os.pathsep}{ENV.get('PATH', '')}"


def banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def command(args: tuple[str, ...]) -> list[str]:
    """The phaselog CLI of this venv (or the module, if the script is missing) with ``args``."""
    exe = BIN / "phaselog"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "phaselog", *args]


def phaselog(*args: str, quiet: bool = False, cwd: Path | None = None) -> int:
    """Run the phaselog CLI as a user would, showing the command (and its output unless quiet)."""
    print(f"$ phaselog {shlex.join(args)}" + ("   # (output omitted)" if quiet else ""), flush=True)
    out = subprocess.DEVNULL if quiet else None
    code = subprocess.run(command(args), env=ENV, check=False, stdout=out, cwd=cwd).returncode
    if code:
        print(f"  (exit {code})", flush=True)
    return code


def agent() -> subprocess.Popen[str]:
    args = ["--ticket-id", TICKET, "--run-id", RUN, "--workdir", str(ROOT / "work"), "--seconds", "1.0"]
    print(f"$ python examples/ticket_agent.py {shlex.join(args)}", flush=True)
    return subprocess.Popen(
        # stderr too: the runner's own lines (skip, run, done …) go there, in order with the agent's
        [sys.executable, str(HERE / "ticket_agent.py"), *args],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def video(*extra: str) -> int:
    args = ["--ticket-id", "VID-1", "--run-id", "launch", "--workdir", str(ROOT / "video")]
    print(f"$ python examples/video_pipeline.py {shlex.join(args)}", flush=True)
    return subprocess.run([sys.executable, str(HERE / "video_pipeline.py"), *args], env=ENV, check=False).returncode


def main() -> int:
    shutil.rmtree(ROOT, ignore_errors=True)
    for sub in ("work", "data", "video", "video-dag"):
        (ROOT / sub).mkdir(parents=True)
    started = time.monotonic()

    banner("1. the ticket agent runs under phaselog's runner; it is killed (SIGKILL) inside phase 3")
    proc = agent()
    assert proc.stdout is not None
    in_phase3 = False
    for line in proc.stdout:
        print(line, end="", flush=True)
        if in_phase3 and "(2/5)" in line:
            os.kill(proc.pid, signal.SIGKILL)
            break
        in_phase3 = in_phase3 or line.startswith("▶ phase 3")
    proc.wait()
    proc.stdout.close()
    print(f"  ✖ the agent was killed by signal {-proc.returncode} in the middle of phase 3", flush=True)

    banner("2. what does the ledger say, and what would a rerun do?")
    ids = ("--ticket-id", TICKET, "--run-id", RUN)
    phaselog("status", *ids, "--workdir", str(ROOT / "work"), "--format", "table")  # artifacts checked there
    phaselog("explain", *ids, "--workdir", str(ROOT / "work"), "--format", "table")

    banner("3. run it again: phases 1-2 are skipped, phase 3 resumes after its last step done")
    proc = agent()
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
    proc.stdout.close()
    if proc.wait() != 0:
        print("the agent failed", file=sys.stderr)
        return 1

    banner("4. the run's history: checkpoints, progress events, the abandoned attempt")
    phaselog("history", *ids, "--phase", "create_pr", "--format", "table")
    phaselog("list", *ids, "--format", "table")
    phaselog("verify", "--ticket-id", TICKET, "--format", "table")

    banner("5. a data job as a shell manifest; a changed artifact reruns from there")
    job = str(HERE / "data-job.yaml")
    data = ("--ticket-id", "DATA-1", "--run-id", "nightly", "--pipeline-file", job)
    phaselog("run", *data, "--workdir", str(ROOT / "data"), "--format", "table")
    print("# someone edits data/clean.csv by hand:", flush=True)
    with open(ROOT / "data" / "data" / "clean.csv", "a") as fh:
        fh.write("4,999\n")
    phaselog("explain", *data, "--workdir", str(ROOT / "data"), "--format", "table")
    phaselog("run", *data, "--workdir", str(ROOT / "data"), "--quiet", "--format", "table")

    banner("6. a gated video pipeline: it stops for a person, and continues after the decision")
    vpipe = ("--ticket-id", "VID-1", "--run-id", "launch", "--pipeline-file", str(HERE / "video.json"))
    video()
    phaselog("reject", *vpipe, "--phase", "proposal", "--by", "ana", "--comment", "too long: one idea only", quiet=True)
    video()
    phaselog("approve", *vpipe, "--phase", "proposal", "--by", "ana", quiet=True)
    video()
    phaselog("approve", *vpipe, "--phase", "publish", "--by", "ana", quiet=True)
    if video() != 0:
        print("the video pipeline did not finish", file=sys.stderr)
        return 1
    phaselog("history", "--ticket-id", "VID-1", "--format", "table")
    files = sorted(p.name for p in (ROOT / "store" / "checkpoints" / TICKET).rglob("phase_*.yaml"))
    print(f"\nseed-format files on disk ({ROOT / 'store'}): {', '.join(files)}")

    banner("7. a video as a DAG: the voice-over and the b-roll need only the script, so they run side by side")
    dag = ("--ticket-id", "VID-2", "--run-id", "launch", "--pipeline-file", str(HERE / "video-dag.yaml"))
    if phaselog("run", *dag, "--workdir", str(ROOT / "video-dag"), "--max-parallel", "2", "--format", "table") != 0:
        print("the video DAG did not finish", file=sys.stderr)
        return 1
    print(side_by_side(ROOT / "video-dag" / "timeline.txt", "voice_over", "b_roll"), flush=True)
    print(f"demo finished in {time.monotonic() - started:.1f} s")
    banner("8. look at these runs in a browser (the dashboard; Ctrl-C stops it)")
    ui = command(("ui", "--store", str(ROOT / "store"), "--open"))
    print(f"  {shlex.join(ui)}", flush=True)
    print_next_steps()
    return 0


def side_by_side(timeline: Path, first: str, second: str) -> str:
    """What the DAG's timeline (``phase start end`` lines the phases wrote) says of two phases."""
    spans = {name: (float(a), float(b)) for name, a, b in (line.split() for line in timeline.read_text().splitlines())}
    zero = min(a for a, _ in spans.values())
    (a1, b1), (a2, b2) = spans[first], spans[second]
    both = "side by side" if a1 < b2 and a2 < b1 else "one after the other"
    return (
        f"  {first} ran {a1 - zero:.2f}-{b1 - zero:.2f} s and {second} {a2 - zero:.2f}-{b2 - zero:.2f} s "
        f"after the run began: {both}"
    )


def print_next_steps() -> None:
    """How to call `phaselog` yourself: it lives in the virtualenv, which `make demo` does not activate."""
    venv = os.path.relpath(BIN.parent)
    store = os.path.relpath(ROOT / "store")
    work = os.path.relpath(ROOT / "work")  # where the agent's artifacts are: status checks them there
    banner("try it yourself")
    print(f"  The phaselog command is in {venv}/bin; put it on your PATH first:\n", flush=True)
    print(f"    . {venv}/bin/activate", flush=True)
    status = f"status --store {store} --workdir {work} --ticket-id {TICKET} --run-id {RUN} --format table"
    print(f"    phaselog {status}", flush=True)
    print(f"    phaselog history --store {store} --ticket-id {TICKET} --format table", flush=True)


if __name__ == "__main__":
    sys.exit(main())
