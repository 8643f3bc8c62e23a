"""Ticket id rules and run-id normalisation (phaselog.model.ids)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaselog.model.errors import InvalidIdentifier, PhaselogError, UsageError
from phaselog.model.ids import (
    RUN_ID_NAMESPACE,
    TICKET_ID_MAX,
    given_run_name,
    is_canonical_uuid,
    normalize_run_id,
    validate_ticket_id,
)

CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TICKET_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"


def _error_of(fn: Callable[[str], str], value: str) -> InvalidIdentifier | None:
    """Return the InvalidIdentifier ``fn(value)`` raises, or None if it accepts the value."""
    try:
        fn(value)
    except InvalidIdentifier as err:
        return err
    return None


def _refused_ticket(value: object, rule: str, field: str = "ticket_id") -> InvalidIdentifier:
    with pytest.raises(InvalidIdentifier) as info:
        validate_ticket_id(value, field=field)
    err = info.value
    assert err.context["field"] == field
    assert err.context["rule"] == rule
    assert field in err.message
    return err


# -- ticket ids: accepted ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ticket_id",
    [
        "PROJ-1234",
        "OMN-2143",
        "a",
        "0",
        "_private",
        "dataset.v2",
        "my_dataset-2026.01",
        "a.b.c",
        "x" * TICKET_ID_MAX,
        "A-",
        "a.",
    ],
)
def test_valid_ticket_ids_are_returned_unchanged(ticket_id: str) -> None:
    assert validate_ticket_id(ticket_id) == ticket_id


@given(
    st.text(alphabet=TICKET_ALPHABET, min_size=1, max_size=TICKET_ID_MAX).filter(
        lambda s: s[0] not in ".-" and ".." not in s
    )
)
def test_every_id_of_the_allowed_shape_is_accepted(ticket_id: str) -> None:
    assert validate_ticket_id(ticket_id) == ticket_id


# -- ticket ids: refused ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "non_empty"),
        ("x" * (TICKET_ID_MAX + 1), "max_length"),
        ("x" * 1000, "max_length"),
        (".hidden", "leading_char"),
        ("-flag", "leading_char"),
        (".", "leading_char"),
        ("..", "leading_char"),
        ("a..b", "traversal"),
        ("a..", "traversal"),
        ("a/b", "charset"),
        ("../etc", "leading_char"),
        ("a\\b", "charset"),
        ("a\x00b", "charset"),
        ("a\nb", "charset"),
        ("a\tb", "charset"),
        ("a\rb", "charset"),
        ("a\x1bb", "charset"),
        ("a\x7fb", "charset"),
        ("PROJ-1\n", "charset"),
        ("a b", "charset"),
        ("a:b", "charset"),
        ("a*b", "charset"),
        ("résumé", "charset"),
        # unicode lookalikes: Cyrillic small a, fullwidth letters, division slash, one-dot leader,
        # fraction slash, Kelvin sign, non-breaking hyphen, Arabic-Indic digit.
        ("\u0430bc", "charset"),
        ("\uff21\uff22\uff23", "charset"),
        ("a\u2215b", "charset"),
        ("a\u2024\u2024b", "charset"),
        ("a\u2044b", "charset"),
        ("\u212a-1", "charset"),
        ("PROJ\u20111", "charset"),
        ("PROJ-\u0661", "charset"),
    ],
)
def test_invalid_ticket_ids_are_refused_with_field_and_rule(value: str, rule: str) -> None:
    _refused_ticket(value, rule)


@pytest.mark.parametrize("value", [None, 123, b"PROJ-1", ["PROJ-1"]])
def test_non_string_ticket_ids_are_refused(value: object) -> None:
    _refused_ticket(value, "type")


def test_refusal_names_the_field_given_by_the_caller() -> None:
    err = _refused_ticket("a/b", "charset", field="ticket")
    assert "'/'" in err.message  # the message points at the offending character


def test_invalid_identifier_is_a_usage_error_and_value_error() -> None:
    with pytest.raises(InvalidIdentifier) as info:
        validate_ticket_id("")
    assert isinstance(info.value, UsageError)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, PhaselogError)
    assert info.value.error_code == "invalid_id"
    assert info.value.exit_code == 2


@given(st.text(min_size=1, max_size=80))
def test_accepted_ticket_ids_are_always_one_safe_path_segment(value: str) -> None:
    err = _error_of(validate_ticket_id, value)
    if err is not None:
        assert err.context["field"] == "ticket_id"
        assert err.context["rule"] in {"max_length", "leading_char", "traversal", "charset"}
        return
    assert 1 <= len(value) <= TICKET_ID_MAX
    assert set(value) <= set(TICKET_ALPHABET)
    assert value[0] not in ".-"
    assert ".." not in value


# -- run ids --------------------------------------------------------------------------------------
U = "4fa2159f-9c61-5f8b-9ae5-28692b46cbd7"


@pytest.mark.parametrize(
    "spelling",
    [
        U,
        U.upper(),
        "{" + U + "}",
        "{" + U.upper() + "}",
        "urn:uuid:" + U,
        "urn:uuid:" + U.upper(),
        U.replace("-", ""),
        U.replace("-", "").upper(),
    ],
)
def test_every_uuid_spelling_normalises_to_the_canonical_form(spelling: str) -> None:
    assert normalize_run_id(spelling) == U


def test_uuid_objects_normalise_to_their_string() -> None:
    assert normalize_run_id(uuid.UUID(U)) == U


@pytest.mark.parametrize(
    ("short", "expected"),
    [
        ("a1b2c3d4", "4fa2159f-9c61-5f8b-9ae5-28692b46cbd7"),
        ("abcd1234", "5c0d9ab6-07cc-5c62-8df7-0991b577ffc3"),
    ],
)
def test_short_run_ids_map_to_the_seed_tools_uuid5(short: str, expected: str) -> None:
    assert normalize_run_id(short) == expected
    assert str(uuid.uuid5(RUN_ID_NAMESPACE, short)) == expected
    assert uuid.UUID(expected).version == 5


def test_short_ids_are_case_sensitive_and_distinct() -> None:
    assert normalize_run_id("run-A") != normalize_run_id("run-a")
    assert normalize_run_id("a1b2c3d4") != normalize_run_id("abcd1234")


@pytest.mark.parametrize("value", ["", " ", "   ", "\t", "\n", " \t\n "])
def test_empty_or_whitespace_run_ids_are_refused(value: str) -> None:
    with pytest.raises(InvalidIdentifier) as info:
        normalize_run_id(value)
    assert info.value.context == {"field": "run_id", "rule": "non_empty"}


@pytest.mark.parametrize("value", [None, 42, b"a1b2c3d4"])
def test_non_string_run_ids_are_refused(value: object) -> None:
    with pytest.raises(InvalidIdentifier) as info:
        normalize_run_id(value, field="run")
    assert info.value.context == {"field": "run", "rule": "type"}


@pytest.mark.parametrize("value", ["run\x00id", "run\nid", "a1b2\x7f"])
def test_run_ids_with_control_characters_are_refused(value: str) -> None:
    with pytest.raises(InvalidIdentifier) as info:
        normalize_run_id(value)
    assert info.value.context == {"field": "run_id", "rule": "charset"}


def test_overlong_run_ids_are_refused() -> None:
    with pytest.raises(InvalidIdentifier) as info:
        normalize_run_id("r" * 257)
    assert info.value.context == {"field": "run_id", "rule": "max_length"}
    assert CANONICAL.fullmatch(normalize_run_id("r" * 256))


def test_is_canonical_uuid() -> None:
    assert is_canonical_uuid(U)
    assert not is_canonical_uuid(U.upper())
    assert not is_canonical_uuid(U.replace("-", ""))
    assert not is_canonical_uuid("{" + U + "}")
    assert not is_canonical_uuid(U + "\n")
    assert not is_canonical_uuid("a1b2c3d4")


def _spellings(u: uuid.UUID) -> st.SearchStrategy[str]:
    s = str(u)
    return st.sampled_from([s, s.upper(), "{" + s + "}", "urn:uuid:" + s, u.hex, u.hex.upper(), "{" + u.hex + "}"])


@given(st.uuids().flatmap(lambda u: st.tuples(st.just(u), _spellings(u))))
def test_any_uuid_spelling_normalises_to_str_of_the_uuid(pair: tuple[uuid.UUID, str]) -> None:
    u, spelling = pair
    assert normalize_run_id(spelling) == str(u)


run_id_text = st.one_of(
    st.text(min_size=1, max_size=300),
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.text(alphabet="0123456789abcdefABCDEF-{}", min_size=30, max_size=40),
)


@given(run_id_text)
def test_normalisation_is_idempotent_and_canonical(value: str) -> None:
    err = _error_of(normalize_run_id, value)
    if err is not None:
        assert err.context["rule"] in {"non_empty", "max_length", "charset"}
        return
    once = normalize_run_id(value)
    assert CANONICAL.fullmatch(once)
    assert is_canonical_uuid(once)
    assert normalize_run_id(once) == once
    assert normalize_run_id(once.upper()) == once


def _reference_normalize(run_id: str) -> str:
    """The mapping as first written (uuid.UUID, else uuid.uuid5): the fast path must agree with it."""
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        return str(uuid.uuid5(RUN_ID_NAMESPACE, run_id))


_UUID_SPELLINGS = st.uuids().flatmap(
    lambda u: st.sampled_from(
        [str(u), str(u).upper(), u.hex, f"{{{u}}}", f"urn:uuid:{u}", f"uuid:{u.hex}", f"{{{u.hex[:16]}-{u.hex[16:]}}}"]
    )
)


@given(st.one_of(st.text(min_size=1, max_size=80), _UUID_SPELLINGS, st.from_regex(r"[0-9a-fA-F{}:urnid_ -]{30,40}")))
def test_run_ids_map_as_uuid_and_uuid5_do(run_id: str) -> None:
    """UUID spellings normalise as uuid.UUID reads them; every other name maps as uuid.uuid5 does."""
    try:
        got = normalize_run_id(run_id)
    except InvalidIdentifier:
        assert not run_id.strip() or any(ord(c) < 32 or c == "\x7f" for c in run_id)
        return
    except UnicodeEncodeError:  # a lone surrogate: uuid.uuid5 refuses it the same way
        with pytest.raises(UnicodeEncodeError):
            _reference_normalize(run_id)
        return
    assert got == _reference_normalize(run_id)
    assert (given_run_name(run_id) is None) == _is_uuid(run_id)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
