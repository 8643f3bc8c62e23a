"""The audit entries (progress events, approvals, markers) are built one way (``EntryRecord``).

The stored bytes below were written by the three hand-built kinds this replaced: the shared path
must keep them byte for byte (key order included: a stored entry is compared as it is), parse
what it writes, and refuse a broken field naming it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaselog.model.entries import Approval, Marker, ProgressEvent, entry_bytes, parse_entry
from phaselog.model.errors import Corrupt

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
EVENT = ProgressEvent(
    "T-1", "r1", "implement", 1, 1, 2, "step", T0, step=3, tokens=10, elapsed_sec=1.5, pid=42, prev_hash="ab"
)
APPROVAL = Approval("T-1", "r1", "review", 2, 1, "cd", "approve", "ana", T0, 1, comment="ok")
MARKER = Marker("T-1", 1, "Title", "ticket-pipeline", {"b": "2", "a": "1"}, T0)
STORED = {
    "progress": b'{"schema_version": "1.0.0", "kind": "phaselog.progress", "ticket_id": "T-1", "run_id": "r1", '
    b'"phase": "implement", "phase_ordinal": 1, "attempt_number": 1, "seq": 2, "event": "step", '
    b'"timestamp": "2026-01-02T03:04:05Z", "step": 3, "status": null, "provider": null, "tokens": 10, '
    b'"elapsed_sec": 1.5, "output": null, "output_sha256": null, "output_length": null, "host": null, '
    b'"pid": 42, "process_start": null, "prev_hash": "ab", '
    b'"content_hash": "50872ffa734c61fc44a2a7acdc9a74f8448ed8d97e1a3f7502ee5c4d40658405"}\n',
    "approval": b'{"schema_version": "1.0.0", "kind": "phaselog.approval", "ticket_id": "T-1", "run_id": "r1", '
    b'"phase": "review", "phase_ordinal": 2, "attempt_number": 1, "checkpoint_hash": "cd", "decision": "approve", '
    b'"by": "ana", "comment": "ok", "timestamp": "2026-01-02T03:04:05Z", "seq": 1, '
    b'"content_hash": "9e707de6ca685aa4951c46b6ef9486f5e965324942b31ac326a1edb382a18e90"}\n',
    "marker": b'{"schema_version": "1.0.0", "kind": "phaselog.marker", "ticket_id": "T-1", "revision": 1, '
    b'"title": "Title", "pipeline": "ticket-pipeline", "meta": {"a": "1", "b": "2"}, '
    b'"timestamp": "2026-01-02T03:04:05Z", "prev_hash": null, '
    b'"content_hash": "9c0d4189927b9fc85680633a26b09600fbbc4eefd5df91dcb734cb6facf54b82"}\n',
}
RECORDS: dict[str, Any] = {"progress": EVENT, "approval": APPROVAL, "marker": MARKER}


@pytest.mark.parametrize("kind", sorted(STORED))
def test_each_kind_stores_the_bytes_it_always_stored_and_reads_them_back(kind: str) -> None:
    record = RECORDS[kind]
    assert entry_bytes(record) == STORED[kind]
    assert parse_entry(type(record), STORED[kind], "x.json") == record


def test_an_approval_names_its_predecessor_only_when_it_has_one() -> None:
    chained = Approval("T-1", "r1", "review", 2, 2, "ef", "reject", "bo", T0, 2, prev_hash=APPROVAL.content_hash)
    assert list(chained.to_json())[-1] == "prev_hash"
    assert "prev_hash" not in APPROVAL.to_json()
    assert Approval.from_json(chained.to_json()) == chained


text = st.text(max_size=8)
maybe_int = st.none() | st.integers(0, 10**6)
events = st.builds(
    ProgressEvent,
    text,
    text,
    text,
    st.integers(1, 99),
    st.integers(1, 10**6),
    st.integers(1, 10**6),
    st.sampled_from(["start", "step", "complete", "fail", "skip"]),
    st.just(T0),
    step=maybe_int,
    status=st.none() | text,
    tokens=maybe_int,
    elapsed_sec=st.none() | st.floats(0, 1e6),
    output=st.none() | text,
    pid=maybe_int,
    process_start=st.none() | st.floats(0, 1e9),
    prev_hash=st.none() | text,
)
markers = st.builds(
    Marker,
    text,
    st.integers(1, 99),
    text,
    text,
    st.dictionaries(text, text, max_size=3),
    st.just(T0),
    prev_hash=st.none() | text,
)


@given(st.one_of(events, markers))
def test_what_is_written_reads_back_as_the_same_record(record: Any) -> None:
    again = parse_entry(type(record), entry_bytes(record), "x.json")
    assert again.to_json() == record.to_json()
    assert again.content_hash == record.content_hash


@pytest.mark.parametrize(
    ("kind", "field", "value", "message"),
    [
        ("progress", "seq", "2", "seq: must be an integer"),
        ("progress", "tokens", True, "tokens: has the wrong type"),
        ("progress", "event", "jump", "event: must be one of"),
        ("approval", "by", None, "by: must be a string"),
        ("approval", "decision", "maybe", "decision: must be approve or reject"),
        ("marker", "meta", {"a": 1}, "meta: must map strings to strings"),
        ("marker", "revision", 1.0, "revision: must be an integer"),
    ],
)
def test_a_broken_field_is_refused_by_name(kind: str, field: str, value: Any, message: str) -> None:
    doc = RECORDS[kind].to_json()
    doc[field] = value
    with pytest.raises(Corrupt) as err:
        type(RECORDS[kind]).from_json(doc)
    assert err.value.message.startswith(message)
    assert err.value.context.get("field") == field
    del doc[field]
    if field not in ("tokens", "meta", "event", "decision"):
        with pytest.raises(Corrupt, match=f"{field}: missing required field"):
            type(RECORDS[kind]).from_json(doc)
