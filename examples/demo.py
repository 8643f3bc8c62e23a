"""`make demo`: a ticket pipeline is killed (SIGKILL) inside phase 3, then resumed.

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


def banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def command(args: tuple[str, ...]) -> list[str]:
    """The phaselog CLI of this venv (or the module, if the script is missing) with ``args``."""
    exe = BIN / "phaselog"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "phaselog", *args]


def phaselog(*args: str) -> int:
    """Run the phaselog CLI as a user would, showing the command."""
    print(f"$ phaselog {shlex.join(args)}", flush=True)
    return subprocess.run(command(args), env=ENV, check=False).returncode


def quiet(*args: str) -> None:
    """Run a phaselog command, showing only the command (its JSON is not the point here)."""
    print(f"$ phaselog {shlex.join(args)}   # (output omitted)", flush=True)
    proc = subprocess.run(command(args), env=ENV, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, file=sys.stderr)
        raise SystemExit(f"demo step failed: phaselog {' '.join(args)}")


def worker() -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "ticket_worker.py"),
            "--ticket-id",
            TICKET,
            "--run-id",
            RUN,
            "--workdir",
            str(ROOT / "work"),
            "--seconds",
            "1.0",
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
    )


def main() -> int:
    shutil.rmtree(ROOT, ignore_errors=True)
    started = time.monotonic()

    banner("1. run the ticket pipeline; it will be killed with SIGKILL inside phase 3")
    proc = worker()
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
        if "(2/5)" in line and getattr(main, "in_phase3", False):
            os.kill(proc.pid, signal.SIGKILL)
            break
        if line.startswith("▶ phase 3"):
            main.in_phase3 = True  # type: ignore[attr-defined]
    proc.wait()
    print(f"  ✖ worker killed by signal {-proc.returncode} in the middle of phase 3", flush=True)

    banner("2. what does the ledger say? (derived from the checkpoints alone)")
    phaselog("status", "--ticket-id", TICKET, "--run-id", RUN, "--format", "table")
    phaselog("resume", "--ticket-id", TICKET, "--run-id", RUN, "--skip-to", "create_pr", "--format", "table")

    banner("3. run it again: it resumes at phase 3 and finishes")
    proc = worker()
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
    if proc.wait() != 0:
        print("worker failed", file=sys.stderr)
        return 1

    banner("4. the run's history: checkpoints, progress events, the abandoned attempt")
    phaselog("status", "--ticket-id", TICKET, "--run-id", RUN, "--format", "table")
    phaselog("history", "--ticket-id", TICKET, "--run-id", RUN, "--phase", "create_pr", "--format", "table")
    phaselog("list", "--ticket-id", TICKET, "--run-id", RUN, "--format", "table")
    phaselog("verify", "--ticket-id", TICKET, "--format", "table")

    banner("5. a gated phase: the video pipeline waits for a person's approval")
    vid, vrun = "VID-1", "launch-video"
    phaselog("init", "--ticket-id", vid, "--title", "Launch video", "--pipeline", "video-pipeline", "--format", "table")
    quiet(
        "write",
        "--ticket-id",
        vid,
        "--run-id",
        vrun,
        "--phase",
        "research",
        "--payload",
        '{"summary": "devs want speed", "sources": ["https://example.org/survey"]}',
    )
    quiet(
        "write",
        "--ticket-id",
        vid,
        "--run-id",
        vrun,
        "--phase",
        "proposal",
        "--payload",
        '{"title": "phaselog in 90 s", "concept": "a long tour of every command"}',
    )
    phaselog("status", "--ticket-id", vid, "--run-id", vrun, "--format", "table")
    print("# the script cannot be recorded before the proposal is approved:")
    phaselog(
        "write",
        "--ticket-id",
        vid,
        "--run-id",
        vrun,
        "--phase",
        "script",
        "--payload",
        '{"script_path": "script.md", "word_count": 180}',
    )
    phaselog(
        "reject",
        "--ticket-id",
        vid,
        "--run-id",
        vrun,
        "--phase",
        "proposal",
        "--by",
        "ana",
        "--comment",
        "too long: one idea only",
        "--format",
        "table",
    )
    quiet(
        "write",
        "--ticket-id",
        vid,
        "--run-id",
        vrun,
        "--phase",
        "proposal",
        "--payload",
        '{"title": "phaselog in 90 s", "concept": "kill a pipeline, resume it"}',
    )
    phaselog("approve", "--ticket-id", vid, "--run-id", vrun, "--phase", "proposal", "--by", "ana", "--format", "table")
    print("# what changed between the rejected and the approved proposal:")
    phaselog("diff", "--ticket-id", vid, f"{vrun}:proposal:1", f"{vrun}:proposal:2", "--format", "text")
    phaselog(
        "write",
        "--ticket-id",
        vid,
        "--run-id",
        vrun,
        "--phase",
        "script",
        "--payload",
        '{"script_path": "script.md", "word_count": 180}',
        "--format",
        "table",
    )
    phaselog("history", "--ticket-id", vid, "--format", "table")
    files = sorted(p.name for p in (ROOT / "store" / "checkpoints" / TICKET).rglob("phase_*.yaml"))
    print(f"\nseed-format files on disk ({ROOT / 'store'}): {', '.join(files)}")
    print(f"demo finished in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
