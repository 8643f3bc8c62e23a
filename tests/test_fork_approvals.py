"""A forked gated phase keeps its source's approval, and `status` says where it came from (issue 19, D91)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import phaselog
from phaselog.model.ids import normalize_run_id

BIN = Path(sys.executable).parent / "phaselog"
GATED = {
    "name": "gated",
    "version": "1",
    "phases": [{"name": "draft"}, {"name": "publish", "requires_approval": True}, {"name": "after"}],
}


@pytest.mark.all_stores
def test_a_forked_gated_phase_carries_the_source_approval_named_and_writes_none(store: phaselog.Store) -> None:
    led = phaselog.Ledger(store)
    pl = phaselog.pipeline_from_dict(GATED)
    led.write("T-1", "r1", "draft", {}, pipeline=pl)
    led.write("T-1", "r1", "publish", {}, pipeline=pl)
    led.approve("T-1", "r1", "publish", by="ana", pipeline=pl)
    led.fork("T-1", "r1", through="publish", new_run_id="r2")

    publish = led.status("T-1", "r2").phase("publish")
    assert (publish.state, publish.approval) == ("completed", "approved")
    origin = publish.approval_from
    assert origin is not None
    assert origin["inherited"] is True
    assert (origin["run_id"], origin["run_name"], origin["attempt_number"]) == (normalize_run_id("r1"), "r1", 1)
    assert (origin["by"], origin["decision"]) == ("ana", "approve")
    assert publish.reason == "approved by ana in run r1 (its attempt 1, copied here by fork)"
    assert led.approvals("T-1", "r2") == []  # nothing was approved in the new run
    assert led.status("T-1", "r2").phase("draft").approval_from is None  # not gated: nothing to carry

    # the verdict stays bound to the copied content: a new attempt in the fork needs its own approval
    led.write("T-1", "r2", "publish", {"v": 2})
    again = led.status("T-1", "r2").phase("publish")
    assert (again.state, again.approval_from) == ("awaiting_approval", None)


def test_a_rejection_in_the_source_after_the_fork_shows_in_the_fork_named(led: phaselog.Ledger) -> None:
    pl = phaselog.pipeline_from_dict(GATED)
    led.write("T-2", "r1", "draft", {}, pipeline=pl)
    led.write("T-2", "r1", "publish", {}, pipeline=pl)
    led.approve("T-2", "r1", "publish", by="ana", pipeline=pl)
    led.fork("T-2", "r1", through="publish", new_run_id="r2")
    led.reject("T-2", "r1", "publish", by="bo", comment="wrong numbers", pipeline=pl)
    publish = led.status("T-2", "r2").phase("publish")
    assert publish.state == "rejected"
    assert publish.approval_from is not None
    assert publish.approval_from["by"] == "bo"
    assert "rejected by bo in run r1" in str(publish.reason)


@pytest.mark.parametrize("backend_url", ["files", "sqlite"])
def test_status_json_and_table_name_the_run_an_approval_came_from(tmp_path: Path, backend_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    url = f"file://{tmp_path}/store" if backend_url == "files" else f"sqlite://{tmp_path}/ledger.db"
    job = tmp_path / "gated.json"
    job.write_text(json.dumps(GATED))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(BIN), *args, "--store", url, "--ticket-id", "T-3"]
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    for phase in ("draft", "publish"):
        cli("write", "--pipeline-file", str(job), "--run-id", "nightly", "--phase", phase, "--payload", "{}")
    cli("approve", "--pipeline-file", str(job), "--run-id", "nightly", "--phase", "publish", "--by", "ana")
    cli("fork", "--run-id", "nightly", "--through", "publish", "--new-run-id", "retry")
    st = json.loads(cli("status", "--run-id", "retry").stdout)
    publish = st["phases"][1]
    assert (publish["state"], publish["approval"]) == ("completed", "approved")
    assert publish["approval_from"]["run_name"] == "nightly"
    assert publish["approval_from"]["by"] == "ana"
    assert "approved by ana in run nightly" in publish["reason"]
    assert st["next_phase"] == "after"
    table = cli("status", "--run-id", "retry", "--format", "table").stdout
    flat = " ".join(table.split())
    assert "approved by ana in" in flat
    assert "nightly" in flat
