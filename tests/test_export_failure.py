"""An export that fails half-way prints its error alone (issue 20, D110).

`phaselog export` used to print the JSON Lines it had read before the damaged record, then the
error object: a reader taking lines until EOF saw a plausible, partial export. Now the lines are
spooled and printed only once the export is complete.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import phaselog
from conftest import IMPLEMENT
from phaselog.stores.base import Store
from phaselog.stores.files.store import FilesStore
from test_conformance import raw

PHASELOG = str(Path(sys.executable).parent / "phaselog")


def _damage(store: Store, ticket: str, run: str) -> None:
    """Edit the stored payload of implement attempt 1 behind the library's back (its hash no longer fits)."""
    rid = phaselog.normalize_run_id(run)
    if isinstance(store, FilesStore):
        path = store.root / "checkpoints" / ticket / rid / "phase_1_implement_a1.yaml"
        path.write_text(path.read_text("utf-8").replace("feat/PROJ-1234", "feat/EVIL-666"), "utf-8")
        return
    where = "WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = 1 AND attempt = 1"
    ((body,),) = raw(store, f"SELECT body FROM phaselog_checkpoints {where}", (ticket, rid))
    doc = json.loads(body)
    doc["checkpoint"]["phase_payload"]["branch_name"] = "feat/EVIL-666"
    raw(store, f"UPDATE phaselog_checkpoints SET body = ? {where}", (json.dumps(doc), ticket, rid))


def _export(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PHASELOG, "export", "--store", url, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.all_stores
def test_an_export_that_fails_half_way_prints_only_its_error(store: Store) -> None:
    ledger = phaselog.Ledger(store)
    for ticket in ("AAA-1", "ZZZ-9"):  # AAA-1 is exported first, intact; ZZZ-9's record is damaged
        ledger.init_ticket(ticket, title=ticket)
        ledger.write(ticket, "r1", "implement", IMPLEMENT)
        ledger.progress(ticket, "r1", "local_review", "start")
    whole = _export(store.url, "--ticket-id", "AAA-1")
    assert whole.returncode == 0, whole.stdout
    assert len(whole.stdout.splitlines()) >= 3  # the marker, the manifest, the checkpoint, the event
    _damage(store, "ZZZ-9", "r1")
    store.close()

    proc = _export(store.url)
    assert proc.returncode != 0
    error = json.loads(proc.stdout)  # one JSON object: nothing before it
    assert error["success"] is False
    assert error["error_code"] == "corrupt"
    assert "ZZZ-9" in error["error"]
    assert '"type":' not in proc.stdout  # not one export line
    assert _export(store.url, "--ticket-id", "AAA-1").stdout == whole.stdout  # the intact ticket still exports
