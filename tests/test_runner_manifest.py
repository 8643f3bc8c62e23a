"""The manifest loader checks the runner's keys and names the key and the rule when one is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from phaselog.model.errors import PipelineError
from phaselog.model.execution import Execution
from phaselog.model.pipelines import manifest_dict, pipeline_from_dict


def doc(**phase: Any) -> dict[str, Any]:
    return {"name": "job", "version": "1", "phases": [{"name": "first"}, {"name": "second", **phase}]}


def test_runner_keys_are_read() -> None:
    pl = pipeline_from_dict(
        doc(
            run="make data",
            env={"MODE": "fast", "N": 3},
            timeout="1h30m",
            retries=2,
            backoff="linear",
            retry_delay="2s",
            artifacts=["out/*.csv"],
            fingerprint="code",
        )
    )
    ex = pl.phase("second").execution
    assert ex == Execution(
        run="make data",
        env={"MODE": "fast", "N": "3"},
        timeout=5400.0,
        retries=2,
        backoff="linear",
        retry_delay=2.0,
        artifacts=("out/*.csv",),
        fingerprint="code",
    )
    assert pl.phase("first").execution == Execution()
    again = pipeline_from_dict(manifest_dict(pl))
    assert again.phase("second").execution == ex
    assert again.manifest_hash == pl.manifest_hash


def test_manifests_without_runner_keys_keep_their_hash() -> None:
    plain = pipeline_from_dict(doc())
    assert "execution" not in str(manifest_dict(plain))
    with_run = pipeline_from_dict(doc(run="true"))
    assert with_run.manifest_hash != plain.manifest_hash


@pytest.mark.parametrize(
    ("phase", "field", "rule"),
    [
        ({"run": ""}, "phases[1].run", "type"),
        ({"run": ["make"]}, "phases[1].run", "type"),
        ({"env": ["A=1"]}, "phases[1].env", "type"),
        ({"env": {"1BAD": "x"}}, "phases[1].env", "env_name"),
        ({"env": {"A": None}}, "phases[1].env", "type"),
        ({"timeout": "soon"}, "phases[1].timeout", "duration"),
        ({"timeout": 0}, "phases[1].timeout", "duration"),
        ({"timeout": True}, "phases[1].timeout", "duration"),
        ({"retries": -1}, "phases[1].retries", "type"),
        ({"retries": "3"}, "phases[1].retries", "type"),
        ({"retries": 1000}, "phases[1].retries", "type"),
        ({"backoff": "random"}, "phases[1].backoff", "enum"),
        ({"retry_delay": "-"}, "phases[1].retry_delay", "duration"),
        ({"artifacts": [1]}, "phases[1].artifacts", "type"),
        ({"artifacts": ["../secret"]}, "phases[1].artifacts", "relative-path"),
        ({"artifacts": ["/etc/passwd"]}, "phases[1].artifacts", "relative-path"),
        ({"fingerprint": "data"}, "phases[1].fingerprint", "enum"),
        ({"retry": 3}, "phases[1].retry", "unknown_key"),
    ],
)
def test_bad_runner_keys_name_the_key_and_rule(phase: dict[str, Any], field: str, rule: str) -> None:
    with pytest.raises(PipelineError) as info:
        pipeline_from_dict(doc(**phase), source="job.yaml")
    assert info.value.context["field"] == field
    assert info.value.context["rule"] == rule
    assert field.rsplit(".", maxsplit=1)[-1] in info.value.message
    assert "job.yaml" in info.value.message


def test_decorator_options_are_checked_like_manifest_keys() -> None:
    import phaselog

    pipe = phaselog.pipeline("deco", phases=["a"])
    with pytest.raises(PipelineError, match="timeout"):
        pipe.phase("a", timeout="whenever")
    with pytest.raises(phaselog.UnknownPhase, match="valid phases: 1=a"):
        pipe.phase("b")
    pipe.phase("a", retries=2, timeout="1m")(lambda ctx: {})
    assert pipe.pipeline.phase("a").execution.retries == 2
    assert pipe.pipeline.phase("a").execution.timeout == 60.0
