"""After ``doctor --quarantine`` frees an attempt number (D18) and a newer attempt takes it, a later
phase built on the quarantined attempt is stale, and its link checks say it was quarantined (D115)."""

from __future__ import annotations

from pathlib import Path

import phaselog
from phaselog.doctor import doctor
from phaselog.ledger import Ledger
from phaselog.pipelines import pipeline_from_dict

PIPE = pipeline_from_dict({"name": "q", "version": "1", "phases": [{"name": "a"}, {"name": "b"}]})


def test_a_basis_on_a_quarantined_attempt_says_quarantined_not_changed(root: Path) -> None:
    ledger: Ledger = phaselog.Ledger(phaselog.open_store(root.as_uri()))
    first = ledger.write("Q-1", "r", "a", {"n": 1}, pipeline=PIPE)
    ledger.write("Q-1", "r", "b", {"n": 1}, pipeline=PIPE)
    damaged = root / "checkpoints" / first.stored.location
    damaged.write_bytes(damaged.read_bytes() + b"garbage: [\n")  # damage from outside
    report = doctor(ledger, "Q-1", quarantine=True)
    assert [m["from"] for m in report.moved if m["from"].endswith(".yaml")] == [f"checkpoints/{first.stored.location}"]
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
