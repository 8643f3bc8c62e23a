"""The Ledger is composed of services; ``Run`` is the facade a caller of one run needs.

The Run facade is checked against the Ledger's own calls on every store: the same records, the
same state. The composition is checked on the source: the Ledger inherits nothing, every public
method is a service's method with its docstring, and no service module reaches back into the
Ledger (it is handed the store, the clock and the services it needs).
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import phaselog
from phaselog.ledger.facade import Ledger, delegate
from phaselog.model.errors import NotFound
from phaselog.stores import Store

pytestmark = pytest.mark.all_stores

T = "VID-9"
VIDEO = "video-pipeline"
RESEARCH = {"summary": "Who watches launch videos", "sources": ["https://example.org/a"]}
PROPOSAL = {"title": "Launch", "concept": "Ninety seconds, one idea"}
SERVICES = (
    "resolve",
    "reads",
    "writes",
    "status",
    "progress",
    "gates",
    "markers",
    "audit",
    "fork",
    "verify",
    "retention",
)
SRC = Path(phaselog.__file__).parent


def test_a_gated_phase_end_to_end_through_the_run_facade(store: Store) -> None:
    ledger = phaselog.Ledger(store)
    ledger.init_ticket(T, title="Launch video", pipeline=VIDEO)
    run = ledger.run(T, "r1")
    assert run.pipeline.name == VIDEO  # from the ticket's marker

    run.write("research", RESEARCH)
    started = run.progress("proposal", "start", step=0)
    assert (started.attempt_number, started.seq) == (1, 1)
    run.progress("proposal", "step", step=1, tokens=10)
    flying = run.in_flight()
    assert list(flying) == ["proposal"]
    assert (flying["proposal"].attempt_number, flying["proposal"].last_step) == (1, 1)
    assert [e.event for e in run.progress_events("proposal")] == ["start", "step"]

    first = run.write("proposal", PROPOSAL)
    assert first.record.attempt_number == 1  # the attempt in flight got its checkpoint
    assert run.in_flight() == {}
    assert run.status().phase("proposal").state == "awaiting_approval"

    rejection, _ = run.reject("proposal", by="ana", comment="too long")
    assert not rejection.approved
    assert run.status().phase("proposal").state == "rejected"
    second = run.write("proposal", {**PROPOSAL, "concept": "Sixty seconds"})
    assert second.record.attempt_number == 2
    approval, warnings = run.approve("proposal", by="ana", checkpoint_hash=second.record.content_hash)
    assert (approval.approved, approval.attempt_number, warnings) == (True, 2, [])
    failed = run.fail("script", "the writer crashed")
    assert (failed.record.status, failed.record.error) == ("failed", "the writer crashed")

    st = run.status()
    assert st == ledger.status(T, "r1")
    assert [p.state for p in st.phases[:3]] == ["completed", "completed", "failed"]
    assert st.next_phase == "script"
    assert run.approvals() == ledger.approvals(T, "r1")
    assert [a.decision for a in run.approvals()] == ["reject", "approve"]
    assert run.read("proposal").record == second.record
    assert run.read("proposal", 1).record == first.record

    kinds = [(e["kind"], e["phase"]) for e in run.history()]
    assert kinds == [(e["kind"], e["phase"]) for e in ledger.history(T, "r1")]
    assert kinds == [
        ("checkpoint", "research"),
        ("progress", "proposal"),
        ("progress", "proposal"),
        ("checkpoint", "proposal"),
        ("approval", "proposal"),
        ("checkpoint", "proposal"),
        ("approval", "proposal"),
        ("checkpoint", "script"),
    ]
    assert [e["kind"] for e in run.history("research")] == ["checkpoint"]
    assert run.verify().ok
    dry = ledger.prune(T, keep_last=1, dry_run=True)  # the rejected first proposal is the only one to go
    assert [(r["phase"], r["attempt_number"]) for r in dry.removed if "content_hash" in r] == [("proposal", 1)]
    assert sorted(r["kind"] for r in dry.removed if "kind" in r) == ["approvals", "progress", "progress"]
    with pytest.raises(NotFound):
        run.progress_events("script")  # nothing in flight there


def test_the_ledger_inherits_nothing_and_delegates_to_its_services(store: Store) -> None:
    assert Ledger.__mro__ == (Ledger, object)
    ledger = phaselog.Ledger(store)
    delegated = {name: d for name, d in vars(Ledger).items() if isinstance(d, delegate)}
    assert {
        "write",
        "read",
        "status",
        "progress",
        "approve",
        "reject",
        "history",
        "in_flight",
        "verify",
    } <= set(delegated)
    for name, d in delegated.items():
        service = getattr(ledger, d.service)
        bound = getattr(ledger, name)
        assert bound.__self__ is service, name  # the service's own bound method: no copy of its logic
        assert bound.__doc__, name
        assert bound.__doc__ == Ledger.__dict__[name].__doc__, name
        assert inspect.signature(bound) == inspect.signature(getattr(service, d.method.__name__)), name
    for service in (
        "reads",
        "writes",
        "states",
        "events",
        "gates",
        "tickets",
        "audit",
        "forks",
        "verifier",
        "retention",
    ):
        assert getattr(ledger, service).store is store, service


@pytest.mark.parametrize("module", SERVICES)
def test_no_service_reaches_back_into_the_ledger(module: str) -> None:
    tree = ast.parse((SRC / "ledger" / f"{module}.py").read_text("utf-8"))
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("phaselog")
    }
    assert "phaselog.ledger.facade" not in imported
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "NotImplementedError" not in names  # no stubs standing in for another class's methods
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name.endswith("Mixin")]
    assert classes == []


def test_prune_is_delegated_and_its_module_loads_on_first_use(store: Store) -> None:
    code = (
        "import sys, phaselog.ledger.facade as m; assert 'phaselog.ledger.retention' not in sys.modules; "
        "assert isinstance(m.Ledger.__dict__['prune'], m.delegate)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    ledger = phaselog.Ledger(store)
    assert ledger.prune.__self__ is ledger.retention
    assert inspect.signature(ledger.prune) == inspect.signature(ledger.retention.prune)
    assert Ledger.prune.__doc__ == ledger.prune.__doc__
