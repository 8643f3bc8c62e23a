"""A manifest evolved between runs (D13, D114): it fits the run's records, or it is refused before
anything runs; honest history never turns into apparent damage."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phaselog
from helpers import cli_env, run_cli
from phaselog.ledger.facade import Ledger
from phaselog.model.errors import PipelineMismatch
from phaselog.model.ids import normalize_run_id
from phaselog.stores.files.store import FilesStore
from phaselog.stores.sql.sqlite import SqliteStore


def manifest(path: Path, *names: str, version: str = "1") -> Path:
    phases = [{"name": n, "run": f"echo {n} >> calls.txt; echo '{{\"n\": 1}}'"} for n in names]
    path.write_text(json.dumps({"name": "evo", "version": version, "phases": phases}))
    return path


def cli(tmp_path: Path, kind: str, *args: str) -> Any:
    env = cli_env(tmp_path / "store")
    if kind == "sqlite":
        env["PHASELOG_STORE"] = f"sqlite:///{tmp_path / 'ledger.db'}"
    return run_cli(None, *args, env=env)


def calls(work: Path) -> list[str]:
    f = work / "calls.txt"
    return f.read_text().split() if f.exists() else []


@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_a_phase_inserted_before_a_recorded_one_is_refused_before_anything_runs(tmp_path: Path, kind: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    v1 = manifest(tmp_path / "v1.json", "a", "b")
    v2 = manifest(tmp_path / "v2.json", "a", "x", "b", version="2")
    run = ("run", "--ticket-id", "T-1", "--run-id", "r1", "--workdir", str(work), "--quiet")
    assert cli(tmp_path, kind, *run, "--pipeline-file", str(v1)).rc == 0
    assert calls(work) == ["a", "b"]
    for _ in range(2):  # and every rerun says the same: nothing runs unrecorded
        res = cli(tmp_path, kind, *run, "--pipeline-file", str(v2))
        assert res.rc != 0
        err = res.json
        assert (err["error_code"], err["rule"]) == ("pipeline_mismatch", "phase_layout")
        assert "phase 'b' moved from position 2 to 3" in err["error"]
        assert "add new phases after position 2" in err["error"]
        assert calls(work) == ["a", "b"]  # x never ran
    status = cli(tmp_path, kind, "status", "--ticket-id", "T-1", "--run-id", "r1", "--pipeline-file", str(v2))
    assert status.json["rule"] == "phase_layout"  # every surface decides the same
    verify = cli(tmp_path, kind, "verify", "--ticket-id", "T-1")
    assert verify.rc == 0, verify.out
    assert verify.json["ok"], verify.out
    # Added after the recorded phases, the same new phase is run once, recorded, and skipped after.
    v3 = manifest(tmp_path / "v3.json", "a", "b", "x", version="3")
    for _ in range(2):
        res = cli(tmp_path, kind, *run, "--pipeline-file", str(v3))
        assert res.rc == 0, res.out
        assert res.json["states"] == {"a": "completed", "b": "completed", "x": "completed"}
    assert calls(work) == ["a", "b", "x"]
    assert cli(tmp_path, kind, "verify", "--ticket-id", "T-1").json["ok"]


@pytest.mark.parametrize(
    ("names", "said"),
    [
        (("b", "a"), "phase 'a' moved from position 1 to 2"),
        (("a", "c"), "phase 'b' at position 2 is gone (position 2 is now 'c')"),
        (("a",), "phase 'b' at position 2 is gone (the manifest has 1 phases)"),
        (("b",), "phase 'a' at position 1 is gone (position 1 is now 'b'); phase 'b' moved from position 2 to 1"),
    ],
)
def test_reordered_renamed_or_removed_phases_are_refused_and_verify_stays_clean(
    ledger: Ledger, tmp_path: Path, names: tuple[str, ...], said: str
) -> None:
    ran: list[str] = []

    def build(*phases: str) -> Any:
        pipe = phaselog.pipeline("evo", phases=list(phases))
        for n in phases:
            pipe.phase(n)(lambda ctx, n=n: ran.append(n) or {"n": 1})
        return pipe

    build("a", "b").run("T-2", "r", store=ledger, workdir=tmp_path)
    assert ran == ["a", "b"]
    with pytest.raises(PipelineMismatch) as exc:
        build(*names).run("T-2", "r", store=ledger, workdir=tmp_path)
    assert exc.value.context["rule"] == "phase_layout"
    assert said in exc.value.message
    assert ran == ["a", "b"]
    with pytest.raises(PipelineMismatch):  # a write by hand is refused by the same decision
        ledger.write("T-2", "r", names[0], {"n": 1}, pipeline=build(*names).pipeline)
    rep = ledger.verify("T-2")
    assert rep.ok, rep.problems


# -- the property ----------------------------------------------------------------------------------
POOL = ["a", "b", "c", "d", "e", "f"]
OPS = st.tuples(st.sampled_from(["insert", "remove", "swap", "rename", "append"]), st.integers(0, 5), st.integers(0, 5))


def evolve(names: list[str], op: tuple[str, int, int]) -> list[str]:
    kind, i, j = op
    out = list(names)
    fresh = [n for n in POOL if n not in out]
    if kind in ("insert", "append", "rename") and not fresh:
        return out
    if kind == "insert":
        out.insert(i % (len(out) + 1), fresh[j % len(fresh)])
    elif kind == "append":
        out.append(fresh[j % len(fresh)])
    elif kind == "remove" and len(out) > 1:
        del out[i % len(out)]
    elif kind == "swap":
        a, b = i % len(out), j % len(out)
        out[a], out[b] = out[b], out[a]
    elif kind == "rename":
        out[i % len(out)] = fresh[j % len(fresh)]
    return out


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["files", "sqlite"]), ops=st.lists(OPS, min_size=1, max_size=4))
def test_evolving_a_manifest_never_runs_unrecorded_work_nor_damages_history(
    kind: str, ops: list[tuple[str, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        store = FilesStore(base / "store") if kind == "files" else SqliteStore(base / "ledger.db")
        ledger = phaselog.Ledger(store)
        try:
            names = ["a", "b"]
            layout: dict[int, str] = {}  # what the run's records say: position -> phase name
            for step in range(len(ops) + 1):
                if step:
                    names = evolve(names, ops[step - 1])
                ran: list[str] = []
                pipe = phaselog.pipeline("evo", phases=list(names))
                for n in names:
                    pipe.phase(n)(lambda ctx, n=n, ran=ran: ran.append(n) or {"n": 1})
                before = len(store.attempts("T-P", normalize_run_id("r")))
                fits = all(i <= len(names) and names[i - 1] == n for i, n in layout.items())
                if not fits:
                    with pytest.raises(PipelineMismatch) as refused:
                        pipe.run("T-P", "r", store=ledger, workdir=base, quiet=True)
                    assert refused.value.context["rule"] == "phase_layout"
                    assert ran == []  # refused before anything ran
                else:  # it fits: it runs (a refusal fails the test)
                    assert pipe.run("T-P", "r", store=ledger, workdir=base, quiet=True).done
                    for i, n in enumerate(names, start=1):
                        layout[i] = n
                # everything that ran is recorded, and nothing ran twice
                refs = store.attempts("T-P", normalize_run_id("r"))
                assert len(refs) - before == len(ran)
                assert len(set(ran)) == len(ran)
                assert {(r.phase_ordinal, r.phase) for r in refs} <= set(layout.items())
                rep = ledger.verify("T-P")
                assert rep.ok, (names, layout, rep.problems)
        finally:
            store.close()
