"""A gated video pipeline: it stops at each approval gate, and the next run continues.

    PHASELOG_HOME=/tmp/pl python examples/video_pipeline.py --ticket-id VID-1 --run-id launch   # exit 3: waits
    phaselog approve --ticket-id VID-1 --run-id launch --phase proposal --by ana --pipeline-file examples/video.json
    PHASELOG_HOME=/tmp/pl python examples/video_pipeline.py --ticket-id VID-1 --run-id launch   # continues

A rejection (`phaselog reject … --comment "too long"`) makes the next run redo the phase, with the
comment as ``ctx.rejection``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import phaselog

MANIFEST = Path(__file__).with_name("video.json")
pipe = phaselog.pipeline(MANIFEST)


@pipe.phase("research")
def research(ctx: Any) -> Any:
    print("▶ research: what do developers want to see?", flush=True)
    return {"summary": "developers want to see a crash and a resume", "sources": ["https://example.org/survey"]}


@pipe.phase("proposal")
def proposal(ctx: Any) -> Any:
    concept = "a long tour of every command"
    if ctx.rejection:
        print(f"▶ proposal, attempt {ctx.attempt}: redone after a rejection: {ctx.rejection!r}", flush=True)
        concept = "kill a pipeline, resume it"
    else:
        print("▶ proposal", flush=True)
    return {"title": "phaselog in 90 s", "concept": concept}


@pipe.phase("script")
def script(ctx: Any) -> Any:
    concept = ctx.payload("proposal")["concept"]
    print(f"▶ script for {concept!r}", flush=True)
    (ctx.workdir / "script.md").write_text(f"# phaselog in 90 s\n\n{concept}\n")
    return {"script_path": "script.md", "word_count": 180}, ["script.md"]


@pipe.phase("publish")
def publish(ctx: Any) -> Any:
    print("▶ publish", flush=True)
    return {"url": "https://video.example/phaselog-in-90s"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ticket-id", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--workdir", default=".")
    args = ap.parse_args()
    result = pipe.run(args.ticket_id, args.run_id, workdir=args.workdir)
    if result.waiting:
        print(f"  waiting for approval at {result.waiting} (exit 3)", flush=True)
    print(json.dumps(result.states), flush=True)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
