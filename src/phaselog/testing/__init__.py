"""The store conformance suite: the contract every phaselog store keeps, as pytest tests you run on yours.

phaselog runs it on its own three stores (``tests/test_conformance.py``); a third-party backend runs it
on itself with one fixture, ``store_factory``, and one subclass (pytest must be installed; ``import
phaselog`` never imports this package)::

    import pytest
    from phaselog.testing import StoreConformance, StoreFactory

    @pytest.fixture
    def store_factory(tmp_path):
        count = iter(range(1_000_000))
        return StoreFactory(lambda: f"jsondir://{tmp_path}/store-{next(count)}", damage=MyDamage())

    class TestMyStore(StoreConformance):
        pass

``store_factory`` returns a callable giving a fresh, empty store (a Store, or a URL ``open_store``
opens) on each call, or a :class:`StoreFactory` that adds the optional hooks: ``damage`` (how to
damage a record from outside, :class:`Damage`), ``capped`` (reopen with a smaller record cap), ``cli``
(its URLs open in a new ``phaselog`` process). Tests of an optional part of the contract run only
when the store declares its :class:`~phaselog.stores.base.Capability` (retention, quarantine, guard
storage) and the factory provides the hook they need; otherwise they are skipped, naming what is
missing. ``strict=True`` turns every such skip into a failure (phaselog's own stores run strict).

The parts can also be used one by one (``class TestMine(RecordTests, StateTests)``). See
docs/stores.md, "Writing a backend".
"""

from __future__ import annotations

from phaselog.testing._harness import Damage, EntryRef, RecordRef, StoreFactory
from phaselog.testing.audit import AuditTests
from phaselog.testing.damage import DamageTests
from phaselog.testing.guard import GuardTests
from phaselog.testing.logs import LogTests
from phaselog.testing.records import RecordTests
from phaselog.testing.retention import RetentionTests
from phaselog.testing.state import StateTests
from phaselog.testing.transfer import TransferTests

__all__ = [
    "AuditTests",
    "Damage",
    "DamageTests",
    "EntryRef",
    "GuardTests",
    "LogTests",
    "RecordRef",
    "RecordTests",
    "RetentionTests",
    "StateTests",
    "StoreConformance",
    "StoreFactory",
    "TransferTests",
]


class StoreConformance(
    RecordTests, StateTests, AuditTests, DamageTests, TransferTests, RetentionTests, GuardTests, LogTests
):
    """Every contract test; subclass it as ``Test…`` and provide the ``store_factory`` fixture."""
