"""Crash tests: a writer dies mid-write, a new process reopens the store and checks it.

Two kinds, both with real processes and real files:

* every named fault point in the files store (``PHASELOG_FAULT=<point>`` makes the writer
  ``_exit(137)`` exactly there), each before and after each durable step;
* SIGKILL at random moments: forked children write checkpoints in a loop and report each write
  to the parent only after it returned; the parent kills them after a random delay and checks
  that every acknowledged write survived, whole, and nothing else is damaged.
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

import phaselog
from conftest import IMPLEMENT, PAYLOADS
from phaselog.ledger.facade import Ledger
from phaselog.stores.files import entries as files_entries
from phaselog.stores.files import hints as files_hints
from phaselog.stores.files import publish as files_publish
from phaselog.stores.files.io import TEMP_MAX_AGE_S
from phaselog.stores.files.store import FilesStore

pytestmark = pytest.mark.slow

T = "CRASH-1"
RUN = "crash-run"
RUN_UUID = phaselog.normalize_run_id(RUN)
# The files store's fault points: its audit entries' and its publication sequence's.
SRC = "".join(Path(m.__file__).read_text("utf-8") for m in (files_entries, files_publish, files_hints) if m.__file__)
POINTS = re.findall(r"""_faults\.point\(\s*["']([^"']+)["']\s*\)""", SRC)

# What a reader finds after the writer died at each point: the record is visible exactly from
# the moment its last file is linked under its final name.
OUTCOME = {
    "files.after_meta_temp": "absent",
    "files.after_cp_temp": "absent",
    "files.after_temps_fsync": "absent",
    "files.after_meta_link": "absent",
    "files.after_cp_link": "present",
    "files.after_dir_fsync": "present",
    "files.after_failed_temp": "absent",
    "files.after_failed_link": "present",
    # The newest-attempt hint (D185) is written after the record is durable: a crash before or
    # in the middle of it leaves a hint that fails its checks, and the next call lists.
    "files.before_hint": "present",
    "files.hint_half_written": "present",
}
# Audit entries (progress events, approvals, markers) are published the same way.
ENTRY_OUTCOME = {
    "files.after_entry_temp": "absent",
    "files.after_entry_link": "present",
}
CRASH_PAYLOAD = {**IMPLEMENT, "files_changed": ["src/crash.py"]}

WRITER = """
import json, sys
import phaselog
from phaselog.stores.files.store import FilesStore

root, ticket, run_id, status, payload = sys.argv[1:6]
ledger = phaselog.Ledger(FilesStore(root))
if status == "failed":
    result = ledger.write(ticket, run_id, "implement", None, status="failed", error="killed")
else:
    result = ledger.write(ticket, run_id, "implement", json.loads(payload))
print(result.record.attempt_number)
"""


def _run_writer(root: Path, status: str, fault: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PHASELOG_FAULT"}
    if fault:
        env["PHASELOG_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-c", WRITER, str(root), T, RUN, status, json.dumps(CRASH_PAYLOAD)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _listing(run_dir: Path) -> set[str]:
    return {p.name for p in run_dir.iterdir()}


def _assert_store_sound(ledger: Ledger, run_dir: Path, run: str | None = None) -> None:
    """Whole or absent: no seed file without its sidecar, nothing damaged, everything valid."""
    names = _listing(run_dir)
    for name in names:
        m = re.fullmatch(r"phase_(\d+)_([a-z_]+)_a(\d+)\.yaml", name)
        if m:
            assert f".meta_{m[1]}_{m[2]}_a{m[3]}.json" in names, f"{name} without its sidecar"
    page = ledger.list(T, run)
    assert page.damaged == [], [d.to_json() for d in page.damaged]
    for s in page.items:
        r = s.record
        _stored, report = ledger.validate(T, r.run_id, r.phase, r.attempt_number)
        assert report.is_valid, [i.text() for i in report.errors]
    report = ledger.verify(T, run)
    assert report.ok, report.problems


def test_every_fault_point_has_an_expected_outcome() -> None:
    # A new fault point in files.py or files_publish.py must be added here (and so get a crash test).
    assert POINTS, "no fault points found in files.py / files_publish.py"
    assert len(POINTS) == len(set(POINTS))
    assert set(POINTS) == set(OUTCOME) | set(ENTRY_OUTCOME)


def test_an_unarmed_writer_completes(tmp_path: Path) -> None:
    # The control: the same subprocess without a fault writes and exits 0.
    proc = _run_writer(tmp_path / "store", "completed", None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"


@pytest.mark.parametrize("history", [False, True], ids=["first_write", "after_history"])
@pytest.mark.parametrize("point", sorted(OUTCOME))
def test_crash_at_fault_point_leaves_whole_or_absent(tmp_path: Path, point: str, history: bool) -> None:
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    before: dict[int, str] = {}
    if history:
        run = ledger.run(T, RUN)
        before[1] = run.write("implement", IMPLEMENT).record.content_hash
        before[2] = run.fail("implement", "flaky test").record.content_hash
        run.write("local_review", PAYLOADS["local_review"])
    crashing = len(before) + 1
    status = "failed" if "failed" in point else "completed"

    proc = _run_writer(root, status, point)
    assert proc.returncode == 137, f"fault point {point} was not reached: {proc.stderr}"
    assert proc.stdout == ""  # it never acknowledged the write

    # Reopen from scratch: a new store object, as a new process would.
    ledger = phaselog.Ledger(FilesStore(root))
    run_dir = root / "checkpoints" / T / RUN_UUID
    refs = [r.attempt_number for r in ledger.store.attempts(T, RUN_UUID) if r.phase == "implement"]
    seed_file = run_dir / f"phase_1_implement_a{crashing}.yaml"
    failed_file = run_dir / f".failed_1_implement_a{crashing}.json"
    if OUTCOME[point] == "present":
        assert refs == [*before, crashing]
        got = ledger.read(T, RUN, "implement", crashing).record
        assert got.status == status
        assert got.prev_hash == (before[crashing - 1] if history else None)
        if status == "completed":
            assert got.phase_payload == {"phase": "implement", **CRASH_PAYLOAD}
            assert seed_file.is_file()
        else:
            assert failed_file.is_file()
    else:
        assert refs == list(before)
        assert not seed_file.exists()
        assert not failed_file.exists()
        with pytest.raises(phaselog.NotFound):
            ledger.read(T, RUN, "implement", crashing)
    for attempt, content_hash in before.items():
        assert ledger.read(T, RUN, "implement", attempt).record.content_hash == content_hash
    _assert_store_sound(ledger, run_dir)
    leftovers = {n for n in _listing(run_dir) if n.startswith(".tmp-")}

    # The next writer of the same phase gets the right number and a correct link.
    expected = crashing + 1 if OUTCOME[point] == "present" else crashing
    proc = _run_writer(root, "completed", None)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == expected
    nxt = ledger.read(T, RUN, "implement").record
    assert nxt.attempt_number == expected
    prev = ledger.read(T, RUN, "implement", expected - 1).record if expected > 1 else None
    assert nxt.prev_hash == (prev.content_hash if prev else None)
    _assert_store_sound(ledger, run_dir)
    # Young leftovers stay (another writer may still own them) but are never records.
    assert leftovers <= _listing(run_dir)
    assert {s.location.rsplit("/", 1)[-1] for s in ledger.list(T).items}.isdisjoint(leftovers)


ENTRY_WRITER = """
import sys
from phaselog.stores.files.store import FilesStore

root, ticket, run_id, name, size = sys.argv[1:6]
body = ('{"seq": 1, "output": "' + "x" * int(size) + '"}\\n').encode()
print(FilesStore(root).put_entry("progress", ticket, run_id, name, body))
"""
ENTRY_SIZE = 50_000
# The bodies are opaque bytes to the store, not real progress events: keep them in a run of
# their own so that verify of the checkpoints' run does not judge them.
ENTRY_RUN = phaselog.normalize_run_id("entry-run")


def _run_entry_writer(root: Path, name: str, fault: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PHASELOG_FAULT"}
    if fault:
        env["PHASELOG_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-c", ENTRY_WRITER, str(root), T, ENTRY_RUN, name, str(ENTRY_SIZE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("point", sorted(ENTRY_OUTCOME))
def test_crash_while_publishing_an_audit_entry_leaves_whole_or_absent(tmp_path: Path, point: str) -> None:
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    ledger.write(T, RUN, "implement", IMPLEMENT)
    assert _run_entry_writer(root, "e_000001", None).returncode == 0  # one intact entry first

    proc = _run_entry_writer(root, "e_000002", point)
    assert proc.returncode == 137, f"fault point {point} was not reached: {proc.stderr}"
    assert proc.stdout == ""

    store = FilesStore(root)
    found = {name: body for name, _loc, body in store.entries("progress", T, ENTRY_RUN)}
    assert all(isinstance(b, bytes) for b in found.values())
    expected = ["e_000001", "e_000002"] if ENTRY_OUTCOME[point] == "present" else ["e_000001"]
    assert sorted(found) == expected
    for body in found.values():
        assert isinstance(body, bytes)
        assert len(body) == len(b'{"seq": 1, "output": ""}\n') + ENTRY_SIZE  # whole, never a prefix
    _assert_store_sound(ledger, root / "checkpoints" / T / RUN_UUID, RUN)
    leftovers = sorted(p.name for p in (root / "checkpoints" / T / ENTRY_RUN / ".progress").iterdir())
    assert [n for n in leftovers if not n.startswith(".tmp-")] == [f"{n}.json" for n in expected]

    again = _run_entry_writer(root, "e_000002", None)
    if ENTRY_OUTCOME[point] == "present":
        assert again.returncode != 0
        assert "AlreadyExists" in again.stderr
    else:
        assert again.returncode == 0, again.stderr
    assert store.entry_names("progress", T, ENTRY_RUN) == ["e_000001", "e_000002"]


# -- random SIGKILL ---------------------------------------------------------------------------
RUNS = ("kill-a", "kill-b", "kill-c")
PHASES = ("implement", "local_review", "create_pr")
ROUNDS_PER_ROOT = 16
# (writers per round) for each root: one writer, or two that contend for the same phases.
ROOTS = [1, 2] * 7
TOTAL_KILLS = ROUNDS_PER_ROOT * sum(ROOTS)
MAX_DELAY_S = 0.030


def test_the_suite_performs_at_least_200_kills() -> None:
    assert TOTAL_KILLS >= 200


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Load pipelines and compile schemas once, so forked children write from their first ms."""
    ledger = phaselog.Ledger(FilesStore(tmp_path_factory.mktemp("warm")))
    for phase in PHASES:
        ledger.write(T, "warm", phase, PAYLOADS[phase])
        ledger.write(T, "warm", phase, None, status="failed", error="warm-up")
        ledger.verify(T)


def _child(root: Path, wfd: int, seed: int) -> None:
    """Write forever; report each write on ``wfd`` only once ``write`` has returned."""
    code = 0
    try:
        rng = random.Random(seed)
        ledger = phaselog.Ledger(FilesStore(root))
        while True:
            run, phase = rng.choice(RUNS), rng.choice(PHASES)
            if rng.random() < 0.2:
                res = ledger.write(T, run, phase, None, status="failed", error="boom")
            else:
                res = ledger.write(T, run, phase, PAYLOADS[phase])
            r = res.record
            line = f"{r.run_id} {r.phase} {r.attempt_number} {r.status} {r.content_hash}\n"
            os.write(wfd, line.encode())  # < PIPE_BUF: atomic, whole or not at all
    except BaseException:
        traceback.print_exc()
        code = 3
    finally:
        os._exit(code)


def _kill_round(root: Path, writers: int, rng: random.Random, *, after_an_ack: bool = False) -> tuple[list[str], int]:
    """Fork ``writers`` children, SIGKILL them after a random delay; return their reports.

    ``after_an_ack``: the random delay starts only once some child has acknowledged a write (at
    most 60 s), so that on a machine slow enough for every earlier round to kill before the first
    acknowledgement, the test still checks something rather than failing for want of evidence.
    """
    rfd, wfd = os.pipe()
    pids = []
    for _ in range(writers):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            os.close(rfd)
            _child(root, wfd, rng.randrange(2**32))
        pids.append(pid)
    os.close(wfd)
    chunks = []
    if after_an_ack:
        ready, _, _ = select.select([rfd], [], [], 60.0)
        if ready:
            chunks.append(os.read(rfd, 65536))
    time.sleep(rng.uniform(0, MAX_DELAY_S))
    kills = 0
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"writer {pid} ended by itself (status {status:#x})"
        assert os.WTERMSIG(status) == signal.SIGKILL
        kills += 1
    while chunk := os.read(rfd, 65536):
        chunks.append(chunk)
    os.close(rfd)
    return b"".join(chunks).decode().splitlines(), kills


def _ordinal(phase: str) -> int:
    return PHASES.index(phase) + 1


@pytest.mark.usefixtures("warm")
@pytest.mark.parametrize(("index", "writers"), list(enumerate(ROOTS)))
def test_random_sigkill_never_loses_an_acknowledged_write(tmp_path: Path, index: int, writers: int) -> None:
    rng = random.Random(f"sigkill-{index}")
    root = tmp_path / "store"
    ledger = phaselog.Ledger(FilesStore(root))
    acked: dict[tuple[str, str, int], tuple[str, str]] = {}
    validated: set[tuple[str, str, int]] = set()
    kills = 0
    for round_number in range(ROUNDS_PER_ROOT):
        last = round_number == ROUNDS_PER_ROOT - 1
        lines, n = _kill_round(root, writers, rng, after_an_ack=last and not acked)
        kills += n
        for line in lines:
            run_id, phase, attempt, status, content_hash = line.split()
            key = (run_id, phase, int(attempt))
            assert key not in acked, f"attempt acknowledged twice: {key}"
            acked[key] = (status, content_hash)

        # Every acknowledged write is there, with the content that was acknowledged.
        store = FilesStore(root)
        for (run_id, phase, attempt), (status, content_hash) in acked.items():
            got = store.get(T, run_id, _ordinal(phase), phase, attempt)
            assert got.record.content_hash == content_hash
            assert got.recorded_hash == content_hash
            assert got.record.status == status

        page = ledger.list(T)
        assert page.damaged == [], [d.to_json() for d in page.damaged]
        per_phase: dict[tuple[str, str], list[int]] = {}
        for s in page.items:
            r = s.record
            key = (r.run_id, r.phase, r.attempt_number)
            per_phase.setdefault((r.run_id, r.phase), []).append(r.attempt_number)
            if key not in validated:  # records are immutable; verify below rechecks them all
                _stored, report = ledger.validate(T, r.run_id, r.phase, r.attempt_number)
                assert report.is_valid, (key, [i.text() for i in report.errors])
                validated.add(key)
        # Auto-numbered attempts never leave a gap, crash or not.
        for numbers in per_phase.values():
            assert numbers == list(range(1, len(numbers) + 1))
        assert set(acked) <= validated
        report = ledger.verify(T)
        assert report.ok, report.problems

        # Sometimes age the leftovers so the next writer's clean-up runs under fire too.
        if rng.random() < 0.3:
            stale = time.time() - TEMP_MAX_AGE_S - 60
            for p in (root / "checkpoints" / T).glob("*/.tmp-*"):
                os.utime(p, (stale, stale))

    assert kills == ROUNDS_PER_ROOT * writers
    assert acked, "no write was acknowledged before its kill: the checks above proved nothing"
    # After the last kill, every phase of every run takes its next attempt normally.
    for run in RUNS:
        for phase in PHASES:
            run_id = phaselog.normalize_run_id(run)
            latest = max((a for (r, p, a) in validated if (r, p) == (run_id, phase)), default=0)
            res = ledger.write(T, run, phase, PAYLOADS[phase])
            assert res.record.attempt_number == latest + 1
    assert ledger.verify(T).ok
    assert sum(1 for _ in root.rglob("phase_*.yaml")) > 0
