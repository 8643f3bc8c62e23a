"""A third-party store passes the installable conformance suite: tests/example_backend (``jsondir://``).

The backend is installed the way a package would be: a ``*.dist-info`` folder on the path whose
``entry_points.txt`` names ``example_backend:BACKEND`` in the group ``phaselog.stores``. phaselog finds
it only when a ``jsondir://`` URL is opened, in this process and in a ``phaselog`` command alike (so
the suite's CLI tests run on it too). It declares no optional capability: the suite skips the tests of
retention, quarantine and guard storage, naming what is missing, and runs every other one.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from example_backend import BACKEND, JsonDirDamage, JsonDirStore
from phaselog.stores.base import Store
from phaselog.stores.registry import unregister_backend
from phaselog.testing import StoreConformance, StoreFactory
from phaselog.testing._harness import phaselog_cli

TESTS = Path(__file__).resolve().parent


def install_example(where: Path) -> Path:
    """A site folder in which the example backend is an installed distribution with an entry point."""
    info = where / "phaselog_example_backend-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: phaselog-example-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[phaselog.stores]\njsondir = example_backend:BACKEND\n")
    return where


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The example backend installed (for this process and the ``phaselog`` commands it starts)."""
    site = install_example(tmp_path_factory.mktemp("site"))
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        paths = [str(site), str(TESTS), os.environ.get("PYTHONPATH", "")]
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
        yield site
    # The entry point registered it on first use: forget it, so no other test module sees a fourth form.
    unregister_backend(BACKEND)


def capped(store: Store, cap: int) -> Store:
    """The same jsondir store, opened again with a record cap of ``cap`` bytes."""
    assert isinstance(store, JsonDirStore)
    return JsonDirStore(store.root, max_record_bytes=cap)


@pytest.fixture
def store_factory(installed: Path, tmp_path: Path) -> StoreFactory:
    """Fresh jsondir stores, opened by URL through the registry."""
    count = itertools.count()
    return StoreFactory(
        lambda: f"jsondir://{tmp_path}/store-{next(count)}", damage=JsonDirDamage(), capped=capped, cli=True
    )


class TestExampleBackend(StoreConformance):
    """The whole suite; what needs a capability the example lacks is skipped, naming it."""


def test_the_example_is_found_through_its_entry_point_only_when_asked_for(installed: Path, tmp_path: Path) -> None:
    from phaselog.stores import open_store
    from phaselog.stores.registry import backend_for

    unregister_backend(BACKEND)
    store = open_store(f"jsondir://{tmp_path}/s")
    assert isinstance(store, JsonDirStore)
    assert backend_for("jsondir") is BACKEND
    assert "example_backend" in sys.modules


def test_a_phaselog_command_opens_the_installed_backend(installed: Path, tmp_path: Path) -> None:
    url = f"jsondir://{tmp_path}/cli-store"
    payload = '{"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []}'
    wrote = phaselog_cli(
        tmp_path,
        "write",
        "--ticket-id",
        "EX-1",
        "--run-id",
        "r1",
        "--phase",
        "implement",
        "--payload",
        payload,
        "--store",
        url,
    )
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    read = phaselog_cli(
        tmp_path, "read", "--ticket-id", "EX-1", "--run-id", "r1", "--phase", "implement", "--store", url
    )
    assert read.returncode == 0, read.stdout + read.stderr
    assert '"success": true' in read.stdout
    assert (tmp_path / "cli-store" / "EX-1").is_dir()
