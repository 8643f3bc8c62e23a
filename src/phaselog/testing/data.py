"""What the conformance suite writes: its ticket and runs, payloads, a hand-moved clock, and the
small readers that prove an operation changed nothing."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from phaselog.ledger.facade import Ledger
from phaselog.model.ids import normalize_run_id
from phaselog.stores.base import Damaged, Store, Stored
from phaselog.transfer.jsonl import export_records

#: The ticket every contract test writes to, and its two runs (as given, and as stored).
T = "CONF-1"
R1, R2 = "run-a", "run-b"
RUN1, RUN2 = normalize_run_id(R1), normalize_run_id(R2)

#: The instant every test's clock starts at.
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# Payloads of the default pipeline's phases (implement, local_review, create_pr …).
IMPLEMENT: dict[str, Any] = {"branch_name": "feat/PROJ-1234", "commit_sha": "a1b2c3d", "files_changed": ["src/foo.py"]}
LOCAL_REVIEW: dict[str, Any] = {"iteration_count": 1, "issue_fingerprints": [], "last_clean_sha": "a1b2c3d"}
CREATE_PR: dict[str, Any] = {"pr_url": "https://github.com/o/r/pull/1", "pr_number": 1, "head_sha": "a1b2c3d"}
#: Payloads of the gated video pipeline's phases.
VIDEO: dict[str, dict[str, Any]] = {
    "research": {"summary": "Who watches launch videos", "sources": ["https://example.org/a"]},
    "proposal": {"title": "Launch", "concept": "Ninety seconds, one idea"},
    "script": {"script_path": "script.md", "word_count": 180},
}


class Clock:
    """A clock the test moves by hand: ``clock()`` is now; ``tick``/``advance`` move it forward."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 1) -> None:
        """Move ``seconds`` forward."""
        self.now += timedelta(seconds=seconds)

    def advance(self, **kw: float) -> datetime:
        """Move forward by ``timedelta(**kw)``; returns the new now."""
        self.now += timedelta(**kw)
        return self.now


def impl(i: int) -> dict[str, Any]:
    """An implement payload that names its attempt."""
    return {**IMPLEMENT, "files_changed": [f"src/f{i}.py"]}


def decision(did: str, selected: str = "a") -> dict[str, Any]:
    """One decision in seed 002's shape."""
    return {
        "decision_id": did,
        "category": "creative_direction",
        "subject": f"subject of {did}",
        "options_considered": [
            {"option_id": "a", "label": "Bold", "score": 0.8, "reason": "memorable"},
            {"option_id": "b", "label": "Calm", "score": 0.4, "reason": "safe"},
        ],
        "selected": selected,
        "reason": "fits the brand",
    }


def contents(store: Store, ticket: str = T) -> list[tuple[Any, ...]]:
    """Everything a ticket holds, as (kind, key, hash): to prove an operation changed nothing."""
    out: list[tuple[Any, ...]] = []
    for rid in store.runs(ticket):
        for item in store.iter_records(ticket, rid):
            if isinstance(item, Damaged):
                out.append(("damaged", item.location))
            else:
                out.append(("cp", item.location, item.record.content_hash))
        for kind in ("progress", "approvals", "pruned"):
            out.extend((kind, rid, name, _sha(data)) for name, _loc, data in store.entries(kind, ticket, rid))
    out.extend(("markers", name, _sha(data)) for name, _loc, data in store.entries("markers", ticket, None))
    return out


def _sha(data: object) -> str:
    return hashlib.sha256(data if isinstance(data, bytes) else repr(data).encode()).hexdigest()


def keys(items: list[Stored]) -> list[tuple[str, str, int, str]]:
    """(run, phase, attempt, status) of each record."""
    return [(s.record.run_id, s.record.phase, s.record.attempt_number, s.record.status) for s in items]


def populate(led: Ledger, clock: Clock) -> None:
    """Every kind of record: markers, checkpoints (failed too), events, approvals, a fork."""
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    clock.tick()
    led.progress(T, R1, "research", "start", pid=1)
    clock.tick()
    led.progress(T, R1, "research", "step", step=1, output="notes", tokens=5)
    clock.tick()
    led.write(T, R1, "research", None, status="failed", error="source down")
    clock.tick()
    led.write(T, R1, "research", VIDEO["research"], decisions=[decision("d1")])
    clock.tick()
    led.write(T, R1, "proposal", VIDEO["proposal"])
    clock.tick()
    led.approve(T, R1, "proposal", by="ana")
    clock.tick()
    led.fork(T, R1, through="proposal", new_run_id=R2)
    clock.tick()
    led.init_ticket(T, title="Launch film")
    led.write("OTHER-2", R1, "implement", impl(1))


def export_text(store: Store) -> list[str]:
    """Every export line of ``store``, as sorted-key JSON text."""
    return [json.dumps(line, sort_keys=True) for line in export_records(store)]


def records_in(lines: list[dict[str, Any]]) -> int:
    """How many export lines are records (not the pipeline manifests that travel with them)."""
    return sum(1 for line in lines if line["type"] != "pipeline")
