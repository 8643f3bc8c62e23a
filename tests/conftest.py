"""Shared fixtures. Every test gets its own store root under tmp_path."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The installable conformance suite (phaselog.testing) asserts in its own modules: let pytest explain
# them. Registered before anything imports it (helpers takes its Clock from phaselog.testing.data).
pytest.register_assert_rewrite("phaselog.testing")

from hypothesis import HealthCheck, settings  # noqa: E402

import phaselog  # noqa: E402
from helpers import Clock  # noqa: E402
from phaselog.ledger.facade import Ledger  # noqa: E402
from phaselog.stores.base import Store  # noqa: E402
from phaselog.stores.files.store import FilesStore  # noqa: E402

# Hypothesis: deterministic in CI, a little more searching locally.
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
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


BACKENDS = ("files", "sqlite", "postgres")
PG_URL = os.environ.get("PHASELOG_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "all_stores: run this test once per store backend (files, sqlite, postgres)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests (or modules) marked ``all_stores`` get the ``backend`` fixture for every backend."""
    if "backend" in metafunc.fixturenames:
        marked = metafunc.definition.get_closest_marker("all_stores") is not None
        metafunc.parametrize("backend", BACKENDS if marked else ("files",))


def postgres_available() -> str | None:
    """None if the test PostgreSQL answers, else the reason."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'phaselog[postgres]')"
    try:
        with psycopg.connect(PG_URL, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {PG_URL} is not reachable: {str(exc).strip()[:200]}"
    return None


def require_postgres() -> str:
    """The PostgreSQL URL, or skip (locally) / fail (CI=true) with the reason."""
    reason = postgres_available()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true and {reason}: PostgreSQL tests must not be skipped in CI")
        pytest.skip(reason)
    return PG_URL


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A PostgreSQL URL with a fresh schema of its own, dropped afterwards."""
    import psycopg

    base = require_postgres()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}schema={schema}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty files-store root."""
    return tmp_path / "store"


def make_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    """A fresh, empty store of ``backend``."""
    if backend == "files":
        return FilesStore(tmp_path / "store")
    if backend == "sqlite":
        from phaselog.stores.sql.sqlite import SqliteStore

        return SqliteStore(tmp_path / "ledger.db")
    url = request.getfixturevalue("pg_schema_url")
    from phaselog.stores.sql.postgres import PostgresStore

    return PostgresStore(url)


@pytest.fixture
def store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    """The store under test: the files store, or every backend for tests marked all_stores."""
    s = make_store(backend, tmp_path, request)
    yield s
    s.close()


@pytest.fixture
def ledger(store: Store) -> Ledger:
    """A ledger over ``store``."""
    return phaselog.Ledger(store)


@pytest.fixture
def clock() -> Clock:
    """A clock the test moves by hand, at helpers.T0."""
    return Clock()


@pytest.fixture
def led(store: Store, clock: Clock) -> Ledger:
    """A ledger over the store under test, with a hand-moved clock."""
    return phaselog.Ledger(store, clock=clock)


@pytest.fixture
def seed_root(tmp_path: Path) -> Path:
    """A store root holding a copy of the seed tool's own files (OMN-2143, OMN-2144)."""
    dest = tmp_path / "seed-store"
    shutil.copytree(FIXTURES / "checkpoints", dest / "checkpoints")
    return dest


def records_in(lines: Iterable[dict[str, object]]) -> int:
    """How many export lines are records (not the pipeline manifests that travel with them)."""
    return sum(1 for line in lines if line["type"] != "pipeline")


# -- the dashboard's tests (test_ui_http.py, test_ui_browser.py) ----------------------------------
@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A files store holding the dashboard's sample data (tests/ui_data.py)."""
    import ui_data

    root = tmp_path / "store"
    return root, ui_data.make_store(root)


@pytest.fixture
def server(built: tuple[Path, dict[str, str]]) -> Iterator[Any]:
    """The dashboard served over ``built``'s store (a ``ui_data.Server``), stopped afterwards."""
    from ui_data import Server

    srv = Server(str(built[0]))
    yield srv
    srv.stop()


@pytest.fixture
def long_built(tmp_path: Path) -> tuple[Path, str]:
    """A files store holding one long run (tests/ui_data.py ``make_long_store``), and its UUID."""
    import ui_data

    root = tmp_path / "long-store"
    return root, ui_data.make_long_store(root)


@pytest.fixture
def long_server(long_built: tuple[Path, str]) -> Iterator[Any]:
    """The dashboard served over ``long_built``'s store, stopped afterwards."""
    from ui_data import Server

    srv = Server(str(long_built[0]))
    yield srv
    srv.stop()
