"""`phaselog notify` against a real HTTP receiver on 127.0.0.1 and real stores (issue 23)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

import phaselog
from notify_support import GATED, SECRET, receiver
from phaselog.notify import Deliverer, load_config, status


def _config(tmp_path: Path, rules: list[dict[str, Any]], **top: Any) -> Path:
    path = tmp_path / "hooks.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "poll": "50ms", **top, "rules": rules}))
    return path


def _deliver(led: phaselog.Ledger, cfg: Path, monkeypatch: pytest.MonkeyPatch) -> Deliverer:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    d = Deliverer(led, load_config(cfg), seed=1)
    d.run(threading.Event(), idle_exit=True)
    return d


@pytest.mark.all_stores
def test_a_gated_checkpoint_gives_exactly_one_signed_awaiting_approval(
    store: phaselog.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = phaselog.Ledger(store)
    pl = phaselog.pipeline_from_dict(GATED)
    led.write("T-1", "r1", "draft", {}, pipeline=pl)
    led.write("T-1", "r1", "publish", {}, pipeline=pl)
    with receiver() as rec:
        hook = {"url": rec.url, "secret_env": "HOOK_SECRET"}
        cfg = _config(tmp_path, [{"events": ["phase.awaiting_approval"], "webhook": hook}])
        _deliver(led, cfg, monkeypatch)
        _deliver(led, cfg, monkeypatch)  # a second deliverer on the same config resumes: nothing again
        got = rec.delivered()
    assert [(g["body"]["type"], g["body"]["phase"], g["signed"]) for g in got] == [
        ("phase.awaiting_approval", "publish", True)
    ]
    assert got[0]["body"]["ticket_id"] == "T-1"
    assert got[0]["body"]["event_id"].startswith("phase.awaiting_approval:")


def test_500_three_times_then_200_delivers_the_same_event_after_backoff(
    store: phaselog.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = phaselog.Ledger(store)
    pl = phaselog.pipeline_from_dict(GATED)
    led.write("T-1", "r1", "draft", {}, pipeline=pl)
    with receiver(script=[500, 500, 500]) as rec:
        hook = {"url": rec.url, "secret_env": "HOOK_SECRET", "backoff": "20ms", "max_attempts": 5}
        d = _deliver(led, _config(tmp_path, [{"events": ["checkpoint.written"], "webhook": hook}]), monkeypatch)
        got = list(rec.got)
    assert [g["status"] for g in got] == [500, 500, 500, 200]
    assert len({g["body"]["event_id"] for g in got}) == 1
    assert (d.stats.delivered, d.stats.failed_attempts, d.stats.dead_letters) == (1, 3, 0)


def test_a_receiver_down_for_good_leaves_a_dead_letter_and_blocks_nothing_else(
    store: phaselog.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = phaselog.Ledger(store)
    pl = phaselog.pipeline_from_dict(GATED)
    led.write("T-1", "r1", "draft", {}, pipeline=pl)
    led.write("T-2", "r2", "draft", {}, pipeline=pl)
    with receiver(always=503) as down, receiver() as up:
        rules = [
            {
                "name": "down",
                "events": ["checkpoint.written"],
                "tickets": ["T-1"],
                "webhook": {"url": down.url, "backoff": "10ms", "max_attempts": 3},
            },
            {"name": "up", "events": ["checkpoint.written"], "webhook": {"url": up.url}},
        ]
        cfg = _config(tmp_path, rules)
        d = _deliver(led, cfg, monkeypatch)
        assert sorted(g["body"]["ticket_id"] for g in up.delivered()) == ["T-1", "T-2"]
        assert [g["status"] for g in down.got] == [503, 503, 503]
    view = status(led, load_config(cfg))
    [dead] = view["dead_letters"]
    assert (dead["rule"], dead["attempts"], dead["event"]["ticket_id"]) == ("down", 3, "T-1")
    assert "503" in dead["error"]
    assert d.stats.dead_letters == 1
    assert view["lease"] is None  # released at exit


def test_a_run_in_retries_blocks_only_its_own_later_events(
    store: phaselog.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = phaselog.Ledger(store)
    pl = phaselog.pipeline_from_dict(GATED)
    for t in ("T-1", "T-2"):
        led.write(t, "r1", "draft", {}, pipeline=pl)
        led.write(t, "r1", "publish", {}, pipeline=pl)
    with receiver(down_for=frozenset({"T-1"})) as rec:
        hook = {"url": rec.url, "backoff": "30ms", "max_attempts": 3}
        _deliver(led, _config(tmp_path, [{"events": ["checkpoint.written"], "webhook": hook}]), monkeypatch)
        got = [(g["body"]["ticket_id"], g["body"]["phase"], g["status"]) for g in rec.got]
    # T-2 is delivered whole while T-1's first event is still being retried; T-1's second event
    # goes out only once its first is dead-lettered (order within a run), and dies too.
    assert [x for x in got if x[0] == "T-2"] == [("T-2", "draft", 200), ("T-2", "publish", 200)]
    assert [x for x in got if x[0] == "T-1"] == [("T-1", "draft", 503)] * 3 + [("T-1", "publish", 503)] * 3
    assert got.index(("T-2", "publish", 200)) < got.index(("T-1", "publish", 503))
    assert [d["event"]["phase"] for d in status(led, load_config(tmp_path / "hooks.yaml"))["dead_letters"]] == [
        "draft",
        "publish",
    ]


def test_a_manifest_names_its_own_hooks_per_run_and_per_phase(
    store: phaselog.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = phaselog.Ledger(store)
    with receiver() as rec, receiver() as other:
        manifest = {
            "name": "hooked",
            "version": "1",
            "notify": [{"name": "done", "events": ["run.completed"], "webhook": {"url": rec.url}}],
            "phases": [
                {"name": "draft", "notify": [{"events": ["checkpoint.written"], "webhook": {"url": rec.url}}]},
                {"name": "final"},
            ],
        }
        pl = phaselog.pipeline_from_dict(manifest)
        led.write("T-1", "r1", "draft", {}, pipeline=pl)
        led.write("T-1", "r1", "final", {}, pipeline=pl)
        led.write("T-2", "r1", "draft", {}, pipeline=phaselog.pipeline_from_dict(GATED))  # no hooks
        cfg = _config(tmp_path, [{"events": ["run.completed"], "webhook": {"url": other.url}}])
        _deliver(led, cfg, monkeypatch)
        got = sorted((g["body"]["type"], g["body"]["ticket_id"], g["body"]["phase"]) for g in rec.delivered())
        merged = [(g["body"]["type"], g["body"]["ticket_id"]) for g in other.delivered()]
    # the phase hook: only draft's checkpoint; the run hook: the completion; the config's rule as well
    assert got == [("checkpoint.written", "T-1", "draft"), ("run.completed", "T-1", "final")]
    assert merged == [("run.completed", "T-1")]
    names = {r["rule"] for r in status(led, load_config(cfg))["rules"]}
    assert {"hooked.run.done", "hooked.draft.1", "rule1"} <= names


def test_a_manifest_hook_is_checked_when_the_manifest_is_loaded() -> None:
    base = {"name": "p", "version": "1", "phases": [{"name": "a"}]}
    with pytest.raises(phaselog.PipelineError) as caught:
        phaselog.pipeline_from_dict({**base, "notify": [{"events": ["phase.awaited"], "command": "true"}]})
    assert (caught.value.context["field"], caught.value.context["rule"]) == ("notify[0].events", "event_type")
    with pytest.raises(phaselog.PipelineError) as caught:
        phaselog.pipeline_from_dict({**base, "phases": [{"name": "a", "notify": [{"events": ["run.dead"]}]}]})
    assert caught.value.context["field"] == "phases[0].notify[0]"
    plain = phaselog.pipeline_from_dict(base)
    assert plain.manifest_hash == phaselog.pipeline_from_dict({**base, "notify": []}).manifest_hash


def test_the_cli_delivers_in_burst_and_status_shows_the_dead_letter(tmp_path: Path) -> None:
    led = phaselog.open(str(tmp_path / "store"))
    led.write("T-1", "r1", "draft", {}, pipeline=phaselog.pipeline_from_dict(GATED))
    env = {**os.environ, "PYTHONPATH": str(Path(phaselog.__file__).resolve().parent.parent), "HOOK_SECRET": SECRET}
    with receiver(always=500) as rec:
        hook = {"url": rec.url, "secret_env": "HOOK_SECRET", "backoff": "10ms", "max_attempts": 2}
        cfg = _config(tmp_path, [{"name": "ops", "events": ["checkpoint.written"], "webhook": hook}])
        base = [sys.executable, "-m", "phaselog", "notify"]
        root = ["--root", str(tmp_path / "store")]
        run = subprocess.run(
            [*base, "--config", str(cfg), *root, "--burst", "--quiet"],
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert [g["signed"] for g in rec.got] == [True, True]
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["dead_letters"] == 1
    shown = subprocess.run(
        [*base, "status", "--config", str(cfg), *root], capture_output=True, env=env, timeout=60, check=False
    )
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert [(d["rule"], d["attempts"]) for d in view["dead_letters"]] == [("ops", 2)]
    assert "HTTP 500" in view["dead_letters"][0]["error"]
    assert view["lease"] is None
    assert view["rules"] == [{"rule": "ops", "cursor": view["rules"][0]["cursor"], "after_cursor": 0, "started": True}]
    table = subprocess.run(
        [*base, "status", "--config", str(cfg), *root, "--format", "table"],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
        text=True,
    )
    assert table.returncode == 0, table.stderr
    assert "ops" in table.stdout  # the dead letter, readable
    assert "HTTP 500" in table.stdout
    assert not table.stdout.lstrip().startswith("{")
