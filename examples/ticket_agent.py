"""The ticket agent: implement → local_review → create_pr → pr_release_ready → ready_for_merge,
run by phaselog's runner. Kill it anywhere and run it again: it resumes where it stopped.

    PHASELOG_HOME=/tmp/pl python examples/ticket_agent.py --ticket-id DEMO-1 --run-id demo
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from datetime import UTC, datetime
from typing import Any

import phaselog

pipe = phaselog.pipeline("ticket-pipeline")  # the built-in manifest: phases and payload schemas
SECONDS = 1.0
STEPS = 5


def sha(text: str) -> str:
    """A stand-in commit SHA derived from text."""
    return hashlib.sha1(text.encode()).hexdigest()[:7]  # noqa: S324 - not security, a fake git SHA


def work(ctx: Any, what: str) -> str:
    """Pretend to work, visibly: a progress event per step, restarting where an attempt stopped."""
    if ctx.resume_after:
        print(f"    attempt {ctx.attempt} resumes {ctx.phase} after step {ctx.resume_after}", flush=True)
    for i in range(ctx.resume_after + 1, STEPS + 1):  # the steps an interrupted attempt finished are done
        time.sleep(SECONDS / STEPS)
        ctx.step_done(i, output=f"{what}: step {i} of {STEPS}\n", tokens=250 * i)
        print(f"    … {what} ({i}/{STEPS})", flush=True)
    artifact = f"{ctx.phase}.log"
    (ctx.workdir / artifact).write_text(f"{ctx.phase} done at {datetime.now(UTC).isoformat()}\n")
    return artifact


def announce(ctx: Any) -> None:
    ordinal = ctx.pipeline.phase(ctx.phase).ordinal
    print(f"▶ phase {ordinal} {ctx.phase} (attempt {ctx.attempt})", flush=True)


@pipe.phase("implement", retries=2)
def implement(ctx: Any) -> Any:
    announce(ctx)
    log = work(ctx, "write the code")
    head = sha(f"{ctx.ticket_id}-implement")
    return {"branch_name": f"feat/{ctx.ticket_id.lower()}", "commit_sha": head, "files_changed": ["src/app.py"]}, [log]


@pipe.phase("local_review", retries=2)
def local_review(ctx: Any) -> Any:
    announce(ctx)
    log = work(ctx, "review locally")
    head = ctx.payload("implement")["commit_sha"]
    return {"iteration_count": 2, "issue_fingerprints": ["src/app.py:12"], "last_clean_sha": head}, [log]


@pipe.phase("create_pr", retries=2)
def create_pr(ctx: Any) -> Any:
    announce(ctx)
    log = work(ctx, "open the pull request")
    head = ctx.payload("implement")["commit_sha"]
    return {"pr_url": "https://git.example/acme/app/pull/42", "pr_number": 42, "head_sha": head}, [log]


@pipe.phase("pr_release_ready", retries=2)
def pr_release_ready(ctx: Any) -> Any:
    announce(ctx)
    log = work(ctx, "wait for reviews")
    return {"last_review_sha": ctx.payload("create_pr")["head_sha"], "issue_fingerprints": []}, [log]


@pipe.phase("ready_for_merge", retries=2)
def ready_for_merge(ctx: Any) -> Any:
    announce(ctx)
    log = work(ctx, "label for merge")
    return {"label_applied_at": datetime.now(UTC).isoformat().replace("+00:00", "Z")}, [log]


def main() -> int:
    global SECONDS  # noqa: PLW0603 - a knob for the demo
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ticket-id", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--workdir", default=".", help="where artifacts are written")
    ap.add_argument("--seconds", type=float, default=1.0, help="simulated work per phase")
    args = ap.parse_args()
    SECONDS = args.seconds
    try:
        # The runner's lines (skip, run, done, retry, failed, waiting) go to stderr; quiet=True hides them.
        result = pipe.run(args.ticket_id, args.run_id, workdir=args.workdir)
    except phaselog.RunHeld as exc:
        print(f"  {exc}", file=sys.stderr)
        return 75
    except phaselog.PhaseFailed as exc:
        print(f"  {exc}", file=sys.stderr)
        return 1
    print("  pipeline finished" if result.done else f"  stopped: {result.to_json()}", flush=True)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
