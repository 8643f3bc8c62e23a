"""A ticket pipeline worker that checkpoints every phase and resumes where it stopped.

Run it twice with the same ticket and run id: the second run skips what is done.

    PHASELOG_HOME=/tmp/pl python examples/ticket_worker.py --ticket-id DEMO-1 --run-id demo
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import phaselog


def sha(text: str) -> str:
    """A stand-in commit SHA derived from text."""
    return hashlib.sha1(text.encode()).hexdigest()[:7]  # noqa: S324 - not security, a fake git SHA


def work(run: phaselog.Run, phase: str, seconds: float, what: str, first_step: int = 1) -> None:
    """Pretend to work, visibly, recording a progress event before each step."""
    steps = 5
    tokens = 0
    for i in range(first_step, steps + 1):
        tokens += 250
        run.ledger.progress(
            run.ticket_id, run.run_id, phase, "step", step=i, tokens=tokens, output=f"{what}: step {i} of {steps}\n"
        )
        time.sleep(seconds / steps)
        print(f"    … {what} ({i}/{steps})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ticket-id", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--workdir", default=".demo/work", help="where artifacts are written")
    ap.add_argument("--seconds", type=float, default=1.0, help="simulated work per phase")
    args = ap.parse_args()

    ledger = phaselog.open()  # PHASELOG_HOME, else ~/.phaselog
    run = ledger.run(args.ticket_id, args.run_id)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)

    status = run.status()
    if status.done:
        print("  nothing to do: every phase is completed", flush=True)
        return 0
    start = status.next_phase
    if status.completed_phases:
        decision = run.can_skip_to(start, artifacts_root=workdir)
        if not decision.allowed:
            for b in decision.blockers:
                print(f"  cannot resume at {start}: {b.phase} is {b.state}: {b.reason}")
            return 1
        print(f"  resuming at {start}: {', '.join(status.completed_phases)} already done", flush=True)

    branch = f"feat/{args.ticket_id.lower()}"
    for phase in run.pipeline.phases:
        if status.phase(phase.name).state == "completed":
            continue
        print(f"▶ phase {phase.ordinal} {phase.name}", flush=True)
        state = status.phase(phase.name)
        first_step = 1
        if state.state == "in_progress" and state.in_flight:
            flight = state.in_flight
            first_step = flight["resume_from_step"] or 1
            print(
                f"  attempt {flight['attempt_number']} stopped at step {first_step}"
                f" ({'abandoned: ' + flight['abandoned_reason'] if flight['abandoned'] else 'in flight'});"
                f" a new attempt restarts from step {first_step}",
                flush=True,
            )
        ledger.progress(run.ticket_id, run.run_id, phase.name, "start")
        work(run, phase.name, args.seconds, phase.description.rstrip("."), first_step)
        head = sha(f"{args.ticket_id}-{phase.name}")
        artifact = f"{phase.name}.log"
        (workdir / artifact).write_text(f"{phase.name} done at {datetime.now(UTC).isoformat()}\n")
        payload = {
            "implement": {"branch_name": branch, "commit_sha": head, "files_changed": ["src/app.py"]},
            "local_review": {"iteration_count": 2, "issue_fingerprints": ["src/app.py:12"], "last_clean_sha": head},
            "create_pr": {"pr_url": "https://git.example/acme/app/pull/42", "pr_number": 42, "head_sha": head},
            "pr_release_ready": {"last_review_sha": head, "issue_fingerprints": []},
            "ready_for_merge": {"label_applied_at": datetime.now(UTC).isoformat().replace("+00:00", "Z")},
        }[phase.name]
        result = run.write(phase.name, payload, repo_commit_map={"app": head}, artifact_paths=[artifact])
        print(
            f"  ✔ checkpoint {result.location} (attempt {result.record.attempt_number}, "
            f"hash {result.record.content_hash[:12]})",
            flush=True,
        )
    print("  pipeline finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
