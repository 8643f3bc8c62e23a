"""Realistic records, the stores the benchmarks read, and facts about the machine.

Every data set is written by phaselog itself (``Ledger.write``), so the files are exactly what
phaselog writes: seed-format YAML plus the JSON sidecar, prev_hash and basis links included.
Large data sets are built with ``os.fsync`` switched off (``no_fsync``) and one ``os.sync()``
at the end, which leaves the same bytes on disk in a fraction of the time.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

import phaselog
from phaselog.ledger.facade import Ledger
from phaselog.model.ids import normalize_run_id
from phaselog.model.pipelines import builtin
from phaselog.stores.files.store import FilesStore

REPO = Path(__file__).resolve().parent.parent
PHASES = [p.name for p in builtin("ticket-pipeline").phases]
SHA_A = "4801973d2b6ce1a07f35e2c91b4d8a6f0e3c7b25"
SHA_B = "9c1e5a7b3d2f4e6a8b0c1d2e3f4a5b6c7d8e9f01"

#: A realistic implement checkpoint: two repos, a few artifacts, a dozen changed files (~1 KB).
REPO_COMMIT_MAP = {"omnibase_infra": SHA_A, "omniclaude": SHA_B}
ARTIFACT_PATHS = [
    "docs/design/checkpoint-resume.md",
    "reports/implement/pytest-summary.txt",
    "reports/implement/coverage.xml",
]
IMPLEMENT = {
    "branch_name": "feat/omn-2143-checkpoint-infrastructure",
    "commit_sha": SHA_A,
    "files_changed": [
        "src/omnibase_infra/models/checkpoint/model_checkpoint.py",
        "src/omnibase_infra/enums/enum_checkpoint_phase.py",
        "src/omnibase_infra/nodes/node_checkpoint_effect/handlers/handler_checkpoint_write.py",
        "src/omnibase_infra/nodes/node_checkpoint_effect/handlers/handler_checkpoint_read.py",
        "tests/unit/nodes/test_node_checkpoint_effect/test_handler_checkpoint_write.py",
        "tests/unit/nodes/test_node_checkpoint_effect/test_handler_checkpoint_read.py",
    ],
}
PAYLOADS: dict[str, dict[str, Any]] = {
    "implement": IMPLEMENT,
    "local_review": {
        "iteration_count": 2,
        "issue_fingerprints": ["ruff:E501:src/a.py:12", "mypy:arg-type:src/b.py:40"],
        "last_clean_sha": SHA_A,
    },
    "create_pr": {
        "pr_url": "https://github.com/omnibase/omnibase_infra/pull/2143",
        "pr_number": 2143,
        "head_sha": SHA_A,
    },
    "pr_release_ready": {
        "last_review_sha": SHA_A,
        "issue_fingerprints": ["review:naming:src/a.py"],
    },
    "ready_for_merge": {"label_applied_at": "2026-02-09T18:01:58Z"},
}


def write_kwargs() -> dict[str, Any]:
    """Keyword arguments of Ledger.write shared by every benchmark record."""
    return {"repo_commit_map": REPO_COMMIT_MAP, "artifact_paths": ARTIFACT_PATHS}


def run_id(label: str) -> str:
    """A canonical run UUID for a readable label (phaselog maps strings with UUID v5)."""
    return normalize_run_id(label)


@contextlib.contextmanager
def no_fsync() -> Iterator[None]:
    """Switch ``os.fsync`` off while building data sets, then flush everything once."""
    real = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real
        os.sync()


class Clock:
    """A deterministic clock for data sets: one second per record, starting 2026-02-09."""

    def __init__(self) -> None:
        self.now = datetime(2026, 2, 9, 15, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1, microseconds=1237)
        return self.now


def open_ledger(root: Path, *, clock: Clock | None = None) -> Ledger:
    """A ledger over a files store at ``root``."""
    return Ledger(FilesStore(root), clock=clock)


def write_phase(ledger: Ledger, ticket: str, run: str, phase: str) -> phaselog.WriteResult:
    """Append the next attempt of ``phase`` with its realistic payload."""
    return ledger.write(ticket, run, phase, PAYLOADS[phase], **write_kwargs())


def build_run(ledger: Ledger, ticket: str, run: str, attempts: int) -> None:
    """``attempts`` checkpoints in one run, walking the five phases round and round."""
    for i in range(attempts):
        write_phase(ledger, ticket, run, PHASES[i % len(PHASES)])


#: One run of the list data set: retries of implement, local_review and pr_release_ready.
LIST_RUN_SHAPE = [
    "implement",
    "implement",
    "local_review",
    "local_review",
    "create_pr",
    "pr_release_ready",
    "pr_release_ready",
    "ready_for_merge",
]


def build_ticket(ledger: Ledger, ticket: str, checkpoints: int) -> int:
    """``checkpoints`` records over many runs of ``LIST_RUN_SHAPE``; returns the run count."""
    runs = 0
    written = 0
    while written < checkpoints:
        run = run_id(f"{ticket}-run-{runs:05d}")
        for phase in LIST_RUN_SHAPE[: checkpoints - written]:
            write_phase(ledger, ticket, run, phase)
            written += 1
        runs += 1
    return runs


def sidecar_of(seed_file: Path) -> Path:
    """The JSON sidecar beside a seed file: ``phase_1_x_a2.yaml`` → ``.meta_1_x_a2.json``."""
    stem = seed_file.name.removeprefix("phase_").removesuffix(".yaml")
    return seed_file.with_name(f".meta_{stem}.json")


# -- where and on what ---------------------------------------------------------------------------
def make_workdir(parent: str | None) -> Path:
    """A fresh temporary folder for the stores (removed by ``cleanup``)."""
    return Path(tempfile.mkdtemp(prefix="phaselog-bench-", dir=parent))


def cleanup(path: Path) -> None:
    """Remove a work folder."""
    shutil.rmtree(path, ignore_errors=True)


def filesystem_of(path: Path, *, options: bool = True) -> str:
    """``ext4 on /dev/vda at / (rw,relatime,…)``: the mount holding ``path``, from /proc/mounts."""
    target = os.path.realpath(path)
    best: tuple[str, str, str, str] | None = None
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            for line in fh:
                dev, mnt, fstype, opts, *_ = line.split()
                mnt = mnt.replace("\\040", " ")
                inside = target == mnt or target.startswith(mnt.rstrip("/") + "/")
                if inside and (best is None or len(mnt) >= len(best[1])):
                    best = (dev, mnt, fstype, opts)
    except OSError:
        return "unknown filesystem (no /proc/mounts)"
    if best is None:
        return "unknown filesystem"
    dev, mnt, fstype, opts = best
    return f"{fstype} on {dev} at {mnt}" + (f" ({opts})" if options else "")


def _git(*args: str) -> str:
    try:
        res = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return res.stdout.strip() if res.returncode == 0 else ""


def environment() -> list[str]:
    """Lines describing the machine and the code under test."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown commit"
    dirty = " + uncommitted changes in src/" if _git("status", "--porcelain", "--", "src") else ""
    try:
        from yaml import CSafeLoader  # noqa: F401

        libyaml = "libyaml C loader/dumper"
    except ImportError:
        libyaml = "pure-Python (no libyaml)"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"phaselog {phaselog.__version__} at {commit}{dirty}; Python {platform.python_version()} "
        f"({sys.executable}); PyYAML {yaml.__version__} with {libyaml}",
        f"{os.cpu_count()} CPUs, load average {load} (1/5/15 min); {platform.platform()}",
    ]
