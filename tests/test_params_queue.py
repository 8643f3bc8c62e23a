"""`phaselog submit --param`: the parameters travel with the queue row to a real worker process on a
real PostgreSQL, reach its Python and shell phases, and are recorded with the run (issue 25)."""

from __future__ import annotations

import json
from pathlib import Path

from queue_support import cli, cli_json, start_worker

PHASES = """
import json, os

def py(ctx):
    with open(os.path.join(str(ctx.workdir), "py-seen.json"), "w") as f:
        json.dump(ctx.params, f)
    return {"limit": ctx.params["limit"]}
"""

MANIFEST = {
    "name": "pq",
    "version": "1",
    "params": {
        "type": "object",
        "properties": {"date": {"type": "string"}, "limit": {"type": "integer", "default": 10}},
        "required": ["date"],
    },
    "phases": [
        {"name": "py", "call": "pqphases:py"},
        {"name": "sh", "run": 'echo "$PHASELOG_PARAM_DATE $PHASELOG_PARAM_LIMIT" > sh-seen.txt; echo "{}"'},
    ],
}


def test_submit_param_reaches_the_worker_s_phases_and_the_run_s_records(pg_schema_url: str, tmp_path: Path) -> None:
    url = pg_schema_url
    cli_json("store", "migrate", "--store", url)
    pipelines, work = tmp_path / "pipelines", tmp_path / "work"
    pipelines.mkdir()
    work.mkdir()
    (pipelines / "pqphases.py").write_text(PHASES)
    job = pipelines / "pq.yaml"
    job.write_text(json.dumps(MANIFEST))
    base = ("submit", "--store", url, "--pipeline-file", str(job), "--ticket-id", "Q-1")

    bad = cli(*base, "--run-id", "bad", "--param", "limit=ten", "--param", "date=d")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert json.loads(bad.stdout)["field"] == "params.limit"
    missing = cli(*base, "--run-id", "bad", "--param", "limit=3")
    assert missing.returncode == 2
    assert json.loads(missing.stdout)["field"] == "params.date"
    assert cli_json("queue", "list", "--store", url)["runs"] == []  # nothing queued

    queued = cli_json(*base, "--run-id", "w1", "--param", "date=2026-11-30", "--param", "limit=3")
    assert queued["params"] == {"date": "2026-11-30", "limit": 3}  # typed by the schema at submit
    again = cli(*base, "--run-id", "w1", "--param", "date=2026-12-01")
    assert again.returncode != 0
    assert "already in the queue with parameters" in json.loads(again.stdout)["error"]

    proc = start_worker(url, pipelines, work, "--burst")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert json.loads(out)["outcomes"] == {"done": 1}
    assert json.loads((work / "py-seen.json").read_text()) == {"date": "2026-11-30", "limit": 3}
    assert (work / "sh-seen.txt").read_text() == "2026-11-30 3\n"
    status = cli_json("status", "--store", url, "--ticket-id", "Q-1", "--run-id", "w1")
    assert status["params"] == {"date": "2026-11-30", "limit": 3}
    assert status["done"] is True
