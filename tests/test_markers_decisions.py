"""The ticket marker (seed 002's project.json) and the decision log (seed 002's decision_log.json).

Seed 002 wrote its decision log before validating the checkpoint that carried it, so a refused
write could still change the log. In phaselog the log is derived from stored checkpoints only.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import phaselog
from conftest import IMPLEMENT
from helpers import Clock, decision, tree
from phaselog import InvalidRecord, PipelineError, PipelineMismatch, UsageError
from phaselog.model.entries import Marker
from phaselog.model.errors import Prerequisite
from phaselog.model.ids import normalize_run_id
from phaselog.stores.files.store import FilesStore

T = "VID-9"
R1, R2 = "run-1", "run-2"
RESEARCH = {"summary": "s", "sources": ["https://example.org/a"]}
PROPOSAL = {"title": "Launch", "concept": "c"}


# -- ticket marker ---------------------------------------------------------------------------------
def test_init_records_the_ticket_identity(led: phaselog.Ledger, root: Path) -> None:
    marker, changed = led.init_ticket(T, title="Launch video", pipeline="video-pipeline", meta={"owner": "ana"})
    assert changed is True
    assert (marker.revision, marker.title, marker.pipeline, dict(marker.meta)) == (
        1,
        "Launch video",
        "video-pipeline",
        {"owner": "ana"},
    )
    assert marker.prev_hash is None
    path = root / "checkpoints" / T / ".markers" / "rev_000001.json"
    assert Marker.from_json(json.loads(path.read_text("utf-8"))) == marker
    assert led.marker(T) == marker


def test_init_with_the_same_identity_is_a_no_op(led: phaselog.Ledger, root: Path) -> None:
    first, _ = led.init_ticket(T, title="Launch video", pipeline="video-pipeline", meta={"owner": "ana"})
    before = tree(root)
    for kw in ({"pipeline": "video-pipeline", "meta": {"owner": "ana"}}, {}, {"meta": {}}):
        again, changed = led.init_ticket(T, title="Launch video", **kw)  # type: ignore[arg-type]
        assert (again, changed) == (first, False)
    assert tree(root) == before


def test_init_with_another_pipeline_is_refused(led: phaselog.Ledger, root: Path) -> None:
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    before = tree(root)
    with pytest.raises(PipelineMismatch) as err:
        led.init_ticket(T, title="Launch video", pipeline="ticket-pipeline")
    assert err.value.error_code == "pipeline_mismatch"
    assert err.value.context == {"recorded": "video-pipeline", "requested": "ticket-pipeline"}
    assert tree(root) == before


def test_title_and_metadata_changes_are_appended_as_revisions(led: phaselog.Ledger, root: Path, clock: Clock) -> None:
    r1, _ = led.init_ticket(T, title="Launch video", pipeline="video-pipeline", meta={"owner": "ana"})
    rev1_bytes = (root / "checkpoints" / T / ".markers" / "rev_000001.json").read_bytes()
    clock.tick()
    r2, changed = led.init_ticket(T, title="Launch film")
    assert changed
    assert r2.revision == 2
    assert r2.prev_hash == r1.content_hash
    assert dict(r2.meta) == {"owner": "ana"}  # kept
    clock.tick()
    r3, changed = led.init_ticket(T, title="Launch film", meta={"owner": "bo", "team": "growth"})
    assert changed
    assert r3.revision == 3
    assert r3.prev_hash == r2.content_hash
    assert dict(r3.meta) == {"owner": "bo", "team": "growth"}
    assert r3.pipeline == "video-pipeline"
    assert [m.revision for m in led.markers(T)] == [1, 2, 3]
    assert (root / "checkpoints" / T / ".markers" / "rev_000001.json").read_bytes() == rev1_bytes  # never overwritten
    assert led.verify(T).ok


@pytest.mark.parametrize(
    ("kw", "exc"),
    [
        ({"title": ""}, UsageError),
        ({"title": "   "}, UsageError),
        ({"title": "x" * 501}, UsageError),
        ({"title": "ok", "meta": {"": "v"}}, UsageError),
        ({"title": "ok", "meta": {"k": 1}}, UsageError),
        ({"title": "ok", "pipeline": "no-such-pipeline"}, PipelineError),
    ],
)
def test_bad_init_is_refused_and_nothing_written(
    led: phaselog.Ledger, root: Path, kw: dict[str, Any], exc: type[Exception]
) -> None:
    with pytest.raises(exc):
        led.init_ticket(T, **kw)
    assert tree(root) == {}


def test_runs_of_a_ticket_with_a_marker_default_to_its_pipeline(led: phaselog.Ledger) -> None:
    led.init_ticket(T, title="Launch video", pipeline="video-pipeline")
    assert led.pipeline_for(T, R1).name == "video-pipeline"
    res = led.write(T, R1, "research", RESEARCH)  # no --pipeline: the marker's
    assert res.record.pipeline is not None
    assert res.record.pipeline.name == "video-pipeline"
    assert led.status(T, R2).pipeline == "video-pipeline"  # even a run with nothing yet
    with pytest.raises(PipelineMismatch):
        led.write(T, R2, "implement", IMPLEMENT, pipeline="ticket-pipeline")
    assert led.pipeline_for("OTHER-1", R1).name == "ticket-pipeline"  # no marker: the default


def test_default_pipeline_marker(led: phaselog.Ledger) -> None:
    marker, _ = led.init_ticket("PROJ-5", title="Fix login")
    assert marker.pipeline == "ticket-pipeline"


def test_verify_checks_the_marker_revision_chain(led: phaselog.Ledger, root: Path) -> None:
    led.init_ticket(T, title="a", pipeline="video-pipeline")
    led.init_ticket(T, title="b")
    led.init_ticket(T, title="c")
    assert led.verify(T).ok
    (root / "checkpoints" / T / ".markers" / "rev_000002.json").unlink()
    rep = led.verify(T)
    assert [p["rule"] for p in rep.problems] == ["marker_chain"]


def test_verify_reports_an_edited_marker_revision(led: phaselog.Ledger, root: Path) -> None:
    led.init_ticket(T, title="a", pipeline="video-pipeline")
    led.init_ticket(T, title="b")
    path = root / "checkpoints" / T / ".markers" / "rev_000001.json"
    doc = json.loads(path.read_text("utf-8"))
    doc["title"] = "edited"
    path.write_text(json.dumps(doc), "utf-8")
    # The revision carries its content hash: the edit itself is caught, not only a broken chain.
    problems = led.verify(T).problems
    assert any(
        p["rule"] == "content_hash" and p["path"].endswith("rev_000001.json") and p["damaged"] for p in problems
    ), problems


# -- decision log ----------------------------------------------------------------------------------
def test_decisions_are_stored_with_the_checkpoint_not_in_the_seed_file(led: phaselog.Ledger, root: Path) -> None:
    res = led.write(T, R1, "implement", IMPLEMENT, decisions=[decision("d1")])
    assert res.record.decisions == (decision("d1"),)
    seed = yaml.safe_load((root / "checkpoints" / res.location).read_text("utf-8"))
    assert "decisions" not in seed  # the seed tool's file stays pure
    assert led.read(T, R1, "implement").record.decisions == (decision("d1"),)


def test_decision_log_shape_and_source_reference(led: phaselog.Ledger, root: Path) -> None:
    res = led.write(T, R1, "implement", IMPLEMENT, decisions=[decision("d1"), decision("d2", "b")])
    log = led.decisions(T)
    assert set(log) == {"version", "ticket", "decisions", "conflicts"}
    assert (log["version"], log["ticket"], log["conflicts"]) == ("1.0", T, [])
    assert [d["decision_id"] for d in log["decisions"]] == ["d1", "d2"]
    d2 = log["decisions"][1]
    assert {k: v for k, v in d2.items() if k != "source"} == decision("d2", "b")
    src = d2["source"]
    assert src == {
        "run_id": normalize_run_id(R1),
        "phase": "implement",
        "attempt_number": 1,
        "content_hash": res.record.content_hash,
        "checkpoint_path": res.location,
    }
    assert (root / "checkpoints" / src["checkpoint_path"]).is_file()
    json.dumps(log)  # plain JSON all the way down


def test_decisions_merge_across_runs_first_record_wins(led: phaselog.Ledger, clock: Clock) -> None:
    # The run that writes first has the run id that sorts last: time, not names, decides.
    first, second = sorted([R1, R2], key=normalize_run_id, reverse=True)
    assert normalize_run_id(first) > normalize_run_id(second)
    led.write(T, first, "implement", IMPLEMENT, decisions=[decision("d1"), decision("d2")])
    clock.tick()
    led.write(
        T,
        second,
        "implement",
        IMPLEMENT,
        decisions=[decision("d1"), decision("d2", "b"), decision("d3")],
    )
    log = led.decisions(T)
    assert [d["decision_id"] for d in log["decisions"]] == ["d1", "d2", "d3"]
    by_id = {d["decision_id"]: d for d in log["decisions"]}
    assert by_id["d1"]["source"]["run_id"] == normalize_run_id(first)
    assert by_id["d2"]["selected"] == "a"
    assert by_id["d3"]["source"]["run_id"] == normalize_run_id(second)
    # an identical duplicate is not a conflict; a different one is reported
    assert [c["decision_id"] for c in log["conflicts"]] == ["d2"]
    c = log["conflicts"][0]
    assert c["kept"]["run_id"] == normalize_run_id(first)
    assert c["ignored"]["run_id"] == normalize_run_id(second)
    assert "first record wins" in c["message"]


def test_decisions_from_later_attempts_and_phases_join_the_log(led: phaselog.Ledger, clock: Clock) -> None:
    led.write(T, R1, "implement", IMPLEMENT, decisions=[decision("d1")])
    clock.tick()
    led.write(T, R1, "implement", IMPLEMENT, decisions=[decision("d1", "b"), decision("d2")])
    clock.tick()
    led.write(
        T,
        R1,
        "local_review",
        {"iteration_count": 1, "issue_fingerprints": [], "last_clean_sha": "a1b2c3d"},
        decisions=[decision("d3")],
    )
    log = led.decisions(T)
    assert [(d["decision_id"], d["source"]["phase"], d["source"]["attempt_number"]) for d in log["decisions"]] == [
        ("d1", "implement", 1),
        ("d2", "implement", 2),
        ("d3", "local_review", 1),
    ]
    assert [c["decision_id"] for c in log["conflicts"]] == ["d1"]


@pytest.mark.parametrize(
    "bad",
    [
        [{"decision_id": "d9"}],  # missing fields
        [decision("d9", extra_field="x")],  # unknown field
        [decision("d9"), decision("d9")],  # twice in one checkpoint
        [decision("d9", options_considered="a, b")],  # not a list
        [decision("d9", options_considered=[{"option_id": "a"}])],  # option without label
        [decision("d9", options_considered=[{"option_id": "a", "label": "A", "score": "high"}])],
    ],
)
def test_a_refused_write_never_changes_the_decision_log(
    led: phaselog.Ledger, root: Path, bad: list[dict[str, Any]]
) -> None:
    led.write(T, R1, "implement", IMPLEMENT, decisions=[decision("d1")])
    log, files = led.decisions(T), tree(root)
    with pytest.raises(InvalidRecord):
        led.write(T, R1, "implement", IMPLEMENT, decisions=copy.deepcopy(bad))
    assert led.decisions(T) == log
    assert tree(root) == files


def test_a_prerequisite_refusal_never_changes_the_decision_log(led: phaselog.Ledger, root: Path) -> None:
    led.init_ticket(T, title="v", pipeline="video-pipeline")
    led.write(T, R1, "research", RESEARCH, decisions=[decision("d1")])
    led.write(T, R1, "proposal", PROPOSAL)  # not approved
    log, files = led.decisions(T), tree(root)
    with pytest.raises(Prerequisite):
        led.write(T, R1, "script", {"script_path": "s.md", "word_count": 3}, decisions=[decision("d2")])
    assert led.decisions(T) == log
    assert tree(root) == files


def test_failed_attempts_do_not_contribute_decisions(led: phaselog.Ledger) -> None:
    led.write(T, R1, "implement", None, status="failed", error="x", decisions=[decision("d1")])
    assert led.read(T, R1, "implement", 1).record.decisions == (decision("d1"),)  # recorded ...
    assert led.decisions(T)["decisions"] == []  # ... but only completed work decides


def test_decision_log_of_an_unknown_ticket_is_empty(led: phaselog.Ledger) -> None:
    assert led.decisions("NOPE-1") == {
        "version": "1.0",
        "ticket": "NOPE-1",
        "decisions": [],
        "conflicts": [],
    }


def test_decision_log_is_the_same_from_a_copied_store(
    led: phaselog.Ledger, root: Path, tmp_path: Path, clock: Clock
) -> None:
    import shutil

    led.write(T, R1, "implement", IMPLEMENT, decisions=[decision("d1")])
    clock.tick()
    led.write(T, R2, "implement", IMPLEMENT, decisions=[decision("d1", "b")])
    copy_root = tmp_path / "copy"
    shutil.copytree(root, copy_root)
    other = phaselog.Ledger(FilesStore(copy_root))
    assert other.decisions(T) == led.decisions(T)
