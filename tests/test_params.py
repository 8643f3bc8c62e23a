"""Run parameters (issue 25): declared by a manifest's ``params``, given with ``--param``,
``--params-file`` or ``pipe.run(params=...)``, checked before anything runs, recorded with the run,
seen by phases. Real files stores and SQLite, real `phaselog` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import phaselog
from phaselog.model.errors import UsageError
from phaselog.model.params import coerce, differences, resolve
from phaselog.model.pipelines import builtin, pipeline_from_dict
from phaselog.model.records import Checkpoint

BIN = Path(sys.executable).parent / "phaselog"

PARAMS = {
    "type": "object",
    "properties": {
        "date": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1, "default": 100},
        "dry_run": {"type": "boolean", "default": False},
    },
    "required": ["date"],
}
#: A shell phase that writes what it saw: one env var, and the PHASELOG_PARAMS file.
SHELL = (
    'printf "%s %s\\n" "$PHASELOG_PARAM_DATE" "$PHASELOG_PARAM_LIMIT" >> seen.log; '
    'cp "$PHASELOG_PARAMS" params-seen.json; echo "{\\"ok\\": true}"'
)


def manifest(tmp_path: Path, params: dict[str, Any] | None = PARAMS, run: str = SHELL) -> Path:
    doc: dict[str, Any] = {"name": "pjob", "version": "1", "phases": [{"name": "fetch", "run": run}]}
    if params is not None:
        doc["params"] = params
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    out["PHASELOG_HOME"] = str(tmp_path / "store")
    out["PATH"] = f"{BIN.parent}{os.pathsep}{out.get('PATH', '')}"
    return out


def cli(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def run_args(job: Path, run_id: str = "r1") -> tuple[str, ...]:
    return ("run", "--pipeline-file", str(job), "--ticket-id", "T-1", "--run-id", run_id, "--quiet")


def nothing_recorded(tmp_path: Path) -> bool:
    return not list((tmp_path / "store").rglob("*.json")) or not (tmp_path / "store" / "checkpoints").exists()


# -- the CLI --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "field", "words"),
    [
        ((), "params.date", "missing required parameter date"),
        (("--param", "date=d", "--param", "limit=three"), "params.limit", "'three' is not an integer"),
        (("--param", "date=d", "--param", "limit=0"), "params.limit", "parameter limit"),
        (("--param", "date=d", "--param", "colour=red"), "params.colour", "unknown parameter colour"),
        (("--param", "date"), "param", "key=value"),
    ],
)
def test_bad_params_are_refused_by_name_and_nothing_is_recorded(
    tmp_path: Path, env: dict[str, str], given: tuple[str, ...], field: str, words: str
) -> None:
    job = manifest(tmp_path)
    done = cli(tmp_path, env, *run_args(job), *given)
    assert done.returncode == 2, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["field"] == field
    assert words in out["error"]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "seen.log").exists()  # no phase ran
    assert not (tmp_path / "store" / "checkpoints").exists()  # nothing recorded


def test_param_values_are_typed_by_the_schema_seen_by_a_shell_phase_and_shown_by_status(
    tmp_path: Path, env: dict[str, str]
) -> None:
    job = manifest(tmp_path)
    done = cli(tmp_path, env, *run_args(job), "--param", "date=2026-11-30", "--param", "limit=3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["params"]["limit"] == 3  # what `run` prints says so too
    assert (tmp_path / "seen.log").read_text() == "2026-11-30 3\n"
    seen = json.loads((tmp_path / "params-seen.json").read_text())
    assert seen == {"date": "2026-11-30", "limit": 3, "dry_run": False}  # typed, defaults applied
    status = json.loads(cli(tmp_path, env, "status", "--ticket-id", "T-1", "--run-id", "r1").stdout)
    assert status["params"] == {"date": "2026-11-30", "limit": 3, "dry_run": False}
    shown = cli(tmp_path, env, "status", "--ticket-id", "T-1", "--run-id", "r1", "--format", "table").stdout
    assert 'params: date="2026-11-30", dry_run=false, limit=3' in shown  # the table says so too
    read = json.loads(cli(tmp_path, env, "read", "--ticket-id", "T-1", "--run-id", "r1", "--phase", "fetch").stdout)
    assert read["metadata"]["params"] == seen  # recorded with the checkpoint, under its hash


def test_params_file_and_param_over_it(tmp_path: Path, env: dict[str, str]) -> None:
    job = manifest(tmp_path)
    (tmp_path / "p.json").write_text(json.dumps({"date": "2026-01-01", "limit": 7}))
    done = cli(tmp_path, env, *run_args(job), "--params-file", "p.json", "--param", "limit=9")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "seen.log").read_text() == "2026-01-01 9\n"
    (tmp_path / "bad.json").write_text("[1, 2]")
    bad = cli(tmp_path, env, *run_args(job, "r2"), "--params-file", "bad.json")
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["field"] == "params_file"


def test_a_rerun_with_other_params_is_refused_same_or_none_resume(tmp_path: Path, env: dict[str, str]) -> None:
    job = manifest(tmp_path, run='echo x >> seen.log; test -e ok || exit 1; echo "{}"')
    first = cli(tmp_path, env, *run_args(job), "--param", "date=2026-11-30")
    assert first.returncode == 1  # the phase failed: recorded, with the parameters
    changed = cli(tmp_path, env, *run_args(job), "--param", "date=2026-12-01", "--param", "limit=5")
    assert changed.returncode == 2
    out = json.loads(changed.stdout)
    assert out["rule"] == "params_changed"
    assert 'date: recorded "2026-11-30", given "2026-12-01"' in out["error"]
    assert "limit: recorded 100, given 5" in out["error"]
    assert (tmp_path / "seen.log").read_text() == "x\n"  # the refused rerun ran nothing
    (tmp_path / "ok").touch()
    same = cli(tmp_path, env, *run_args(job), "--param", "date=2026-11-30", "--param", "limit=100")
    assert same.returncode == 0, same.stdout + same.stderr
    again = cli(tmp_path, env, *run_args(job))  # none given: the recorded ones; the phase is done
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["states"] == {"fetch": "completed"}
    assert (tmp_path / "seen.log").read_text() == "x\nx\n"


def test_a_pipeline_without_params_refuses_one_and_records_as_before(tmp_path: Path, env: dict[str, str]) -> None:
    job = manifest(tmp_path, params=None, run='echo "{}"')
    refused = cli(tmp_path, env, *run_args(job), "--param", "x=1")
    assert refused.returncode == 2
    assert "it declares no params" in json.loads(refused.stdout)["error"]
    done = cli(tmp_path, env, *run_args(job))
    assert done.returncode == 0
    read = json.loads(cli(tmp_path, env, "read", "--ticket-id", "T-1", "--run-id", "r1", "--phase", "fetch").stdout)
    assert "params" not in read["metadata"]
    status = json.loads(cli(tmp_path, env, "status", "--ticket-id", "T-1", "--run-id", "r1").stdout)
    assert "params" not in status


# -- Python ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_pipe_run_params_reach_ctx_params_and_a_shell_phase(tmp_path: Path, kind: str) -> None:
    store = str(tmp_path / "store") if kind == "files" else f"sqlite:///{tmp_path / 'ledger.db'}"
    pipe = phaselog.pipeline(
        pipeline_from_dict(
            {
                "name": "mixed",
                "version": "1",
                "params": PARAMS,
                "phases": [{"name": "py"}, {"name": "sh", "run": SHELL}],
            }
        )
    )
    seen: list[dict[str, Any]] = []

    @pipe.phase("py")
    def py(ctx: Any) -> dict[str, Any]:
        seen.append(dict(ctx.params))
        return {"n": ctx.params["limit"]}

    with pytest.raises(UsageError) as info:
        pipe.run("T-1", "r1", store=store, workdir=tmp_path, quiet=True, params={"limit": 2})
    assert info.value.context["field"] == "params.date"
    assert seen == []
    result = pipe.run("T-1", "r1", store=store, workdir=tmp_path, quiet=True, params={"date": "d", "limit": 2})
    assert result.done
    assert seen == [{"date": "d", "limit": 2, "dry_run": False}]
    assert json.loads((tmp_path / "params-seen.json").read_text()) == seen[0]
    assert (tmp_path / "seen.log").read_text() == "d 2\n"
    led = phaselog.open(store)
    try:
        assert led.status("T-1", "r1", pipeline=pipe.pipeline).to_json()["params"] == seen[0]
    finally:
        led.close()
    with pytest.raises(UsageError) as changed:
        pipe.run("T-1", "r1", store=store, workdir=tmp_path, quiet=True, params={"date": "e"})
    assert changed.value.context["differences"] == ['date: recorded "d", given "e"', "limit: recorded 2, given 100"]


# -- the model ------------------------------------------------------------------------------------
def test_coercion_follows_the_schema() -> None:
    schema = {
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "b": {"type": "boolean"},
            "s": {"type": "string"},
            "tags": {"type": "array"},
            "any": {},
            "maybe": {"type": ["integer", "string"]},
        }
    }
    assert coerce(schema, "n", "3") == 3
    assert coerce(schema, "n", "3.0") == 3
    assert coerce(schema, "x", "2.5") == 2.5
    assert coerce(schema, "b", "true") is True
    assert coerce(schema, "b", "no") is False
    assert coerce(schema, "s", "007") == "007"  # a string stays text
    assert coerce(schema, "tags", '["a"]') == ["a"]
    assert coerce(schema, "any", "5") == 5
    assert coerce(schema, "any", "five") == "five"
    assert coerce(schema, "maybe", "5") == 5
    assert coerce(schema, "maybe", "five") == "five"
    for name, text in (("n", "3.5"), ("n", "true"), ("b", "maybe"), ("tags", "{}")):
        with pytest.raises(UsageError) as info:
            coerce(schema, name, text)
        assert info.value.context["field"] == f"params.{name}"


def test_resolve_applies_defaults_and_differences_name_each_change() -> None:
    pl = pipeline_from_dict({"name": "p", "version": "1", "params": PARAMS, "phases": [{"name": "a"}]})
    assert resolve(pl.params, {"date": "d"}) == {"date": "d", "limit": 100, "dry_run": False}
    assert resolve(None, None) is None
    assert differences({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4}) == [
        "b: recorded 2, given 3",
        "c: not recorded, given 4",
    ]
    assert differences({"a": 1}, {"a": True}) == ["a: recorded 1, given true"]  # JSON types, not Python equality


def test_a_manifest_without_params_keeps_its_hash_and_records_keep_their_bytes() -> None:
    pl = builtin("ticket-pipeline")
    assert pl.params is None
    doc = {"name": pl.name, "version": pl.version, "phases": [{"name": "a"}]}
    plain, with_params = pipeline_from_dict(doc), pipeline_from_dict({**doc, "params": PARAMS})
    assert plain.manifest_hash != with_params.manifest_hash
    assert pipeline_from_dict({**doc, "params": None}).manifest_hash == plain.manifest_hash
    from datetime import UTC, datetime

    cp = Checkpoint("T-1", "00000000-0000-4000-8000-000000000000", "a", 1, 1, datetime(2026, 1, 1, tzinfo=UTC))
    assert "params" not in cp.meta_dict()
    with_p = cp.evolve(params={"date": "d"})
    assert with_p.meta_dict()["params"] == {"date": "d"}
    assert with_p.content_hash != cp.content_hash  # hashed with the record


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ([1], "params"),
        ({"type": "string"}, "params.type"),
        ({"properties": {"Bad-Name": {}}}, "params.properties.Bad-Name"),
        ({"properties": {"a": {}}, "required": ["b"]}, "params.required"),
    ],
)
def test_a_bad_params_declaration_is_a_manifest_error_naming_it(params: Any, field: str) -> None:
    from phaselog.model.errors import PipelineError

    with pytest.raises(PipelineError) as info:
        pipeline_from_dict({"name": "p", "version": "1", "params": params, "phases": [{"name": "a"}]})
    assert info.value.context["field"] == field


# -- the views ------------------------------------------------------------------------------------
def test_explain_runs_and_the_dashboard_show_the_params(tmp_path: Path, env: dict[str, str]) -> None:
    from ui_data import Http, Server

    job = manifest(tmp_path)
    done = cli(tmp_path, env, *run_args(job), "--param", "date=2026-11-30", "--param", "limit=3")
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    want = {"date": "2026-11-30", "limit": 3, "dry_run": False}
    explained = cli(tmp_path, env, "explain", "--ticket-id", "T-1", "--run-id", "r1")
    assert json.loads(explained.stdout)["params"] == want
    runs = cli(tmp_path, env, "runs", "--ticket-id", "T-1")
    assert json.loads(runs.stdout)["runs"][0]["params"] == want
    table = cli(tmp_path, env, "runs", "--ticket-id", "T-1", "--format", "table")
    assert "date=2026-11-30 dry_run=false limit=3" in table.stdout
    srv = Server(str(tmp_path / "store"))
    try:
        status, _, body = Http(srv.base).get(f"/tickets/T-1/runs/{run_id}")
        assert status == 200
        assert '<table class="list" id="params">' in body
        assert '<td class="mono">limit</td><td class="mono">3</td>' in body
        assert "&#34;2026-11-30&#34;" in body or "&quot;2026-11-30&quot;" in body or '"2026-11-30"' in body
    finally:
        srv.stop()


def test_a_fork_keeps_the_run_s_params_and_a_record_copy_detaches_them(tmp_path: Path) -> None:
    from phaselog.model.records import detached_copy

    store = str(tmp_path / "store")
    pl = pipeline_from_dict({"name": "two", "version": "1", "params": PARAMS, "phases": [{"name": "a"}, {"name": "b"}]})
    pipe = phaselog.pipeline(pl)
    pipe.phase("a")(lambda ctx: {"x": 1})
    pipe.phase("b")(lambda ctx: {"y": 2})
    assert pipe.run("T-1", "r1", store=store, workdir=tmp_path, quiet=True, params={"date": "d"}).done
    led = phaselog.open(store)
    try:
        led.fork("T-1", "r1", through="a", new_run_id="r2")
        want = {"date": "d", "limit": 100, "dry_run": False}
        assert led.status("T-1", "r2").to_json()["params"] == want
        stored = led.read("T-1", "r2", "a").record
        copy = detached_copy(stored)
        assert copy.params == want
        assert copy.params is not stored.params
        assert copy.content_hash == stored.content_hash
    finally:
        led.close()
    resumed = pipe.run("T-1", "r2", store=store, workdir=tmp_path, quiet=True)  # none given: the fork's
    assert resumed.done


def _json_values() -> Any:
    from hypothesis import strategies as st

    scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
    return st.recursive(
        scalars,
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
        max_leaves=8,
    )


def test_params_survive_both_decoding_paths_with_the_content_hash() -> None:
    from datetime import UTC, datetime
    from types import MappingProxyType

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from phaselog.model.decoding import checkpoint_from_seed

    names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)

    @settings(max_examples=150, deadline=None)
    @given(st.dictionaries(names, _json_values(), max_size=5))
    def check(params: dict[str, Any]) -> None:
        cp = Checkpoint(
            "T-1",
            "00000000-0000-4000-8000-000000000000",
            "a",
            1,
            1,
            datetime(2026, 1, 1, tzinfo=UTC),
            phase_payload={"phase": "a"},
            params=params,
        )
        seed, meta = json.loads(json.dumps(cp.seed_dict())), json.loads(json.dumps(cp.meta_dict()))
        fast, _ = checkpoint_from_seed(seed, phase_ordinal=1, meta=meta)
        slow, _ = checkpoint_from_seed(MappingProxyType(seed), phase_ordinal=1, meta=meta)
        assert fast.params == slow.params == params
        assert fast.content_hash == slow.content_hash == cp.content_hash

    check()


@pytest.mark.parametrize("n", [0, 1, -7, 2**40])
def test_an_integer_param_reads_back_as_the_integer(n: int) -> None:
    assert coerce({"properties": {"n": {"type": "integer"}}}, "n", str(n)) == n


def test_the_pipeline_view_shows_the_params_schema_only_when_declared() -> None:
    from phaselog.views.results import pipeline as pipeline_view

    doc = {"name": "p", "version": "1", "phases": [{"name": "a"}]}
    assert "params" not in pipeline_view(pipeline_from_dict(doc))
    shown = pipeline_view(pipeline_from_dict({**doc, "params": PARAMS}))
    assert shown["params"]["required"] == ["date"]
    assert shown["params"]["additionalProperties"] is False  # implied: unknown names are refused


def test_a_runner_that_waited_for_the_lease_checks_the_params_again(tmp_path: Path, env: dict[str, str]) -> None:
    import time

    job = manifest(
        tmp_path,
        run='echo "$PHASELOG_PARAM_DATE" >> seen.log; touch started; while [ ! -e go ]; do sleep 0.05; done; echo "{}"',
    )
    first = subprocess.Popen(
        [str(BIN), *run_args(job), "--param", "date=a"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        for _ in range(1200):  # the first runner holds the lease and its phase runs
            if (tmp_path / "started").exists():
                break
            time.sleep(0.05)
        assert (tmp_path / "started").exists()
        second = subprocess.Popen(
            [str(BIN), *run_args(job), "--param", "date=b", "--wait"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        (tmp_path / "go").touch()
        out, _ = second.communicate(timeout=120)
        assert second.returncode == 2, out
        assert json.loads(out)["rule"] == "params_changed"
    finally:
        (tmp_path / "go").touch()
        first.communicate(timeout=120)
    assert first.returncode == 0
    assert (tmp_path / "seen.log").read_text() == "a\n"  # the second runner ran nothing
