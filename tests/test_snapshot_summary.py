"""A snapshot's per-phase summaries are what the full list of attempts says (property tests).

A write or a status reads a :class:`PhaseSummary` per phase (count, newest, newest completed)
instead of a ref per attempt: the files store scans its listing in C (``names.record_groups``),
the SQL stores aggregate over an index. Whatever the history (failed attempts, damaged records,
prunes, a phase recorded under two names, junk in the folder), the summaries must equal those
:func:`summarize` computes from every attempt, and the snapshot must equal the generic one.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import phaselog
from phaselog.model.errors import PhaselogError
from phaselog.stores.base import AttemptRef
from phaselog.stores.files.store import FilesStore
from phaselog.stores.names import parse_record_names, record_groups
from phaselog.stores.snapshot import PhaseSummary, build_snapshot, summarize, summarize_groups, with_attempts
from phaselog.stores.sql.sqlite import SqliteStore

IMPLEMENT = {"branch_name": "feat/x", "commit_sha": "a1b2c3d", "files_changed": ["src/x.py"]}
REVIEW = {"iteration_count": 1, "issue_fingerprints": [], "last_clean_sha": "a1b2c3d"}
PAYLOADS = {"implement": IMPLEMENT, "local_review": REVIEW}
T = "SUM-1"

# -- the listing scan ------------------------------------------------------------------------------
_phases = st.sampled_from(["a", "impl", "impl_a1x", "data_analysis", "x_a"])
_numbers = st.one_of(st.integers(0, 30).map(str), st.integers(0, 30).map(lambda n: f"0{n}"))
_record_name = st.builds(
    lambda kind, o, p, a: {
        "seed": f"phase_{o}_{p}_a{a}.yaml",
        "failed": f".failed_{o}_{p}_a{a}.json",
        "meta": f".meta_{o}_{p}_a{a}.json",
        "junk": f"phase_{o}_{p}_a{a}.yaml.bak",
    }[kind],
    st.sampled_from(["seed", "seed", "seed", "failed", "meta", "junk"]),
    st.sampled_from(["1", "2", "3", "01"]),
    _phases,
    _numbers,
)
_listing = st.lists(
    st.one_of(_record_name, st.sampled_from([".lock", ".progress", ".tmp-x", "phase_\nphase_1_a_a1.yaml", "phase_"])),
    max_size=60,
    unique=True,
)


def _reference_groups(listing: list[str]) -> set[tuple[int, str, int, int, int | None]]:
    """The groups, computed the slow and obvious way from every parsed name."""
    refs = [AttemptRef(o, a, p, done) for (o, a), (p, done) in parse_record_names(listing).items()]
    out: dict[tuple[int, str], list[int | None]] = {}
    for r in refs:
        g = out.setdefault((r.phase_ordinal, r.phase), [0, 0, None])
        g[0] = int(g[0] or 0) + 1
        g[1] = max(int(g[1] or 0), r.attempt_number)
        if r.completed:
            g[2] = max(int(g[2] or 0), r.attempt_number)
    return {(o, p, int(n or 0), int(top or 0), done) for (o, p), (n, top, done) in out.items()}


@settings(max_examples=400, deadline=None)
@given(_listing, st.randoms(use_true_random=False))
def test_the_listing_scan_groups_exactly_what_the_names_say(listing: list[str], rnd: object) -> None:
    rnd.shuffle(listing)  # type: ignore[attr-defined]  # a folder lists in any order
    # Exactly, whatever the names: where they are ambiguous the scan takes the exact path itself.
    assert set(record_groups(listing)) == _reference_groups(listing)
    refs = [AttemptRef(o, a, p, done) for (o, a), (p, done) in parse_record_names(listing).items()]
    assert summarize_groups(record_groups(listing)) == summarize(refs)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.sampled_from(["implement", "review", "renamed"]), st.booleans()),
        max_size=40,
    ),
    st.integers(0, 40),
)
def test_summaries_merge_like_the_whole_list(attempts: list[tuple[int, str, bool]], cut: int) -> None:
    """``with_attempts`` (the runner's snapshot after its writes) equals summarising everything."""
    refs, next_attempt = [], {}
    for ordinal, phase, done in attempts:
        next_attempt[ordinal] = next_attempt.get(ordinal, 0) + 1
        refs.append(AttemptRef(ordinal, next_attempt[ordinal], phase, done))
    whole = summarize(refs)
    assert with_attempts(summarize(refs[:cut]), refs[cut:]) == whole
    for s in whole:
        mine = [r for r in refs if r.phase_ordinal == s.ordinal]
        assert s.count == len(mine)
        assert s.newest == max(mine, key=lambda r: r.attempt_number)
        done = [r for r in mine if r.completed]
        assert s.newest_completed == (max(done, key=lambda r: r.attempt_number) if done else None)


# -- real stores -----------------------------------------------------------------------------------
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(["implement", "local_review"]), st.booleans()),
        st.tuples(st.just("damage"), st.sampled_from(["implement", "local_review"]), st.booleans()),
        st.tuples(st.just("prune"), st.integers(1, 3), st.just(False)),
    ),
    min_size=1,
    max_size=25,
)


def _garble(
    store: FilesStore | SqliteStore, db: Path, run: str, ordinal: int, phase: str, attempt: int, done: bool
) -> None:
    """Damage one stored record from outside."""
    if isinstance(store, FilesStore):
        name = f"phase_{ordinal}_{phase}_a{attempt}.yaml" if done else f".failed_{ordinal}_{phase}_a{attempt}.json"
        path = store.root / "checkpoints" / T / run / name
        path.chmod(0o600)
        path.write_bytes(b"\x00\xff]]}}: [\n\t!!: &x *y {")
        return
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE phaselog_checkpoints SET body = ? WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ? "
            "AND attempt = ?",
            ('{"kind": "phaselog.checkp', T, run, ordinal, attempt),
        )


@pytest.mark.parametrize("kind", ["files", "sqlite"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_a_stores_summaries_are_those_of_every_attempt(tmp_path: Path, kind: str, ops: list[tuple]) -> None:
    where = tmp_path / uuid.uuid4().hex
    store: FilesStore | SqliteStore = FilesStore(where) if kind == "files" else SqliteStore(where / "l.db")
    try:
        led = phaselog.Ledger(store)
        run = phaselog.normalize_run_id("r1")
        for op, arg, flag in ops:
            try:
                if op == "write":
                    payload = PAYLOADS[arg] if flag else None
                    status = "completed" if flag else "failed"
                    led.write(T, "r1", arg, payload, status=status, error=None if flag else "boom")
                elif op == "damage":
                    ordinal = 1 if arg == "implement" else 2
                    mine = [r for r in store.attempts(T, run) if r.phase_ordinal == ordinal]
                    if flag:  # the newest completed (the walk down past it), else the newest
                        mine = [r for r in mine if r.completed]
                    if mine:
                        _garble(store, where / "l.db", run, ordinal, arg, mine[-1].attempt_number, mine[-1].completed)
                else:
                    led.prune(T, keep_last=arg)
            except PhaselogError:
                continue  # a write over a damaged record, a refused prerequisite: the history stays as is
        every = store.attempts(T, run)
        for history in (False, True):
            snap = store.snapshot(T, run, history=history)
            generic = build_snapshot(store, T, run, history=history)
            assert snap.summaries == summarize(every) == generic.summaries
            assert all(isinstance(s, PhaseSummary) for s in snap.summaries)
            assert snap.records == generic.records
            assert snap.attempts == (tuple(every) if history else ())
        st_ = led.status(T, "r1")
        for s in summarize(every):
            for name, n in s.counts:
                if name in ("implement", "local_review"):
                    assert st_.phase(name).attempts == n
    finally:
        store.close()


@pytest.mark.parametrize(
    "edit",
    [
        # a copy of attempt 2 under another name, as attempt 3 of the same ordinal
        "INSERT INTO phaselog_checkpoints (ticket_id, run_id, phase_ordinal, phase, attempt, prev_attempt, status, "
        "content_hash, body) SELECT ticket_id, run_id, phase_ordinal, 'renamed', 3, 2, 'completed', content_hash, "
        "body FROM phaselog_checkpoints WHERE attempt = 2",
        # the completed attempt 1 renamed: the ordinal's newest completed is the other name's
        "UPDATE phaselog_checkpoints SET phase = 'renamed' WHERE attempt = 1",
    ],
)
def test_an_ordinal_holding_two_phase_names_reads_as_the_generic_snapshot(tmp_path: Path, edit: str) -> None:
    """A SQL snapshot reads with the windowless summary unless an ordinal holds two phase names
    (damage from outside); then it reads again with the windowed one (D193): the same summaries
    and records as the snapshot built from the contract's primitives, either way."""
    db = tmp_path / "l.db"
    store = SqliteStore(db)
    try:
        led = phaselog.Ledger(store)
        run = phaselog.normalize_run_id("r1")
        led.write(T, "r1", "implement", PAYLOADS["implement"])
        led.write(T, "r1", "implement", None, status="failed", error="boom")
        with sqlite3.connect(db) as conn:
            conn.execute(edit)
        other = SqliteStore(db)  # a handle that carries nothing: it reads the run
        try:
            snap = other.snapshot(T, run)
            generic = build_snapshot(other, T, run)
            assert snap.summaries == generic.summaries == summarize(other.attempts(T, run))
            assert snap.records == generic.records
            assert len({(k, type(v).__name__) for k, v in snap.records.items()}) == len(snap.records) >= 2
        finally:
            other.close()
    finally:
        store.close()
