"""``doctor``: damaged files, leftover temp files, abandoned attempts, broken links; quarantine.

Seed 003 quarantined a corrupt checkpoint by renaming it beside itself and carrying on. Here
doctor only reports, unless asked to ``quarantine``: then each damaged file moves (never deleted)
into ``<root>/quarantine/`` with its original bytes and a note of where it came from, and every
move is reported. Nothing else moves or deletes anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW
from helpers import Clock, tree
from phaselog.ledger.doctor import doctor
from phaselog.model.ids import normalize_run_id
from phaselog.stores.files.store import FilesStore

T = "DOC-1"
R = "run-1"
RUN = normalize_run_id(R)


def run_dir(root: Path, ticket: str = T) -> Path:
    return root / "checkpoints" / ticket / RUN


def kinds(rep: object) -> list[str]:
    return sorted(f["kind"] for f in rep.findings)  # type: ignore[attr-defined]


def old(path: Path, seconds: float = 3600) -> None:
    """Make a file look as if it was left behind ``seconds`` ago."""
    past = time.time() - seconds
    os.utime(path, (past, past))


@pytest.fixture
def healthy(ledger: phaselog.Ledger) -> phaselog.Ledger:
    """A ticket with checkpoints, a finished progress attempt, a gated run and a marker."""
    ledger.init_ticket(T, title="doctor me")
    ledger.progress(T, R, "implement", "start")
    ledger.progress(T, R, "implement", "step", step=1)
    ledger.write(T, R, "implement", IMPLEMENT)
    ledger.write(T, R, "local_review", LOCAL_REVIEW)
    ledger.init_ticket("VID-1", title="v", pipeline="video-pipeline")
    ledger.write("VID-1", R, "research", {"summary": "s", "sources": ["https://example.org"]})
    ledger.write("VID-1", R, "proposal", {"title": "t", "concept": "c"})
    ledger.approve("VID-1", R, "proposal", by="ana")
    return ledger


def test_a_healthy_store_needs_nothing(healthy: phaselog.Ledger, root: Path) -> None:
    before = tree(root)
    rep = doctor(healthy)
    assert rep.healthy
    assert rep.findings == []
    assert rep.moved == []
    assert (rep.tickets, rep.runs) == (2, 2)
    assert rep.to_json() == {"healthy": True, "tickets": 2, "runs": 2, "findings": [], "moved": [], "finished": []}
    assert doctor(healthy, quarantine=True).moved == []
    assert tree(root) == before


def test_an_empty_store(ledger: phaselog.Ledger) -> None:
    assert doctor(ledger).to_json() == {
        "healthy": True,
        "tickets": 0,
        "runs": 0,
        "findings": [],
        "moved": [],
        "finished": [],
    }


# -- damaged files --------------------------------------------------------------------------------
def test_damaged_checkpoint_is_reported_and_nothing_moves(healthy: phaselog.Ledger, root: Path) -> None:
    target = run_dir(root) / "phase_2_local_review_a1.yaml"
    target.write_bytes(b"\x00\x01 not yaml {{{")
    before = tree(root)
    rep = doctor(healthy)
    assert not rep.healthy
    assert kinds(rep) == ["damaged"]
    assert rep.findings[0]["path"] == f"{T}/{RUN}/phase_2_local_review_a1.yaml"
    assert rep.moved == []
    assert tree(root) == before


def test_quarantine_moves_a_damaged_checkpoint_with_its_sidecar_and_a_note(
    healthy: phaselog.Ledger, root: Path
) -> None:
    seed = run_dir(root) / "phase_2_local_review_a1.yaml"
    meta = run_dir(root) / ".meta_2_local_review_a1.json"
    seed.write_bytes(b"garbage: [unclosed")
    originals = {seed.name: seed.read_bytes(), meta.name: meta.read_bytes()}
    untouched = {k: v for k, v in tree(root).items() if "local_review_a1" not in k}
    rep = doctor(healthy, T, quarantine=True)
    assert rep.findings == []  # handled
    assert sorted(Path(m["from"]).name for m in rep.moved) == sorted(originals)
    for m in rep.moved:
        assert m["from"] == f"checkpoints/{T}/{RUN}/{Path(m['from']).name}"
        moved_to = root / m["to"]
        assert moved_to.parent == root / "quarantine"
        assert moved_to.read_bytes() == originals[Path(m["from"]).name]  # the original bytes
        note = json.loads((root / m["note"]).read_text("utf-8"))
        assert note["original_path"] == m["from"]
        assert note["sha256"] == hashlib.sha256(moved_to.read_bytes()).hexdigest()
        assert note["size"] == len(moved_to.read_bytes())
        assert note["reason"]
        assert note["moved_at"].endswith("Z")
    assert not seed.exists()
    assert not meta.exists()
    after = tree(root)
    assert {k: v for k, v in after.items() if not k.startswith("quarantine/")} == untouched  # nothing else moved
    assert doctor(healthy).healthy
    assert healthy.status(T, R).phase("local_review").state == "pending"


def test_hand_edited_checkpoint_is_damaged_and_can_be_quarantined(healthy: phaselog.Ledger, root: Path) -> None:
    seed = run_dir(root) / "phase_1_implement_a1.yaml"
    seed.write_text(seed.read_text("utf-8").replace("feat/PROJ-1234", "feat/edited"), "utf-8")
    rep = doctor(healthy, T)
    damaged = [f for f in rep.findings if f["kind"] == "damaged"]
    assert [f["path"] for f in damaged] == [f"{T}/{RUN}/phase_1_implement_a1.yaml"]
    moved = doctor(healthy, T, quarantine=True).moved
    assert {Path(m["from"]).name for m in moved} == {
        "phase_1_implement_a1.yaml",
        ".meta_1_implement_a1.json",
    }
    assert b"feat/edited" in (root / next(m["to"] for m in moved if m["to"].endswith(".yaml"))).read_bytes()


def test_damaged_progress_event_is_quarantined(healthy: phaselog.Ledger, root: Path) -> None:
    ev = run_dir(root) / ".progress" / "001_implement_a000001_s000000002.json"
    ev.write_bytes(b'{"kind": "phaselog.progress", "trunc')
    rep = doctor(healthy, T)
    assert [(f["kind"], f["path"]) for f in rep.findings] == [
        ("damaged", f"{T}/{RUN}/.progress/001_implement_a000001_s000000002.json")
    ]
    rep = doctor(healthy, T, quarantine=True)
    assert [m["from"] for m in rep.moved] == [f"checkpoints/{T}/{RUN}/.progress/{ev.name}"]
    assert not ev.exists()
    assert (root / rep.moved[0]["to"]).read_bytes().endswith(b"trunc")


def test_every_damaged_progress_event_is_reported_at_once(healthy: phaselog.Ledger, root: Path) -> None:
    for seq in (1, 2):
        (run_dir(root) / ".progress" / f"001_implement_a000001_s00000000{seq}.json").write_bytes(b"{")
    rep = doctor(healthy, T)
    assert len([f for f in rep.findings if f["kind"] == "damaged"]) == 2


def test_damaged_progress_events_are_all_quarantined_by_repeated_passes(healthy: phaselog.Ledger, root: Path) -> None:
    for seq in (1, 2):
        (run_dir(root) / ".progress" / f"001_implement_a000001_s00000000{seq}.json").write_bytes(b"{")
    moved = []
    for _ in range(3):
        moved += doctor(healthy, T, quarantine=True).moved
        if not list((run_dir(root) / ".progress").glob("*.json")):
            break
    assert sorted(Path(m["from"]).name for m in moved) == [
        "001_implement_a000001_s000000001.json",
        "001_implement_a000001_s000000002.json",
    ]


def test_damaged_approval_and_marker_are_found(healthy: phaselog.Ledger, root: Path) -> None:
    approval = next((run_dir(root, "VID-1") / ".approvals").glob("*.json"))
    approval.write_bytes(b"not json")
    marker = root / "checkpoints" / "VID-1" / ".markers" / "rev_000001.json"
    marker.write_bytes(b'{"kind": "phaselog.marker"}')
    rep = doctor(healthy, "VID-1")
    damaged = sorted(f["path"] for f in rep.findings if f["kind"] == "damaged")
    assert damaged == sorted([f"VID-1/{RUN}/.approvals/{approval.name}", "VID-1/.markers/rev_000001.json"])
    moved = doctor(healthy, "VID-1", quarantine=True).moved
    assert sorted(m["from"] for m in moved) == sorted(f"checkpoints/{d}" for d in damaged)


def test_ticket_scope(healthy: phaselog.Ledger, root: Path) -> None:
    (run_dir(root, "VID-1") / "phase_1_research_a1.yaml").write_bytes(b"{{")
    assert doctor(healthy, T).healthy
    assert doctor(healthy, T).tickets == 1
    assert not doctor(healthy, "VID-1").healthy
    assert not doctor(healthy).healthy


# -- leftovers -------------------------------------------------------------------------------------
def test_old_temp_files_are_reported_never_deleted(healthy: phaselog.Ledger, root: Path) -> None:
    stale = run_dir(root) / ".tmp-999-deadbeef0000"
    stale.write_bytes(b"half a record")
    old(stale)
    fresh = run_dir(root) / ".progress" / ".tmp-999-cafe00000000"
    fresh.write_bytes(b"being written right now")
    stale_event_dir = run_dir(root) / ".progress" / ".tmp-998-000000000000"
    stale_event_dir.write_bytes(b"x")
    old(stale_event_dir)
    before = tree(root)
    rep = doctor(healthy, quarantine=True)
    found = {f["path"]: f for f in rep.findings}
    assert set(found) == {f"{T}/{RUN}/{stale.name}", f"{T}/{RUN}/.progress/{stale_event_dir.name}"}
    assert all(f["kind"] == "leftover_temp" and f["age_sec"] >= 3600 for f in found.values())
    assert rep.moved == []
    assert tree(root) == before  # reported, not removed: doctor deletes nothing


def test_orphaned_sidecar_is_reported(healthy: phaselog.Ledger, root: Path) -> None:
    # What a crash between the sidecar's link and the seed file's link leaves behind.
    src = run_dir(root) / ".meta_2_local_review_a1.json"
    orphan = run_dir(root) / ".meta_2_local_review_a2.json"
    orphan.write_bytes(src.read_bytes())
    before = tree(root)
    rep = doctor(healthy, T, quarantine=True)
    assert [(f["kind"], f["path"]) for f in rep.findings] == [("orphan_sidecar", f"{T}/{RUN}/{orphan.name}")]
    assert tree(root) == before


# -- abandoned attempts ----------------------------------------------------------------------------
def test_abandoned_attempt_of_a_dead_process(ledger: phaselog.Ledger) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        ledger.progress(T, R, "implement", "start", pid=child.pid)
        assert doctor(ledger).healthy
    finally:
        child.kill()
        child.wait()
    rep = doctor(ledger)
    assert [(f["kind"], f["phase"], f["attempt_number"]) for f in rep.findings] == [("abandoned", "implement", 1)]
    assert str(child.pid) in rep.findings[0]["message"]


def test_abandoned_attempt_by_age(store: FilesStore) -> None:
    clock = Clock()
    led = phaselog.Ledger(store, clock=clock)
    led.progress(T, R, "create_pr", "start")
    assert doctor(led).healthy
    clock.now += timedelta(hours=1, seconds=1)
    rep = doctor(led)
    assert kinds(rep) == ["abandoned"]
    assert "no event for 3601 s" in rep.findings[0]["message"]
    led.write(
        T,
        R,
        "create_pr",
        {"pr_url": "https://github.com/o/r/pull/1", "pr_number": 1, "head_sha": "a1b2c3d"},
    )
    assert doctor(led).healthy  # its checkpoint arrived: nothing in flight


# -- broken links ----------------------------------------------------------------------------------
def test_missing_progress_event_breaks_the_chain(healthy: phaselog.Ledger, root: Path) -> None:
    healthy.progress(T, R, "create_pr", "start")
    for i in range(3):
        healthy.progress(T, R, "create_pr", "step", step=i)
    (run_dir(root) / ".progress" / "003_create_pr_a000001_s000000002.json").unlink()
    rep = doctor(healthy, T, quarantine=True)
    assert set(kinds(rep)) == {"broken_link"}
    assert all("event_chain" in f["message"] for f in rep.findings)
    assert "contiguous hash chain at 3" in rep.findings[0]["message"]
    assert rep.moved == []  # a broken link is not a damaged file: nothing to move


def test_approval_of_content_that_is_not_stored(healthy: phaselog.Ledger, root: Path) -> None:
    approval = next((run_dir(root, "VID-1") / ".approvals").glob("*.json"))
    doc = json.loads(approval.read_text("utf-8"))
    doc["checkpoint_hash"] = "0" * 64
    approval.write_text(json.dumps(doc), "utf-8")
    rep = doctor(healthy, "VID-1")
    # The approval carries its own content hash: the edit is caught as damage, and the damaged
    # approval does not count.
    assert kinds(rep) == ["damaged"]
    assert "content changed after it was written" in rep.findings[0]["message"]
    assert healthy.status("VID-1", R).phase("proposal").state == "awaiting_approval"


def test_approval_bound_to_content_that_is_not_stored(healthy: phaselog.Ledger, root: Path) -> None:
    # The same broken link, written consistently (hash recomputed): reported as a broken link.
    from phaselog.model.entries import Approval, entry_bytes

    approval = next((run_dir(root, "VID-1") / ".approvals").glob("*.json"))
    doc = json.loads(approval.read_text("utf-8"))
    doc.pop("content_hash")
    doc["checkpoint_hash"] = "0" * 64
    approval.write_bytes(entry_bytes(Approval.from_json(doc)))
    rep = doctor(healthy, "VID-1")
    assert kinds(rep) == ["broken_link"]
    assert "approval_link" in rep.findings[0]["message"]
    assert healthy.status("VID-1", R).phase("proposal").state == "awaiting_approval"


def test_broken_fork_lineage(healthy: phaselog.Ledger, root: Path, tmp_path: Path) -> None:
    healthy.fork(T, R, through="local_review", new_run_id="run-2")
    assert doctor(healthy, T).healthy
    os.rename(run_dir(root), tmp_path / "source-run-moved-away")
    rep = doctor(healthy, T)
    assert kinds(rep) == ["broken_link", "broken_link"]
    assert all("lineage" in f["message"] for f in rep.findings)


# -- quarantine is contained -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "location",
    [
        "../outside.yaml",
        f"{T}/../../outside.yaml",
        f"{T}/{RUN}/../x.yaml",
        "/etc/passwd",
        f"{T}/x",
        "",
    ],
)
def test_quarantine_refuses_locations_outside_the_store(
    healthy: phaselog.Ledger, root: Path, tmp_path: Path, location: str
) -> None:
    (tmp_path / "outside.yaml").write_bytes(b"keep me")
    before = tree(root)
    with pytest.raises(phaselog.PhaselogError):
        healthy.store.quarantine(location, "test")  # type: ignore[attr-defined]
    assert tree(root) == before
    assert (tmp_path / "outside.yaml").read_bytes() == b"keep me"


def test_quarantine_of_a_file_that_is_not_there_moves_nothing(healthy: phaselog.Ledger, root: Path) -> None:
    before = tree(root)
    assert healthy.store.quarantine(f"{T}/{RUN}/phase_9_nothing_a1.yaml", "test") == []  # type: ignore[attr-defined]
    assert {k: v for k, v in tree(root).items() if not k.startswith("quarantine")} == before


def test_quarantine_needs_a_store_that_declares_it(healthy: phaselog.Ledger) -> None:
    from phaselog.stores.base import Capability

    class NoQuarantine:
        url = "memory://"
        # What only the files store has, not declared (stores declare capabilities; nothing probes).
        capabilities = healthy.store.capabilities - {Capability.QUARANTINE, Capability.LEFTOVERS}

        def __getattr__(self, name: str) -> object:
            if name in ("quarantine", "leftovers"):  # what only the files store has
                raise AttributeError(name)
            return getattr(healthy.store, name)

    led = phaselog.Ledger(NoQuarantine())  # type: ignore[arg-type]
    with pytest.raises(phaselog.UsageError):
        doctor(led, quarantine=True)
