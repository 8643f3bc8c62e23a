"""The bad-input corpus (issue 8): inputs that once ended in "internal error", crashed, hung or
ate memory, fed to the real CLI against every store.

Each entry is a command line (plus standard input) and what it must give: exit 1 (the operation
failed) or 2 (bad usage), a typed ``error_code`` in a JSON error object — never "internal error",
never a traceback — and nothing created or half-written: the store's files or rows and the
working folder are the same after the whole corpus as before it.

The command lines run in one process per store (``cli_batch.run_batch``: the CLI's own entry
point, one command after another); the few cases where the process itself matters (memory, a
read-only root) run as their own processes below.

Adding a case: append a ``Bad(...)`` to ``CORPUS`` (or to a section of your own). Placeholders in
arguments: ``{work}`` is the working folder holding the input files made by ``_inputs``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import resource
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli_batch import Outcome, run_batch, run_one
from conftest import IMPLEMENT, make_store
from helpers import clean_env
from phaselog.ledger.facade import Ledger
from phaselog.model.limits import MAX_ATTEMPT, MAX_INPUT_BYTES
from phaselog.stores.base import Store

T = "BAD-1"
R = "run-1"
V = "VID-1"
PAYLOAD = json.dumps(IMPLEMENT)
W = ["write", "--ticket-id", T, "--run-id", R, "--phase", "implement"]
RD = ["read", "--ticket-id", T, "--run-id", R, "--phase", "implement"]
PROG = ["progress", "--ticket-id", T, "--run-id", R, "--phase", "implement"]
M = ["write", "--ticket-id", T, "--run-id", "run-2", "--phase", "one"]  # a fresh run: its own pipeline
APPROVE = ["approve", "--ticket-id", V, "--run-id", R, "--phase", "proposal"]
HUGE = "9" * 30  # 10**30: files took 10**23 as an attempt, SQLite overflows at 2**63
INT32 = str(2**31)  # PostgreSQL's INTEGER overflows here


@dataclass(frozen=True)
class Bad:
    """One bad input and what it must give."""

    args: tuple[str, ...]
    exit: int
    code: str
    stdin: bytes = b""

    def argv(self, work: Path) -> list[str]:
        return [a.replace("{work}", str(work)) for a in self.args]


def bad(*args: str, exit: int, code: str, stdin: bytes = b"") -> Bad:
    return Bad(tuple(args), exit, code, stdin)


CORPUS: list[Bad] = [
    # -- attempt numbers: one bound (limits.MAX_ATTEMPT), the same on every store -------------
    bad(*W, "--attempt", "0", "--payload", PAYLOAD, exit=2, code="usage"),
    bad(*W, "--attempt", "-3", "--payload", PAYLOAD, exit=2, code="usage"),
    bad(*W, "--attempt", str(MAX_ATTEMPT + 1), "--payload", PAYLOAD, exit=2, code="usage"),
    bad(*W, "--attempt", INT32, "--payload", PAYLOAD, exit=2, code="usage"),
    bad(*W, "--attempt", HUGE, "--payload", PAYLOAD, exit=2, code="usage"),
    bad(*RD, "--attempt", HUGE, exit=2, code="usage"),
    bad(*RD, "--attempt", INT32, exit=2, code="usage"),
    bad("validate", *RD[1:], "--attempt", HUGE, exit=2, code="usage"),
    bad(*PROG, "--event", "start", "--attempt", HUGE, exit=2, code="usage"),
    bad(*PROG[:1], "show", *PROG[1:], "--attempt", HUGE, exit=2, code="usage"),
    bad(*APPROVE, "--by", "ana", "--attempt", HUGE, exit=2, code="usage"),
    bad("reject", *APPROVE[1:], "--by", "ana", "--attempt", INT32, exit=2, code="usage"),
    bad("diff", "--ticket-id", T, f"{R}:implement:1", f"{R}:implement:{HUGE}", exit=2, code="usage"),
    bad("diff", "--ticket-id", T, f"{R}:implement:0", f"{R}:implement:1", exit=2, code="usage"),
    # -- JSON that is not JSON: NaN, Infinity, overflow to infinity -----------------------------
    bad(*W, "--payload", PAYLOAD[:-1] + ', "x": NaN}', exit=2, code="usage"),
    bad(*W, "--payload", '{"branch_name": Infinity}', exit=2, code="usage"),
    bad(*W, "--payload", '{"branch_name": -Infinity}', exit=2, code="usage"),
    bad(*W, "--payload", '{"n": 1e400}', exit=2, code="usage"),
    bad(*W, "--payload", "@{work}/nan.json", exit=2, code="usage"),
    bad(*W, "--payload", PAYLOAD, "--repo-commit-map", '{"app": NaN}', exit=2, code="usage"),
    bad(*W, "--payload", PAYLOAD, "--decisions", "[NaN]", exit=2, code="usage"),
    bad(*W, "--payload", "-", exit=2, code="usage", stdin=b'{"x": Infinity}'),
    # -- sizes: bounded while reading --------------------------------------------------------------
    bad(*W, "--payload", "@{work}/huge.json", exit=1, code="too_large"),
    bad(*W, "--payload", "@/dev/zero", exit=1, code="too_large"),
    bad(*W, "--payload", "-", exit=1, code="too_large", stdin=b" " * (MAX_INPUT_BYTES + 1)),
    bad(*W, "--payload", PAYLOAD, "--decisions", "@/dev/zero", exit=1, code="too_large"),
    bad(*PROG, "--event", "start", "--output-file", "/dev/zero", exit=1, code="too_large"),
    bad(*PROG, "--event", "start", "--output-file", "{work}/huge.json", exit=1, code="too_large"),
    bad(*W, "--payload", PAYLOAD, "--pipeline-file", "/dev/zero", exit=1, code="pipeline_error"),
    # -- other malformed input files -----------------------------------------------------------
    bad(*W, "--payload", "@{work}/missing.json", exit=2, code="usage"),
    bad(*W, "--payload", "@{work}", exit=2, code="usage"),
    bad(*W, "--payload", "@{work}/latin1.json", exit=2, code="usage"),
    bad(*PROG, "--event", "start", "--output-file", "{work}/missing.txt", exit=2, code="usage"),
    bad(*PROG, "--event", "start", "--output", "x", exit=2, code="usage"),
    # -- pipeline manifests: $ref that never resolves, YAML-native values -----------------------
    *(
        bad(*M, "--pipeline-file", f"{{work}}/{name}.yaml", "--payload", '{"x": 1}', exit=1, code="pipeline_error")
        for name in ("ref-nowhere", "ref-cycle", "ref-remote", "dated")
    ),
    # -- process ids, text fields ---------------------------------------------------------------
    bad(*PROG, "--event", "start", "--pid", "-1", exit=2, code="usage"),
    bad(*PROG, "--event", "start", "--pid", "0", exit=2, code="usage"),
    bad(*PROG, "--event", "start", "--pid", HUGE, exit=2, code="usage"),
    bad("init", "--ticket-id", "BAD-2", "--title", "\x1b[31mred\x1b[0m", exit=2, code="usage"),
    bad("init", "--ticket-id", "BAD-2", "--title", "two\nlines", exit=2, code="usage"),
    bad("init", "--ticket-id", "BAD-2", "--title", "ok", "--meta", "k=\x1b]0;pwned\x07", exit=2, code="usage"),
    bad(*PROG, "--event", "start", "--provider", "\x1b[2J", exit=2, code="usage"),
    bad(*PROG, "--event", "start", "--status", "50%\r\x1b[1A", exit=2, code="usage"),
    bad(*APPROVE, "--by", "\x9b31mana", exit=2, code="usage"),
    bad(*APPROVE, "--by", "ana", "--comment", "\x1b[2J", exit=2, code="usage"),
    # -- identifiers, phases, times -----------------------------------------------------------
    bad(*W[:2], "../etc", *W[3:], "--payload", PAYLOAD, exit=2, code="invalid_id"),
    bad(*W[:-1], "0", "--payload", PAYLOAD, exit=2, code="unknown_phase"),
    bad(*W[:-1], HUGE, "--payload", PAYLOAD, exit=2, code="unknown_phase"),
    bad(*W, "--payload", PAYLOAD, "--timestamp", "2026-01-01T00:00:00", exit=2, code="usage"),
    bad(*W, "--payload", PAYLOAD, "--timestamp", "99999-01-01T00:00:00Z", exit=2, code="usage"),
    bad(*W, "--payload", PAYLOAD, "--timestamp", "0001-01-01T00:00:00+14:00", exit=2, code="usage"),
    bad(*W, "--payload", PAYLOAD, "--timestamp", "9999-12-31T23:59:59-14:00", exit=2, code="usage"),
    bad("list", "--ticket-id", T, "--after", f"{R}:1:{HUGE}x", exit=2, code="usage"),
    bad("history", "--ticket-id", T, "--phase", HUGE, exit=2, code="unknown_phase"),
    bad("fork", "--ticket-id", T, "--run-id", R, "--through", "nope", exit=2, code="unknown_phase"),
    # -- every other command: one hostile value each ------------------------------------------------
    bad("status", "--ticket-id", "../x", "--run-id", R, exit=2, code="invalid_id"),
    bad("runs", "--ticket-id", "../x", exit=2, code="invalid_id"),
    bad("tickets", "--format", "xml", exit=2, code="usage"),
    bad("tickets", "--state", "waiting", exit=2, code="usage"),
    bad("approvals", "--ticket-id", "../x", exit=2, code="invalid_id"),
    bad("resume", "--ticket-id", T, "--run-id", R, "--skip-to", HUGE, exit=2, code="unknown_phase"),
    bad("verify", "--ticket-id", "T-1\x00", exit=2, code="invalid_id"),
    bad("pipelines", "../../etc/passwd", exit=1, code="pipeline_error"),
    bad("decisions", "--ticket-id", "../x", exit=2, code="invalid_id"),
    bad("doctor", "--ticket-id", "../x", exit=2, code="invalid_id"),
    bad("export", "--ticket-id", ".hidden", exit=2, code="invalid_id"),
    bad("import", "--input", "{work}/missing.jsonl", exit=2, code="usage"),
    bad("copy", "--from", "bogus://x", "--to", "{work}/copy", exit=2, code="usage"),
    bad("store", "migrate", "--store", "bogus://x", exit=2, code="usage"),
    bad("guard", "run", "--name", "g", "--stale-after", "soon", "--", "true", exit=2, code="usage"),
    bad("guard", "run", "--name", "g", "--cooldown", f"{HUGE}w", "--", "true", exit=2, code="usage"),
    bad("guard", "status", "--name", "../x", exit=2, code="usage"),
    bad("guard", "reset", "--name", "\x1b[2J", exit=2, code="usage"),
    bad("guard", "history", "--name", "-x", exit=2, code="usage"),
    bad("events", "--after", "not-a-cursor", exit=2, code="usage"),  # feed's command; here so the corpus covers it
    bad("notify", "--config", "{work}/no-such-hooks.yaml", exit=2, code="usage"),
    bad("notify", "--config", "{work}/dated.yaml", exit=2, code="usage"),  # a manifest: unknown keys
    bad("notify", "--config", "{work}/nan.json", exit=2, code="usage"),
    bad("notify", "status", "--config", "{work}/dated.yaml", exit=2, code="usage"),
    # the queue (PostgreSQL): refused before anything is read on the other stores, so only inputs
    # the command line itself rejects give the same answer on every store
    bad("submit", "--ticket-id", T, "--pipeline", "ticket-pipeline", "--priority", "high", exit=2, code="usage"),
    bad("worker", "--concurrency", "0", exit=2, code="usage"),
    bad("queue", "list", "--state", "sleeping", exit=2, code="usage"),
    bad("queue", "show", "--ticket-id", T, exit=2, code="usage"),
    bad("queue", "cancel", "--run-id", R, exit=2, code="usage"),
    bad("queue", "retry", "--ticket-id", T, "--run-id", R, "--by", "x", exit=2, code="usage"),
    bad("run", "--ticket-id", T, "--run-id", "run-9", "--pipeline-file", "/dev/zero", exit=1, code="pipeline_error"),
    bad("run", "--ticket-id", "../x", "--run-id", "run-9", "--pipeline", "ticket-pipeline", exit=2, code="invalid_id"),
    bad("explain", "--ticket-id", T, "--run-id", R, "--pipeline-file", "/dev/zero", exit=1, code="pipeline_error"),
    bad("step", "-1", exit=2, code="usage"),
    bad("logs", "--ticket-id", T, "--run-id", R, "--phase", "implement", "--attempt", "0", exit=2, code="usage"),
    bad("logs", "--ticket-id", T, "--run-id", R, "--phase", "implement", "--attempt", "99", exit=1, code="not_found"),
    bad("logs", "--ticket-id", T, "--run-id", R, "--phase", "nope", exit=2, code="unknown_phase"),
    bad("logs", "--ticket-id", T, "--run-id", "no-such-run", "--phase", "implement", exit=1, code="not_found"),
    bad("logs", "--ticket-id", "../x", "--run-id", R, "--phase", "implement", exit=2, code="invalid_id"),
    bad(
        "run",
        "--ticket-id",
        T,
        "--run-id",
        "run-9",
        "--pipeline",
        "ticket-pipeline",
        "--log-cap",
        "9GiB",
        exit=2,
        code="usage",
    ),
    bad("step", "1", "--output-file", "/dev/zero", exit=1, code="too_large"),
    bad("prune", "--ticket-id", T, "--keep-last", "0", exit=2, code="usage"),
    bad("prune", "--ticket-id", T, "--older-than", "soon", exit=2, code="usage"),
    bad("prune", "--ticket-id", T, "--older-than", f"{HUGE}d", exit=2, code="usage"),
    # `phaselog ui` refuses before it listens: none of these starts a server
    bad("ui", "--host", "0.0.0.0", "--port", "0", exit=2, code="usage"),  # beyond loopback without a token
    bad("ui", "--token", "short", "--port", "0", exit=2, code="usage"),
    bad("ui", "--port", "70000", exit=2, code="usage"),
    bad("mcp", "--http", "--host", "0.0.0.0", "--port", "0", exit=2, code="usage"),  # beyond loopback, no token
    bad("mcp", "--port", "70000", exit=2, code="usage"),
    bad("skill", "--print", "--install", "{work}/skills", exit=2, code="usage"),
    bad("ui", "--host", "\x00", "--port", "0", exit=2, code="usage"),
    # provable history (docs/anchoring.md): refused before a key file or a witness is created
    bad("keys", "init", "--out", "{work}/nan.json", exit=2, code="usage"),  # never overwrites a file
    bad(
        "anchor",
        "--ticket-id",
        "TAMP-1",
        "--all",
        "--to",
        "{work}/witness",
        "--key",
        "{work}/nan.json",
        exit=2,
        code="usage",
    ),
    bad("anchor", "--all", "--to", "{work}/witness", "--key", "{work}/nan.json", exit=2, code="usage"),  # not a key
    bad("prove", "--ticket-id", "TAMP-1", "not-a-ref", exit=2, code="usage"),
    bad("verify", "--against", "{work}/no-witness", exit=2, code="usage"),
]


# -- the store and the inputs -------------------------------------------------------------------
def _inputs(work: Path) -> None:
    """The input files the corpus names under {work}."""
    (work / "nan.json").write_text('{"branch_name": NaN}')
    (work / "latin1.json").write_bytes('{"branch_name": "caf\u00e9"}'.encode("latin-1"))
    with (work / "huge.json").open("wb") as fh:  # 1 GiB, sparse: costs no disk, would cost memory
        fh.truncate(1 << 30)
    (work / "ref-nowhere.yaml").write_text(
        "name: refs\nversion: '1'\nphases:\n  - name: one\n    payload_schema:\n      type: object\n"
        "      properties:\n        x: {$ref: '#/$defs/nope'}\n"
    )
    (work / "ref-cycle.yaml").write_text(
        "name: refs\nversion: '1'\nphases:\n  - name: one\n    payload_schema:\n"
        "      $defs:\n        a: {$ref: '#/$defs/b'}\n        b: {$ref: '#/$defs/a'}\n"
        "      type: object\n      properties:\n        x: {$ref: '#/$defs/a'}\n"
    )
    (work / "ref-remote.yaml").write_text(
        "name: refs\nversion: '1'\nphases:\n  - name: one\n    payload_schema:\n      type: object\n"
        "      properties:\n        x: {$ref: 'https://example.invalid/schema.json'}\n"
    )
    (work / "dated.yaml").write_text("name: dated\nversion: 2026-01-01\nphases:\n  - name: one\n")


def _history(ledger: Ledger) -> None:
    ledger.write(T, R, "implement", IMPLEMENT)
    ledger.write(T, R, "local_review", None, status="failed", error="tests failed")
    ledger.init_ticket(V, title="Launch video", pipeline="video-pipeline")
    ledger.write(V, R, "research", {"summary": "s", "sources": ["https://example.org/a"]})
    ledger.write(V, R, "proposal", {"title": "Launch", "concept": "c"})
    ledger.progress(T, R, "implement", "start")


def snapshot(store: Store, kind: str) -> dict[str, Any]:
    """Everything a store holds: files (with contents) or rows of every table."""
    if kind == "files":
        root: Path = store.root  # type: ignore[attr-defined]
        return {
            str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))
        }
    s: Any = store
    if kind == "sqlite":
        tables = [r[0] for r in s.session.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    else:
        tables = [
            r[0]
            for r in s.session.query(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
                "ORDER BY table_name"
            )
        ]
    return {t: sorted(map(repr, s.session.query(f"SELECT * FROM {t}"))) for t in tables}


def folder(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def check(outcome: Outcome, want: Bad) -> str | None:
    """None if the outcome is what the corpus says, else why not."""
    text = outcome.out + outcome.err
    if "internal error" in text or "Traceback" in text:
        return "internal error / traceback"
    doc = outcome.json
    if not isinstance(doc, dict) or doc.get("success") is not False:
        return "stdout is not one JSON error object"
    if outcome.rc not in (1, 2) or outcome.rc != want.exit:
        return f"exit {outcome.rc}, expected {want.exit}"
    if doc.get("error_code") != want.code:
        return f"error_code {doc.get('error_code')!r}, expected {want.code!r}"
    return None


@pytest.fixture(params=["files", "sqlite", "postgres"])
def populated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Store, dict[str, str], Path]]:
    kind = request.param
    store = make_store(kind, tmp_path, request)
    _history(Ledger(store))
    target = {"PHASELOG_HOME": str(tmp_path / "store")} if kind == "files" else {"PHASELOG_STORE": store.url}
    env = clean_env(HOME=str(tmp_path / "home"), **target)
    work = tmp_path / "work"
    work.mkdir()
    _inputs(work)
    yield kind, store, env, work
    store.close()


def test_every_bad_input_gives_a_typed_error_and_changes_nothing(
    populated: tuple[str, Store, dict[str, str], Path],
) -> None:
    kind, store, env, work = populated
    before, files_before = snapshot(store, kind), folder(work.parent)
    outcomes = run_batch([(b.argv(work), b.stdin) for b in CORPUS], env=env, cwd=work)
    failures = [f"{why}: {o.describe()}" for b, o in zip(CORPUS, outcomes, strict=True) if (why := check(o, b))]
    assert not failures, f"{len(failures)} of {len(CORPUS)} bad inputs misbehaved on {kind}:\n\n" + "\n\n".join(
        failures
    )
    assert snapshot(store, kind) == before, "a refused command changed the store"
    assert folder(work.parent) == files_before, "a refused command created files"


def _leaf_commands() -> set[str]:
    import click

    from phaselog.cli import cli

    out: set[str] = set()

    def walk(group: click.Group, prefix: str) -> None:
        for name, cmd in group.commands.items():
            path = f"{prefix}{name}"
            if isinstance(cmd, click.Group) and cmd.commands:
                walk(cmd, f"{path} ")
                if getattr(cmd, "invoke_without_command", False):
                    out.add(path)  # `progress` records an event itself and has `progress show`
            else:
                out.add(path)

    walk(cli, "")
    return out


def test_the_corpus_feeds_every_command() -> None:
    # Guard against the corpus shrinking, and against a new command that nobody fed bad input.
    fed = {
        " ".join(b.args[:2])
        if (b.args[0] in ("guard", "store", "queue", "notify", "keys") and not b.args[1].startswith("-"))
        or b.args[1:2] == ("show",)
        else b.args[0]
        for b in CORPUS
    }
    missing = sorted(_leaf_commands() - fed)
    assert not missing, f"commands without a bad-input case in CORPUS: {missing}"
    assert len(CORPUS) >= 70


# -- cases that need a process of their own ------------------------------------------------------
def _limit_memory(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def test_a_50_mb_payload_is_refused_within_a_small_memory_limit(tmp_path: Path) -> None:
    # Issue 8: a 50 MB `--payload @file` took 5.9 GB of memory before being refused. Under a
    # 1 GiB address-space limit the old code dies with MemoryError ("internal error"); bounded
    # reading refuses it after MAX_INPUT_BYTES + 1 bytes.
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**IMPLEMENT, "branch_name": "b" * 50_000_000}))
    root = tmp_path / "store"
    out = run_one(
        [*W, "--payload", f"@{big}"],
        env=clean_env(PHASELOG_HOME=str(root)),
        cwd=tmp_path,
        preexec_fn=_limit_memory(1 << 30),
    )
    assert out.rc == 1, out.describe()
    assert out.json["error_code"] == "too_large", out.describe()
    assert out.json["rule"] == "max_input_bytes"
    assert not root.exists() or not any(p.is_file() for p in root.rglob("*"))


def test_writes_to_a_read_only_files_root_are_io_errors(tmp_path: Path) -> None:
    # Issue 8: "writes to a read-only files root (mkdir not wrapped)" ended in internal error.
    root = tmp_path / "store"
    Ledger(make_store("files", tmp_path, None)).write(T, R, "implement", IMPLEMENT)  # type: ignore[arg-type]
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    tmp_path.chmod(0o755)
    before = snapshot(make_store("files", tmp_path, None), "files")  # type: ignore[arg-type]
    env = clean_env(PHASELOG_HOME=str(root), HOME=str(tmp_path))

    # Root ignores permissions: run as nobody, as a real user of a read-only root would be.
    prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups") if os.geteuid() == 0 else ()

    writes = [
        ["write", "--ticket-id", "NEW-1", "--run-id", R, "--phase", "implement", "--payload", PAYLOAD],
        [
            *W[:-1],
            "local_review",
            "--payload",
            '{"iteration_count": 1, "issue_fingerprints": [], "last_clean_sha": "a1b2c3d"}',
        ],
        ["progress", "--ticket-id", "NEW-2", "--run-id", R, "--phase", "implement", "--event", "start"],
        ["init", "--ticket-id", "NEW-3", "--title", "x"],
    ]
    for argv in writes:
        out = run_one(argv, env=env, cwd=tmp_path, prefix=prefix)
        assert "internal error" not in out.out, out.describe()
        assert out.rc == 1, out.describe()
        assert out.json["error_code"] == "io_error", out.describe()
    assert snapshot(make_store("files", tmp_path, None), "files") == before  # type: ignore[arg-type]


# -- the record size cap counts the same bytes on every store ----------------------------------------
def _payloads(shape: str) -> list[dict[str, Any]]:
    if shape == "flat":  # YAML and JSON about the same size
        return [{"files": [f"src/module_{i:05d}.py" for i in range(n)]} for n in range(250, 520, 15)]
    # Deep: each list item sits 30 levels down, so its YAML line is ~30x its JSON.
    out = []
    for n in range(60, 200, 10):
        doc: dict[str, Any] = {"v": [0] * n}
        for _ in range(30):
            doc = {"k": doc}
        out.append(doc)
    return out


@pytest.mark.parametrize("shape", ["flat", "deep"])
def test_every_store_takes_the_same_records_at_the_size_cap(
    shape: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Issue 8: files counted YAML + sidecar, SQL only the body, so a record near the cap was taken
    # by one store and refused by another (and copied one way only). Now both stores count the
    # stored JSON document and the YAML file, each against the cap.
    from phaselog import TooLarge
    from phaselog.model.pipelines import pipeline_from_dict
    from phaselog.stores.files.store import FilesStore
    from phaselog.stores.sql.postgres import PostgresStore
    from phaselog.stores.sql.sqlite import SqliteStore

    cap = 8192
    free = pipeline_from_dict({"name": "free", "version": "1", "phases": [{"name": "one"}]})
    stores: dict[str, Store] = {
        "files": FilesStore(tmp_path / "files", max_record_bytes=cap),
        "sqlite": SqliteStore(tmp_path / "ledger.db", max_record_bytes=cap),
        "postgres": PostgresStore(request.getfixturevalue("pg_schema_url"), max_record_bytes=cap),
    }
    try:
        verdicts: list[dict[str, str]] = []
        for i, payload in enumerate(_payloads(shape)):
            verdict = {}
            for kind, store in stores.items():
                try:
                    Ledger(store).write(T, f"run-{i}", "one", payload, pipeline=free)
                    verdict[kind] = "taken"
                except TooLarge:
                    verdict[kind] = "refused"
            verdicts.append(verdict)
        for v in verdicts:
            assert len(set(v.values())) == 1, f"stores disagree at the cap: {verdicts}"
        seen = [v["files"] for v in verdicts]
        assert set(seen) == {"taken", "refused"}  # the sizes straddle the cap
    finally:
        for store in stores.values():
            store.close()


# -- the library's edge: values Python holds and JSON does not --------------------------------------
def _deep(levels: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"v": 1}
    for _ in range(levels):
        doc = {"k": doc}
    return doc


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"payload": {"x": float("nan")}}, "phase_payload.x"),
        ({"payload": {"x": [1, float("-inf")]}}, "phase_payload.x[1]"),
        ({"payload": {"x": datetime.date(2026, 1, 1)}}, "phase_payload.x"),
        ({"payload": {"x": {1, 2}}}, "phase_payload.x"),
        ({"payload": {"x": b"bytes"}}, "phase_payload.x"),
        ({"payload": {"x": {1: "int key"}}}, "phase_payload.x"),
        ({"payload": {"x": 10**5000}}, "phase_payload.x"),
        ({"payload": _deep(70)}, None),
        ({"repo_commit_map": {"app": 1}}, None),
        ({"artifact_paths": "src/x.py"}, None),
        ({"decisions": [{"decision_id": float("nan")}]}, "decisions[0].decision_id"),
    ],
)
def test_the_library_refuses_values_json_cannot_hold(tmp_path: Path, kwargs: dict[str, Any], field: str | None) -> None:
    # Before: NaN, dates, sets, bytes and huge integers from the Python API (or a runner's shell
    # phase) passed the free schema and failed while hashing — a raw ValueError/TypeError.
    from phaselog import InvalidRecord
    from phaselog.model.pipelines import pipeline_from_dict
    from phaselog.stores.files.store import FilesStore

    free = pipeline_from_dict({"name": "free", "version": "1", "phases": [{"name": "one"}]})
    store = FilesStore(tmp_path / "store")
    payload = kwargs.pop("payload", {"x": 1})
    with pytest.raises(InvalidRecord) as info:
        Ledger(store).write(T, R, "one", payload, pipeline=free, **kwargs)
    if field is not None:
        assert info.value.context["field"] == field
    assert not (tmp_path / "store").exists() or not [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
