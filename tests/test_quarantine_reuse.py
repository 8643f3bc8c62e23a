"""After ``doctor --quarantine`` frees an attempt number (D18) and a newer attempt takes it, a later
phase built on the quarantined attempt is stale, and its link checks say it was quarantined (D115)."""

from __future__ import annotations

from typing import Any

import pytest

from phaselog.ledger.doctor import doctor
from phaselog.ledger.facade import Ledger
from phaselog.model.pipelines import pipeline_from_dict
from phaselog.stores.files.store import FilesStore
from test_sql_quarantine import raw

pytestmark = pytest.mark.all_stores

PIPE = pipeline_from_dict({"name": "q", "version": "1", "phases": [{"name": "a"}, {"name": "b"}]})


def damage(store: Any, location: str) -> None:
    """Damage attempt 1 of ``a`` from outside the library (a file's bytes, a row's JSON)."""
    if isinstance(store, FilesStore):
        path = store.root / "checkpoints" / location
        path.write_bytes(path.read_bytes() + b"garbage: [\n")
    else:
        raw(store, "UPDATE phaselog_checkpoints SET body = replace(body, '\"zzz-1\"', 'NaN') WHERE phase = 'a'")


def test_a_basis_on_a_quarantined_attempt_says_quarantined_not_changed(ledger: Ledger) -> None:
    first = ledger.write("Q-1", "r", "a", {"n": "zzz-1"}, pipeline=PIPE)
    ledger.write("Q-1", "r", "b", {"n": 1}, pipeline=PIPE)
    damage(ledger.store, first.stored.location)
    report = doctor(ledger, "Q-1", quarantine=True)
    assert len(report.moved) >= 1
    assert first.stored.location in report.moved[0]["from"]
    again = ledger.write("Q-1", "r", "a", {"n": 2}, pipeline=PIPE)
    assert again.stored.record.attempt_number == 1  # the freed number is taken again (D18)

    _stored, rep = ledger.validate("Q-1", "r", "b", pipeline=PIPE)
    assert not rep.errors, rep.errors
    said = [i for i in rep.warnings if i.rule == "basis_quarantined"]
    assert len(said) == 1
    assert "doctor --quarantine" in said[0].message
    assert "changed after this was written" not in said[0].message
    verify = ledger.verify("Q-1")
    assert verify.ok, verify.problems
    b = next(p for p in ledger.status("Q-1", "r", pipeline=PIPE).phases if p.phase == "b")
    assert b.state == "stale"
    assert b.reason is not None
    assert "quarantine" in b.reason
    assert "changed" not in b.reason
