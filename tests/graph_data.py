"""A run of a pipeline that branches (issue 25), written through the library for the graph views' tests.

``video-dag``: research -> script -> {voice, broll} -> render -> publish (gated). The run ``dag-1`` of
ticket ``VID-9`` has research and script completed, voice and broll completed side by side (their
attempts overlap in time; broll failed once), render in flight (a start event from this process) and
publish pending.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import phaselog
from phaselog.model.ids import normalize_run_id

MANIFEST = """\
name: video-dag
version: "1.0.0"
description: A video whose voice-over and b-roll are made side by side.
phases:
  - name: research
    description: Gather sources.
  - name: script
    description: Write the script.
  - name: voice
    description: Record the voice-over.
    needs: [script]
  - name: broll
    description: Gather b-roll.
    needs: [script]
  - name: render
    description: Render the video.
    needs: [voice, broll]
  - name: publish
    description: Publish it; a person approves.
    needs: render
    requires_approval: true
"""

TICKET, RUN = "VID-9", "dag-1"
PHASES = ["research", "script", "voice", "broll", "render", "publish"]
EDGES = {("research", "script"), ("script", "voice"), ("script", "broll"), ("voice", "render")}
EDGES |= {("broll", "render"), ("render", "publish")}
STATES = {
    "research": "completed",
    "script": "completed",
    "voice": "completed",
    "broll": "completed",
    "render": "in_progress",
    "publish": "pending",
}


def write_manifest(root: Path) -> Path:
    """``<root>/pipelines/video-dag.yaml``."""
    (root / "pipelines").mkdir(parents=True, exist_ok=True)
    path = root / "pipelines" / "video-dag.yaml"
    path.write_text(MANIFEST)
    return path


def make_store(root: Path) -> str:
    """A files store at ``root`` holding the run (see the module docstring); its UUID."""
    write_manifest(root)
    ledger = phaselog.Ledger(phaselog.open_store(str(root)))
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)

    def done(phase: str, start: int, end: int, error: str | None = None) -> None:
        ledger.write(
            TICKET,
            RUN,
            phase,
            {},
            pipeline="video-dag",
            started_at=t0 + timedelta(seconds=start),
            timestamp=t0 + timedelta(seconds=end),
            status="failed" if error else "completed",
            error=error,
        )

    done("research", 0, 10)
    done("script", 10, 20)
    done("voice", 20, 50)  # voice and broll overlap: 20-50 and 22-40, 41-55
    done("broll", 22, 40, error="no footage")
    done("broll", 41, 55)
    ledger.progress(TICKET, RUN, "render", "start", pipeline="video-dag")
    ledger.close()
    return normalize_run_id(RUN)
