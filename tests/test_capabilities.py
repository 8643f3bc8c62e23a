"""Optional capabilities are declared in the contract, and every backend declares what it has."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaselog.guard import Guard, guard_names
from phaselog.ledger.facade import Ledger
from phaselog.model.errors import UsageError
from phaselog.stores.base import CAPABILITY_MEMBERS, Capability, Store, local_root
from phaselog.stores.stamps import run_stamps, ticket_stamp

pytestmark = pytest.mark.all_stores

T = "PROJ-1"


def _has(store: Store, member: str) -> bool:
    # The one place that looks: this test proves the declarations the library relies on.
    return hasattr(store, member)


def test_every_capability_says_what_it_provides() -> None:
    assert set(CAPABILITY_MEMBERS) == set(Capability)
    assert all(CAPABILITY_MEMBERS[c] for c in Capability)


def test_declared_capabilities_match_what_the_backend_implements(store: Store) -> None:
    assert isinstance(store.capabilities, frozenset)
    for capability, members in CAPABILITY_MEMBERS.items():
        implemented = [m for m in members if _has(store, m)]
        if capability in store.capabilities:
            assert implemented == list(members), (
                f"{type(store).__name__} declares {capability} but lacks some of {members}"
            )
        else:
            assert implemented == [], (
                f"{type(store).__name__} implements {implemented} but does not declare {capability}"
            )


def test_every_built_in_store_has_leases_retention_stamps_and_guards(store: Store) -> None:
    assert {Capability.LEASES, Capability.RETENTION, Capability.STAMPS, Capability.GUARD_STORAGE} <= store.capabilities
    # A folder tree has no schema; a database has no folder of its own on this machine.
    assert (Capability.MIGRATE in store.capabilities) != (Capability.LOCAL_ROOT in store.capabilities)
    assert (local_root(store) is not None) == (Capability.LOCAL_ROOT in store.capabilities)


def test_stamps_come_from_the_declared_capability(store: Store) -> None:
    ledger = Ledger(store)
    ledger.write(T, "r1", "implement", {"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []})
    [run_id] = store.runs(T)
    assert list(run_stamps(store, T)) == [run_id]
    assert ticket_stamp(store, T) == store.ticket_stamp(T)  # type: ignore[attr-defined]
    assert store.run_stamps(T).keys() == run_stamps(store, T).keys()  # type: ignore[attr-defined]


def test_guards_live_where_the_store_says(store: Store) -> None:
    guard = Guard(store, "nightly")
    guard.reset(by="test")
    assert "nightly" in guard_names(store)


class _Bare:
    """A store with no optional capability (the contract's minimum for these checks)."""

    url = "bare://"
    capabilities: frozenset[Capability] = frozenset()

    def runs(self, ticket_id: str) -> list[str]:
        return ["r"]


def test_a_store_without_a_capability_is_told_so_not_probed() -> None:
    bare = _Bare()
    assert run_stamps(bare, T) == {"r": None}  # nothing remembered
    assert ticket_stamp(bare, T) is None
    assert local_root(bare) is None  # type: ignore[arg-type]
    with pytest.raises(UsageError) as info:
        Guard(bare, "nightly")
    assert info.value.context["rule"] == "no_guard_storage"
    with pytest.raises(UsageError):
        guard_names(bare)


def test_no_capability_is_discovered_with_hasattr_in_src() -> None:
    import re

    src = Path(__file__).resolve().parent.parent / "src" / "phaselog"
    probe = re.compile(
        r"\b(hasattr|getattr)\((self\.)?(ledger\.)?(store|root)\b|isinstance\([^)]*(LeaseCapable|Retention)\)"
    )
    found = [
        f"{path.relative_to(src)}:{n}"
        for path in sorted(src.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if probe.search(line)
    ]
    assert found == []
