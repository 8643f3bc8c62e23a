"""What a backend author hands the suite (one ``store_factory`` fixture), and the fixtures built on it.

The fixture returns either a plain callable giving a fresh, empty store (a :class:`Store` or its URL)
each time it is called, or a :class:`StoreFactory` that also says how to damage a record behind the
library's back, how to reopen a store with a smaller record cap, and whether its URLs open in a new
``phaselog`` process. A test that needs what the backend does not declare (a :class:`Capability`
or one of those hooks) is skipped, naming what is missing — or, with ``strict=True`` (phaselog's own
stores), fails instead, so nothing of the contract goes untested silently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from phaselog.ledger.facade import Ledger
from phaselog.stores import open_store
from phaselog.stores.base import Capability, Store
from phaselog.testing.data import Clock


@dataclass(frozen=True)
class RecordRef:
    """One stored record, by its key (the run id as stored, i.e. normalised)."""

    ticket_id: str
    run_id: str
    phase_ordinal: int
    phase: str
    attempt: int
    #: A completed checkpoint (False: a failed attempt's record).
    completed: bool = True


@dataclass(frozen=True)
class EntryRef:
    """One stored audit entry: its kind (``progress``, ``approvals``, ``markers``), key and name."""

    kind: str
    ticket_id: str
    run_id: str | None
    name: str


class Damage(Protocol):
    """How to damage what a store holds from outside, as a hand edit or a bad disk would.

    Each method changes the stored bytes behind the library's back (a files store's file, a SQL row
    through a separate connection); the suite then checks that reads report the damage and never
    use the damaged record.
    """

    def garble_record(self, store: Store, ref: RecordRef) -> None:
        """Make the record's stored bytes unreadable (not a record at all)."""

    def edit_payload(self, store: Store, ref: RecordRef, key: str, value: Any) -> None:
        """Set ``phase_payload[key]`` of a completed record, leaving it parseable (its hash no longer fits)."""

    def set_schema_version(self, store: Store, ref: RecordRef, version: str) -> None:
        """Make the stored record claim another ``schema_version`` (a record from a newer phaselog)."""

    def garble_entry(self, store: Store, entry: EntryRef) -> None:
        """Make an audit entry's stored bytes unreadable."""

    def edit_entry(self, store: Store, entry: EntryRef, fields: Mapping[str, Any]) -> None:
        """Change top-level fields of an audit entry's JSON, leaving it parseable."""


@dataclass(frozen=True)
class StoreFactory:
    """A backend under test: fresh stores, and the optional hooks some contract tests need."""

    #: A fresh, empty store each call (a Store, or a URL that :func:`open_store` opens).
    new: Callable[[], Store | str]
    #: How to damage stored records (None: the damage tests are skipped, or fail when ``strict``).
    damage: Damage | None = None
    #: Reopen ``store`` with a record size cap of that many bytes (None: the cap test is skipped).
    capped: Callable[[Store, int], Store] | None = None
    #: A store's URL opens in a new ``phaselog`` process too (the CLI tests run it there).
    cli: bool = False
    #: Fail, never skip: every capability and hook the suite asks for must be there.
    strict: bool = False

    def store(self) -> Store:
        """A fresh, empty store."""
        made = self.new()
        return open_store(made) if isinstance(made, str) else made


def as_factory(given: StoreFactory | Callable[[], Store | str]) -> StoreFactory:
    """The ``store_factory`` fixture's value as a StoreFactory (a plain callable: no hooks)."""
    return given if isinstance(given, StoreFactory) else StoreFactory(given)


def missing(factory: StoreFactory, what: str) -> None:
    """Skip the test because the backend lacks ``what`` — or fail, for a strict factory."""
    if factory.strict:
        pytest.fail(f"the store under test lacks {what}, and its factory is strict (nothing may be skipped)")
    pytest.skip(f"the store under test lacks {what}")


def require(factory: StoreFactory, store: Store, *capabilities: Capability) -> None:
    """Go on only when ``store`` declares every one of ``capabilities`` (else :func:`missing`)."""
    absent = [c for c in capabilities if c not in store.capabilities]
    if absent:
        missing(factory, ", ".join(f"Capability.{c.name}" for c in absent))


def damage_of(factory: StoreFactory) -> Damage:
    """The factory's damage hooks (else :func:`missing`)."""
    if factory.damage is None:
        missing(factory, "a way to damage records from outside (StoreFactory.damage)")
    assert factory.damage is not None
    return factory.damage


def cli_env(cwd: Path) -> dict[str, str]:
    """The environment of a ``phaselog`` command the suite starts: this very phaselog first on the path
    (also when the tests run from a checkout), every other entry made absolute, no default store."""
    here = str(Path(__file__).resolve().parent.parent.parent)
    rest = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([here, *rest]), "PHASELOG_HOME": str(cwd / "no-home")}


def phaselog_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``phaselog ARGS`` in a new process, as a script would run it."""
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=cli_env(cwd),
        check=False,
    )


def cli_json(factory: StoreFactory, store: Store, cwd: Path, *args: str, ok: bool = True) -> dict[str, Any]:
    """The JSON ``phaselog ARGS --store URL`` prints (the test skips unless the factory says ``cli``)."""
    if not factory.cli:
        missing(factory, "URLs that open in a new phaselog process (StoreFactory.cli)")
    proc = phaselog_cli(cwd, *args, "--store", store.url)
    assert (proc.returncode == 0) == ok, (proc.returncode, proc.stdout, proc.stderr)
    data: dict[str, Any] = json.loads(proc.stdout)
    data.pop("correlation_id", None)
    return data


class Fixtures:
    """The fixtures every part of the suite uses, built on the author's ``store_factory`` fixture."""

    @pytest.fixture
    def factory(self, store_factory: StoreFactory | Callable[[], Store | str]) -> StoreFactory:
        """The backend under test (see :class:`StoreFactory`)."""
        return as_factory(store_factory)

    @pytest.fixture
    def store(self, factory: StoreFactory) -> Iterator[Store]:
        """A fresh, empty store, closed afterwards."""
        made = factory.store()
        yield made
        made.close()

    @pytest.fixture
    def other_store(self, factory: StoreFactory) -> Iterator[Store]:
        """A second fresh, empty store of the same backend."""
        made = factory.store()
        yield made
        made.close()

    @pytest.fixture
    def clock(self) -> Clock:
        """A clock the test moves by hand."""
        return Clock()

    @pytest.fixture
    def led(self, store: Store, clock: Clock) -> Ledger:
        """A ledger over the store under test, with the hand-moved clock."""
        return Ledger(store, clock=clock)
