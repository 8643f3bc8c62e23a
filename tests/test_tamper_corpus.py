"""The tamper corpus (issue 8, "nothing lost, nothing forged"): every way we know of damaging or
forging stored records from outside, each caught.

A case builds a small history through the library, then changes the stored bytes or rows the way
someone with write access to the files or the database would (never through phaselog), and says
what must catch it: the ``verify`` rule, and — when the newest record of a phase was hit — that
``read`` refuses the phase instead of returning the edit or silently falling back to an older
attempt. Every case also runs ``status``, ``list``, ``history``, ``doctor`` and ``export``: they may
report damage, never crash.

What cannot be caught (deleting the newest entry of a chain, or rewriting it together with its
recomputed hash) is listed in docs/guarantees.md; the two ``*_is_not_detectable`` tests at the
end pin that limit down, so the document stays true.

Adding a case: write a function ``(ledger, tamper) -> Expect`` decorated with ``@case(stores)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import phaselog
from cli_batch import run_batch
from conftest import IMPLEMENT, LOCAL_REVIEW, make_store
from helpers import clean_env
from phaselog import Corrupt, PhaselogError
from phaselog.ledger.facade import Ledger
from phaselog.model.ids import normalize_run_id
from phaselog.model.records import Checkpoint
from phaselog.stores.base import Store

T = "TAMP-1"
R = "run-1"
RUN = normalize_run_id(R)
V = "VID-9"
VIDEO_PAYLOADS: dict[str, dict[str, Any]] = {
    "research": {"summary": "Who watches launch videos", "sources": ["https://example.org/a"]},
    "proposal": {"title": "Launch", "concept": "Ninety seconds, one idea"},
    "script": {"script_path": "script.md", "word_count": 180},
}
FILES, SQLITE, POSTGRES = "files", "sqlite", "postgres"
ALL = (FILES, SQLITE, POSTGRES)
SQL = (SQLITE, POSTGRES)


@dataclass(frozen=True)
class Expect:
    """What must catch a case."""

    rule: str  # a rule verify reports
    ticket: str = T
    read_phase: str | None = None  # read of this phase (latest) must raise Corrupt
    run: str = RUN


CaseFn = Callable[[Ledger, "Tamper"], Expect]
CASES: dict[str, tuple[tuple[str, ...], CaseFn]] = {}


def case(*stores: str) -> Callable[[CaseFn], CaseFn]:
    """Register a tamper case for ``stores`` (default: every store)."""

    def register(fn: CaseFn) -> CaseFn:
        CASES[fn.__name__] = (stores or ALL, fn)
        return fn

    return register


# -- how records are changed from outside -------------------------------------------------------
class Tamper:
    """Direct access to a store's bytes or rows, bypassing phaselog."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def is_files(self) -> bool:
        return hasattr(self.store, "checkpoints_root")

    # files
    def run_dir(self, ticket: str = T, run: str = RUN) -> Path:
        return self.store.checkpoints_root / ticket / run  # type: ignore[attr-defined, no-any-return]

    def seed_file(self, ordinal: int, phase: str, attempt: int, ticket: str = T, run: str = RUN) -> Path:
        return self.run_dir(ticket, run) / f"phase_{ordinal}_{phase}_a{attempt}.yaml"

    def sidecar(self, ordinal: int, phase: str, attempt: int, ticket: str = T, run: str = RUN) -> Path:
        return self.run_dir(ticket, run) / f".meta_{ordinal}_{phase}_a{attempt}.json"

    # SQL
    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> None:
        store: Any = self.store
        store.session.write(lambda tx: tx.execute(statement, params))

    def sql_row(self, ordinal: int, attempt: int, ticket: str = T, run: str = RUN) -> tuple[str, ...]:
        store: Any = self.store
        rows = store.session.query(
            "SELECT status, content_hash, body FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? "
            "AND phase_ordinal = ? AND attempt = ?",
            (ticket, run, ordinal, attempt),
        )
        return tuple(rows[0])

    # both
    def delete_attempt(self, ordinal: int, phase: str, attempt: int, ticket: str = T, run: str = RUN) -> None:
        if self.is_files:
            for p in (self.seed_file(ordinal, phase, attempt, ticket, run), self.sidecar(ordinal, phase, attempt)):
                p.unlink()
        else:
            self.sql(
                "DELETE FROM phaselog_checkpoints WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ? "
                "AND attempt = ?",
                (ticket, run, ordinal, attempt),
            )

    def forge_checkpoint(self, record: Checkpoint) -> None:
        """Store ``record`` in place of the stored attempt, consistently: a recomputed content hash."""
        from phaselog.model import _yaml
        from phaselog.stores.kernel import record_document

        if self.is_files:
            yaml_bytes = _yaml.dump(record.seed_dict()).encode()
            path = self.seed_file(record.phase_ordinal, record.phase, record.attempt_number, record.ticket_id)
            path.write_bytes(yaml_bytes)
            self.sidecar(record.phase_ordinal, record.phase, record.attempt_number, record.ticket_id).write_bytes(
                record_document(record, hashlib.sha256(yaml_bytes).hexdigest())
            )
        else:
            self.sql(
                "UPDATE phaselog_checkpoints SET body = ?, content_hash = ? WHERE ticket_id = ? AND run_id = ? "
                "AND phase_ordinal = ? AND attempt = ?",
                (
                    record_document(record, None).decode(),
                    record.content_hash,
                    record.ticket_id,
                    record.run_id,
                    record.phase_ordinal,
                    record.attempt_number,
                ),
            )

    def entry_names(self, kind: str, ticket: str, run: str | None) -> list[str]:
        return self.store.entry_names(kind, ticket, run)

    def _entry_path(self, kind: str, ticket: str, run: str | None, name: str) -> Path:
        base = self.store.checkpoints_root / ticket  # type: ignore[attr-defined]
        return (base / run if run else base) / f".{kind}" / f"{name}.json"  # type: ignore[no-any-return]

    def edit_entry(self, kind: str, ticket: str, run: str | None, name: str, change: Callable[[str], str]) -> None:
        if self.is_files:
            path = self._entry_path(kind, ticket, run, name)
            path.write_text(change(path.read_text("utf-8")), "utf-8")
        else:
            store: Any = self.store
            key = (kind, ticket, run or "", name)
            (body,) = store.session.query(
                "SELECT body FROM phaselog_entries WHERE kind = ? AND ticket_id = ? AND run_id = ? AND name = ?", key
            )[0]
            self.sql(
                "UPDATE phaselog_entries SET body = ? WHERE kind = ? AND ticket_id = ? AND run_id = ? AND name = ?",
                (change(body), *key),
            )

    def delete_entry(self, kind: str, ticket: str, run: str | None, name: str) -> None:
        if self.is_files:
            self._entry_path(kind, ticket, run, name).unlink()
        else:
            self.sql(
                "DELETE FROM phaselog_entries WHERE kind = ? AND ticket_id = ? AND run_id = ? AND name = ?",
                (kind, ticket, run or "", name),
            )


def _replace(old: str, new: str) -> Callable[[str], str]:
    def change(text: str) -> str:
        assert old in text, f"{old!r} not in {text[:300]}"
        return text.replace(old, new, 1)

    return change


# -- histories -----------------------------------------------------------------------------------
def impl(n: int) -> dict[str, Any]:
    return {**IMPLEMENT, "branch_name": f"feat/attempt-{n}"}


def ticket_history(ledger: Ledger) -> dict[str, Checkpoint]:
    """implement a1..a3, local_review a1 failed and a2 completed."""
    out = {f"implement{n}": ledger.write(T, R, "implement", impl(n)).record for n in (1, 2, 3)}
    out["review1"] = ledger.write(T, R, "local_review", None, status="failed", error="tests failed").record
    out["review2"] = ledger.write(T, R, "local_review", LOCAL_REVIEW).record
    return out


def video_history(ledger: Ledger) -> None:
    """Judgements 1..3: reject proposal a1, approve proposal a2, approve script a1."""
    ledger.init_ticket(V, title="Launch video", pipeline="video-pipeline")
    ledger.write(V, R, "research", VIDEO_PAYLOADS["research"])
    ledger.write(V, R, "proposal", VIDEO_PAYLOADS["proposal"])
    ledger.reject(V, R, "proposal", by="ana", comment="too long")
    ledger.write(V, R, "proposal", {**VIDEO_PAYLOADS["proposal"], "concept": "Sixty seconds"})
    ledger.approve(V, R, "proposal", by="ana")
    ledger.write(V, R, "script", VIDEO_PAYLOADS["script"])
    ledger.approve(V, R, "script", by="ana")


# -- the cases: checkpoints -----------------------------------------------------------------------
@case(FILES)
def yaml_date_in_payload(ledger: Ledger, t: Tamper) -> Expect:
    return _yaml_native(ledger, t, "2026-01-01")


@case(FILES)
def yaml_nan_in_payload(ledger: Ledger, t: Tamper) -> Expect:
    return _yaml_native(ledger, t, ".nan")


@case(FILES)
def yaml_infinity_in_payload(ledger: Ledger, t: Tamper) -> Expect:
    return _yaml_native(ledger, t, ".inf")


@case(FILES)
def yaml_timestamp_in_payload(ledger: Ledger, t: Tamper) -> Expect:
    return _yaml_native(ledger, t, "2026-01-01 10:00:00")


def _yaml_native(ledger: Ledger, t: Tamper, value: str) -> Expect:
    ticket_history(ledger)
    path = t.seed_file(1, "implement", 3)
    path.write_text(_replace("branch_name: feat/attempt-3", f"branch_name: {value}")(path.read_text()))
    return Expect("json_type", read_phase="implement")


@case(FILES)
def yaml_timestamp_unquoted(ledger: Ledger, t: Tamper) -> Expect:
    rec = ticket_history(ledger)["implement3"]
    path = t.seed_file(1, "implement", 3)
    stamp = rec.seed_dict()["timestamp_utc"]
    path.write_text(_replace(f"'{stamp}'", stamp)(path.read_text()))
    return Expect("json_type", read_phase="implement")


@case(FILES)
def sidecar_deleted_and_newest_yaml_edited(ledger: Ledger, t: Tamper) -> Expect:
    # Issue 8: the run's newest record (nothing links to it) loses its sidecar and is edited.
    ticket_history(ledger)
    t.sidecar(2, "local_review", 2).unlink()
    path = t.seed_file(2, "local_review", 2)
    path.write_text(_replace("iteration_count: 1", "iteration_count: 7")(path.read_text()))
    return Expect("missing_sidecar", read_phase="local_review")


@case(FILES)
def sidecar_deleted(ledger: Ledger, t: Tamper) -> Expect:
    # Untouched YAML, but without its sidecar the record loses its phaselog part (pipeline, basis,
    # prev_hash): it is no longer the record that was written, and nothing vouches for it.
    ticket_history(ledger)
    t.sidecar(1, "implement", 3).unlink()
    return Expect("missing_sidecar", read_phase="implement")


@case(FILES)
def only_attempt_of_a_phase_loses_its_sidecar(ledger: Ledger, t: Tamper) -> Expect:
    # The run's other records hold sidecars: a bare seed file newer than all of them is not history.
    ticket_history(ledger)
    ledger.write(T, R, "create_pr", {"pr_url": "https://github.com/o/r/pull/1", "pr_number": 1, "head_sha": "a1b2c3d"})
    t.sidecar(3, "create_pr", 1).unlink()
    return Expect("missing_sidecar", read_phase="create_pr")


@case(FILES)
def newest_yaml_edited(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    path = t.seed_file(1, "implement", 3)
    path.write_text(_replace("feat/attempt-3", "feat/forged")(path.read_text()))
    return Expect("content_hash", read_phase="implement")


@case(FILES)
def sidecar_copy_edited(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    path = t.sidecar(1, "implement", 3)
    path.write_text(_replace("feat/attempt-3", "feat/forged")(path.read_text()))
    return Expect("content_hash", read_phase="implement")


@case(FILES)
def sidecar_status_flipped_to_failed(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    path = t.sidecar(1, "implement", 3)
    path.write_text(_replace('"status":"completed"', '"status":"failed"')(path.read_text()))
    return Expect("content_hash", read_phase="implement")


@case(FILES)
def sidecar_holds_nan(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    path = t.sidecar(1, "implement", 3)
    path.write_text(_replace('"commit_sha":"a1b2c3d"', '"commit_sha":NaN')(path.read_text()))
    return Expect("json", read_phase="implement")


@case(FILES)
def failed_attempt_edited(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    path = t.run_dir() / ".failed_2_local_review_a1.json"
    path.write_text(_replace("tests failed", "flaky network")(path.read_text()))
    return Expect("content_hash")


@case(FILES)
def newest_yaml_truncated(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    path = t.seed_file(1, "implement", 3)
    path.write_bytes(path.read_bytes()[:40])
    return Expect("required", read_phase="implement")


@case(FILES)
def attempt_renamed_to_another_number(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    t.seed_file(1, "implement", 3).rename(t.seed_file(1, "implement", 7))
    t.sidecar(1, "implement", 3).rename(t.sidecar(1, "implement", 7))
    return Expect("location_mismatch", read_phase="implement")


@case(FILES)
def newest_yaml_replaced_by_a_symlink(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    path = t.seed_file(1, "implement", 3)
    outside = path.parent.parent.parent.parent / "outside.yaml"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    return Expect("no_symlinks", read_phase="implement")


@case(SQLITE, POSTGRES)
def row_status_flipped_to_failed(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    t.sql(
        "UPDATE phaselog_checkpoints SET status = 'failed' WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = 1 "
        "AND attempt = 3",
        (T, RUN),
    )
    return Expect("row_mismatch", read_phase="implement")


@case(SQLITE, POSTGRES)
def row_status_flipped_to_completed(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    ledger.write(T, R, "local_review", None, status="failed", error="regressed")
    t.sql(
        "UPDATE phaselog_checkpoints SET status = 'completed' WHERE ticket_id = ? AND run_id = ? "
        "AND phase_ordinal = 2 AND attempt = 3",
        (T, RUN),
    )
    return Expect("row_mismatch", read_phase="local_review")


@case(SQLITE, POSTGRES)
def row_hash_column_replaced(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    t.sql(
        "UPDATE phaselog_checkpoints SET content_hash = ? WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = 1 "
        "AND attempt = 3",
        ("0" * 64, T, RUN),
    )
    return Expect("row_mismatch", read_phase="implement")


@case(SQLITE, POSTGRES)
def row_body_edited(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    _status, _hash, body = t.sql_row(1, 3)
    t.sql(
        "UPDATE phaselog_checkpoints SET body = ? WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = 1 "
        "AND attempt = 3",
        (_replace("feat/attempt-3", "feat/forged")(body), T, RUN),
    )
    return Expect("content_hash", read_phase="implement")


@case(SQLITE, POSTGRES)
def row_body_holds_nan(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    _status, _hash, body = t.sql_row(1, 3)
    t.sql(
        "UPDATE phaselog_checkpoints SET body = ? WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = 1 "
        "AND attempt = 3",
        (_replace('"commit_sha":"a1b2c3d"', '"commit_sha":NaN')(body), T, RUN),
    )
    return Expect("json", read_phase="implement")


@case(SQLITE, POSTGRES)
def row_moved_to_another_attempt(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    t.sql(
        "UPDATE phaselog_checkpoints SET attempt = 9 WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = 1 "
        "AND attempt = 3",
        (T, RUN),
    )
    return Expect("location_mismatch", read_phase="implement")


@case()
def middle_attempt_deleted(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    t.delete_attempt(1, "implement", 2)
    return Expect("prev_hash")


@case()
def earlier_attempt_forged_with_a_recomputed_hash(ledger: Ledger, t: Tamper) -> Expect:
    # A consistent forgery (new content, its own correct hash) of a record that later records
    # link to: the link of the next attempt no longer matches.
    recs = ticket_history(ledger)
    t.forge_checkpoint(
        recs["implement2"].evolve(phase_payload={**impl(2), "phase": "implement", "commit_sha": "bad0bad"})
    )
    return Expect("prev_hash")


@case()
def earlier_phase_forged_with_a_recomputed_hash(ledger: Ledger, t: Tamper) -> Expect:
    # The newest attempt of implement is in local_review's basis: forging it breaks that link.
    recs = ticket_history(ledger)
    t.forge_checkpoint(
        recs["implement3"].evolve(phase_payload={**impl(3), "phase": "implement", "commit_sha": "bad0bad"})
    )
    return Expect("basis")


# -- the cases: across a pruned gap (prune notes) ---------------------------------------------------
def _pruned_history(ledger: Ledger) -> dict[str, Checkpoint]:
    """ticket_history, then ``prune --keep-last 1``: implement a1, a2 and local_review a1 (failed) go."""
    from phaselog.ledger.retention import prune

    recs = ticket_history(ledger)
    prune(ledger, T, keep_last=1)
    assert ledger.verify(T).ok
    return recs


@case()
def forged_record_after_its_predecessor_was_pruned(ledger: Ledger, t: Tamper) -> Expect:
    # Before: a record whose predecessor was pruned had none of its links checked, so a fully
    # re-hashed forgery (here: built on another implement) passed verify.
    recs = _pruned_history(ledger)
    basis = dict(recs["review2"].basis or {})
    basis["implement"] = type(basis["implement"])(3, "b" * 64)
    t.forge_checkpoint(recs["review2"].evolve(basis=basis, phase_payload={**LOCAL_REVIEW, "phase": "local_review"}))
    return Expect("basis")


@case()
def forged_prev_hash_across_a_pruned_gap(ledger: Ledger, t: Tamper) -> Expect:
    # implement a3's predecessor a2 was pruned: its prev_hash is checked against the note's hash.
    recs = _pruned_history(ledger)
    t.forge_checkpoint(recs["implement3"].evolve(prev_hash="c" * 64))
    return Expect("basis")  # local_review's basis names a3's old hash; prev_hash is reported too


@case()
def prune_note_edited(ledger: Ledger, t: Tamper) -> Expect:
    # A note vouches for the link across the gap: an edit of it is damage, never a new truth.
    _pruned_history(ledger)
    (name,) = t.entry_names("pruned", T, RUN)
    t.edit_entry("pruned", T, RUN, name, lambda text: text.replace('"attempt_number": 2', '"attempt_number": 7', 1))
    return Expect("content_hash")


@case()
def prune_note_forged_with_a_recomputed_hash(ledger: Ledger, t: Tamper) -> Expect:
    # A consistent forgery of the note (its own hash recomputed) that claims another hash for the
    # pruned implement a2: implement a3's prev_hash no longer matches what the note says.
    _pruned_history(ledger)
    (name,) = t.entry_names("pruned", T, RUN)

    def forge(text: str) -> str:
        from phaselog.ledger.prune_notes import PrunedRecord, PruneNote

        doc = json.loads(text)
        doc.pop("content_hash")
        note = PruneNote.from_json(doc)
        removed = tuple(
            PrunedRecord(r.phase, r.phase_ordinal, r.attempt_number, r.status, "d" * 64, r.prev_hash, r.linked)
            if (r.phase, r.attempt_number) == ("implement", 2)
            else r
            for r in note.removed
        )
        return dataclasses.replace(note, removed=removed).body().decode()

    t.edit_entry("pruned", T, RUN, name, forge)
    return Expect("prev_hash")


# -- the cases: the audit trail ------------------------------------------------------------------
@case()
def progress_event_edited(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    for step in (None, 1, 2):
        ledger.progress(T, R, "implement", "start" if step is None else "step", step=step, tokens=10)
    name = t.entry_names("progress", T, RUN)[1]
    t.edit_entry("progress", T, RUN, name, _replace('"tokens": 10', '"tokens": 99999'))
    return Expect("content_hash")


@case()
def middle_progress_event_deleted(ledger: Ledger, t: Tamper) -> Expect:
    ticket_history(ledger)
    for step in (None, 1, 2):
        ledger.progress(T, R, "implement", "start" if step is None else "step", step=step)
    t.delete_entry("progress", T, RUN, t.entry_names("progress", T, RUN)[1])
    return Expect("event_chain")


@case()
def rejection_edited_into_an_approval(ledger: Ledger, t: Tamper) -> Expect:
    video_history(ledger)
    first = t.entry_names("approvals", V, RUN)[0]
    t.edit_entry("approvals", V, RUN, first, _replace('"decision": "reject"', '"decision": "approve"'))
    return Expect("content_hash", ticket=V)


@case()
def rejection_deleted_then_the_same_attempt_approved(ledger: Ledger, t: Tamper) -> Expect:
    # Issue 8: "delete a rejection, approve the same attempt, verify ok". The later judgements of
    # the phase name the rejection (prev_hash) and the run's numbering has a hole.
    video_history(ledger)
    t.delete_entry("approvals", V, RUN, t.entry_names("approvals", V, RUN)[0])
    _approval, warnings = ledger.approve(V, R, "proposal", by="mallory", attempt=1)
    assert warnings  # superseded: recorded, but the point is that verify sees the hole
    return Expect("judgement_chain", ticket=V)


@case()
def judgement_of_another_phase_deleted(ledger: Ledger, t: Tamper) -> Expect:
    video_history(ledger)
    t.delete_entry("approvals", V, RUN, t.entry_names("approvals", V, RUN)[1])  # proposal's approval
    return Expect("judgement_chain", ticket=V)


@case()
def approval_forged_for_other_content(ledger: Ledger, t: Tamper) -> Expect:
    # A well-formed approval (its own content hash recomputed) naming a checkpoint hash that is not
    # the stored checkpoint's.
    from phaselog.model.entries import Approval, entry_bytes

    video_history(ledger)
    name = t.entry_names("approvals", V, RUN)[-1]

    def forge(text: str) -> str:
        doc = json.loads(text)
        doc.pop("content_hash")
        doc["checkpoint_hash"] = "f" * 64
        return entry_bytes(Approval.from_json(doc)).decode()

    t.edit_entry("approvals", V, RUN, name, forge)
    return Expect("approval_link", ticket=V)


@case()
def marker_edited(ledger: Ledger, t: Tamper) -> Expect:
    video_history(ledger)
    t.edit_entry("markers", V, None, t.entry_names("markers", V, None)[0], _replace("Launch video", "Other video"))
    return Expect("content_hash", ticket=V)


@case()
def middle_marker_revision_deleted(ledger: Ledger, t: Tamper) -> Expect:
    video_history(ledger)
    ledger.init_ticket(V, title="Launch video v2")
    ledger.init_ticket(V, title="Launch video v3")
    t.delete_entry("markers", V, None, t.entry_names("markers", V, None)[1])
    return Expect("marker_chain", ticket=V)


# -- the test --------------------------------------------------------------------------------------
PARAMS = [pytest.param(kind, name, id=f"{name}-{kind}") for name, (kinds, _) in CASES.items() for kind in kinds]


@pytest.mark.parametrize(("kind", "name"), PARAMS)
def test_each_tampering_is_caught(kind: str, name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = make_store(kind, tmp_path, request)
    try:
        expect = CASES[name][1](Ledger(store), Tamper(store))
    finally:
        store.close()
    # A fresh store object: nothing cached from before the tampering.
    fresh = make_store(kind, tmp_path, request) if kind != POSTGRES else type(store)(store.url)  # type: ignore[call-arg]
    try:
        ledger = Ledger(fresh)
        report = ledger.verify(expect.ticket)
        rules = [p["rule"] for p in report.problems]
        assert not report.ok, f"{name}: verify says ok"
        assert expect.rule in rules, f"{name}: expected rule {expect.rule!r}, verify reported {report.problems}"
        if expect.read_phase is not None:
            with pytest.raises(Corrupt):
                ledger.read(expect.ticket, expect.run, expect.read_phase)
        _every_view_reports_without_crashing(ledger, expect)
    finally:
        fresh.close()


def _every_view_reports_without_crashing(ledger: Ledger, expect: Expect) -> None:
    """status, list, history, doctor, export, validate: damage is reported or refused, typed."""
    from phaselog.ledger.doctor import doctor
    from phaselog.transfer.jsonl import export_records

    calls: list[Callable[[], Any]] = [
        lambda: ledger.status(expect.ticket, expect.run),
        lambda: ledger.list(expect.ticket),
        lambda: ledger.history(expect.ticket),
        lambda: doctor(ledger, expect.ticket),
        lambda: list(export_records(ledger.store, expect.ticket)),
        lambda: ledger.can_skip_to(expect.ticket, expect.run, 2),
    ]
    if expect.read_phase is not None:
        calls.append(lambda: ledger.validate(expect.ticket, expect.run, expect.read_phase))
    for call in calls:
        with contextlib.suppress(PhaselogError):  # a typed refusal (corrupt, …) is a report too
            call()


def test_the_corpus_covers_every_store() -> None:
    # Guard against a corpus that silently shrinks to one store.
    assert {k for kinds, _ in CASES.values() for k in kinds} == set(ALL)
    assert len(CASES) >= 30


# -- the reproduction on the real CLI ------------------------------------------------------
@pytest.mark.parametrize("value", ["2026-01-01", ".nan", ".inf", "2026-01-01 10:00:00"])
def test_a_yaml_native_value_is_damage_on_every_command(tmp_path: Path, value: str) -> None:
    # Issue 8: verify, status, list, history, export, doctor, read and the next write all failed
    # with "internal error: TypeError: Object of type date is not JSON serializable".
    root = tmp_path / "store"
    ledger = phaselog.open(root)
    ledger.write(T, R, "implement", impl(1))
    path = Tamper(ledger.store).seed_file(1, "implement", 1)
    path.write_text(_replace("branch_name: feat/attempt-1", f"branch_name: {value}")(path.read_text()))
    ledger.close()
    base = ["--ticket-id", T]
    commands = [
        ["verify", *base],
        ["status", *base, "--run-id", R],
        ["list", *base],
        ["history", *base],
        ["export", *base],
        ["doctor"],
        ["read", *base, "--run-id", R, "--phase", "implement"],
        ["validate", *base, "--run-id", R, "--phase", "implement"],
        ["write", *base, "--run-id", R, "--phase", "implement", "--payload", json.dumps(impl(2))],
    ]
    outcomes = run_batch([(c, b"") for c in commands], env=clean_env(PHASELOG_HOME=str(root)), cwd=tmp_path)
    for o in outcomes:
        assert "internal error" not in o.out + o.err, o.describe()
        assert "Traceback" not in o.err, o.describe()
        assert o.rc in (0, 1), o.describe()
        doc = o.json if o.argv[0] != "export" else None
        if doc is not None and doc.get("success") is False:
            # doctor's verdict is about the whole store (damage among its findings), the others' about a record
            assert doc["error_code"] == ("unhealthy" if o.argv[0] == "doctor" else "corrupt"), o.describe()
    verify, status, listing = (outcomes[i].json for i in range(3))
    assert verify["ok"] is False
    assert [p["rule"] for p in verify["problems"]] == ["json_type"]
    assert status["phases"][0]["state"] == "damaged"
    assert listing["count"] == 0
    assert [w["rule"] for w in listing["warnings"]] == ["json_type"]
    read = outcomes[6].json
    assert (read["error_code"], read["rule"]) == ("corrupt", "json_type")
    # After doctor --quarantine moves the damaged attempt aside, the run writes again.
    quarantine = run_batch(
        [(["doctor", "--quarantine"], b""), (commands[-1], b"")],
        env=clean_env(PHASELOG_HOME=str(root)),
        cwd=tmp_path,
    )
    assert [o.rc for o in quarantine] == [0, 0], [o.describe() for o in quarantine]


# -- seed-tool history stays readable --------------------------------------------------------------
def test_seed_tool_history_in_a_run_phaselog_continues_is_not_damage(seed_root: Path) -> None:
    # The missing-sidecar rule must not turn the seed tool's own older files into damage once
    # phaselog writes into the same run: files older than phaselog's first record are history.
    ledger = phaselog.open(seed_root)
    before = ledger.list("OMN-2143")
    assert before.damaged == []
    ledger.write("OMN-2143", "a1b2c3d4", "implement", impl(3))
    after = ledger.list("OMN-2143")
    assert after.damaged == [], [d.message for d in after.damaged]
    assert len(after.items) == len(before.items) + 1
    assert ledger.verify("OMN-2143").ok


def test_a_bare_seed_file_written_after_phaselog_is_not_trusted(tmp_path: Path) -> None:
    # The other side of the same rule: a seed-format file newer than phaselog's records, with no
    # sidecar and no phaselog record naming it, is what a deleted sidecar looks like.
    ledger = phaselog.open(tmp_path / "store")
    ledger.write(T, R, "implement", impl(1))
    second = ledger.write(T, R, "implement", impl(2)).record
    t = Tamper(ledger.store)
    t.sidecar(1, "implement", 2).unlink()
    with pytest.raises(Corrupt) as info:
        ledger.read(T, R, "implement")
    assert info.value.context["rule"] == "missing_sidecar"
    # Restoring the sidecar restores the record: nothing was moved or rewritten.
    from phaselog.stores.kernel import record_document

    yaml_bytes = t.seed_file(1, "implement", 2).read_bytes()
    t.sidecar(1, "implement", 2).write_bytes(record_document(second, hashlib.sha256(yaml_bytes).hexdigest()))
    assert ledger.read(T, R, "implement").record == second
    assert ledger.verify(T).ok


# -- the documented limits (docs/guarantees.md, "what phaselog cannot detect") --------------------
@pytest.mark.parametrize("kind", ALL)
def test_deleting_the_newest_attempt_is_not_detectable(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = make_store(kind, tmp_path, request)
    try:
        ledger = Ledger(store)
        recs = ticket_history(ledger)
        Tamper(store).delete_attempt(2, "local_review", 2)
        # Nothing names the newest attempt, so its absence looks like a history that stopped earlier.
        assert ledger.verify(T).ok
        assert ledger.read(T, R, "implement").record == recs["implement3"]
    finally:
        store.close()


@pytest.mark.parametrize("kind", ALL)
def test_deleting_the_newest_judgement_is_not_detectable(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = make_store(kind, tmp_path, request)
    try:
        ledger = Ledger(store)
        video_history(ledger)
        Tamper(store).delete_entry("approvals", V, RUN, store.entry_names("approvals", V, RUN)[-1])
        assert ledger.verify(V).ok
    finally:
        store.close()


@pytest.mark.parametrize("kind", ALL)
def test_a_pruned_rejection_leaves_no_hole_in_the_judgements(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # The other side of the judgement chain: prune removes attempt 1 of proposal with its
    # rejection; its note lists what went, so neither the numbering nor the chain shows a hole —
    # and the next judgement of the phase still chains.
    from phaselog.ledger.retention import prune

    store = make_store(kind, tmp_path, request)
    try:
        ledger = Ledger(store)
        video_history(ledger)
        report = prune(ledger, V, keep_last=1)
        assert any(r.get("kind") == "approvals" for r in report.removed), report.removed
        assert [a.seq for a in ledger.approvals(V, R)] == [2, 3]
        assert ledger.verify(V).ok, ledger.verify(V).problems
        ledger.write(V, R, "proposal", {**VIDEO_PAYLOADS["proposal"], "concept": "Thirty seconds"})
        ledger.reject(V, R, "proposal", by="ana")
        assert ledger.verify(V).ok, ledger.verify(V).problems
        # ... while deleting a judgement by hand still shows.
        Tamper(store).delete_entry("approvals", V, RUN, store.entry_names("approvals", V, RUN)[0])
        assert "judgement_chain" in [p["rule"] for p in ledger.verify(V).problems]
    finally:
        store.close()
