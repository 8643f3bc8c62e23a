"""History, diff and fork (phaselog.ledger.audit, phaselog.ledger.diff), and the purity of everything derived.

Seed 003 kept a history of ``<unix-nano>.json`` files, accepted ``3abc`` as attempt 3 in its
checkpoint-diff, and joined raw ids into paths. Here history is the records themselves in time
order, references are parsed strictly, and history / status / decisions are pure functions of the
stored records: the same from a second read, from a copied store, and whatever order listings
come back in (a property test over random operation sequences).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import phaselog
from conftest import IMPLEMENT, PAYLOADS
from helpers import Clock, tree
from phaselog import InvalidRecord, NotFound, PhaselogError, UnknownPhase, UsageError
from phaselog.ledger.diff import diff_values, parse_ref, render_text
from phaselog.model.errors import Prerequisite
from phaselog.model.ids import normalize_run_id
from phaselog.model.records import parse_timestamp
from phaselog.stores.files.store import FilesStore

T = "HIST-1"
R1, R2 = "run-1", "run-2"
RUN1, RUN2 = normalize_run_id(R1), normalize_run_id(R2)
VIDEO: dict[str, dict[str, Any]] = {
    "research": {"summary": "s", "sources": ["https://example.org/a"]},
    "proposal": {"title": "Launch", "concept": "c"},
    "script": {"script_path": "script.md", "word_count": 120},
}


def times(entries: list[dict[str, Any]]) -> list[datetime]:
    return [parse_timestamp(e["at"], field="at") for e in entries if e["at"] is not None]


# -- history ---------------------------------------------------------------------------------------
def test_history_has_every_kind_of_record_in_time_order(led: phaselog.Ledger, clock: Clock) -> None:
    led.init_ticket(T, title="Launch", pipeline="video-pipeline")
    clock.tick()
    led.progress(T, R1, "research", "start")
    clock.tick()
    led.progress(T, R1, "research", "step", step=1, tokens=10)
    clock.tick()
    led.write(T, R1, "research", None, status="failed", error="source down")
    clock.tick()
    led.write(T, R1, "research", VIDEO["research"])
    clock.tick()
    led.write(T, R1, "proposal", VIDEO["proposal"])
    clock.tick()
    led.reject(T, R1, "proposal", by="bo", comment="too long")
    clock.tick()
    led.init_ticket(T, title="Launch film")
    h = led.history(T)
    assert [(e["kind"], e["phase"], e["attempt_number"], e["seq"]) for e in h] == [
        ("marker", None, None, None),
        ("progress", "research", 1, 1),
        ("progress", "research", 1, 2),
        ("checkpoint", "research", 1, None),
        ("checkpoint", "research", 2, None),
        ("checkpoint", "proposal", 1, None),
        ("approval", "proposal", 1, 1),
        ("marker", None, None, None),
    ]
    assert times(h) == sorted(times(h))
    assert h[3]["summary"] == "research attempt 1 failed: source down"
    assert h[6]["summary"] == "proposal attempt 1 rejected by bo: too long"
    assert h[2]["summary"] == "research attempt 1 step 1"  # once "step step 1" (issue 9)
    assert h[0]["record"]["title"] == "Launch"
    assert h[-1]["record"]["revision"] == 2
    assert h[4]["record"]["checkpoint_path"].endswith("phase_1_research_a2.yaml")
    assert h[4]["hash"] == led.read(T, R1, "research").record.content_hash
    assert all(e["run_id"] == RUN1 for e in h[1:-1])
    assert all("_ordinal" not in e for e in h)


def test_history_orders_sub_second_times(led: phaselog.Ledger, clock: Clock) -> None:
    # "…:00Z" and "…:00.500000Z" do not sort as strings ('.' < 'Z'): history must sort by time.
    led.progress(T, R1, "implement", "start")  # 12:00:00
    clock.tick(0.5)
    led.progress(T, R1, "implement", "step", step=1)  # 12:00:00.5
    clock.tick(0.5)
    led.progress(T, R1, "implement", "step", step=2)  # 12:00:01
    clock.tick(0.25)
    led.write(T, R1, "implement", IMPLEMENT)  # 12:00:01.25
    h = led.history(T)
    assert [(e["kind"], e["seq"]) for e in h] == [
        ("progress", 1),
        ("progress", 2),
        ("progress", 3),
        ("checkpoint", None),
    ]
    assert times(h) == sorted(times(h))


def test_history_of_one_instant_keeps_the_causal_order(led: phaselog.Ledger) -> None:
    # The clock never moves (seed 003's same-nanosecond case): seq, then checkpoint, then approval.
    led.init_ticket(T, title="x", pipeline="video-pipeline")
    led.write(T, R1, "research", VIDEO["research"])
    led.progress(T, R1, "proposal", "start")
    for i in range(1, 12):
        led.progress(T, R1, "proposal", "step", step=i)
    led.write(T, R1, "proposal", VIDEO["proposal"])
    led.approve(T, R1, "proposal", by="ana")
    led.approve(T, R1, "proposal", by="bo")
    h = led.history(T, R1, "proposal")
    assert [e["seq"] for e in h if e["kind"] == "progress"] == list(range(1, 13))
    assert [e["kind"] for e in h][-3:] == ["checkpoint", "approval", "approval"]
    assert [e["record"]["by"] for e in h[-2:]] == ["ana", "bo"]


def test_history_filters_by_run_and_phase(led: phaselog.Ledger, clock: Clock) -> None:
    led.init_ticket(T, title="x")
    for run in (R1, R2):
        for phase in ("implement", "local_review"):
            clock.tick()
            led.write(T, run, phase, PAYLOADS[phase])
    everything = led.history(T)
    assert [e["kind"] for e in everything].count("checkpoint") == 4
    assert [e["kind"] for e in everything].count("marker") == 1
    one_run = led.history(T, R2)
    assert {e["run_id"] for e in one_run} == {RUN2}
    assert len(one_run) == 2
    one_phase = led.history(T, phase="local_review")
    assert {(e["run_id"], e["phase"]) for e in one_phase} == {
        (RUN1, "local_review"),
        (RUN2, "local_review"),
    }
    assert led.history(T, R1, "2") == [e for e in one_phase if e["run_id"] == RUN1]  # ordinal works too
    with pytest.raises(UnknownPhase):
        led.history(T, R1, "no_such_phase")
    assert led.history("EMPTY-1") == []


def test_history_shows_damaged_records(led: phaselog.Ledger, root: Path) -> None:
    res = led.write(T, R1, "implement", IMPLEMENT)
    (root / "checkpoints" / res.location).write_text("{{ not: yaml", "utf-8")
    h = led.history(T)
    assert [e["kind"] for e in h] == ["damaged"]
    assert "phase_1_implement_a1.yaml" in h[0]["summary"]


def test_history_changes_nothing(led: phaselog.Ledger, root: Path) -> None:
    led.init_ticket(T, title="x")
    led.progress(T, R1, "implement", "start")
    led.write(T, R1, "implement", IMPLEMENT)
    before = tree(root)
    led.history(T)
    led.history(T, R1, "implement")
    assert tree(root) == before


# -- diff ------------------------------------------------------------------------------------------
def test_diff_of_two_attempts_field_by_field(led: phaselog.Ledger, clock: Clock) -> None:
    led.progress(T, R1, "implement", "start")
    clock.tick(3)
    led.progress(T, R1, "implement", "step", step=1, tokens=100, output="first try")
    led.write(
        T,
        R1,
        "implement",
        None,
        status="failed",
        error="tests failed",
        repo_commit_map={"app": "a1b2c3d"},
    )
    clock.tick(60)
    led.progress(T, R1, "implement", "start")
    clock.tick(5)
    led.progress(T, R1, "implement", "step", step=2, tokens=250, output="second try")
    led.write(
        T,
        R1,
        "implement",
        {**IMPLEMENT, "files_changed": ["src/foo.py", "src/bar.py"]},
        repo_commit_map={"app": "b2c3d4e"},
        artifact_paths=["src/bar.py"],
    )
    d = led.diff(T, f"{R1}:implement:1", f"{R1}:implement:2")
    assert d["a"] == f"{RUN1}:implement:1"
    assert d["b"] == f"{RUN1}:implement:2"
    assert d["identical"] is False
    by = {c["field"]: c for c in d["changes"]}
    assert by["status"]["a"] == "failed"
    assert by["status"]["b"] == "completed"
    assert by["error"] == {"field": "error", "change": "changed", "a": "tests failed", "b": None}
    assert by["repo_commit_map.app"] == {
        "field": "repo_commit_map.app",
        "change": "changed",
        "a": "a1b2c3d",
        "b": "b2c3d4e",
    }
    assert by["artifact_paths"]["added"] == ["src/bar.py"]
    assert by["phase_payload"]["a"] is None  # the failed attempt had no payload
    assert by["progress.elapsed_sec"] == {
        "field": "progress.elapsed_sec",
        "change": "changed",
        "a": 3.0,
        "b": 5.0,
    }
    assert by["progress.tokens"]["a"] == 100
    assert by["progress.tokens"]["b"] == 250
    assert by["progress.output_sha256"]["b"] == hashlib.sha256(b"second try").hexdigest()
    assert by["progress.output_length"] == {
        "field": "progress.output_length",
        "change": "changed",
        "a": 9,
        "b": 10,
    }
    assert "content_hash" in by
    assert "timestamp_utc" in by


def test_diff_of_payloads_names_nested_fields(led: phaselog.Ledger) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    led.write(
        T,
        R1,
        "implement",
        {**IMPLEMENT, "files_changed": ["src/foo.py", "src/x.py"], "commit_sha": "fffffff"},
    )
    changes = {c["field"]: c for c in led.diff(T, f"{R1}:implement:1", f"{R1}:1:2")["changes"]}
    assert changes["phase_payload.commit_sha"]["b"] == "fffffff"
    assert changes["phase_payload.files_changed"]["added"] == ["src/x.py"]
    assert "phase_payload.branch_name" not in changes


def test_diff_of_an_attempt_with_itself_is_identical(led: phaselog.Ledger) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    d = led.diff(T, f"{R1}:implement:1", f"{RUN1}:1:1")
    assert (d["identical"], d["changes"]) == (True, [])
    assert render_text(d).endswith("(identical)")


def test_diff_of_two_progress_events(led: phaselog.Ledger, clock: Clock) -> None:
    led.progress(T, R1, "implement", "start", provider="claude")
    clock.tick(7)
    led.progress(T, R1, "implement", "step", step=3, tokens=42, output="so far", status="testing")
    d = led.diff(T, f"{R1}:implement:1:1", f"{R1}:implement:1:2")
    by = {c["field"]: c for c in d["changes"]}
    assert set(by) == {
        "event",
        "status",
        "step",
        "tokens",
        "elapsed_sec",
        "output_sha256",
        "output_length",
        "timestamp",
    }
    assert by["elapsed_sec"]["b"] == 7.0
    assert by["tokens"]["b"] == 42
    assert by["event"]["b"] == "step"
    assert d["b"] == f"{RUN1}:implement:1:2"


def test_diff_every_consecutive_pair_of_a_phase(led: phaselog.Ledger) -> None:
    assert led.diff_phase(T, R1, "implement") == []
    led.write(T, R1, "implement", IMPLEMENT)
    assert led.diff_phase(T, R1, "implement") == []
    led.write(T, R1, "implement", None, status="failed", error="x")
    led.write(T, R1, "implement", IMPLEMENT)
    pairs = led.diff_phase(T, R1, "implement")
    assert [(p["a"][-1], p["b"][-1]) for p in pairs] == [("1", "2"), ("2", "3")]
    assert all(not p["identical"] for p in pairs)


def test_diff_across_runs_shows_what_a_fork_changed(led: phaselog.Ledger) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    led.fork(T, R1, through="implement", new_run_id=R2)
    d = led.diff(T, f"{R1}:implement:1", f"{R2}:implement:1")
    assert [c["field"] for c in d["changes"]] == ["content_hash"]  # same content, another run


@pytest.mark.parametrize(
    ("ref", "rule"),
    [
        ("r1:implement:3abc", "ref_number"),  # seed 003 read this as 3
        ("r1:implement:0", "ref_number"),
        ("r1:implement:-1", "ref_number"),
        ("r1:implement:01", "ref_number"),
        ("r1:implement: 1", "ref_number"),
        ("r1:implement:1e3", "ref_number"),
        ("r1:implement:\uff11", "ref_number"),  # a full-width digit one
        ("r1:implement:1:0", "ref_number"),
        ("r1:implement:1:x", "ref_number"),
        ("r1:implement:9999999999", "ref_number"),
        ("r1:implement", "ref_format"),
        ("r1:implement:1:2:3", "ref_format"),
        ("r1::1", "ref_format"),
        (":implement:1", "ref_format"),
        ("", "ref_format"),
        ("r1:Implement:1", "ref_phase"),
        ("r1:../x:1", "ref_phase"),
        ("r1:0:1", "ref_phase"),
    ],
)
def test_bad_references_are_rejected_clearly(led: phaselog.Ledger, root: Path, ref: str, rule: str) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    before = tree(root)
    with pytest.raises(UsageError) as err:
        led.diff(T, ref, f"{R1}:implement:1")
    assert err.value.context["rule"] == rule
    assert err.value.context["field"] == "A"
    assert err.value.message.startswith("A: ")  # names the argument at fault
    with pytest.raises(UsageError):
        parse_ref(ref)
    assert tree(root) == before


def test_run_part_of_a_reference_never_names_a_path(led: phaselog.Ledger, root: Path, tmp_path: Path) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    ref = parse_ref("../../etc:implement:1")
    assert ref.run_id == normalize_run_id("../../etc")  # a UUID v5, like any other short id
    with pytest.raises(NotFound):
        led.diff(T, "../../etc:implement:1", f"{R1}:implement:1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_diff_mixing_an_attempt_and_an_event_is_refused(led: phaselog.Ledger) -> None:
    led.progress(T, R1, "implement", "start")
    led.write(T, R1, "implement", IMPLEMENT)
    with pytest.raises(UsageError) as err:
        led.diff(T, f"{R1}:implement:1", f"{R1}:implement:1:1")
    assert err.value.context["rule"] == "ref_kind"


@pytest.mark.parametrize(
    ("a", "exc"),
    [
        (f"{R1}:implement:9", NotFound),  # no such attempt
        (f"{R2}:implement:1", NotFound),  # no such run
        (f"{R1}:nosuch:1", UnknownPhase),
        (f"{R1}:9:1", UnknownPhase),
    ],
)
def test_diff_of_records_that_do_not_exist(led: phaselog.Ledger, a: str, exc: type[Exception]) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    with pytest.raises(exc):
        led.diff(T, a, f"{R1}:implement:1")


def test_diff_of_an_event_that_does_not_exist(led: phaselog.Ledger) -> None:
    led.progress(T, R1, "implement", "start")
    with pytest.raises(NotFound):
        led.diff(T, f"{R1}:implement:1:1", f"{R1}:implement:1:2")


def test_render_text_marks_added_removed_and_changed() -> None:
    result = {
        "a": "A",
        "b": "B",
        "changes": diff_values({"x": 1, "gone": "old", "tags": ["a", "b"]}, {"x": 2, "new": True, "tags": ["b", "c"]}),
    }
    text = render_text(result)
    assert text.splitlines()[:2] == ["--- A", "+++ B"]
    assert "- gone: 'old'" in text
    assert "+ new: True" in text
    assert "~ x: 1 → 2" in text
    assert "    + 'c'" in text
    assert "    - 'a'" in text


def test_diff_values_distinguishes_types_and_nesting() -> None:
    assert diff_values({"a": 1}, {"a": 1.0}) == [{"field": "a", "change": "changed", "a": 1, "b": 1.0}]
    assert diff_values({"a": True}, {"a": 1})[0]["change"] == "changed"
    assert diff_values([{"k": 1}], [{"k": 1}, {"k": 2}]) == [{"field": "[1]", "change": "added", "b": {"k": 2}}]
    assert diff_values({"m": {"n": [1, {"o": 2}]}}, {"m": {"n": [1, {"o": 3}]}}) == [
        {"field": "m.n[1].o", "change": "changed", "a": 2, "b": 3}
    ]


# -- fork ------------------------------------------------------------------------------------------
@pytest.fixture
def vid(led: phaselog.Ledger) -> phaselog.Ledger:
    led.init_ticket(T, title="Launch", pipeline="video-pipeline")
    return led


def test_fork_reuses_checkpoints_and_records_lineage(vid: phaselog.Ledger, root: Path) -> None:
    vid.write(T, R1, "research", VIDEO["research"])
    src = vid.write(T, R1, "proposal", VIDEO["proposal"])
    vid.approve(T, R1, "proposal", by="ana")
    vid.write(T, R1, "script", VIDEO["script"])  # after the fork point: not reused
    source_run = {k: v for k, v in tree(root).items() if RUN1 in k}
    new_id, written = vid.fork(T, R1, through="proposal", new_run_id=R2)
    assert new_id == RUN2
    assert [w.record.phase for w in written] == ["research", "proposal"]
    forked = vid.read(T, R2, "proposal").record
    assert forked.forked_from == {
        "ticket_id": T,
        "run_id": RUN1,
        "phase": "proposal",
        "attempt_number": 1,
        "content_hash": src.record.content_hash,
    }
    assert forked.phase_payload == src.record.phase_payload
    st = vid.status(T, R2)
    assert [p.state for p in st.phases[:3]] == [
        "completed",
        "completed",
        "pending",
    ]  # approval carried over
    assert st.next_phase == "script"
    assert {k: v for k, v in tree(root).items() if RUN1 in k} == source_run  # the source is untouched
    assert vid.write(T, R2, "script", VIDEO["script"]).record.basis["proposal"].hash == forked.content_hash
    assert vid.verify(T).ok


def test_fork_without_a_new_run_id_makes_a_fresh_uuid(led: phaselog.Ledger) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    a, _ = led.fork(T, R1, through="implement")
    b, _ = led.fork(T, R1, through="implement")
    assert len({a, b, RUN1}) == 3
    assert normalize_run_id(a) == a


def test_fork_through_an_unapproved_phase_is_refused(vid: phaselog.Ledger, root: Path) -> None:
    vid.write(T, R1, "research", VIDEO["research"])
    vid.write(T, R1, "proposal", VIDEO["proposal"])
    before = tree(root)
    with pytest.raises(Prerequisite) as err:
        vid.fork(T, R1, through="proposal", new_run_id=R2)
    assert err.value.error_code == "prerequisite"
    assert [(b["phase"], b["state"]) for b in err.value.context["blockers"]] == [("proposal", "awaiting_approval")]
    assert tree(root) == before  # validated first: nothing written


def test_fork_through_a_missing_or_failed_phase_is_refused(led: phaselog.Ledger, root: Path) -> None:
    led.write(T, R1, "local_review", PAYLOADS["local_review"])  # free order: phase 1 never written
    led.write(T, R1, "create_pr", None, status="failed", error="CI red")
    before = tree(root)
    with pytest.raises(Prerequisite) as err:
        led.fork(T, R1, through="create_pr", new_run_id=R2)
    got = {b["phase"]: b["state"] for b in err.value.context["blockers"]}
    assert got == {"implement": "pending", "create_pr": "failed"}
    assert tree(root) == before


def test_fork_through_a_stale_or_edited_phase_is_refused(led: phaselog.Ledger, root: Path, clock: Clock) -> None:
    first = led.write(T, R1, "implement", IMPLEMENT)
    clock.tick()
    led.write(T, R1, "local_review", PAYLOADS["local_review"])
    path = root / "checkpoints" / first.location
    doc = yaml.safe_load(path.read_text("utf-8"))
    doc["phase_payload"]["commit_sha"] = "fffffff"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), "utf-8")
    with pytest.raises(Prerequisite) as err:
        led.fork(T, R1, through="local_review", new_run_id=R2)
    got = {b["phase"]: b["state"] for b in err.value.context["blockers"]}
    assert got["implement"] == "damaged"  # edited after writing: never reused
    assert got["local_review"] in {"stale", "invalid"}  # built on what is no longer there
    assert led.store.attempts(T, RUN2) == []


def test_fork_through_a_stale_phase_is_refused(led: phaselog.Ledger, clock: Clock) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    clock.tick()
    led.write(T, R1, "local_review", PAYLOADS["local_review"])
    clock.tick()
    led.write(T, R1, "implement", IMPLEMENT)  # newer implement: local_review is stale
    with pytest.raises(Prerequisite) as err:
        led.fork(T, R1, through="local_review", new_run_id=R2)
    assert [(b["phase"], b["state"]) for b in err.value.context["blockers"]] == [("local_review", "stale")]
    _, written = led.fork(T, R1, through="implement", new_run_id=R2)  # up to the current phase is fine
    assert [w.record.attempt_number for w in written] == [1]
    assert written[0].record.forked_from["attempt_number"] == 2  # type: ignore[index]


def test_fork_through_the_last_phase_needs_every_phase(led: phaselog.Ledger, clock: Clock) -> None:
    phases = list(PAYLOADS)
    for phase in phases[:-1]:
        clock.tick()
        led.write(T, R1, phase, PAYLOADS[phase])
    with pytest.raises(Prerequisite) as err:
        led.fork(T, R1, through=phases[-1], new_run_id=R2)
    assert [b["phase"] for b in err.value.context["blockers"]] == [phases[-1]]
    clock.tick()
    led.write(T, R1, phases[-1], PAYLOADS[phases[-1]])
    _, written = led.fork(T, R1, through=phases[-1], new_run_id=R2)
    assert len(written) == 5
    assert led.status(T, R2).done


def test_fork_into_an_existing_or_the_same_run_is_refused(led: phaselog.Ledger) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    led.write(T, R2, "implement", IMPLEMENT)
    with pytest.raises(InvalidRecord):
        led.fork(T, R1, through="implement", new_run_id=R2)
    with pytest.raises(UsageError):
        led.fork(T, R1, through="implement", new_run_id=R1)
    with pytest.raises(UsageError):
        led.fork(T, R1, through="implement", new_run_id=RUN1)  # the same run spelled as its UUID
    assert [r.attempt_number for r in led.store.attempts(T, RUN2)] == [1]


def test_fork_of_an_unknown_phase_is_refused(led: phaselog.Ledger) -> None:
    led.write(T, R1, "implement", IMPLEMENT)
    with pytest.raises(UnknownPhase):
        led.fork(T, R1, through="no_such_phase", new_run_id=R2)


def test_verify_checks_fork_lineage(led: phaselog.Ledger, root: Path) -> None:
    src = led.write(T, R1, "implement", IMPLEMENT)
    led.fork(T, R1, through="implement", new_run_id=R2)
    assert led.verify(T).ok
    path = root / "checkpoints" / src.location
    doc = yaml.safe_load(path.read_text("utf-8"))
    doc["phase_payload"]["branch_name"] = "feat/other"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), "utf-8")
    problems = led.verify(T).problems
    lineage = [p for p in problems if p["rule"] == "lineage"]
    assert len(lineage) == 1
    assert RUN2 in lineage[0]["path"]
    assert "not stored (or damaged)" in lineage[0]["message"]
    assert any(p["path"].endswith(f"{RUN1}/phase_1_implement_a1.yaml") for p in problems)


def test_verify_reports_a_fork_whose_source_is_gone(led: phaselog.Ledger, root: Path, tmp_path: Path) -> None:
    src = led.write(T, R1, "implement", IMPLEMENT)
    led.fork(T, R1, through="implement", new_run_id=R2)
    # A person moved the source run away (phaselog itself never does).
    shutil.move(str(root / "checkpoints" / T / RUN1), str(tmp_path / "moved-away"))
    lineage = [p for p in led.verify(T).problems if p["rule"] == "lineage"]
    assert len(lineage) == 1
    assert "not stored" in lineage[0]["message"]
    assert src.record.run_id in lineage[0]["message"]


# -- purity: history, status and decisions are functions of the records ----------------------------
class ShuffledStore(FilesStore):
    """The files store over the same real files, returning every listing in a shuffled order."""

    def __init__(self, root: Path, seed: int) -> None:
        super().__init__(root)
        self.rng = random.Random(seed)

    def _mix(self, items: list[Any]) -> list[Any]:
        items = list(items)
        self.rng.shuffle(items)
        return items

    def runs(self, ticket_id: str) -> list[str]:
        return self._mix(super().runs(ticket_id))

    def attempts(self, ticket_id: str, run_id: str) -> list[Any]:
        return self._mix(super().attempts(ticket_id, run_id))

    def iter_records(self, ticket_id: str, run_id: str | None = None) -> Iterator[Any]:
        return iter(self._mix(list(super().iter_records(ticket_id, run_id))))

    def entries(self, kind: str, ticket_id: str, run_id: str | None, prefix: str = "") -> list[Any]:
        return self._mix(super().entries(kind, ticket_id, run_id, prefix))

    def entry_names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        return self._mix(super().entry_names(kind, ticket_id, run_id))


PT = "PURE-1"
PURE_RUNS = (R1, R2)
PURE_PHASES = ("research", "proposal", "script")
PURE_TICKS = (0, 0.000001, 0.25, 0.5, 1, 7200)

run_s = st.sampled_from(PURE_RUNS)
phase_s = st.sampled_from(PURE_PHASES)
_ARGS: dict[str, Any] = {
    "tick": st.tuples(st.sampled_from(PURE_TICKS)),
    "init": st.tuples(st.sampled_from(["Launch", "Launch v2"])),
    "start": st.tuples(run_s, phase_s),
    "step": st.tuples(run_s, phase_s, st.integers(0, 5), st.sampled_from([None, "out", "more out"])),
    "end": st.tuples(run_s, phase_s),
    "write": st.tuples(run_s, phase_s, st.sampled_from([None, "d1", "d2"]), st.sampled_from(["a", "b"])),
    "fail": st.tuples(run_s, phase_s),
    "approve": st.tuples(run_s, phase_s),
    "reject": st.tuples(run_s, phase_s),
    # moves a run forward the way a pipeline does, so gates and approvals are reached often
    "advance": st.tuples(run_s, st.sampled_from([None, "d1", "d2"]), st.sampled_from(["a", "b"])),
}
_WEIGHTS = {
    "tick": 3,
    "init": 1,
    "start": 2,
    "step": 2,
    "end": 1,
    "write": 2,
    "fail": 1,
    "approve": 1,
    "reject": 1,
    "advance": 6,
}
OPS = st.sampled_from([k for k, n in _WEIGHTS.items() for _ in range(n)]).flatmap(
    lambda kind: _ARGS[kind].map(lambda args: (kind, *args))
)


def _decision(did: str, selected: str) -> dict[str, Any]:
    return {
        "decision_id": did,
        "category": "c",
        "subject": "s",
        "selected": selected,
        "reason": "r",
        "options_considered": [{"option_id": "a", "label": "A"}, {"option_id": "b", "label": "B"}],
    }


def _apply(led: phaselog.Ledger, clock: Clock, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "tick":
        clock.tick(op[1])
    elif kind == "init":
        led.init_ticket(PT, title=op[1], pipeline="video-pipeline")
    elif kind == "start":
        led.progress(PT, op[1], op[2], "start")
    elif kind == "step":
        led.progress(PT, op[1], op[2], "step", step=op[3], output=op[4])
    elif kind == "end":
        led.progress(PT, op[1], op[2], "complete")
    elif kind == "write":
        decisions = [_decision(op[3], op[4])] if op[3] else []
        led.write(PT, op[1], op[2], VIDEO[op[2]], decisions=decisions)
    elif kind == "advance":
        nxt = led.status(PT, op[1]).next_phase
        if nxt not in VIDEO:
            return
        if led.status(PT, op[1]).phase(nxt).state == "awaiting_approval":
            led.approve(PT, op[1], nxt, by="ana")
        else:
            _apply(led, clock, ("write", op[1], nxt, op[2], op[3]))
    elif kind == "fail":
        led.write(PT, op[1], op[2], None, status="failed", error="boom")
    else:
        led.approve(PT, op[1], op[2], by="ana", decision=kind)


def derive(led: phaselog.Ledger) -> dict[str, Any]:
    """Everything derived from a ticket's records."""
    out: dict[str, Any] = {
        "history": led.history(PT),
        "decisions": led.decisions(PT),
        "history:proposal": led.history(PT, phase="proposal"),
    }
    for run in PURE_RUNS:
        out[f"status:{run}"] = led.status(PT, run).to_json()
        out[f"history:{run}"] = led.history(PT, run)
        out[f"skip:{run}"] = led.can_skip_to(PT, run, "script").to_json()
    return out


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=6, max_size=24), seed=st.integers(0, 2**32 - 1))
def test_derived_views_are_pure_functions_of_the_records(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]], seed: int
) -> None:
    base = tmp_path_factory.mktemp("pure")
    root = base / "store"
    clock = Clock()
    led = phaselog.Ledger(FilesStore(root), clock=clock)
    led.init_ticket(PT, title="Launch", pipeline="video-pipeline")
    for op in ops:
        before = tree(root)
        try:
            _apply(led, clock, op)
        except PhaselogError:
            assert tree(root) == before, op  # a refused operation leaves no trace
    first = derive(led)
    assert derive(led) == first  # reading again
    copied = base / "copy"
    shutil.copytree(root, copied)
    assert derive(phaselog.Ledger(FilesStore(copied), clock=clock)) == first  # from a copy
    assert derive(phaselog.Ledger(ShuffledStore(root, seed), clock=clock)) == first  # any listing order
    hist = first["history"]
    assert times(hist) == sorted(times(hist))  # time order, whatever the sub-second digits
    for run in PURE_RUNS:
        sub = first[f"history:{run}"]
        assert sub == [e for e in hist if e["run_id"] == normalize_run_id(run)]
    assert first["history:proposal"] == [e for e in hist if e["phase"] == "proposal"]
    assert len({e["hash"] for e in hist}) == len(hist)  # every record once


@settings(max_examples=20, deadline=None)
@given(ops=st.lists(OPS, min_size=1, max_size=10))
def test_decisions_only_change_when_a_checkpoint_is_stored(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]]
) -> None:
    root = tmp_path_factory.mktemp("dec") / "store"
    clock = Clock()
    led = phaselog.Ledger(FilesStore(root), clock=clock)
    led.init_ticket(PT, title="Launch", pipeline="video-pipeline")
    for op in ops:
        log = led.decisions(PT)
        stored = {
            (run, r.phase_ordinal, r.attempt_number)
            for run in PURE_RUNS
            for r in led.store.attempts(PT, normalize_run_id(run))
        }
        with contextlib.suppress(PhaselogError):  # refused operations are part of the sequence
            _apply(led, clock, op)
        now = {
            (run, r.phase_ordinal, r.attempt_number)
            for run in PURE_RUNS
            for r in led.store.attempts(PT, normalize_run_id(run))
        }
        if led.decisions(PT) != log:
            assert op[0] in ("write", "advance"), op
            assert op[-2] is not None, op  # it carried a decision
            assert len(now) > len(stored), op  # and its checkpoint was stored
