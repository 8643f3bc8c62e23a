"""Manifests that used to load and then fail while (or after) running (issue 20).

Each is refused when the manifest loads, with an error naming the key and the phase, before
anything runs: `phaselog run` exits non-zero with a JSON error, no traceback, no record, and the
phase before the bad one has not run. And a record the store could not read back is never
acknowledged: more phases than the ordinal bound are refused at load, and the write path checks
the same bound (``limits.is_phase_ordinal``) on every store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.model.errors import InvalidRecord, PipelineError
from phaselog.model.limits import MAX_PHASE_ORDINAL
from phaselog.model.pipelines import Phase, Pipeline, pipeline_from_dict
from phaselog.stores.base import Store

PHASELOG = str(Path(sys.executable).parent / "phaselog")
FIRST = {"name": "first", "run": "touch first-ran && echo '{}'"}


def _run(tmp_path: Path, second: dict[str, Any], *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    manifest = tmp_path / "job.json"
    manifest.write_text(json.dumps({"name": "job", "version": "1", "phases": [FIRST, {"name": "second", **second}]}))
    store = tmp_path / "store"
    cmd = [PHASELOG, "run", "--store", str(store), "--ticket-id", "T-1", "--pipeline-file", str(manifest)]
    proc = subprocess.run(
        [*cmd, "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"},
        check=False,
    )
    return proc, store


def _refused(proc: subprocess.CompletedProcess[str], tmp_path: Path, store: Path, field: str) -> dict[str, Any]:
    assert proc.returncode not in (0, 3), (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    error = json.loads(proc.stdout)
    assert error["success"] is False
    assert error["field"] == field, error
    assert not (tmp_path / "first-ran").exists(), "a phase ran before the manifest was refused"
    if store.exists():
        assert not list(store.rglob("phase_*")), "something was recorded"
    return error


def test_an_env_value_with_a_nul_is_refused_at_load(tmp_path: Path) -> None:
    proc, store = _run(tmp_path, {"run": "echo '{}'", "env": {"X": "a\x00b"}})
    error = _refused(proc, tmp_path, store, "phases[1].env")
    assert "NUL" in error["error"]
    assert "X" in error["error"]


def test_a_payload_schema_that_is_no_json_schema_is_refused_at_load(tmp_path: Path) -> None:
    proc, store = _run(tmp_path, {"run": "echo '{}'", "payload_schema": {"type": "objectz"}})
    error = _refused(proc, tmp_path, store, "phases[1].payload_schema")
    assert "phase second" in error["error"]
    assert "not a valid JSON Schema" in error["error"]


@pytest.mark.parametrize("timeout", [100000000000, "100000000000s", 1.5e10])
def test_a_timeout_past_the_bound_is_refused_in_either_form(tmp_path: Path, timeout: Any) -> None:
    proc, store = _run(tmp_path, {"run": "echo '{}'", "timeout": timeout})
    error = _refused(proc, tmp_path, store, "phases[1].timeout")
    assert error["rule"] == "duration_max"
    assert "36500d" in error["error"]


def test_the_bound_is_the_same_for_a_number_and_a_duration() -> None:
    from phaselog.model.durations import MAX_DAYS

    for ok in (MAX_DAYS * 86400, f"{MAX_DAYS}d"):
        pipeline_from_dict({"name": "j", "version": "1", "phases": [{"name": "p", "timeout": ok}]})
    for bad in (MAX_DAYS * 86400 + 1, f"{MAX_DAYS * 86400 + 1}s", 10**400):
        with pytest.raises(PipelineError) as info:
            pipeline_from_dict({"name": "j", "version": "1", "phases": [{"name": "p", "timeout": bad}]})
        assert info.value.context["rule"] == "duration_max"


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
        ("raise RuntimeError('no config')\n", "RuntimeError: no config"),
        ("def __getattr__(name):\n    raise SystemExit(4)\n", "SystemExit: 4"),
    ],
)
def test_a_call_module_that_exits_or_raises_on_import_is_a_manifest_error(
    tmp_path: Path, body: str, shown: str
) -> None:
    (tmp_path / "exitmod.py").write_text(body)
    proc, store = _run(tmp_path, {"call": "exitmod:step"})
    error = _refused(proc, tmp_path, store, "phases[1].call")
    assert "call: exitmod:step" in error["error"]
    assert shown in error["error"]


# -- the phase ordinal bound -------------------------------------------------------------------------
def test_a_manifest_with_more_phases_than_the_ordinal_bound_is_refused(tmp_path: Path) -> None:
    manifest = tmp_path / "big.json"
    phases = [{"name": f"p{i}"} for i in range(1, MAX_PHASE_ORDINAL + 6)]
    manifest.write_text(json.dumps({"name": "big", "version": "1", "order": "free", "phases": phases}))
    store = tmp_path / "store"
    cmd = [PHASELOG, "write", "--store", str(store), "--ticket-id", "T-1", "--run-id", "r1", "--phase", "p1003"]
    proc = subprocess.run(
        [*cmd, "--pipeline-file", str(manifest), "--payload", "{}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout
    error = json.loads(proc.stdout)
    assert (error["field"], error["rule"]) == ("phases", "max_phase_ordinal")
    assert str(MAX_PHASE_ORDINAL) in error["error"]
    assert not store.exists() or not list(store.rglob("phase_*"))
    phases = phases[:MAX_PHASE_ORDINAL]  # exactly the bound loads
    assert len(pipeline_from_dict({"name": "big", "version": "1", "phases": phases}).phases) == MAX_PHASE_ORDINAL


@pytest.mark.all_stores
def test_a_record_past_the_ordinal_bound_is_never_acknowledged(store: Store) -> None:
    """A Pipeline built in Python skips the manifest's check: the write path applies the same bound."""
    big = Pipeline("big", "1", tuple(Phase(f"p{i}", i) for i in range(1, MAX_PHASE_ORDINAL + 4)), order="free")
    ledger = phaselog.Ledger(store)
    with pytest.raises(InvalidRecord) as info:
        ledger.write("T-1", "r1", "p1003", {}, pipeline=big)
    assert (info.value.context["field"], info.value.context["rule"]) == ("phase_ordinal", "max_phase_ordinal")
    assert store.tickets() == [] or list(store.iter_records("T-1", phaselog.normalize_run_id("r1"))) == []
    stored = ledger.write("T-1", "r1", f"p{MAX_PHASE_ORDINAL}", {}, pipeline=big)  # the bound itself is fine
    assert ledger.read("T-1", "r1", f"p{MAX_PHASE_ORDINAL}", pipeline=big).record.content_hash == (
        stored.record.content_hash
    )
    assert ledger.verify("T-1").ok
