"""String formats: git-sha, relative-path, uri, date-time (phaselog.model.formats)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaselog.model import formats
from phaselog.model.formats import CHECKERS, date_time, git_sha, relative_path, uri

HEX = "0123456789abcdef"


def test_checkers_cover_the_four_formats() -> None:
    assert {
        "git-sha": git_sha,
        "relative-path": relative_path,
        "uri": uri,
        "date-time": date_time,
    } == CHECKERS


# -- git-sha ----------------------------------------------------------------------------------
@pytest.mark.parametrize("sha", ["a1b2c3d", "4801973", "0" * 7, "f" * 40, "4801973d2b6ce1a07f35e2c91b4d8a6f0e3c7b25"])
def test_git_sha_accepts_7_to_40_lowercase_hex(sha: str) -> None:
    assert git_sha(sha) is None


@pytest.mark.parametrize(
    "sha",
    [
        "",
        "a1b2c3",  # 6
        "a" * 41,
        "A1B2C3D",  # upper case
        "a1b2c3g",  # not hex
        " a1b2c3d",
        "a1b2c3d ",
        "a1b2c3d\n",
        "0x1b2c3d4",
        "\u0661\u0662\u0663\u0664\u0665\u0666\u0667",  # Arabic-Indic digits
        "a1b2c3\uff44",  # fullwidth 'd'
    ],
)
def test_git_sha_refuses_everything_else(sha: str) -> None:
    reason = git_sha(sha)
    assert reason is not None
    assert "7-40 lowercase hex" in reason


@given(st.text(alphabet=HEX, min_size=7, max_size=40))
def test_git_sha_accepts_any_lowercase_hex_of_valid_length(sha: str) -> None:
    assert git_sha(sha) is None


@given(st.text(max_size=50))
def test_git_sha_accepts_exactly_the_documented_shape(value: str) -> None:
    ok = 7 <= len(value) <= 40 and set(value) <= set(HEX)
    assert (git_sha(value) is None) == ok


# -- relative-path ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "a",
        "src/foo.py",
        "docs/notes/résumé-flow.md",
        "docs/日本語/ファイル.txt",
        ".hidden",
        "a/.config/x",
        "a/..b",
        "a/b..",
        "...",
        "name with spaces.txt",
        "ab:c",  # a colon past the second character is not a drive letter
    ],
)
def test_relative_path_accepts_normalised_relative_paths(path: str) -> None:
    assert relative_path(path) is None


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/etc/passwd", "relative"),
        ("/", "relative"),
        ("C:", "relative"),
        ("C:/Windows", "relative"),
        ("c:file.txt", "relative"),
        ("..", "'..'"),
        ("../x", "'..'"),
        ("a/../b", "'..'"),
        ("a/..", "'..'"),
        ("a\\b", "backslash"),
        ("\\\\server\\share", "backslash"),
        ("C:\\x", "backslash"),
        ("", "empty"),
        (".", "normalised"),
        ("./a", "normalised"),
        ("a/./b", "normalised"),
        ("a//b", "normalised"),
        ("a/", "normalised"),
        ("a/b/", "normalised"),
        ("a\x00b", "control"),
        ("a\nb", "control"),
        ("a\tb", "control"),
        ("a\x1b[31mb", "control"),
        ("a\x7f", "control"),
        ("a\x85b", "control"),  # NEL, a C1 control character
        ("a\x9b31mb", "control"),  # CSI, a C1 control character (terminal escape)
    ],
)
def test_relative_path_refuses_with_a_reason(path: str, words: str) -> None:
    reason = relative_path(path)
    assert reason is not None
    assert words in reason


segment = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))


@given(st.lists(segment, min_size=1, max_size=6))
def test_relative_path_accepts_any_join_of_plain_segments(parts: list[str]) -> None:
    path = "/".join(parts)
    if len(path) >= 2 and path[0].isascii() and path[0].isalpha() and path[1] == ":":
        assert relative_path(path) is not None  # a drive letter
    else:
        assert relative_path(path) is None


@given(st.lists(segment, min_size=1, max_size=4), st.integers(min_value=0, max_value=4))
def test_relative_path_refuses_a_dotdot_segment_anywhere(parts: list[str], at: int) -> None:
    parts.insert(min(at, len(parts)), "..")
    assert relative_path("/".join(parts)) is not None


@given(st.text(max_size=30))
def test_relative_path_never_accepts_escaping_shapes(value: str) -> None:
    if relative_path(value) is not None:
        return
    assert value
    assert not value.startswith("/")
    assert "\\" not in value
    assert ".." not in value.split("/")
    assert all(p not in ("", ".") for p in value.split("/"))
    assert all(ord(c) >= 32 and not 0x7F <= ord(c) <= 0x9F for c in value)


# -- uri --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        "https://github.com/OmniNode-ai/omnibase_infra/pull/287",
        "http://localhost:8080/x?y=1#z",
        "mailto:someone@example.com",
        "urn:isbn:0451450523",
        "s3://bucket/key",
        "git+ssh://git@github.com/o/r.git",
        "https://münchen.example/ü",
    ],
)
def test_uri_accepts_absolute_uris(value: str) -> None:
    assert uri(value) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "github.com/o/r",
        "/pull/1",
        "relative/path",
        "https:",  # nothing after the scheme
        "1http://x",  # a scheme starts with a letter
        "ht tp://x",
        "https://x y",
        "https://x\n",
        "https://x\ty",
        "https://a\x00b",  # control characters are never part of a URI
        "https://a\x1b[2Jb",
        ":no-scheme",
    ],
)
def test_uri_refuses_non_uris(value: str) -> None:
    reason = uri(value)
    assert reason is not None
    assert "URI" in reason


# -- date-time --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        "2026-01-31T12:00:00Z",
        "2026-02-09T18:01:58.120034Z",
        "2026-01-31T12:00:00+00:00",
        "2026-01-31T12:00:00-05:00",
        "2026-01-31T12:00:00.5+05:30",
        "2026-01-31t12:00:00z",
        "2026-01-31 12:00:00Z",
        "2024-02-29T00:00:00Z",  # leap day
    ],
)
def test_date_time_accepts_rfc3339_with_timezone(value: str) -> None:
    assert date_time(value) is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("2026-01-31T12:00:00", "timezone"),  # no timezone
        ("2026-01-31T12:00:00.123456", "timezone"),
        ("2026-01-31", "timezone"),
        ("12:00:00Z", "timezone"),
        ("2026-01-31T12:00Z", "timezone"),  # seconds are required
        ("2026-01-31T12:00:00+0530", "timezone"),
        ("2026-01-31T12:00:00 Z", "timezone"),
        ("2026-01-31T12:00:00Z\n", "timezone"),
        ("yesterday", "timezone"),
        ("", "timezone"),
        ("2026-02-30T12:00:00Z", "real"),
        ("2025-02-29T12:00:00Z", "real"),
        ("2026-13-01T12:00:00Z", "real"),
        ("2026-01-31T24:00:00Z", "real"),
        ("2026-01-31T12:60:00Z", "real"),
    ],
)
def test_date_time_refuses_without_timezone_or_impossible(value: str, words: str) -> None:
    reason = date_time(value)
    assert reason is not None
    assert words in reason


@given(
    st.datetimes(
        min_value=datetime(1000, 1, 1),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]),
    )
)
def test_date_time_accepts_every_aware_isoformat(ts: datetime) -> None:
    assert date_time(ts.isoformat()) is None
    assert date_time(ts.replace(tzinfo=None).isoformat()) is not None


def test_format_module_exports_the_checkers_by_name() -> None:
    assert formats.CHECKERS["git-sha"]("abc1234") is None
    assert formats.CHECKERS["relative-path"]("/abs") is not None
