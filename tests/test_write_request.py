"""``WriteRequest``: ``Writes.write``'s arguments as one typed value, the one path a write takes.

``Ledger.write`` keeps its keyword signature (tests/test_ledger_facade.py); it builds a request and
hands it to ``Writes.write_request``, as ``fork`` does with the checkpoints it copies.
"""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime
from pathlib import Path

import phaselog
from phaselog.ledger.writes import WriteRequest, Writes

T, R = "PROJ-7", "r1"
IMPLEMENT = {"branch_name": "feat/x", "commit_sha": "a1b2c3d", "files_changed": ["src/x.py"]}


def test_the_request_carries_every_argument_of_write_and_only_those_of_a_copy_besides() -> None:
    params = {n for n in inspect.signature(Writes.write).parameters if n != "self"}
    fields = {f.name for f in dataclasses.fields(WriteRequest)}
    assert params - fields == {"artifacts_root"}  # hashed into artifact_hashes before the request is built
    assert fields - params == {"forked_from", "artifact_hashes"}
    defaults = {f.name: f.default for f in dataclasses.fields(WriteRequest)}
    for name, p in inspect.signature(Writes.write).parameters.items():
        if name in defaults and p.default is not inspect.Parameter.empty:
            assert defaults[name] == p.default, name


def test_write_and_write_request_make_the_same_record(tmp_path: Path) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    (tmp_path / "a.txt").write_text("hello", "utf-8")
    one = phaselog.Ledger(phaselog.open_store(f"file://{tmp_path / 'one'}"), clock=lambda: when)
    two = phaselog.Ledger(phaselog.open_store(f"file://{tmp_path / 'two'}"), clock=lambda: when)
    kw = {"repo_commit_map": {"app": "a1b2c3d"}, "artifact_paths": ["a.txt"], "decisions": []}
    written = one.write(T, R, "implement", IMPLEMENT, artifacts_root=tmp_path, **kw)
    hashes = written.record.artifact_hashes
    assert hashes is not None
    assert set(hashes) == {"a.txt"}
    again = two.writes.write_request(WriteRequest(T, R, "implement", IMPLEMENT, artifact_hashes=hashes, **kw))
    assert again.record.content_hash == written.record.content_hash
    failed = two.writes.write_request(WriteRequest(T, R, "local_review", None, status="failed", error="boom"))
    assert (failed.record.status, failed.record.error, failed.record.attempt_number) == ("failed", "boom", 1)
