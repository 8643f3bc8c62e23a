"""Entry names: every name format a store writes, each defined once with its parser beside it.

Phase names may hold ``_a`` (``data_analysis``), so no name is ever taken apart with
``split("_a")``: each format is a regular expression anchored at both ends, and the parser is
the only reader of its format. Every store, retention, verify and doctor use these functions.

==========================  =============================================  ===================
what                        format                                         where
==========================  =============================================  ===================
completed checkpoint        ``phase_<N>_<phase>_a<k>.yaml``                run folder / row
its sidecar (files)         ``.meta_<N>_<phase>_a<k>.json``                run folder
failed attempt              ``.failed_<N>_<phase>_a<k>.json``              run folder / row
progress event              ``<NNN>_<phase>_a<kkkkkk>_s<sssssssss>``       ``.progress``
approval                    ``<ssssss>_<NNN>_<phase>_a<kkkkkk>``           ``.approvals``
ticket marker revision      ``rev_<rrrrrr>``                               ``.markers``
prune note                  ``<ssssss>``                                   ``.pruned``
==========================  =============================================  ===================
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: Audit entry kinds, each in its own folder (files) or ``kind`` column (SQL).
ENTRY_KINDS = ("progress", "approvals", "markers", "pruned")
#: What any entry name may look like (safe as a file name, bounded).
ENTRY_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")
_PHASE = r"([a-z][a-z0-9_]*)"

CHECKPOINT_RE = re.compile(rf"phase_(\d+)_{_PHASE}_a(\d+)\.yaml")
META_RE = re.compile(rf"\.meta_(\d+)_{_PHASE}_a(\d+)\.json")
FAILED_RE = re.compile(rf"\.failed_(\d+)_{_PHASE}_a(\d+)\.json")
EVENT_RE = re.compile(rf"(\d{{3,}})_{_PHASE}_a(\d{{6,}})_s(\d{{9,}})")
APPROVAL_RE = re.compile(rf"(\d{{6,}})_(\d{{3,}})_{_PHASE}_a(\d{{6,}})")
MARKER_RE = re.compile(r"rev_(\d{6,})")
NOTE_RE = re.compile(r"(\d{6,})")


class AttemptName(NamedTuple):
    """What a record's name says: phase ordinal, phase name, attempt."""

    ordinal: int
    phase: str
    attempt: int


class EventName(NamedTuple):
    """What a progress event's name says."""

    ordinal: int
    phase: str
    attempt: int
    seq: int


class ApprovalName(NamedTuple):
    """What an approval's name says."""

    seq: int
    ordinal: int
    phase: str
    attempt: int


# -- checkpoints -----------------------------------------------------------------------------------
def checkpoint_name(ordinal: int, phase: str, attempt: int) -> str:
    """The seed file name of a completed attempt (the seed tool's own format)."""
    return f"phase_{ordinal}_{phase}_a{attempt}.yaml"


def meta_name(ordinal: int, phase: str, attempt: int) -> str:
    """The sidecar holding phaselog's part of a completed attempt (files store)."""
    return f".meta_{ordinal}_{phase}_a{attempt}.json"


def failed_name(ordinal: int, phase: str, attempt: int) -> str:
    """The record of a failed attempt."""
    return f".failed_{ordinal}_{phase}_a{attempt}.json"


def record_name(ordinal: int, phase: str, attempt: int, *, completed: bool) -> str:
    """The name of a record: the seed file when completed, else the failed record."""
    return checkpoint_name(ordinal, phase, attempt) if completed else failed_name(ordinal, phase, attempt)


def _attempt(m: re.Match[str] | None) -> AttemptName | None:
    if m is None:
        return None
    return AttemptName(int(m.group(1)), m.group(2), int(m.group(3)))


def parse_checkpoint_name(name: str) -> AttemptName | None:
    """Parse ``phase_<N>_<phase>_a<k>.yaml``; None for any other name."""
    return _attempt(CHECKPOINT_RE.fullmatch(name))


def parse_meta_name(name: str) -> AttemptName | None:
    """Parse ``.meta_<N>_<phase>_a<k>.json``; None for any other name."""
    return _attempt(META_RE.fullmatch(name))


def parse_failed_name(name: str) -> AttemptName | None:
    """Parse ``.failed_<N>_<phase>_a<k>.json``; None for any other name."""
    return _attempt(FAILED_RE.fullmatch(name))


# -- audit entries ---------------------------------------------------------------------------------
def event_name(ordinal: int, phase: str, attempt: int, seq: int) -> str:
    """The entry name of a progress event: sorts by phase, attempt, then sequence number."""
    return f"{ordinal:03d}_{phase}_a{attempt:06d}_s{seq:09d}"


def event_prefix(ordinal: int, phase: str, attempt: int | None = None) -> str:
    """The common prefix of a phase's (or one attempt's) event names."""
    return f"{ordinal:03d}_{phase}_a" + ("" if attempt is None else f"{attempt:06d}_s")


def parse_event_name(name: str) -> EventName | None:
    """Parse a progress event's name; None for any other name."""
    m = EVENT_RE.fullmatch(name)
    if m is None:
        return None
    return EventName(int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4)))


def approval_name(seq: int, ordinal: int, phase: str, attempt: int) -> str:
    """The entry name of an approval (or rejection): sorts by the run's approval sequence."""
    return f"{seq:06d}_{ordinal:03d}_{phase}_a{attempt:06d}"


def parse_approval_name(name: str) -> ApprovalName | None:
    """Parse an approval's name; None for any other name."""
    m = APPROVAL_RE.fullmatch(name)
    if m is None:
        return None
    return ApprovalName(int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4)))


def marker_name(revision: int) -> str:
    """The entry name of a ticket marker revision."""
    return f"rev_{revision:06d}"


def parse_marker_name(name: str) -> int | None:
    """The revision a marker's name gives; None for any other name."""
    m = MARKER_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def note_name(seq: int) -> str:
    """The entry name of a run's ``seq``-th prune note."""
    return f"{seq:06d}"


def parse_note_name(name: str) -> int | None:
    """The sequence number a prune note's name gives; None for any other name."""
    m = NOTE_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def is_entry_name(name: str) -> bool:
    """True when ``name`` is safe as an entry name (a file name in the files store)."""
    return ENTRY_NAME_RE.fullmatch(name) is not None
