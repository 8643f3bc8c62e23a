"""The SQL stores' memo of decoded records: a hit is a copy, and an edited row is never a hit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phaselog
from phaselog.model._json import _plain
from phaselog.model.ids import normalize_run_id
from phaselog.model.records import copy_json, detached_copy
from phaselog.stores import open_store
from phaselog.stores.kernel import DecodedRecords

DECISION = {
    "decision_id": "d1",
    "category": "design",
    "subject": "cache",
    "options_considered": [{"option_id": "copy", "label": "Copy on read", "score": 0.8, "reason": "cheap"}],
    "selected": "copy",
    "reason": "measured",
}
PAYLOAD = {"branch_name": "feat/x", "commit_sha": "a1b2c3d", "files_changed": ["src/x.py", "src/y.py"]}


def _sqlite(tmp_path: Path) -> phaselog.Ledger:
    return phaselog.Ledger(open_store(f"sqlite:///{tmp_path / 'l.db'}", create=True))


def test_a_caller_editing_a_record_in_place_changes_only_its_copy(tmp_path: Path) -> None:
    led = _sqlite(tmp_path)
    led.write("T-1", "r1", "implement", PAYLOAD, repo_commit_map={"repo": "a1b2c3d"})
    first = led.read("T-1", "r1", "implement").record
    assert first.phase_payload is not None
    first.phase_payload["files_changed"].append("evil.py")  # type: ignore[index]
    first.phase_payload["branch_name"] = "main"  # type: ignore[index]
    first.repo_commit_map["repo"] = "0000000"  # type: ignore[index]
    again = led.read("T-1", "r1", "implement").record
    assert again.phase_payload is not None
    assert again.phase_payload["files_changed"] == PAYLOAD["files_changed"]
    assert again.phase_payload["branch_name"] == "feat/x"
    assert again.repo_commit_map == {"repo": "a1b2c3d"}
    assert again.content_hash == first.content_hash
    status = led.status("T-1", "r1")  # the snapshot reads through the same memo
    assert status.phase("implement").state == "completed"
    assert led.verify("T-1", "r1").ok


def test_records_a_status_shares_with_the_memo_reach_readers_only_as_copies(tmp_path: Path) -> None:
    """A status reads the carried records uncopied, and the memo keeps those very records (D192):
    every reader after it (read, get, the reader's snapshot) still gets its own copy."""
    led = _sqlite(tmp_path)
    led.write("T-1", "r1", "implement", PAYLOAD)
    other = _sqlite(tmp_path)  # a handle that did not write the run: its status decodes the rows
    assert other.status("T-1", "r1").phase("implement").state == "completed"
    first = other.read("T-1", "r1", "implement", attempt=1).record
    assert first.phase_payload is not None
    expected = copy_json(first.phase_payload)
    first.phase_payload["files_changed"].append("evil.py")  # type: ignore[index]
    run = normalize_run_id("r1")
    snap = other.store.snapshot("T-1", run)
    (stored,) = snap.stored()
    assert stored.record.phase_payload is not None
    stored.record.phase_payload["branch_name"] = "main"  # type: ignore[index]
    for record in (other.read("T-1", "r1", "implement").record, other.store.get("T-1", run, 1, "implement", 1).record):
        assert record.phase_payload == expected
        assert record.content_hash == first.content_hash
    (again,) = other.store.snapshot("T-1", run).stored()
    assert again.record.phase_payload == expected
    assert other.status("T-1", "r1").phase("implement").state == "completed"
    assert other.verify("T-1", "r1").ok


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE phaselog_checkpoints SET body = replace(body, 'feat/x', 'feat/y')",
        "UPDATE phaselog_checkpoints SET status = 'failed'",
        "UPDATE phaselog_checkpoints SET content_hash = 'beef' || substr(content_hash, 5)",
    ],
)
def test_a_row_edited_after_it_was_read_is_reported_not_remembered(tmp_path: Path, edit: str) -> None:
    led = _sqlite(tmp_path)
    led.write("T-1", "r1", "implement", PAYLOAD)
    led.read("T-1", "r1", "implement")  # the memo now holds the intact record
    led.status("T-1", "r1")
    with sqlite3.connect(tmp_path / "l.db") as db:
        db.execute(edit)
    with pytest.raises(phaselog.Corrupt):
        led.read("T-1", "r1", "implement", attempt=1)
    assert not led.verify("T-1", "r1").ok


def test_the_memo_is_bounded_by_the_documents_it_keeps(tmp_path: Path) -> None:
    led = _sqlite(tmp_path)
    stored = led.write("T-1", "r1", "implement", PAYLOAD).stored
    memo = DecodedRecords(max_chars=2500)
    memo.put(2, "x" * 1000, stored)
    memo.put(2, "y" * 1000, stored)
    memo.put(2, "z" * 1000, stored)  # the oldest goes
    assert memo.get(2, "x" * 1000, "here") is None
    hit = memo.get(2, "z" * 1000, "here")
    assert hit is not None
    assert (hit.location, hit.record) == ("here", stored.record)
    assert hit.record is not stored.record
    assert hit.record.phase_payload is not stored.record.phase_payload
    memo.put(2, "w" * 5000, stored)  # bigger than the memo: not kept
    assert memo.get(2, "w" * 5000, "here") is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_json)
def test_copy_json_is_equal_and_shares_no_container(value: object) -> None:
    copied = copy_json(value)
    assert copied == value

    def containers(v: object) -> list[int]:
        if isinstance(v, dict):
            return [id(v), *(i for x in v.values() for i in containers(x))]
        if isinstance(v, list):
            return [id(v), *(i for x in v for i in containers(x))]
        return []

    assert not set(containers(copied)) & set(containers(value))


def test_a_detached_copy_is_equal_with_the_same_hash(tmp_path: Path) -> None:
    led = _sqlite(tmp_path)
    led.write("T-1", "r1", "implement", PAYLOAD, decisions=[DECISION])
    cp = led.read("T-1", "r1", "implement").record
    copy = detached_copy(cp)
    assert copy == cp
    assert copy.content_hash == cp.content_hash
    assert copy.decisions[0] is not cp.decisions[0]
    assert copy.evolve(error=None).content_hash == cp.content_hash


_payloads = st.dictionaries(
    st.text(max_size=6),
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
        max_leaves=12,
    ),
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(_payloads)
def test_a_stored_records_parts_hash_to_its_content_hash(payload: dict[str, object]) -> None:
    """What the reader's shortcut relies on: the parts phaselog stores hash to the record's content
    hash, and the record read from them (without rebuilding that hash) is the record written."""
    from datetime import UTC, datetime

    from phaselog.model.records import Checkpoint, parts_hash, stored_parts_match
    from phaselog.stores.kernel import decode_document, record_document, record_from_document

    cp = Checkpoint(
        ticket_id="T-1",
        run_id="0b7e2a0e-8f3c-5d5e-9a4e-1f2a3b4c5d6e",
        phase="implement",
        phase_ordinal=2,
        attempt_number=3,
        timestamp_utc=datetime(2026, 11, 30, 21, 0, 0, 1234, tzinfo=UTC),
        phase_payload=payload,
        prev_hash="ab" * 32,
    )
    doc = decode_document(record_document(cp), "here")
    assert parts_hash(doc["checkpoint"], doc["phaselog"]) == cp.content_hash
    # Where orjson writes the canonical bytes (no float, no integer beyond 64 bits) the shortcut
    # must hold; elsewhere it may decline (the exact path then decides).
    assert stored_parts_match(doc["checkpoint"], doc["phaselog"], cp.content_hash) or not _plain(payload)
    stored = record_from_document(doc, 2, "here")
    assert not stored.tampered
    assert stored.record == cp
    assert stored.record.content_hash == cp.evolve().content_hash  # rebuilt from scratch: the same


def test_a_decoded_record_has_every_field_a_constructed_one_has(tmp_path: Path) -> None:
    from dataclasses import fields

    from phaselog.model.decoding import checkpoint_from_seed
    from phaselog.model.records import Checkpoint

    led = _sqlite(tmp_path)
    written = led.write("T-1", "r1", "implement", PAYLOAD).record
    decoded, _ = checkpoint_from_seed(written.seed_dict(), phase_ordinal=2, meta=written.meta_dict())
    assert {f.name for f in fields(Checkpoint)} <= set(decoded.__dict__)
    assert decoded == Checkpoint(**{f.name: getattr(decoded, f.name) for f in fields(Checkpoint)})
    assert decoded == written
