"""Bad configuration files: a clear error naming the key, exit 2, before anything is delivered (issue 23)."""

from __future__ import annotations

import hmac
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
from notify_support import GATED, receiver
from phaselog.model.errors import UsageError
from phaselog.notify import Deliverer, parse_config
from phaselog.notify.transports import body_of, event_env, sign

OK_HOOK = {"url": "https://hooks.example.org/x", "secret_env": "HOOK_SECRET"}
ENV = {"HOOK_SECRET": "k"}


def _rules(*rules: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {**top, "rules": list(rules)}


BAD = [
    pytest.param(
        _rules({"events": ["run.completed"], "webhook": OK_HOOK}, colour="red"), "colour", "unknown_key", id="top-key"
    ),
    pytest.param(
        _rules({"events": ["run.completed"], "webhook": OK_HOOK, "pipeline": ["x"]}),
        "rules[0].pipeline",
        "unknown_key",
        id="rule-key",
    ),
    pytest.param(
        _rules({"events": ["run.completed"], "webhook": {**OK_HOOK, "retries": 3}}),
        "rules[0].webhook.retries",
        "unknown_key",
        id="webhook-key",
    ),
    pytest.param(
        _rules({"events": ["phase.awaited"], "webhook": OK_HOOK}), "rules[0].events", "event_type", id="event-type"
    ),
    pytest.param(
        _rules({"events": ["run.completed"], "webhook": {**OK_HOOK, "secret_env": "NOT_SET_ANYWHERE"}}),
        "rules[0].webhook.secret_env",
        "secret_missing",
        id="secret-missing",
    ),
    pytest.param(
        _rules({"events": ["run.completed"], "webhook": {**OK_HOOK, "url": "ftp://x.example.org/"}}),
        "rules[0].webhook.url",
        "url",
        id="url-ftp",
    ),
    pytest.param(
        _rules({"events": ["run.completed"], "webhook": {**OK_HOOK, "url": "file:///etc/passwd"}}),
        "rules[0].webhook.url",
        "url",
        id="url-file",
    ),
    pytest.param(
        _rules({"events": ["run.completed"], "webhook": {**OK_HOOK, "template": {"text": "{ticket_id.__class__}"}}}),
        "rules[0].webhook.template.text",
        "template_field",
        id="template-attribute",
    ),
    pytest.param(_rules({"events": ["run.completed"]}), "rules[0]", "destination", id="no-destination"),
    pytest.param(
        _rules({"events": ["run.completed"], "command": "x", "webhook": OK_HOOK}), "rules[0]", "destination", id="two"
    ),
    pytest.param(
        _rules({"events": ["run.completed"], "command": {"run": "x", "max_attempts": 0}}),
        "rules[0].command.max_attempts",
        "range",
        id="max-attempts",
    ),
    pytest.param(
        _rules({"events": ["run.completed"], "command": {"run": "x", "timeout": "soon"}}),
        "rules[0].command.timeout",
        "duration",
        id="duration",
    ),
    pytest.param(
        _rules(
            {"events": ["run.completed"], "command": "a"}, {"events": ["run.dead"], "command": "b", "name": "rule1"}
        ),
        "rules[1].name",
        "unique",
        id="same-name",
    ),
    pytest.param({"rules": []}, "rules", "required", id="no-rules"),
]


@pytest.mark.parametrize(("doc", "key", "rule"), BAD)
def test_a_bad_config_names_the_key_and_the_rule(doc: dict[str, Any], key: str, rule: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_config(doc, name="t", env=ENV)
    assert (caught.value.context["field"], caught.value.context["rule"]) == (key, rule)
    assert caught.value.message.startswith(f"{key}:")


def test_the_cli_refuses_a_bad_config_with_exit_2_before_delivering_anything(tmp_path: Path) -> None:
    led = phaselog.open(str(tmp_path / "store"))
    led.write("T-1", "r1", "draft", {}, pipeline=phaselog.pipeline_from_dict(GATED))
    with receiver() as rec:
        cfg = tmp_path / "hooks.yaml"
        good = {"events": ["checkpoint.written"], "webhook": {"url": rec.url}}
        bad = {"events": ["checkpoint.written"], "webhook": {"url": rec.url, "secret_env": "PHASELOG_NOT_SET"}}
        cfg.write_text(yaml.safe_dump({"rules": [good, bad]}))
        env = {k: v for k, v in os.environ.items() if k != "PHASELOG_NOT_SET"}
        env["PYTHONPATH"] = str(Path(phaselog.__file__).resolve().parent.parent)
        proc = subprocess.run(  # our own CLI
            [sys.executable, "-m", "phaselog", "notify", "--config", str(cfg), "--root", str(tmp_path / "store")],
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert rec.got == []  # the good rule delivered nothing either
    assert proc.returncode == 2, proc.stderr
    err = json.loads(proc.stdout or proc.stderr)
    assert err["field"] == "rules[1].webhook.secret_env"
    assert "PHASELOG_NOT_SET is not set" in err["error"]
    assert "Traceback" not in proc.stderr.decode()


def test_a_template_builds_a_chat_payload_and_the_signature_covers_its_bytes() -> None:
    cfg = parse_config(
        _rules(
            {
                "events": ["phase.awaiting_approval"],
                "webhook": {**OK_HOOK, "template": {"text": "{ticket_id}: {phase} waits ({data_status}) <{url}>"}},
            }
        ),
        name="t",
        env=ENV,
    )
    event = {"event_id": "e1", "type": "phase.awaiting_approval", "ticket_id": "T-1", "phase": "publish"}
    event |= {"url": None, "data": {"status": "completed"}}
    target = cfg.rules[0].target
    body = body_of(target, event)  # type: ignore[arg-type]  # a webhook rule
    assert json.loads(body) == {"text": "T-1: publish waits (completed) <>"}
    assert sign(b"k", body) == "sha256=" + hmac.new(b"k", body, "sha256").hexdigest()
    assert event_env(event)["PHASELOG_EVENT_TICKET_ID"] == "T-1"
    assert json.loads(event_env(event)["PHASELOG_EVENT_DATA"]) == {"status": "completed"}


def test_a_command_gets_the_event_on_stdin_and_in_its_environment(tmp_path: Path) -> None:
    led = phaselog.open(str(tmp_path / "store"))
    led.write("T-1", "r1", "draft", {}, pipeline=phaselog.pipeline_from_dict(GATED))
    out = tmp_path / "got.txt"
    cmd = f'cat > {out}.json; echo "$PHASELOG_EVENT_TYPE $PHASELOG_EVENT_TICKET_ID $PHASELOG_EVENT_PHASE" > {out}'
    cfg = parse_config(_rules({"events": ["checkpoint.written"], "command": cmd}, poll="20ms"), name="c", env=ENV)
    Deliverer(led, cfg).run(threading.Event(), idle_exit=True)
    assert out.read_text().split() == ["checkpoint.written", "T-1", "draft"]
    assert json.loads(Path(f"{out}.json").read_text())["event_id"].startswith("checkpoint.written:")
