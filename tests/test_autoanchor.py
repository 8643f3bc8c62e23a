"""Automatic anchoring (issue 26, D323): after every judgement and every completed run, through the events seam."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import cli_env, run_cli
from phaselog.ledger import autoanchor
from phaselog.ledger.facade import Ledger
from phaselog.ledger.proofs import verify_against
from phaselog.ledger.witness import DirectoryWitness, open_witness
from phaselog.model import events
from phaselog.model.heads import load_public_key, make_key_pair
from phaselog.stores.base import Store
from test_proofs import _gated_and_rejected, _video
from test_tamper_corpus import RUN, R, Tamper, V

pytestmark = pytest.mark.all_stores


@pytest.fixture
def key(tmp_path: Path) -> Path:
    (tmp_path / "keys").mkdir()
    private, _, _ = make_key_pair(tmp_path / "keys" / "anchor.key")
    return private


@pytest.fixture
def auto(tmp_path: Path, key: Path) -> Iterator[autoanchor.AutoAnchor]:
    sub = autoanchor.AutoAnchor(str(tmp_path / "witness"), key)
    stop = events.subscribe(sub)
    yield sub
    stop()


def _public(key: Path) -> Any:
    return load_public_key(Path(f"{key}.pub").read_bytes(), source="pub")


def test_every_judgement_and_completed_run_is_anchored(
    store: Store, tmp_path: Path, key: Path, auto: autoanchor.AutoAnchor
) -> None:
    ledger = Ledger(store)
    _gated_and_rejected(ledger)  # init, research, proposal, rejected
    assert [(h.ticket_id, h.size) for h in auto.heads] == [(V, 4)]  # after the rejection, not the writes
    ledger.write(V, R, "proposal", _video("proposal"))
    _, warnings = ledger.approve(V, R, "proposal", by="ana")
    assert warnings == []
    assert [h.size for h in auto.heads] == [4, 6]
    witness = DirectoryWitness(tmp_path / "witness")
    assert verify_against(ledger, witness, _public(key))["ok"]

    # The attack of the issue: delete the rejection, approve as someone else — the head anchored
    # automatically after the rejection reports it.
    rejection = store.entry_names("approvals", V, RUN)[0]
    Tamper(store).delete_entry("approvals", V, RUN, rejection)
    ledger.approve(V, R, "proposal", attempt=1, by="mallory")
    report = verify_against(ledger, witness, _public(key))
    assert not report["ok"]
    assert report["problems"][0]["rule"] == "not_extended"
    assert report["problems"][0]["line"] == 1
    assert "approval proposal attempt 1" in report["problems"][0]["message"]


def test_a_run_completed_by_a_write_is_anchored(store: Store, tmp_path: Path, auto: autoanchor.AutoAnchor) -> None:
    from conftest import PAYLOADS

    ledger = Ledger(store)
    for phase in ("implement", "local_review", "create_pr", "pr_release_ready"):
        ledger.write("PROJ-1", R, phase, PAYLOADS[phase])
    assert auto.heads == []  # writes of a run in progress anchor nothing
    ledger.write("PROJ-1", R, "ready_for_merge", PAYLOADS["ready_for_merge"])
    assert [(h.ticket_id, h.size) for h in auto.heads] == [("PROJ-1", 5)]


def test_a_failing_witness_is_a_warning_never_a_failed_write(store: Store, tmp_path: Path, key: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    stop = autoanchor.enable(str(blocker), key)
    try:
        ledger = Ledger(store)
        ledger.init_ticket(V, title="t", pipeline="video-pipeline")
        ledger.write(V, R, "research", _video("research"))
        ledger.write(V, R, "proposal", _video("proposal"))
        approval, warnings = ledger.reject(V, R, "proposal", by="ana")
        assert approval.decision == "reject"
        assert len(warnings) == 1
        assert "phase.rejected" in warnings[0]
        assert "cannot keep the public key" in warnings[0]
    finally:
        stop()


def test_the_environment_turns_it_on_for_the_cli(store: Store, tmp_path: Path, key: Path) -> None:
    ledger = Ledger(store)
    ledger.init_ticket(V, title="t", pipeline="video-pipeline")
    ledger.write(V, R, "research", _video("research"))
    ledger.write(V, R, "proposal", _video("proposal"))
    to = f"sqlite:///{tmp_path / 'witness.db'}"
    env = cli_env(tmp_path / "unused-root", PHASELOG_ANCHOR_TO=to, PHASELOG_ANCHOR_KEY=str(key))
    args = ("reject", "--store", store.url, "--ticket-id", V, "--run-id", R, "--phase", "proposal", "--by", "bo")
    done = run_cli(None, *args, env=env)
    assert done.rc == 0, done
    witness = open_witness(to, field="--against")
    try:
        report = verify_against(ledger, witness, _public(key))
    finally:
        witness.close()
    assert report["ok"], report
    assert report["heads_checked"] == 1
    # Half a setting is a warning on the judgement, not an error.
    half = cli_env(tmp_path / "unused-root", PHASELOG_ANCHOR_TO=to)
    ledger.write(V, R, "proposal", _video("proposal"))
    done = run_cli(None, *args, env=half)
    assert done.rc == 0, done
    assert "PHASELOG_ANCHOR_KEY is not set" in json.dumps(json.loads(done.out))


def test_from_environment_follows_the_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path) -> None:
    before = len(events.subscribers())
    monkeypatch.setenv(autoanchor.ENV_TO, str(tmp_path / "w"))
    monkeypatch.setenv(autoanchor.ENV_KEY, str(key))
    assert autoanchor.from_environment() == []
    assert autoanchor.from_environment() == []
    assert len(events.subscribers()) == before + 1  # once per setting
    monkeypatch.delenv(autoanchor.ENV_KEY)
    (warning,) = autoanchor.from_environment()
    assert autoanchor.ENV_KEY in warning
    assert len(events.subscribers()) == before  # unsubscribed when the setting went
