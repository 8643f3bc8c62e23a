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
seal, pruned-run record     ``<ssssss>``                                   ``<ticket>/.tree``
log chunk (live output)     ``<NNN>_<phase>_a<kkkkkk>_c<ccccccccc>``       ``.logs``
an attempt's kept log       ``<NNN>_<phase>_a<kkkkkk>_end``                ``.logs``
(a later execution of it)   ``<NNN>_<phase>_a<kkkkkk>_r<ttt>_…``           ``.logs``
==========================  =============================================  ===================
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable
from itertools import groupby
from operator import itemgetter
from typing import Any, NamedTuple

#: Audit entry kinds, each in its own folder (files) or ``kind`` column (SQL).
ENTRY_KINDS = ("progress", "approvals", "markers", "pruned", "tree", "logs")
#: What any entry name may look like (safe as a file name, bounded).
ENTRY_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")
_PHASE = r"([a-z][a-z0-9_]*)"

CHECKPOINT_RE = re.compile(rf"phase_(\d+)_{_PHASE}_a(\d+)\.yaml")
META_RE = re.compile(rf"\.meta_(\d+)_{_PHASE}_a(\d+)\.json")
FAILED_RE = re.compile(rf"\.failed_(\d+)_{_PHASE}_a(\d+)\.json")
# The same two formats, found in a whole listing joined by newlines (one C-level scan, see record_groups).
_CHECKPOINT_SCAN = re.compile(rf"^phase_(\d+)_{_PHASE}_a(\d+)\.yaml$", re.MULTILINE)
_FAILED_SCAN = re.compile(rf"^\.failed_(\d+)_{_PHASE}_a(\d+)\.json$", re.MULTILINE)
_ORDINAL_PHASE = itemgetter(0, 1)
_ATTEMPT = itemgetter(2)
EVENT_RE = re.compile(rf"(\d{{3,}})_{_PHASE}_a(\d{{6,}})_s(\d{{9,}})")
APPROVAL_RE = re.compile(rf"(\d{{6,}})_(\d{{3,}})_{_PHASE}_a(\d{{6,}})")
MARKER_RE = re.compile(r"rev_(\d{6,})")
NOTE_RE = re.compile(r"(\d{6,})")
LOG_RE = re.compile(rf"(\d{{3,}})_{_PHASE}_a(\d{{6,}})_(?:r(\d{{3,}})_)?(?:c(\d{{9,}})|end)")


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


def parse_record_names(listing: Iterable[str]) -> dict[tuple[int, int], tuple[str, bool]]:
    """The attempts a run folder's listing holds: (ordinal, attempt) -> (phase, completed).

    Seed files and failed records count; attempt 0 does not. Both a seed file and a failed record
    for one attempt (a hand copy): the seed file wins.
    """
    refs: dict[tuple[int, int], tuple[str, bool]] = {}
    for n in listing:
        parsed = parse_checkpoint_name(n)
        completed = True
        if parsed is None:
            parsed = parse_failed_name(n)
            completed = False
            if parsed is None:
                continue
        key = (parsed.ordinal, parsed.attempt)
        if key[1] >= 1 and (key not in refs or completed):
            refs[key] = (parsed.phase, completed)
    return refs


#: (ordinal, phase, how many attempts, the newest, the newest completed or None): see record_groups.
RecordGroup = tuple[int, str, int, int, "int | None"]


def record_groups(listing: list[str]) -> list[RecordGroup]:
    """What :func:`parse_record_names` finds, grouped by (ordinal, phase), without a tuple per name.

    A run folder of a long history holds thousands of names; a write or a status needs only each
    phase's count, newest and newest completed attempt. The listing is sorted and cut to the seed
    files and the failed records by bisection, each part scanned by one compiled pattern, and
    grouped, all in C; Python code runs per (ordinal, phase), not per name. A listing whose names
    could be read two ways (a name holding a newline, one attempt under two names, attempt 0)
    takes the exact path.
    """
    names = sorted(listing)
    seeds, failed = _scan(names, "phase_", _CHECKPOINT_SCAN), _scan(names, ".failed_", _FAILED_SCAN)
    if seeds is None or failed is None:
        return _groups_of(parse_record_names(listing))
    out: dict[tuple[int, str], list[Any]] = {}  # (ordinal, phase) -> [count, newest, newest completed]
    seen: dict[int, set[int]] = {}  # ordinal -> its attempts
    for (o, phase), run in groupby(seeds, _ORDINAL_PHASE):  # runs of one (ordinal, phase), in C
        attempts = list(map(int, map(_ATTEMPT, run)))
        ordinal, top = int(o), max(attempts)
        mine = seen.setdefault(ordinal, set())
        before = len(mine)
        mine.update(attempts)
        if min(attempts) < 1 or len(mine) != before + len(attempts):
            return _groups_of(parse_record_names(listing))  # attempt 0, or an attempt under two names
        g = out.get((ordinal, phase))
        if g is None:
            out[(ordinal, phase)] = [len(attempts), top, top]
        else:  # the same phase again further down (a phase name that extends another one)
            g[0] += len(attempts)
            g[1] = g[2] = max(g[1], top)
    failed_seen: set[tuple[int, int]] = set()
    for o, phase, attempt in failed:
        ordinal, a = int(o), int(attempt)
        if a < 1 or (ordinal, a) in failed_seen:
            return _groups_of(parse_record_names(listing))  # attempt 0, or two failed records of one attempt
        failed_seen.add((ordinal, a))
        if a in seen.get(ordinal, ()):
            continue  # the seed file wins
        g = out.get((ordinal, phase))
        if g is None:
            out[(ordinal, phase)] = [1, a, None]
        else:
            g[0] += 1
            g[1] = max(g[1], a)
    return [(o, p, n, top, done) for (o, p), (n, top, done) in out.items()]


def _scan(names: list[str], prefix: str, pattern: re.Pattern[str]) -> list[tuple[str, str, str]] | None:
    """The matches of ``pattern`` among the sorted ``names`` that start with ``prefix`` (None: a
    name there holds a newline, so lines and names would not be one to one)."""
    lo = bisect_left(names, prefix)
    hi = bisect_left(names, prefix[:-1] + chr(ord(prefix[-1]) + 1), lo)
    if lo == hi:
        return []
    joined = "\n".join(names[lo:hi])
    if joined.count("\n") != hi - lo - 1:
        return None
    found: list[tuple[str, str, str]] = pattern.findall(joined)
    return found


def _groups_of(refs: dict[tuple[int, int], tuple[str, bool]]) -> list[RecordGroup]:
    out: dict[tuple[int, str], list[Any]] = {}
    for (ordinal, attempt), (phase, completed) in refs.items():
        g = out.setdefault((ordinal, phase), [0, 0, None])
        g[0] += 1
        g[1] = max(g[1], attempt)
        if completed and (g[2] is None or attempt > g[2]):
            g[2] = attempt
    return [(o, p, n, top, done) for (o, p), (n, top, done) in out.items()]


# -- audit entries ---------------------------------------------------------------------------------
def event_name(ordinal: int, phase: str, attempt: int, seq: int) -> str:
    """The entry name of a progress event: sorts by phase, attempt, then sequence number."""
    return f"{ordinal:03d}_{phase}_a{attempt:06d}_s{seq:09d}"


def event_prefix(ordinal: int, phase: str, attempt: int | None = None) -> str:
    """The common prefix of a phase's (or one attempt's) event names."""
    return f"{ordinal:03d}_{phase}_a" + ("" if attempt is None else f"{attempt:06d}_s")


#: Attempts whose event names share one :func:`event_block_prefix`: the first five of the
#: attempt's six digits.
EVENT_BLOCK = 10


def event_block_prefix(ordinal: int, phase: str, attempt: int) -> str:
    """A prefix of the event names of the :data:`EVENT_BLOCK` attempts around ``attempt``
    (``…_a00012`` for attempts 120..129): one read gives a block of attempts' events in order.

    It may match the names of a few other attempts too (a seven-digit attempt shares a prefix
    with a six-digit one); readers keep the events of the attempts they asked for.
    """
    return f"{ordinal:03d}_{phase}_a{attempt // EVENT_BLOCK:05d}"


def parse_event_name(name: str) -> EventName | None:
    """Parse a progress event's name; None for any other name."""
    m = EVENT_RE.fullmatch(name)
    if m is None:
        return None
    return EventName(int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4)))


class LogName(NamedTuple):
    """What a log entry's name says: its attempt, and the chunk's number (None: the kept log, its end)."""

    ordinal: int
    phase: str
    attempt: int
    chunk: int | None
    #: Which execution of the attempt wrote it (1, 2, …): an attempt number is run again when its
    #: runner died before its record; each execution's log has its own names, the newest is the one.
    take: int = 1


def log_prefix(ordinal: int, phase: str, attempt: int) -> str:
    """The common prefix of one attempt's log entries (its chunks, then its end)."""
    return f"{ordinal:03d}_{phase}_a{attempt:06d}_"


def _take(take: int) -> str:
    return "" if take == 1 else f"r{take:03d}_"


def log_chunk_name(ordinal: int, phase: str, attempt: int, chunk: int, take: int = 1) -> str:
    """The entry name of chunk ``chunk`` (1, 2, …) of an attempt's live output (``take``: its execution)."""
    return f"{log_prefix(ordinal, phase, attempt)}{_take(take)}c{chunk:09d}"


def log_end_name(ordinal: int, phase: str, attempt: int, take: int = 1) -> str:
    """The entry name of an attempt's kept log (written once, when the attempt ends; sorts after its chunks)."""
    return f"{log_prefix(ordinal, phase, attempt)}{_take(take)}end"


def parse_log_name(name: str) -> LogName | None:
    """Parse a log entry's name; None for any other name."""
    m = LOG_RE.fullmatch(name)
    if m is None:
        return None
    take, chunk = m.group(4), m.group(5)
    return LogName(
        int(m.group(1)), m.group(2), int(m.group(3)), int(chunk) if chunk is not None else None, int(take or 1)
    )


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
