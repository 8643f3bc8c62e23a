"""`phaselog tickets` and `phaselog runs --ticket-id T`, and the run id as the user gave it (issue 9).

A run id like `nightly-1` maps to a UUID v5 that cannot be turned back, so listings showed only the
UUID. Each checkpoint now keeps the name it was written under (`run_name`), and the listings, the
status and the catalog show it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW
from phaselog.ledger.facade import Ledger
from phaselog.model.errors import InvalidRecord
from phaselog.model.ids import normalize_run_id
from phaselog.stores.base import Store
from phaselog.transfer.jsonl import export_records, import_records
from phaselog.views.catalog import Catalog

pytestmark = pytest.mark.all_stores


def cli(store: Store, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args, "--store", store.url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PHASELOG_HOME": "/nonexistent-phaselog-home", "COLUMNS": str(columns)},
        check=False,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _fill(store: Store) -> None:
    led = Ledger(store)
    led.write("CHURN-7", "nightly-1", "implement", IMPLEMENT)
    led.write("CHURN-7", "nightly-1", "local_review", LOCAL_REVIEW)
    uuid_run = "5d3b5d55-61c5-4d4b-a0d9-33e8b8c7a3a1"
    led.write("CHURN-7", uuid_run, "implement", None, status="failed", error="flaky")
    led.init_ticket("VID-1", title="Launch video", pipeline="video-pipeline")
    led.write(
        "VID-1", "nightly-2026-11-30-with-a-long-name", "research", {"summary": "s", "sources": ["https://x.test/a"]}
    )


def test_runs_lists_every_run_of_a_ticket_by_the_name_it_was_given(store: Store) -> None:
    _fill(store)
    out = ok(cli(store, "runs", "--ticket-id", "CHURN-7"))
    runs = {r["run_name"] or r["run_id"]: r for r in out["runs"]}
    assert out["count"] == 2
    assert set(runs) == {"nightly-1", "5d3b5d55-61c5-4d4b-a0d9-33e8b8c7a3a1"}
    named = runs["nightly-1"]
    assert named["run_id"] == normalize_run_id("nightly-1")
    assert (named["pipeline"], named["state"], named["next_phase"]) == ("ticket-pipeline", "pending", "create_pr")
    assert named["last_activity"].endswith("Z")
    assert runs["5d3b5d55-61c5-4d4b-a0d9-33e8b8c7a3a1"]["run_name"] is None
    assert runs["5d3b5d55-61c5-4d4b-a0d9-33e8b8c7a3a1"]["state"] == "failed"
    table = cli(store, "runs", "--ticket-id", "CHURN-7", "--format", "table")
    assert table.returncode == 0, table.stderr
    assert "nightly-1" in table.stdout
    assert "5d3b5d55-61c5-4d4b-a0d9-33e8b8c7a3a1" in table.stdout
    assert "ticket-pipeline" in table.stdout
    assert "failed" in table.stdout
    assert max(map(len, table.stdout.splitlines())) <= 80, table.stdout
    # A ticket with nothing recorded says so (and is not an error: listings may be empty).
    none = ok(cli(store, "runs", "--ticket-id", "NOPE-1"))
    assert (none["count"], "nothing is recorded for ticket NOPE-1" in none["message"]) == (0, True)


def test_tickets_lists_every_ticket_with_its_latest_run(store: Store) -> None:
    _fill(store)
    out = ok(cli(store, "tickets"))
    tickets = {t["ticket_id"]: t for t in out["tickets"]}
    assert set(tickets) == {"CHURN-7", "VID-1"}
    vid = tickets["VID-1"]
    assert (vid["pipeline"], vid["state"], vid["runs"], vid["title"]) == (
        "video-pipeline",
        "pending",
        1,
        "Launch video",
    )
    assert vid["latest_run_name"] == "nightly-2026-11-30-with-a-long-name"
    assert tickets["CHURN-7"]["runs"] == 2
    assert out["tickets"][0]["ticket_id"] == "VID-1"  # newest activity first
    table = cli(store, "tickets", "--format", "table")
    assert table.returncode == 0, table.stderr
    assert "VID-1" in table.stdout
    assert "video-pipeline" in table.stdout
    assert "nightly-" in table.stdout
    assert max(map(len, table.stdout.splitlines())) <= 80, table.stdout


def test_the_name_stays_with_the_run_when_it_is_written_to_by_uuid(store: Store) -> None:
    led = Ledger(store)
    led.write("T-1", "nightly-1", "implement", IMPLEMENT)
    uuid = normalize_run_id("nightly-1")
    written = led.write("T-1", uuid, "local_review", LOCAL_REVIEW)  # e.g. a UUID copied from a listing
    assert written.record.run_name == "nightly-1"
    st = led.status("T-1", uuid)
    assert (st.run_name, st.to_json()["run_name"]) == ("nightly-1", "nightly-1")
    # The run facade and the runner keep it too.
    run = led.run("T-2", "weekly-3")
    assert run.write("implement", IMPLEMENT).record.run_name == "weekly-3"
    pipe = phaselog.pipeline("tiny", phases=["only"])
    pipe.phase("only")(lambda ctx: {"ok": True})
    pipe.run("T-3", "nightly-9", store=led, handle_signals=False)
    assert led.status("T-3", "nightly-9").run_name == "nightly-9"
    assert [s.run_name for s in Catalog().runs(led, "T-3")] == ["nightly-9"]


def test_a_run_name_that_does_not_name_its_run_is_refused_on_import(store: Store, tmp_path: Path) -> None:
    led = Ledger(store)
    led.write("T-1", "nightly-1", "implement", IMPLEMENT)
    lines = list(export_records(store))
    line = next(ln for ln in lines if ln["type"] == "checkpoint")
    assert line["document"]["phaselog"]["run_name"] == "nightly-1"
    forged = json.loads(json.dumps(line))
    forged["document"]["phaselog"]["run_name"] = "nightly-2"
    from phaselog.model.decoding import checkpoint_from_seed

    cp, _ = checkpoint_from_seed(forged["document"]["checkpoint"], phase_ordinal=1, meta=forged["document"]["phaselog"])
    forged["content_hash"] = forged["document"]["content_hash"] = cp.content_hash  # a forger who rehashes
    other = phaselog.open_store(str(tmp_path / "other"))
    with pytest.raises(InvalidRecord) as info:
        import_records(other, [forged])
    assert info.value.context["field"] == "run_name"


def test_a_listing_reads_each_run_once(store: Store) -> None:
    """One snapshot per run (and the listings a store needs), never a record-by-record read."""
    _fill(store)

    class Counting:
        def __init__(self, inner: Store) -> None:
            self._inner, self.calls = inner, Counter[str]()

        def __getattr__(self, name: str) -> Any:
            attr = getattr(self._inner, name)
            if not callable(attr) or name.startswith("_"):
                return attr

            def counted(*a: Any, **kw: Any) -> Any:
                self.calls[name] += 1
                return attr(*a, **kw)

            return counted

    counting = Counting(store)
    Catalog().tickets(Ledger(counting))  # type: ignore[arg-type]
    # three runs (a status's snapshot is ``state_snapshot`` where the store carries runs, D192)
    assert counting.calls["snapshot"] + counting.calls["state_snapshot"] == 3
    assert counting.calls["get"] == counting.calls["iter_records"] == 0
