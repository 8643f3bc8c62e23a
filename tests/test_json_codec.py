"""phaselog.model._json: orjson's fast paths give exactly the standard library's bytes and values.

Content hashes are taken over ``json.dumps(sort_keys=True, …)``: a single differing byte would
make every stored record look tampered with, so the invariant is checked over arbitrary JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaselog.model import _json
from phaselog.model.limits import json_loads
from phaselog.model.records import Checkpoint, canonical_bytes
from phaselog.stores.kernel import record_document

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**64), max_value=2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


def _stdlib_canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _stdlib_compact(doc: Any) -> bytes:
    return (json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode()


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 and 1.0 are not the same value here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


@settings(max_examples=400, deadline=None)
@given(documents)
def test_dumps_are_the_standard_librarys_bytes(doc: Any) -> None:
    try:
        expected = _stdlib_canonical(doc)
    except (UnicodeEncodeError, ValueError):
        with pytest.raises((UnicodeEncodeError, ValueError)):
            _json.dumps_canonical(doc)
        return
    assert _json.dumps_canonical(doc) == expected
    assert _json.dumps_compact(doc, newline=True) == _stdlib_compact(doc)
    assert _json.dumps_compact(doc) == _stdlib_compact(doc)[:-1]


@settings(max_examples=400, deadline=None)
@given(documents)
def test_loads_gives_the_standard_librarys_values(doc: Any) -> None:
    try:
        text = json.dumps(doc, ensure_ascii=False)
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        return  # not UTF-8 text: no store holds it
    expected = json.loads(raw)
    assert _same(json_loads(raw), expected)
    assert _same(json_loads(text), expected)


@pytest.mark.parametrize(
    "raw",
    [b"NaN", b"Infinity", b"[-Infinity]", b"1e400", b'{"a": 1e999}', b"[1,]", b'"a\nb"', b"\xff"],
)
def test_loads_refuses_what_it_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        json_loads(raw)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"18446744073709551616", 2**64),  # orjson alone would give a float
        (b"-9223372036854775809", -(2**63) - 1),
        (b'"\\ud800"', "\ud800"),  # an escaped lone surrogate: orjson refuses, json reads it
        (b'{"a":1,"a":2}', {"a": 2}),
    ],
)
def test_loads_edge_values(raw: bytes, value: Any) -> None:
    assert _same(json_loads(raw), value)


def test_float_and_big_int_documents_take_the_standard_library() -> None:
    doc = {"x": 1.5e-7, "n": 2**70, "s": "é"}
    assert _json.dumps_canonical(doc) == _stdlib_canonical(doc)  # orjson would write 1.5e-7
    assert b"1.5e-07" in _json.dumps_canonical(doc)


@settings(max_examples=200, deadline=None)
@given(documents, documents)
def test_one_walk_of_a_record_gives_both_byte_strings_as_two_walks_did(payload: Any, decision: Any) -> None:
    """A record is walked once (``is_plain``) for its hashed and its stored bytes: the standard
    library's bytes for both, the stored parts in their own key order, not sorted (D178)."""
    cp = Checkpoint(
        ticket_id="T-1",
        run_id="00000000-0000-4000-8000-000000000001",
        phase="implement",
        phase_ordinal=1,
        attempt_number=1,
        timestamp_utc=datetime(2026, 1, 1, tzinfo=UTC),
        phase_payload={"phase": "implement", "z": payload, "a": [payload]},
        decisions=({"d": decision},),
    )
    parts = {"checkpoint": cp.seed_dict(), "phaselog": cp.meta_dict()}
    try:
        canonical = _stdlib_canonical(parts)
    except (UnicodeEncodeError, ValueError):
        with pytest.raises((UnicodeEncodeError, ValueError)):
            record_document(cp)
        return
    stored = record_document(cp)
    assert cp.content_hash == hashlib.sha256(canonical).hexdigest() == hashlib.sha256(canonical_bytes(cp)).hexdigest()
    doc = json.loads(stored)
    assert stored == _stdlib_compact(doc)
    assert list(doc["checkpoint"]["phase_payload"]) == ["phase", "z", "a"]  # as written, not sorted
