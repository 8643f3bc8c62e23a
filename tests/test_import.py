"""Import on every store: each line is checked exactly as a write checks it, and linked to what is
stored, before anything is stored (issue 8: "import splices a foreign history", "import skips
write-time validation", bad import input, store failures reported as input errors)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import IMPLEMENT, LOCAL_REVIEW, REPO
from phaselog.ledger.facade import Ledger
from phaselog.ledger.retention import prune
from phaselog.model.errors import InvalidRecord
from phaselog.model.ids import normalize_run_id
from phaselog.stores import open_store
from phaselog.stores.base import Store
from phaselog.transfer.jsonl import export_records, import_records

pytestmark = pytest.mark.all_stores

T = "IMP-1"
R = "run-a"
RUN = normalize_run_id(R)


def impl(tag: str) -> dict[str, Any]:
    return {**IMPLEMENT, "files_changed": [f"src/{tag}.py"]}


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Store]:
    """A second store (files) to export from."""
    s = open_store(str(tmp_path / "source-store"))
    yield s
    s.close()


def lines_of(store: Store) -> list[dict[str, Any]]:
    return list(export_records(store, T))


def everything(store: Store) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for rid in store.runs(T):
        out += [("cp", s.location, s.record.content_hash) for s in store.iter_records(T, rid)]  # type: ignore[union-attr]
        for kind in ("progress", "approvals", "pruned"):
            out += [(kind, n) for n in store.entry_names(kind, T, rid)]
    out += [("markers", n) for n in store.entry_names("markers", T, None)]
    return out


def rehash(line: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint line with its hashes recomputed (a forger who knows the format: SHA-256 of the
    canonical JSON of both parts, docs/record-format.md)."""
    doc = line["document"]
    both = {"checkpoint": doc["checkpoint"], "phaselog": doc["phaselog"]}
    blob = json.dumps(both, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    doc["content_hash"] = line["content_hash"] = hashlib.sha256(blob).hexdigest()
    return line


def test_a_diverging_history_is_refused_with_everything_built_on_it(store: Store, source: Store) -> None:
    ours = Ledger(store)
    ours.write(T, R, "implement", impl("ours-1"))
    ours.write(T, R, "implement", impl("ours-2"))
    theirs = Ledger(source)
    for i in (1, 2, 3):
        theirs.write(T, R, "implement", impl(f"theirs-{i}"))
    theirs.write(T, R, "local_review", LOCAL_REVIEW)
    before = everything(store)
    rep = import_records(store, lines_of(source))
    assert rep.added == 0
    # Line 1 is the pipeline's manifest (it travels with the records); lines 2-5 the records.
    assert lines_of(source)[0]["type"] == "pipeline"
    assert [c["line"] for c in rep.conflicts] == ["line 2", "line 3", "line 4", "line 5"]
    assert "depends" in rep.conflicts[2]["message"]
    assert "refused" in rep.conflicts[3]["message"] or "basis" in rep.conflicts[3]["message"]
    assert everything(store) == before
    assert ours.read(T, R, "implement").record.phase_payload["files_changed"] == ["src/ours-2.py"]
    assert ours.verify(T).ok


def test_a_history_that_continues_ours_is_added(store: Store, source: Store) -> None:
    ours = Ledger(store)
    ours.write(T, R, "implement", impl("1"))
    lines = lines_of(store)
    import_records(source, lines)
    theirs = Ledger(source)
    theirs.write(T, R, "implement", impl("2"))
    theirs.write(T, R, "local_review", LOCAL_REVIEW)
    rep = import_records(store, lines_of(source))
    assert (rep.added, rep.skipped, rep.conflicts) == (2, 1, [])
    assert ours.verify(T).ok
    assert ours.can_skip_to(T, R, "create_pr").allowed


def _bad_lines(source: Store) -> dict[str, tuple[dict[str, Any], str]]:
    """name → (an export line made invalid and re-hashed, the field the error must name)."""
    led = Ledger(source)
    led.write(T, R, "implement", impl("1"))
    led.progress(T, R, "local_review", "start")
    base = lines_of(source)
    cp_line = next(x for x in base if x["type"] == "checkpoint")
    ev_line = next(x for x in base if x.get("kind") == "progress")
    out: dict[str, tuple[dict[str, Any], str]] = {}

    def mutate(name: str, fld: str, fn: Any) -> None:
        line = copy.deepcopy(cp_line)
        fn(line["document"]["checkpoint"], line["document"]["phaselog"])
        out[name] = (rehash(line), fld)

    mutate("bad_sha", "repo_commit_map", lambda c, m: c.__setitem__("repo_commit_map", {"app": "not-a-sha!"}))
    mutate("traversal", "artifact_paths", lambda c, m: c.__setitem__("artifact_paths", ["../../etc/passwd"]))
    mutate("absolute", "artifact_paths", lambda c, m: c.__setitem__("artifact_paths", ["/etc/passwd"]))
    mutate("schema", "phase_payload", lambda c, m: c["phase_payload"].__setitem__("commit_sha", 42))
    mutate(
        "unknown_phase",
        "phase",
        lambda c, m: (c.__setitem__("phase", "deploy"), c["phase_payload"].__setitem__("phase", "deploy")),
    )
    mutate("wrong_ordinal", "phase", lambda c, m: m.__setitem__("phase_ordinal", 3))
    mutate("absurd_attempt", "attempt_number", lambda c, m: c.__setitem__("attempt_number", 10**12))
    line = copy.deepcopy(ev_line)
    del line["ticket_id"]
    out["entry_without_ticket"] = (line, "ticket_id")
    line = copy.deepcopy(cp_line)
    line["ticket_id"] = "OTHER-1"
    out["line_disagrees"] = (line, "ticket_id")
    note = {
        "type": "entry",
        "kind": "pruned",
        "ticket_id": T,
        "run_id": RUN,
        "name": "000001",
        "content_hash": "0" * 64,
        "document": {"schema_version": "1.0.0", "kind": "phaselog.pruned", "removed": "everything"},
    }
    out["malformed_note"] = (note, "removed")
    return out


@pytest.mark.parametrize(
    "case",
    [
        "bad_sha",
        "traversal",
        "absolute",
        "schema",
        "unknown_phase",
        "wrong_ordinal",
        "absurd_attempt",
        "entry_without_ticket",
        "line_disagrees",
        "malformed_note",
    ],
)
def test_import_refuses_what_write_refuses_before_storing_anything(store: Store, source: Store, case: str) -> None:
    bad, fld = _bad_lines(source)[case]
    good = lines_of(source)
    with pytest.raises(InvalidRecord) as info:
        import_records(store, [*good, bad])  # the good lines come first: still nothing is stored
    assert info.value.context.get("line") == len(good) + 1
    assert fld in str(info.value.context.get("field")) or fld in info.value.message, info.value.message
    assert everything(store) == []


def test_a_forged_prune_note_is_refused(store: Store, source: Store) -> None:
    led = Ledger(source)
    for i in range(1, 5):
        led.write(T, R, "implement", impl(str(i)))
    prune(led, T, keep_last=2)
    lines = lines_of(source)
    notes = [x for x in lines if x.get("kind") == "pruned"]
    assert len(notes) == 1
    # A second note, correctly chained and hashed, that claims attempt 3 (stored) was pruned with
    # another hash: it would vouch for a forged attempt 3.
    from phaselog.ledger.prune_notes import PrunedRecord, PruneNote, parse_note

    first = parse_note(json.dumps(notes[0]["document"]).encode(), "x", "000001")
    forged = PruneNote(
        T,
        RUN,
        2,
        led.clock(),
        (PrunedRecord("implement", 1, 3, "completed", "f" * 64, first.removed[-1].content_hash),),
        prev_hash=first.content_hash,
    )
    doc = json.loads(forged.body())
    lines.append({**notes[0], "name": "000002", "content_hash": doc["content_hash"], "document": doc})
    rep = import_records(store, lines)
    assert [c["path"] for c in rep.conflicts] == [f"{T}/{RUN}/.pruned/000002.json"]
    assert store.entry_names("pruned", T, RUN) == ["000001"]
    assert Ledger(store).verify(T).ok


def test_an_import_of_a_pruned_store_verifies_and_resumes(store: Store, source: Store) -> None:
    led = Ledger(source)
    led.write(T, R, "implement", impl("1"))
    led.write(T, R, "implement", None, status="failed", error="x")
    led.write(T, R, "implement", impl("3"))
    led.write(T, R, "local_review", LOCAL_REVIEW)
    prune(led, T, keep_last=1)
    rep = import_records(store, lines_of(source))
    assert rep.conflicts == []
    target = Ledger(store)
    assert target.verify(T).ok, target.verify(T).problems
    assert target.can_skip_to(T, R, "create_pr").allowed
    again = import_records(store, lines_of(source))
    assert (again.added, again.conflicts) == (0, [])


# -- the CLI: input that is not an export, and store failures ---------------------------------------
def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PHASELOG_HOME": "/nonexistent-phaselog-home"},
        check=False,
    )


@pytest.mark.parametrize(
    ("name", "data", "rule"),
    [
        ("binary", b"\x00\xff\xfe\x80garbage\n", "utf8"),
        ("nested", b"[" * 100_000 + b"]" * 100_000 + b"\n", "json_depth"),
        ("overflow", b'{"type": "checkpoint", "x": 1e999999}\n', "json"),
        ("nan", b'{"type": "checkpoint", "x": NaN}\n', "json"),
    ],
)
def test_cli_import_of_input_that_is_not_an_export_is_a_typed_error(
    store: Store, name: str, data: bytes, rule: str
) -> None:
    proc = cli("import", "--store", store.url, stdin=data)
    assert proc.returncode == 1, (name, proc.stdout, proc.stderr)
    err = json.loads(proc.stdout)
    assert err["error_code"] == "invalid"
    assert "line 1" in err["error"]
    assert b"Traceback" not in proc.stderr
    assert "internal" not in err["error"]


def test_cli_import_whose_store_fails_is_a_store_error_not_an_input_error(tmp_path: Path) -> None:
    # Before: every store failure was reported as "--input: cannot read" (bad usage, exit 2).
    src = Ledger(open_store(str(tmp_path / "src")))
    src.write(T, R, "implement", impl("1"))
    dump = tmp_path / "dump.jsonl"
    dump.write_text("".join(json.dumps(x) + "\n" for x in export_records(src.store, T)))
    target = tmp_path / "target"
    (target / "checkpoints").mkdir(parents=True)
    (target / "checkpoints" / T).write_text("a file where the ticket's folder must go\n")  # fails even for root
    proc = cli("import", "--input", str(dump), "--store", str(target))
    err = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stdout
    assert err["error_code"] == "io_error", err
    assert "--input" not in err["error"], err


def test_copy_checks_records_against_the_source_s_own_pipelines(tmp_path: Path) -> None:
    # A run of a pipeline whose manifest lives in the source's root: copy finds it there (the
    # target has never heard of it), and still checks every record against it.
    src_root = tmp_path / "src"
    (src_root / "pipelines").mkdir(parents=True)
    (src_root / "pipelines" / "data-job.yaml").write_text(
        "name: data-job\nversion: '1'\norder: free\nphases:\n"
        "  - name: data_ingest\n    payload_schema: {type: object, required: [rows]}\n"
        "  - name: data_analysis\n    payload_schema: {type: object}\n"
    )
    led = Ledger(open_store(str(src_root)))
    led.write(T, R, "data_ingest", {"rows": 3}, pipeline="data-job")
    led.write(T, R, "data_analysis", {"mean": 1.5}, pipeline="data-job")
    target = f"sqlite://{tmp_path}/copy.db"
    proc = cli("copy", "--from", str(src_root), "--to", target)
    assert proc.returncode == 0, proc.stdout
    out = json.loads(proc.stdout)
    assert (out["added"], out["conflicts"]) == (2, [])
    # The export carries the manifest: a store that never heard of data-job takes the records,
    # checked against it, and keeps the manifest with them.
    elsewhere = open_store(str(tmp_path / "elsewhere"))
    rep = import_records(elsewhere, export_records(led.store, T))
    assert (rep.added, rep.conflicts, rep.pipelines_recorded) == (2, [], 1)
    assert Ledger(elsewhere).status(T, R).pipeline == "data-job"
    # Without its manifest line, the same export is refused there, naming the pipeline.
    bare = [ln for ln in export_records(led.store, T) if ln["type"] != "pipeline"]
    with pytest.raises(InvalidRecord) as info:
        import_records(open_store(str(tmp_path / "elsewhere-2")), bare)
    assert "data-job" in info.value.message
    # A manifest line whose content does not hash to its content_hash is refused, naming the line.
    lines = list(export_records(led.store, T))
    lines[0]["document"]["phases"][0]["payload_schema"] = {"type": "object"}  # the rows rule dropped
    with pytest.raises(InvalidRecord) as forged:
        import_records(open_store(str(tmp_path / "elsewhere-3")), lines)
    assert (forged.value.context["line"], forged.value.context["rule"]) == (1, "content_hash")
