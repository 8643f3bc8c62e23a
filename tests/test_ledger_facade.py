"""The Ledger is composed of services; ``Run`` is the facade a caller of one run needs.

The Run facade is checked against the Ledger's own calls on every store: the same records, the
same state. The composition is checked on the source: every public method of the Ledger is a plain
``def`` in phaselog/ledger/facade.py, documented, with the signature it always had and that of the
service method it calls; services are built once, on first use; no service module reaches back
into the Ledger (it is handed the store, the clock and the services it needs).
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.ledger import facade
from phaselog.ledger.facade import Ledger, Run
from phaselog.ledger.services import Services
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
    "events",
    "services",
)
SRC = Path(phaselog.__file__).parent

# The public API as it was when the methods were delegate descriptors (parameters, kinds, defaults):
# the redesign must not change one of them.
LEDGER_API = {
    "approvals": "(ticket_id, run_id)",
    "approve": (
        "(ticket_id, run_id, phase, *, by, comment=None, attempt=None, decision='approve', "
        "pipeline=None, checkpoint_hash=None, via=None)"
    ),
    "can_skip_to": "(ticket_id, run_id, phase, *, pipeline=None, artifacts_root=None)",
    "close": "()",
    "logs": "(ticket_id, run_id, phase, attempt=None, *, pipeline=None)",
    "damaged_approvals": "(ticket_id, run_id)",
    "damaged_events": "(ticket_id, run_id)",
    "damaged_markers": "(ticket_id)",
    "decisions": "(ticket_id)",
    "diff": "(ticket_id, a, b)",
    "diff_phase": "(ticket_id, run_id, phase)",
    "event_index": "(ticket_id, run_id)",
    "feed": "(**query)",
    "follow": "(**query)",
    "fork": "(ticket_id, run_id, *, through, new_run_id=None)",
    "history": "(ticket_id, run_id=None, phase=None)",
    "in_flight": "(ticket_id, run_id, *, stale_after=None)",
    "init_ticket": "(ticket_id, *, title, pipeline=None, meta=None)",
    "list": "(ticket_id, run_id=None, *, after=None, limit=None)",
    "load_pipeline": "(pipeline, *, manifest_hash=None)",
    "marker": "(ticket_id)",
    "markers": "(ticket_id)",
    "phase_diffs": "(ticket_id, run_id, phase)",
    "pipeline_for": "(ticket_id, run_id, requested=None, *, snapshot=None)",
    "progress": (
        "(ticket_id, run_id, phase, event, *, attempt=None, step=None, output=None, tokens=None, "
        "provider=None, status=None, pid='self', pipeline=None, max_output_bytes=8388608, "
        "started_at=None)"
    ),
    "progress_event": "(ticket_id, run_id, phase, attempt, seq, *, pipeline=None)",
    "progress_events": "(ticket_id, run_id, phase, attempt=None, *, pipeline=None, newest=False)",
    "progress_latest": "(ticket_id, run_id, phase, attempt=None, *, pipeline=None)",
    "prune": "(ticket_id=None, *, older_than=None, keep_last=None, run_id=None, dry_run=False)",
    "read": "(ticket_id, run_id, phase, attempt=None, *, pipeline=None)",
    "recorded_pipeline": "(ticket_id, run_id)",
    "reject": (
        "(ticket_id, run_id, phase, *, by, comment=None, attempt=None, pipeline=None, checkpoint_hash=None, via=None)"
    ),
    "run": "(ticket_id, run_id, *, pipeline=None)",
    "run_records": "(ticket_id, run_id)",
    "status": "(ticket_id, run_id, *, pipeline=None, artifacts_root=None)",
    "validate": "(ticket_id, run_id, phase, attempt=None, *, pipeline=None, artifacts_root=None)",
    "verify": "(ticket_id, run_id=None)",
    "write": (
        "(ticket_id, run_id, phase, payload=None, *, repo_commit_map=None, artifact_paths=(), "
        "attempt=None, timestamp=None, pipeline=None, status='completed', error=None, "
        "decisions=(), artifacts_root=None, code_fingerprint=None, fence=None, "
        "check_prerequisites=True, started_at=None, params=None)"
    ),
}
RUN_API = {
    "approvals": "()",
    "approve": "(phase, *, by, **kw)",
    "can_skip_to": "(phase, **kw)",
    "fail": "(phase, error, **kw)",
    "history": "(phase=None)",
    "in_flight": "(*, stale_after=None)",
    "logs": "(phase, attempt=None)",
    "progress": "(phase, event, **kw)",
    "progress_events": "(phase, attempt=None)",
    "read": "(phase, attempt=None)",
    "reject": "(phase, *, by, **kw)",
    "status": "()",
    "validate": "(phase, attempt=None, **kw)",
    "verify": "()",
    "write": "(phase, payload=None, **kw)",
}

#: Ledger method -> (service attribute, the service's method it calls).
CALLS = {
    "load_pipeline": ("pipelines", "load"),
    "recorded_pipeline": ("pipelines", "recorded"),
    "pipeline_for": ("pipelines", "for_run"),
    **{name: ("writes", name) for name in ("write",)},
    **{name: ("reads", name) for name in ("read", "list", "run_records", "validate")},
    **{name: ("states", name) for name in ("status", "can_skip_to")},
    **{
        name: ("events", name)
        for name in (
            "progress",
            "progress_events",
            "progress_latest",
            "progress_event",
            "damaged_events",
            "event_index",
            "in_flight",
        )
    },
    **{name: ("gates", name) for name in ("approve", "reject", "approvals", "damaged_approvals")},
    **{name: ("tickets", name) for name in ("init_ticket", "markers", "marker", "damaged_markers")},
    **{name: ("audit", name) for name in ("decisions", "history", "diff", "diff_phase", "phase_diffs")},
    "feed": ("feed_reader", "page"),
    "follow": ("feed_reader", "follow"),
    "fork": ("forks", "fork"),
    "logs": ("logs_reader", "read"),
    "verify": ("verifier", "verify"),
    "prune": ("retention", "prune"),
}


def _plain(sig: inspect.Signature) -> str:
    """A signature without annotations: names, kinds and defaults."""
    out: list[str] = []
    star = False
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        if p.kind is p.VAR_KEYWORD:
            out.append("**" + p.name)
            continue
        out.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return "(" + ", ".join(out) + ")"


def _typed(sig: inspect.Signature) -> list[tuple[str, Any, Any, str]]:
    """The parameters with their annotations (as written; ``builtins.list`` is ``list``) and the return."""

    def norm(a: Any) -> str:
        return str(a).replace("builtins.", "")

    params = [(p.name, p.kind, p.default, norm(p.annotation)) for p in sig.parameters.values() if p.name != "self"]
    return [*params, ("return", None, None, norm(sig.return_annotation))]


def _public_methods(cls: type) -> dict[str, Any]:
    return {name: value for name, value in vars(cls).items() if not name.startswith("_") and inspect.isfunction(value)}


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


def test_the_public_api_and_its_signatures_did_not_change() -> None:
    assert _plain(inspect.signature(Ledger)) == "(store=None, *, pipelines_root=None, clock=None)"
    assert {name: _plain(inspect.signature(f)) for name, f in _public_methods(Ledger).items()} == LEDGER_API
    assert {name: _plain(inspect.signature(f)) for name, f in _public_methods(Run).items()} == RUN_API


def test_every_ledger_method_is_a_plain_documented_def_calling_its_service(store: Store) -> None:
    assert Ledger.__mro__ == (Ledger, Services, object)  # the composition, then the methods: no mixins
    assert not hasattr(facade, "delegate")
    assert not hasattr(facade, "_Lazy")
    assert set(CALLS) == set(LEDGER_API) - {"run", "close"}
    ledger = phaselog.Ledger(store)
    for name, (attr, method) in CALLS.items():
        f = vars(Ledger)[name]
        assert inspect.isfunction(f), name  # go-to-definition lands here, not in a descriptor
        assert f.__module__ == "phaselog.ledger.facade", name
        assert f.__doc__, name
        assert f.__doc__.strip(), name
        service = getattr(ledger, attr)
        called = getattr(service, method)
        assert _typed(inspect.signature(f)) == _typed(inspect.signature(called)), name
        body = ast.parse(inspect.getsource(f).strip()).body[0]
        assert isinstance(body, ast.FunctionDef)
        calls = [
            n
            for n in ast.walk(body)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == method
        ]
        assert calls, f"{name} calls self.{attr}.{method}"
    for attr in ("reads", "writes", "states", "events", "gates", "tickets", "audit", "forks", "verifier", "retention"):
        assert getattr(ledger, attr).store is store, attr
        assert getattr(ledger, attr) is getattr(ledger, attr), attr  # built once


def test_each_import_inside_a_service_property_says_why_it_is_lazy() -> None:
    path = SRC / "ledger" / "services.py"
    lines = path.read_text("utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    inner = [
        node
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    assert inner
    for node in inner:
        assert "# lazy: " in lines[node.lineno - 1], lines[node.lineno - 1]


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


def test_prune_is_built_on_first_use_and_its_module_loads_then(store: Store) -> None:
    code = (
        "import sys, phaselog.ledger.facade as m; assert 'phaselog.ledger.retention' not in sys.modules; "
        "import inspect; assert inspect.isfunction(m.Ledger.__dict__['prune'])"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    ledger = phaselog.Ledger(store)
    assert "retention" not in vars(ledger)
    ledger.prune(T, keep_last=1, dry_run=True)
    assert "retention" in vars(ledger)  # the service, built by the first prune and kept
    assert (
        inspect.signature(Ledger.prune).parameters.keys()
        == inspect.signature(type(ledger.retention).prune).parameters.keys()
    )
