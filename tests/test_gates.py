"""Approval gates and prerequisites (phaselog.ledger.gates; seed 002's issue-414 fix).

Seed 002 (OpenMontage) refused to close a gated stage without ``human_approved=True`` but let a
later stage be written whatever came before it. phaselog records approvals as immutable entries
bound to a checkpoint's content hash, and in a strict pipeline refuses a completed checkpoint
whose earlier phases are missing, failed, stale, rejected or unapproved — naming every blocker.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import phaselog
from helpers import tree
from phaselog import Corrupt, InvalidRecord, NotFound, UsageError
from phaselog.ledger.derive import judge
from phaselog.ledger.gates import GateRefused
from phaselog.model.entries import Approval
from phaselog.model.errors import Prerequisite
from phaselog.model.ids import normalize_run_id
from phaselog.stores.files.store import FilesStore

T = "VID-7"
R = "run-1"
RUN = normalize_run_id(R)
VIDEO = "video-pipeline"
PAYLOADS: dict[str, dict[str, Any]] = {
    "research": {"summary": "Who watches launch videos", "sources": ["https://example.org/a"]},
    "proposal": {"title": "Launch", "concept": "Ninety seconds, one idea"},
    "script": {"script_path": "script.md", "word_count": 180},
    "scene_plan": {"scenes": [{"scene_id": "s1", "description": "open", "duration_sec": 4}]},
    "assets": {"assets": [{"asset_id": "a1", "kind": "image", "path": "img/a.png"}]},
    "edit": {"timeline_path": "timeline.json"},
    "compose": {"render_path": "out/video.mp4", "duration_sec": 90},
    "publish": {"url": "https://example.org/v/1", "published_at": "2026-03-01T12:00:00Z"},
}
GATED = ["proposal", "script", "scene_plan", "assets", "publish"]


@pytest.fixture
def vid(ledger: phaselog.Ledger) -> phaselog.Ledger:
    """A ledger whose ticket T follows the video pipeline (strict order, gated phases)."""
    ledger.init_ticket(T, title="Launch video", pipeline=VIDEO)
    return ledger


def w(led: phaselog.Ledger, phase: str, run: str = R, **kw: Any) -> phaselog.WriteResult:
    return led.write(T, run, phase, PAYLOADS[phase], **kw)


def done(led: phaselog.Ledger, phase: str, run: str = R) -> phaselog.WriteResult:
    """Write ``phase`` and approve it if it is gated."""
    res = w(led, phase, run)
    if phase in GATED:
        led.approve(T, run, phase, by="ana")
    return res


def states(led: phaselog.Ledger, run: str = R) -> dict[str, str]:
    return {p.phase: p.state for p in led.status(T, run).phases}


def blockers(err: pytest.ExceptionInfo[Prerequisite]) -> dict[str, tuple[str, str]]:
    assert err.value.error_code == "prerequisite"
    return {b["phase"]: (b["state"], b["reason"]) for b in err.value.context["blockers"]}


def edit_yaml(root: Path, location: str, **changes: Any) -> None:
    """Hand-edit a checkpoint's seed file the way a person with an editor would."""
    path = root / "checkpoints" / location
    doc = yaml.safe_load(path.read_text("utf-8"))
    doc["phase_payload"].update(changes)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), "utf-8")


# -- the manifest ----------------------------------------------------------------------------------
def test_video_pipeline_gates_and_order(vid: phaselog.Ledger) -> None:
    pl = vid.load_pipeline(VIDEO)
    assert pl.order == "strict"
    assert [p.name for p in pl.phases if p.requires_approval] == GATED
    assert vid.load_pipeline("ticket-pipeline").order == "free"


# -- awaiting approval / approve / reject ----------------------------------------------------------
def test_gated_phase_awaits_approval_until_approved(vid: phaselog.Ledger, root: Path) -> None:
    done(vid, "research")
    res = w(vid, "proposal")
    ps = vid.status(T, R).phase("proposal")
    assert (ps.state, ps.approval, ps.requires_approval) == ("awaiting_approval", None, True)
    assert vid.status(T, R).next_phase == "proposal"
    approval, warnings = vid.approve(T, R, "proposal", by="ana", comment="good direction")
    assert warnings == []
    assert approval.checkpoint_hash == res.record.content_hash  # bound to the exact checkpoint
    assert (approval.attempt_number, approval.decision, approval.by) == (1, "approve", "ana")
    ps = vid.status(T, R).phase("proposal")
    assert (ps.state, ps.approval) == ("completed", "approved")
    assert vid.status(T, R).next_phase == "script"
    # stored as its own immutable entry, beside the run's checkpoints
    files = list((root / "checkpoints" / T / RUN / ".approvals").glob("*.json"))
    assert len(files) == 1
    assert Approval.from_json(json.loads(files[0].read_text("utf-8"))) == approval


def test_ungated_phase_is_completed_without_approval(vid: phaselog.Ledger) -> None:
    w(vid, "research")
    assert vid.status(T, R).phase("research").state == "completed"


def test_reject_until_a_new_attempt_is_written_and_approved(vid: phaselog.Ledger, root: Path) -> None:
    done(vid, "research")
    w(vid, "proposal")
    rej, _ = vid.reject(T, R, "proposal", by="bo", comment="too long")
    assert rej.decision == "reject"
    assert not rej.approved
    ps = vid.status(T, R).phase("proposal")
    assert (ps.state, ps.approval) == ("rejected", "rejected")
    before = tree(root)
    with pytest.raises(GateRefused) as err:
        vid.approve(T, R, "proposal", by="ana")  # a rejection is final for that attempt
    assert err.value.error_code == "gate"
    assert err.value.context["rule"] == "rejected"
    assert tree(root) == before
    w(vid, "proposal")  # attempt 2
    assert vid.status(T, R).phase("proposal").state == "awaiting_approval"
    approval, _ = vid.approve(T, R, "proposal", by="ana")
    assert approval.attempt_number == 2
    assert vid.status(T, R).phase("proposal").state == "completed"


def test_approving_a_superseded_attempt_does_not_approve_the_phase(vid: phaselog.Ledger) -> None:
    done(vid, "research")
    w(vid, "proposal")
    w(vid, "proposal")
    approval, warnings = vid.approve(T, R, "proposal", attempt=1, by="ana")
    assert approval.attempt_number == 1  # recorded, as said
    assert warnings
    assert "superseded by attempt 2" in warnings[0]
    assert vid.status(T, R).phase("proposal").state == "awaiting_approval"


def test_an_approval_stops_counting_once_a_newer_attempt_exists(vid: phaselog.Ledger) -> None:
    done(vid, "research")
    done(vid, "proposal")
    assert vid.status(T, R).phase("proposal").state == "completed"
    w(vid, "proposal")
    assert vid.status(T, R).phase("proposal").state == "awaiting_approval"


def test_approve_then_reject_the_same_checkpoint_is_rejected(vid: phaselog.Ledger) -> None:
    done(vid, "research")
    w(vid, "proposal")
    vid.approve(T, R, "proposal", by="ana")
    vid.reject(T, R, "proposal", by="bo")
    assert vid.status(T, R).phase("proposal").state == "rejected"
    assert [a.seq for a in vid.approvals(T, R)] == [1, 2]


def test_judge_any_rejection_wins_in_any_order() -> None:
    def a(seq: int, decision: str, h: str = "h1") -> Approval:
        from datetime import UTC, datetime

        return Approval(T, RUN, "proposal", 2, 1, h, decision, "ana", datetime(2026, 1, 1, tzinfo=UTC), seq)

    assert judge([a(1, "approve")]) == {"h1": "approved"}
    assert judge([a(1, "reject"), a(2, "approve")]) == {"h1": "rejected"}
    assert judge([a(2, "approve"), a(1, "reject")]) == {"h1": "rejected"}
    assert judge([a(1, "approve"), a(2, "reject", "h2")]) == {"h1": "approved", "h2": "rejected"}


@pytest.mark.parametrize(
    ("setup", "kw", "exc", "rule"),
    [
        ("research", {"phase": "research"}, GateRefused, "not_gated"),
        ("nothing", {"phase": "proposal"}, NotFound, None),
        ("failed", {"phase": "proposal"}, NotFound, None),
        ("failed", {"phase": "proposal", "attempt": 1}, GateRefused, "not_completed"),
        ("proposal", {"phase": "proposal", "attempt": 7}, NotFound, None),
        ("proposal", {"phase": "proposal", "by": "  "}, UsageError, "required"),
        ("proposal", {"phase": "proposal", "by": "ana\nbo"}, UsageError, "format"),
        ("proposal", {"phase": "proposal", "comment": "x" * 10_001}, UsageError, "max_length"),
    ],
)
def test_approvals_that_cannot_be_recorded(
    vid: phaselog.Ledger,
    root: Path,
    *,
    setup: str,
    kw: dict[str, Any],
    exc: type[Exception],
    rule: str | None,
) -> None:
    w(vid, "research")
    if setup == "proposal":
        w(vid, "proposal")
    elif setup == "failed":
        vid.write(T, R, "proposal", None, status="failed", error="renderer crashed")
    before = tree(root)
    args = {"by": "ana", **kw}
    phase = args.pop("phase")
    with pytest.raises(exc) as err:
        vid.approve(T, R, phase, **args)
    if rule is not None:
        assert err.value.context["rule"] == rule  # type: ignore[attr-defined]
    assert tree(root) == before


def test_approval_names_are_trimmed_and_recorded(vid: phaselog.Ledger) -> None:
    done(vid, "research")
    w(vid, "proposal")
    approval, _ = vid.approve(T, R, 2, by="  Ana Lima ", comment="ok")
    assert (approval.by, approval.comment, approval.phase) == ("Ana Lima", "ok", "proposal")


# -- prerequisites (seed 002's scenarios) ----------------------------------------------------------
def test_gated_stage_completed_without_approval_blocks_the_next(vid: phaselog.Ledger, root: Path) -> None:
    done(vid, "research")
    w(vid, "proposal")  # completed, never approved
    before = tree(root)
    with pytest.raises(Prerequisite) as err:
        w(vid, "script")
    assert blockers(err) == {"proposal": ("awaiting_approval", "unapproved: attempt 1 awaits approval")}
    assert "strict" in err.value.message
    assert tree(root) == before  # refused: nothing written
    vid.approve(T, R, "proposal", by="ana")
    assert w(vid, "script").record.attempt_number == 1


def test_predecessor_missing_lists_every_blocker(vid: phaselog.Ledger, root: Path) -> None:
    with pytest.raises(Prerequisite) as err:
        w(vid, "scene_plan")
    got = blockers(err)
    assert list(got) == ["research", "proposal", "script"]
    assert all(state == "pending" and "missing" in reason for state, reason in got.values())
    assert not (root / "checkpoints" / T / RUN).exists()


def test_every_kind_of_blocker_is_named_with_its_reason(vid: phaselog.Ledger) -> None:
    done(vid, "research")
    done(vid, "proposal")
    w(vid, "script")
    vid.reject(T, R, "script", by="bo")
    vid.write(T, R, "scene_plan", None, status="failed", error="planner timed out")
    done(vid, "research")  # research attempt 2: proposal is now stale
    with pytest.raises(Prerequisite) as err:
        w(vid, "assets")
    got = blockers(err)
    assert got["proposal"][0] == "stale"
    assert "newer completed attempt 2" in got["proposal"][1]
    assert got["script"][0] in {"stale", "rejected"}
    assert got["scene_plan"] == ("failed", "planner timed out")
    assert "research" not in got


def test_rejected_predecessor_blocks(vid: phaselog.Ledger) -> None:
    done(vid, "research")
    w(vid, "proposal")
    vid.reject(T, R, "proposal", by="bo", comment="off-brand")
    with pytest.raises(Prerequisite) as err:
        w(vid, "script")
    state, reason = blockers(err)["proposal"]
    assert state == "rejected"
    assert "rejected" in reason


def test_failed_predecessor_blocks(vid: phaselog.Ledger) -> None:
    vid.write(T, R, "research", None, status="failed", error="no sources found")
    with pytest.raises(Prerequisite) as err:
        w(vid, "proposal")
    assert blockers(err) == {"research": ("failed", "no sources found")}


def test_stale_predecessor_blocks(vid: phaselog.Ledger) -> None:
    done(vid, "research")
    done(vid, "proposal")
    done(vid, "research")  # a newer research: the proposal was built on the old one
    assert states(vid)["proposal"] == "stale"
    with pytest.raises(Prerequisite) as err:
        w(vid, "script")
    assert blockers(err)["proposal"][0] == "stale"


def test_predecessor_in_progress_blocks(vid: phaselog.Ledger) -> None:
    done(vid, "research")
    vid.progress(T, R, "proposal", "start")
    with pytest.raises(Prerequisite) as err:
        w(vid, "script")
    assert blockers(err)["proposal"][0] == "in_progress"


def test_failed_attempts_may_always_be_recorded(vid: phaselog.Ledger) -> None:
    res = vid.write(T, R, "publish", None, status="failed", error="upload refused")
    assert (res.record.status, res.record.attempt_number) == ("failed", 1)
    assert states(vid)["publish"] == "failed"


def test_free_order_pipeline_skips_the_check(ledger: phaselog.Ledger) -> None:
    # ticket-pipeline is `order: free` so the seed tool's habits (any phase, any time) still work.
    res = ledger.write(
        "PROJ-1",
        R,
        "create_pr",
        {"pr_url": "https://github.com/o/r/pull/1", "pr_number": 1, "head_sha": "a1b2c3d"},
    )
    assert res.record.phase == "create_pr"


def test_custom_manifest_order_is_honoured(root: Path) -> None:
    base = {
        "name": "mini",
        "version": "1.0.0",
        "description": "d",
        "phases": [
            {"name": "fetch"},
            {"name": "train", "requires_approval": True},
            {"name": "ship"},
        ],
    }
    (root / "pipelines").mkdir(parents=True)
    (root / "pipelines" / "mini.yaml").write_text(yaml.safe_dump({**base, "order": "strict"}))
    (root / "pipelines" / "loose.yaml").write_text(yaml.safe_dump({**base, "name": "loose", "order": "free"}))
    led = phaselog.Ledger(FilesStore(root))
    with pytest.raises(Prerequisite):
        led.write("M-1", R, "ship", {}, pipeline="mini")
    assert led.write("M-2", R, "ship", {}, pipeline="loose").record.phase == "ship"
    led.write("M-1", R, "fetch", {}, pipeline="mini")
    led.write("M-1", R, "train", {}, pipeline="mini")
    with pytest.raises(Prerequisite):
        led.write("M-1", R, "ship", {}, pipeline="mini")
    led.approve("M-1", R, "train", by="ana")
    assert led.write("M-1", R, "ship", {}, pipeline="mini").record.attempt_number == 1


def test_explicit_attempt_does_not_bypass_the_check(vid: phaselog.Ledger) -> None:
    with pytest.raises(Prerequisite):
        w(vid, "proposal", attempt=1)


def test_an_invalid_payload_is_refused_before_anything_else(vid: phaselog.Ledger, root: Path) -> None:
    done(vid, "research")
    before = tree(root)
    with pytest.raises(InvalidRecord):
        vid.write(T, R, "proposal", {"title": ""})
    assert tree(root) == before


# -- hand-edited predecessor -----------------------------------------------------------------------
# A checkpoint edited after it was written no longer hashes to what was recorded: it is damaged,
# never used as a record, so everything built on it is blocked until a new attempt is written.
def test_hand_edited_predecessor_refuses_the_successor_write(vid: phaselog.Ledger, root: Path) -> None:
    res = done(vid, "research")
    edit_yaml(root, res.location, summary="rewritten by hand")
    assert states(vid)["research"] == "damaged"
    before = tree(root)
    with pytest.raises(Prerequisite) as err:
        w(vid, "proposal")
    state, reason = blockers(err)["research"]
    assert state == "damaged"
    assert "attempt 1 is damaged" in reason
    assert tree(root) == before
    assert not vid.can_skip_to(T, R, "proposal").allowed  # resume agrees with write
    problems = vid.verify(T).problems
    assert [Path(p["path"]).name for p in problems] == ["phase_1_research_a1.yaml"]
    assert "changed after it was written" in problems[0]["message"]
    with pytest.raises(Corrupt, match="cannot link to attempt 1"):
        w(vid, "research")  # nothing is built past damage, not even the next attempt (see doctor)


def test_hand_edited_approved_predecessor_blocks_and_loses_its_approval(vid: phaselog.Ledger, root: Path) -> None:
    done(vid, "research")
    res = done(vid, "proposal")
    assert states(vid)["proposal"] == "completed"
    edit_yaml(root, res.location, concept="something nobody approved")
    assert states(vid)["proposal"] == "damaged"
    before = tree(root)
    with pytest.raises(Prerequisite) as err:
        w(vid, "script")
    assert blockers(err)["proposal"][0] == "damaged"
    assert tree(root) == before
    problems = {Path(p["path"]).name: p for p in vid.verify(T).problems}
    assert set(problems) == {"phase_2_proposal_a1.yaml", "000001"}
    assert "changed after it was written" in problems["phase_2_proposal_a1.yaml"]["message"]
    assert problems["000001"]["rule"] == "approval_link"  # the approval judged other content
    with pytest.raises(Corrupt):
        vid.approve(T, R, "proposal", by="ana")  # a damaged checkpoint cannot be judged again
    assert tree(root) == before


def test_hand_edited_predecessor_under_an_existing_successor(vid: phaselog.Ledger, root: Path) -> None:
    res = done(vid, "research")
    done(vid, "proposal")
    edit_yaml(root, res.location, summary="rewritten by hand")
    assert states(vid)["research"] == "damaged"
    assert not vid.can_skip_to(T, R, "script").allowed
    with pytest.raises(Prerequisite) as err:
        w(vid, "script")
    assert blockers(err)["research"][0] == "damaged"
    problems = {(Path(p["path"]).name, p["rule"]) for p in vid.verify(T).problems}
    assert "phase_1_research_a1.yaml" in {name for name, _ in problems}
    assert ("phase_2_proposal_a1.yaml", "basis") in problems  # the successor's link is flagged
