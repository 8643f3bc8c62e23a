"""Shared fixtures. Every test gets its own store root under tmp_path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import phaselog
from phaselog.ledger import Ledger
from phaselog.stores.files import FilesStore

# Hypothesis: deterministic in CI, a little more searching locally.
settings.register_profile(
    "ci", max_examples=100, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

FIXTURES = Path(__file__).parent / "fixtures" / "seed-tool-files"
REPO = Path(__file__).resolve().parent.parent

IMPLEMENT = {"branch_name": "feat/PROJ-1234", "commit_sha": "a1b2c3d", "files_changed": ["src/foo.py"]}
LOCAL_REVIEW = {"iteration_count": 1, "issue_fingerprints": [], "last_clean_sha": "a1b2c3d"}
CREATE_PR = {"pr_url": "https://github.com/o/r/pull/1", "pr_number": 1, "head_sha": "a1b2c3d"}
PR_RELEASE_READY = {"last_review_sha": "a1b2c3d", "issue_fingerprints": []}
READY_FOR_MERGE = {"label_applied_at": "2026-02-09T18:01:58Z"}
PAYLOADS = {
    "implement": IMPLEMENT,
    "local_review": LOCAL_REVIEW,
    "create_pr": CREATE_PR,
    "pr_release_ready": PR_RELEASE_READY,
    "ready_for_merge": READY_FOR_MERGE,
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty files-store root."""
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> FilesStore:
    """A files store at ``root``."""
    return FilesStore(root)


@pytest.fixture
def ledger(store: FilesStore) -> Ledger:
    """A ledger over the files store."""
    return phaselog.Ledger(store)


@pytest.fixture
def seed_root(tmp_path: Path) -> Path:
    """A store root holding a copy of the seed tool's own files (OMN-2143, OMN-2144)."""
    dest = tmp_path / "seed-store"
    shutil.copytree(FIXTURES / "checkpoints", dest / "checkpoints")
    return dest
