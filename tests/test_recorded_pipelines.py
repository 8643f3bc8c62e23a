"""A store keeps the manifest of every pipeline it has records for; it travels with the records.

Issue 9: after `copy` of a run written with `--pipeline-file data-job.yaml`, `status` on the
target failed with "pipeline 'data-job' not found". Issue 11: a pipeline defined in Python is
recorded like a manifest, so the CLI shows its runs with no file at all.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.ledger import recorded_pipelines as pipeline_shelf
from phaselog.ledger.facade import Ledger
from phaselog.model.errors import Corrupt, InvalidRecord
from phaselog.model.pipelines import load_manifest, pipeline_from_dict
from phaselog.stores.base import Capability, Store
from phaselog.transfer.jsonl import export_records, import_records

DATA_JOB = """\
name: data-job
version: "1"
order: strict
phases:
  - name: extract
    payload_schema: {type: object, required: [rows], properties: {rows: {type: integer}}}
  - name: data_analysis
  - name: train
    requires_approval: true
  - name: report
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PHASELOG_HOME": str(cwd / "no-home"), "PHASELOG_PIPELINES": ""},
        check=False,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """A files store with a run of data-job written with --pipeline-file; the file then removed."""
    manifest = tmp_path / "data-job.yaml"
    manifest.write_text(DATA_JOB)
    src = tmp_path / "src"
    for phase, payload in (("extract", '{"rows": 3}'), ("data_analysis", "{}")):
        ok(
            cli(
                "write", "--root", str(src), "--pipeline-file", str(manifest), "--ticket-id", "D-1",
                "--run-id", "nightly-1", "--phase", phase, "--payload", payload,
                cwd=tmp_path,
            )
        )  # fmt: skip
    manifest.unlink()  # nothing but the store knows data-job now
    return src


def _target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/target.db"
    url: str = request.getfixturevalue("pg_schema_url")
    return url


def _status_works(store_arg: list[str], cwd: Path) -> None:
    st = ok(cli("status", *store_arg, "--ticket-id", "D-1", "--run-id", "nightly-1", cwd=cwd))
    assert st["pipeline"] == "data-job"
    assert [p["phase"] for p in st["phases"]] == ["extract", "data_analysis", "train", "report"]
    assert st["next_phase"] == "train"
    table = cli("status", *store_arg, "--ticket-id", "D-1", "--run-id", "nightly-1", "--format", "table", cwd=cwd)
    assert table.returncode == 0, table.stdout + table.stderr
    assert "data_analysis" in table.stdout


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_after_copy_status_finds_the_pipeline_in_the_target_store(
    written: Path, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    target = _target(kind, tmp_path, request)
    out = ok(cli("copy", "--from", str(written), "--to", target, "--no-progress", cwd=tmp_path))
    assert (out["records"], out["added"], out["conflicts"], out["pipelines_recorded"]) == (2, 2, [], 1)
    _status_works(["--store", target], tmp_path)
    # and the target keeps writing the run against it (the schema of extract is the manifest's)
    bad = cli(
        "write", "--store", target, "--ticket-id", "D-1", "--run-id", "nightly-1", "--phase", "extract",
        "--payload", '{"rows": "many"}', cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 1, bad.stdout
    assert "rows" in bad.stdout


@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_after_export_and_import_status_finds_the_pipeline(written: Path, tmp_path: Path, kind: str) -> None:
    dump = tmp_path / "dump.jsonl"
    exported = cli("export", "--root", str(written), cwd=tmp_path)
    assert exported.returncode == 0, exported.stdout
    dump.write_text(exported.stdout)
    lines = [json.loads(x) for x in exported.stdout.splitlines()]
    assert [ln["type"] for ln in lines] == ["pipeline", "checkpoint", "checkpoint"]
    assert lines[0]["content_hash"] == lines[1]["document"]["phaselog"]["pipeline"]["manifest_hash"]
    store_arg = ["--root", str(tmp_path / "imported")] if kind == "files" else ["--store", f"sqlite:///{tmp_path}/i.db"]
    out = ok(cli("import", *store_arg, "--input", str(dump), cwd=tmp_path))
    assert (out["added"], out["pipelines_recorded"]) == (2, 1)
    _status_works(store_arg, tmp_path)
    again = ok(cli("import", *store_arg, "--input", str(dump), cwd=tmp_path))
    assert (again["added"], again["skipped"], again["pipelines_recorded"]) == (0, 2, 0)


def test_pipeline_file_stays_an_override(written: Path, tmp_path: Path) -> None:
    edited = tmp_path / "edited.yaml"
    edited.write_text(DATA_JOB.replace("  - name: report\n", "  - name: report\n  - name: publish\n"))
    st = ok(
        cli(
            "status", "--root", str(written), "--pipeline-file", str(edited), "--ticket-id", "D-1",
            "--run-id", "nightly-1", cwd=tmp_path,
        )
    )  # fmt: skip
    assert [p["phase"] for p in st["phases"]][-1] == "publish"
    # A packaged manifest of that name (the pipeline folders) wins over the recorded one, as before.
    (written / "pipelines").mkdir()
    (written / "pipelines" / "data-job.yaml").write_text(edited.read_text())
    st = ok(cli("status", "--root", str(written), "--ticket-id", "D-1", "--run-id", "nightly-1", cwd=tmp_path))
    assert [p["phase"] for p in st["phases"]][-1] == "publish"


def test_a_python_defined_pipeline_is_shown_by_the_cli_without_a_file(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import phaselog

            pipe = phaselog.pipeline("py-job", phases=["fetch", {"name": "clean", "description": "tidy"}])

            @pipe.phase("fetch")
            def fetch(ctx):
                return {"rows": 3}

            @pipe.phase("clean", retries=2)
            def clean(ctx):
                return {"kept": ctx.payload("fetch")["rows"] - 1}

            result = pipe.run(ticket_id="PY-1", run_id="nightly-7", store=sys.argv[1], handle_signals=False)
            print(result.state)
            """
        )
    )
    url = f"sqlite:///{tmp_path}/py.db"
    proc = subprocess.run(
        [sys.executable, str(script), url], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    common = ["--store", url, "--ticket-id", "PY-1"]
    st = ok(cli("status", *common, "--run-id", "nightly-7", cwd=tmp_path))
    assert (st["pipeline"], [p["state"] for p in st["phases"]]) == ("py-job", ["completed", "completed"])
    explained = ok(cli("explain", *common, "--run-id", "nightly-7", cwd=tmp_path))
    assert [p["phase"] for p in explained["phases"]] == ["fetch", "clean"]
    history = ok(cli("history", *common, cwd=tmp_path))
    assert {e["phase"] for e in history["history"] if e.get("phase")} >= {"fetch", "clean"}
    # The recorded manifest is the effective one: the decorator's retries=2 is in it.
    with Ledger(phaselog.open_store(url)) as led:
        recorded = led.pipeline_for("PY-1", "nightly-7")
    assert recorded.phase("clean").execution.retries == 2
    assert recorded.phase("clean").description == "tidy"


# -- the store contract, on every backend -----------------------------------------------------------
PIPE = pipeline_from_dict(
    {"name": "custom-job", "version": "2", "phases": [{"name": "one"}, {"name": "two", "requires_approval": True}]}
)


@pytest.mark.all_stores
def test_a_write_records_its_manifest_once_in_its_append(store: Store) -> None:
    assert Capability.MANIFESTS in store.capabilities
    assert pipeline_shelf.keys(store) == []
    led = Ledger(store)
    led.write("C-1", "r1", "one", {}, pipeline=PIPE)
    assert pipeline_shelf.keys(store) == [("custom-job", PIPE.manifest_hash)]
    back = pipeline_shelf.read(store, "custom-job", PIPE.manifest_hash)
    assert (back.manifest_hash, back.phase_names, back.phase("two").requires_approval) == (
        PIPE.manifest_hash,
        ["one", "two"],
        True,
    )
    # Content-addressed and never replaced: putting it again adds nothing.
    assert store.pipeline_manifests().put(pipeline_shelf.manifest_doc(PIPE)) is False
    # A second manifest of the same name (a new version) is kept beside the first.
    v3 = pipeline_from_dict({**pipeline_from_dict_doc(PIPE), "version": "3"})
    led.write("C-1", "r2", "one", {}, pipeline=v3)
    assert pipeline_shelf.keys(store) == sorted([("custom-job", PIPE.manifest_hash), ("custom-job", v3.manifest_hash)])
    # A run names its manifest's hash: each run gets its own pipeline back.
    fresh = Ledger(_reopen(store))
    assert fresh.pipeline_for("C-1", "r1").manifest_hash == PIPE.manifest_hash
    assert fresh.pipeline_for("C-1", "r2").manifest_hash == v3.manifest_hash
    # With no hash to go by (--pipeline NAME on a new run), two versions are ambiguous: say so.
    with pytest.raises(phaselog.PhaselogError) as info:
        fresh.pipeline_for("C-1", "r3", "custom-job")
    assert "--pipeline-file" in info.value.message
    fresh.store.close()


def pipeline_from_dict_doc(pipeline: Any) -> dict[str, Any]:
    from phaselog.model.pipelines import manifest_dict

    return manifest_dict(pipeline)


def _reopen(store: Store) -> Store:
    return phaselog.open_store(store.url)


@pytest.mark.all_stores
def test_a_damaged_recorded_manifest_is_reported_never_used(store: Store, tmp_path: Path) -> None:
    Ledger(store).write("C-2", "r1", "one", {}, pipeline=PIPE)
    forged = json.dumps({**pipeline_from_dict_doc(PIPE), "phases": [{"name": "one"}]})
    url = store.url
    store.close()
    if url.startswith("file://"):
        path = Path(url.removeprefix("file://")) / "manifests" / "custom-job" / f"{PIPE.manifest_hash}.json"
        path.chmod(0o600)
        path.write_text(forged)
    elif url.startswith("sqlite://"):
        with sqlite3.connect(url.removeprefix("sqlite://")) as conn:
            conn.execute("UPDATE phaselog_pipelines SET body = ?", (forged,))
    else:
        import psycopg

        from phaselog.stores.sql.postgres import split_url

        dsn, schema = split_url(url)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'UPDATE "{schema}".phaselog_pipelines SET body = %s', (forged,))
    with Ledger(phaselog.open_store(url)) as led, pytest.raises(Corrupt) as info:
        led.status("C-2", "r1")
    assert "custom-job" in info.value.message
    assert "changed after it was recorded" in info.value.message


def test_import_checks_a_manifest_line_like_a_manifest_file(tmp_path: Path) -> None:
    src = phaselog.open_store(str(tmp_path / "a"))
    Ledger(src).write("C-3", "r1", "one", {}, pipeline=PIPE)
    lines = list(export_records(src))
    assert lines[0]["type"] == "pipeline"
    cases = {
        "name": {**lines[0], "name": "../etc"},
        "content_hash": {**lines[0], "content_hash": "0" * 63},
        "document.phases[0].name": {**lines[0], "document": {**lines[0]["document"], "phases": [{"name": "Bad Name"}]}},
    }
    for field, bad in cases.items():
        target = phaselog.open_store(str(tmp_path / f"t-{len(field)}"))
        with pytest.raises(InvalidRecord) as info:
            import_records(target, [bad, *lines[1:]])
        assert (info.value.context["line"], info.value.context["field"]) == (1, field), info.value.message
        assert not (tmp_path / f"t-{len(field)}").exists()  # nothing stored, nothing created


def test_a_manifest_file_loads_back_what_the_store_recorded(tmp_path: Path) -> None:
    """The recorded file is a manifest: `--pipeline-file` reads it as it is."""
    store = phaselog.open_store(str(tmp_path / "s"))
    Ledger(store).write("C-4", "r1", "one", {}, pipeline=PIPE)
    path = tmp_path / "s" / "manifests" / "custom-job" / f"{PIPE.manifest_hash}.json"
    assert load_manifest(path).manifest_hash == PIPE.manifest_hash
