"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) against PhaselogSaver.

All eight capabilities (the five base ones and delete_for_runs, copy_thread, prune), every one of
the suite's tests, on every store. The suite is an async runner, not a pytest plugin: this test
drives it and fails naming each failed capability and test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from phaselog.integrations.langgraph import PhaselogSaver

pytestmark = pytest.mark.all_stores

#: The suite's size in the pinned version (0.0.2): a new version with more tests must be looked at.
EXPECTED_TESTS = 81


def _url(backend: str, tmp_path: Path, request: pytest.FixtureRequest, n: int) -> str:
    if backend == "files":
        return str(tmp_path / f"store-{n}")
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / f'ledger-{n}.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


def test_all_eight_capabilities_pass(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    made: list[PhaselogSaver] = []

    @checkpointer_test(name=f"PhaselogSaver[{backend}]")
    async def saver() -> AsyncIterator[PhaselogSaver]:
        s = PhaselogSaver(_url(backend, tmp_path, request, len(made)))
        made.append(s)
        try:
            yield s
        finally:
            s.close()

    report = asyncio.run(validate(saver))
    results = report.results
    problems = [
        f"{cap}: {'not detected' if not r.detected else ''}{'; '.join(r.failures)}"
        for cap, r in sorted(results.items())
        if not (r.detected and r.passed)
    ]
    assert not problems, "conformance failures:\n" + "\n".join(problems)
    assert {c.value for c in ALL_CAPABILITIES} == set(results)
    assert sum(r.tests_passed for r in results.values()) == EXPECTED_TESTS
    assert report.conformance_level() == "FULL"
    assert len(made) == len(ALL_CAPABILITIES)  # a fresh saver per capability, as the suite intends
