"""A one-line `run:` that prints JSON is invalid YAML: the error says so, the docs show the quoting (issue 19)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phaselog.model.errors import PipelineError
from phaselog.model.pipelines import load_manifest

BIN = Path(sys.executable).parent / "phaselog"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "pipelines.md"

BAD = """name: job
version: "1"
phases:
  - name: fetch
    run: sleep 1; echo '{"ok": 1}'
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    env["PHASELOG_HOME"] = str(cwd / "store")
    return subprocess.run([str(BIN), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("command", ["run", "status"])
def test_a_run_line_printing_json_names_the_line_and_says_how_to_quote_it(tmp_path: Path, command: str) -> None:
    (tmp_path / "job.yaml").write_text(BAD)
    done = cli(command, "--ticket-id", "T-1", "--run-id", "r", "--pipeline-file", "job.yaml", cwd=tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    err = json.loads(done.stdout)
    assert err["success"] is False
    assert (err["error_code"], err["rule"], err["line"]) == ("pipeline_error", "yaml_syntax", 5)
    message = err["error"]
    assert "pipeline manifest job.yaml: not valid YAML" in message
    assert "line 5 (run: sleep 1; echo '{\"ok\": 1}')" in message
    assert "the value of 'run' holds ': '" in message
    assert "quote the whole value" in message
    assert "run: |" in message


def test_other_syntax_errors_name_their_line_without_the_quoting_hint(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text('name: job\nversion: "1"\nphases:\n  - name: fetch\n   run: [unclosed\n')
    with pytest.raises(PipelineError) as caught:
        load_manifest(path)
    assert caught.value.context["rule"] == "yaml_syntax"
    assert isinstance(caught.value.context["line"], int)
    assert "quote the whole value" not in caught.value.message


def test_the_quoted_forms_docs_pipelines_shows_run_and_record_their_json(tmp_path: Path) -> None:
    text = DOCS.read_text()
    section = text.split("**Quoting `run:`.**", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "job.yaml").write_text('name: quoted\nversion: "1"\n' + block)
    ran = cli("run", "--ticket-id", "T-2", "--run-id", "r", "--pipeline-file", "job.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    listed = cli("list", "--ticket-id", "T-2", "--run-id", "r", cwd=tmp_path)
    payloads = {c["phase"]: c["phase_payload"] for c in json.loads(listed.stdout)["checkpoints"]}
    assert payloads == {
        "fetch": {"phase": "fetch", "ok": 1},
        "count": {"phase": "count", "rows": 3},
        "report": {"phase": "report", "ok": 1},
    }
