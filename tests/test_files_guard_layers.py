"""A path and the files store it names keep one guard (issue 21).

The layers of the files store and the guard (stores → model; the guard over stores and model, reaching
its storage only through the stores' contract), their private reads and their sizes are checked for the
whole tree by tests/test_architecture.py.
"""

from __future__ import annotations

from pathlib import Path

from phaselog.guard import Guard, guard_names
from phaselog.model.guard import LoopState
from phaselog.stores.base import Capability, guard_keeper
from phaselog.stores.files.guard import FileGuardStore
from phaselog.stores.files.store import FilesStore


def test_a_path_and_its_files_store_keep_the_same_guard(tmp_path: Path) -> None:
    store = FilesStore(tmp_path)
    keeper = guard_keeper(store)
    assert keeper is not None
    assert Capability.GUARD_STORAGE in store.capabilities
    storage = keeper.guard_storage("nightly")
    assert isinstance(storage, FileGuardStore)
    by_path, by_store = Guard(tmp_path, "nightly"), Guard(store, "nightly")
    assert str(by_path.storage.state_path) == str(by_store.storage.state_path) == str(storage.state_path)
    assert str(by_path.storage.lock_path) == str(storage.lock_path)
    with storage.mutex():
        storage.write_state(LoopState(pass_count=3))
    assert by_store.status()["state"]["pass_count"] == 3
    assert guard_names(tmp_path) == guard_names(store) == ["nightly"]
