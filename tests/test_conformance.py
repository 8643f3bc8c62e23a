"""One contract, three stores: phaselog's conformance suite (phaselog.testing) on each backend.

``TestConformance`` runs every contract test of :mod:`phaselog.testing` against the files store, SQLite
and PostgreSQL (the module is marked ``all_stores``, so the ``backend`` fixture takes each), through the
same Ledger API: the same records, hashes, errors, states and JSON. The factory is strict: a test the
suite would skip for a third-party store (a capability not declared, a hook not given) fails here.
Damage from outside is simulated the way it would happen: for the files store by editing or garbling
the file, for the SQL stores by an ``UPDATE`` of the row's body through a separate connection, behind
the library's back (``FilesDamage``, ``SqlDamage``).

Tests without the ``backend`` fixture run once (they build all three stores themselves).
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import IMPLEMENT, LOCAL_REVIEW, PG_URL, REPO, records_in, require_postgres
from helpers import T0, Clock, decision
from phaselog.ledger.doctor import doctor
from phaselog.ledger.facade import Ledger
from phaselog.stores import open_store
from phaselog.stores.base import Store
from phaselog.stores.files.store import FilesStore
from phaselog.testing import EntryRef, RecordRef, StoreConformance, StoreFactory
from phaselog.testing.data import R1, R2, RUN1, T, export_text, impl, populate
from phaselog.transfer.jsonl import export_records, import_records

pytestmark = pytest.mark.all_stores


# -- damage from outside ---------------------------------------------------------------------------
def _sql_connect(store: Any) -> Any:
    """A separate connection to the store's database (not the library's)."""
    if store.dialect.name == "sqlite":
        return sqlite3.connect(store.path, isolation_level=None)
    import psycopg

    from phaselog.stores.sql.postgres import split_url

    dsn, schema = split_url(store.url)
    con = psycopg.connect(dsn, autocommit=True)
    con.execute(f'SET search_path TO "{schema}"')
    return con


def raw(store: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement behind the library's back; return its rows (if any)."""
    con = _sql_connect(store)
    try:
        if store.dialect.name != "sqlite":
            sql = sql.replace("?", "%s")
        cur = con.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        con.close()


class FilesDamage:
    """Damage to a files store: its files edited or garbled in place."""

    @staticmethod
    def _record(store: Store, ref: RecordRef, *, meta: bool = False) -> Path:
        assert isinstance(store, FilesStore)
        o, p, a = ref.phase_ordinal, ref.phase, ref.attempt
        if not ref.completed:
            name = f".failed_{o}_{p}_a{a}.json"
        else:
            name = f".meta_{o}_{p}_a{a}.json" if meta else f"phase_{o}_{p}_a{a}.yaml"
        return store.root / "checkpoints" / ref.ticket_id / ref.run_id / name

    @staticmethod
    def _entry(store: Store, entry: EntryRef) -> Path:
        assert isinstance(store, FilesStore)
        folder = store.root / "checkpoints" / entry.ticket_id
        if entry.run_id is not None:
            folder = folder / entry.run_id
        return folder / f".{entry.kind}" / f"{entry.name}.json"

    def garble_record(self, store: Store, ref: RecordRef) -> None:
        self._record(store, ref).write_bytes(b"\x00\xff]]}}: [\n\t!!: &x *y {")

    def edit_payload(self, store: Store, ref: RecordRef, key: str, value: Any) -> None:
        path = self._record(store, ref)
        doc = yaml.safe_load(path.read_text("utf-8"))
        assert key in doc["phase_payload"]
        doc["phase_payload"][key] = value
        path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), "utf-8")

    def set_schema_version(self, store: Store, ref: RecordRef, version: str) -> None:
        path = self._record(store, ref, meta=True)
        doc = json.loads(path.read_text("utf-8"))
        doc["schema_version"] = version
        path.write_text(json.dumps(doc), "utf-8")

    def garble_entry(self, store: Store, entry: EntryRef) -> None:
        self._entry(store, entry).write_text('{"kind": "phaselog.', "utf-8")

    def edit_entry(self, store: Store, entry: EntryRef, fields: Mapping[str, Any]) -> None:
        path = self._entry(store, entry)
        path.write_text(json.dumps({**json.loads(path.read_text("utf-8")), **fields}), "utf-8")


class SqlDamage:
    """Damage to a SQL store: a row's body changed through a separate connection."""

    _WHERE = "WHERE ticket_id = ? AND run_id = ? AND phase_ordinal = ? AND attempt = ?"

    def _change(self, store: Store, ref: RecordRef, change: Any) -> None:
        key = (ref.ticket_id, ref.run_id, ref.phase_ordinal, ref.attempt)
        ((body,),) = raw(store, f"SELECT body FROM phaselog_checkpoints {self._WHERE}", key)
        raw(store, f"UPDATE phaselog_checkpoints SET body = ? {self._WHERE}", (change(body), *key))

    def garble_record(self, store: Store, ref: RecordRef) -> None:
        self._change(store, ref, lambda _body: '{"kind": "phaselog.checkp')

    def edit_payload(self, store: Store, ref: RecordRef, key: str, value: Any) -> None:
        def change(body: str) -> str:
            doc = json.loads(body)
            assert key in doc["checkpoint"]["phase_payload"]
            doc["checkpoint"]["phase_payload"][key] = value
            return json.dumps(doc)

        self._change(store, ref, change)

    def set_schema_version(self, store: Store, ref: RecordRef, version: str) -> None:
        self._change(store, ref, lambda body: json.dumps({**json.loads(body), "schema_version": version}))

    def _change_entry(self, store: Store, entry: EntryRef, change: Any) -> None:
        where = "WHERE kind = ? AND ticket_id = ? AND name = ?"
        key = (entry.kind, entry.ticket_id, entry.name)
        ((body,),) = raw(store, f"SELECT body FROM phaselog_entries {where}", key)
        raw(store, f"UPDATE phaselog_entries SET body = ? {where}", (change(body), *key))

    def garble_entry(self, store: Store, entry: EntryRef) -> None:
        self._change_entry(store, entry, lambda _body: '{"kind": "phaselog.')

    def edit_entry(self, store: Store, entry: EntryRef, fields: Mapping[str, Any]) -> None:
        self._change_entry(store, entry, lambda body: json.dumps({**json.loads(body), **fields}))


def capped(store: Store, cap: int) -> Store:
    """The same store, opened again with a record size cap of ``cap`` bytes."""
    if isinstance(store, FilesStore):
        return FilesStore(store.root, max_record_bytes=cap)
    target = store.path if hasattr(store, "path") else store.url
    return type(store)(target, max_record_bytes=cap)  # type: ignore[call-arg]  # a SQL store class, not the protocol


@pytest.fixture
def store_factory(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """Fresh stores of ``backend`` (files, sqlite, postgres), each in its own folder or schema; strict."""
    count = itertools.count()
    schemas: list[str] = []

    def new() -> Store:
        n = next(count)
        if backend == "files":
            return FilesStore(tmp_path / f"store-{n}")
        if backend == "sqlite":
            return open_store(f"sqlite://{tmp_path}/ledger-{n}.db")
        base = require_postgres()
        schemas.append(f"t_{uuid.uuid4().hex[:16]}")
        return open_store(f"{base}{'&' if '?' in base else '?'}schema={schemas[-1]}")

    damage = FilesDamage() if backend == "files" else SqlDamage()
    yield StoreFactory(new, damage=damage, capped=capped, cli=True, strict=True)
    if schemas:
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class TestConformance(StoreConformance):
    """The installable suite on phaselog's own stores."""


# -- what only phaselog's own stores can show --------------------------------------------------------
def test_doctor_reports_leftover_temp_files(store: Store) -> None:
    led = Ledger(store)
    led.write(T, R1, "implement", impl(1))
    if not isinstance(store, FilesStore):
        # A SQL write is one transaction: there are no temp files, and doctor finds nothing.
        rep = doctor(led, T)
        assert rep.healthy, rep.findings
        assert not hasattr(store, "leftovers")
        return
    tmp = store.root / "checkpoints" / T / RUN1 / ".tmp-1-deadbeef"
    tmp.write_bytes(b"half")
    os.utime(tmp, (0, 0))
    assert [f["kind"] for f in doctor(led, T).findings] == ["leftover_temp"]


def test_round_trip_files_sqlite_postgres_files_keeps_records_and_hashes(tmp_path: Path, pg_schema_url: str) -> None:
    clock = Clock()
    source = FilesStore(tmp_path / "a")
    populate(Ledger(source, clock=clock), clock)
    want = export_text(source)
    chain = [
        source,
        open_store(f"sqlite://{tmp_path}/b.db"),
        open_store(pg_schema_url),
        FilesStore(tmp_path / "d"),
    ]
    try:
        for a, b in itertools.pairwise(chain):
            rep = import_records(b, export_records(a))
            assert (rep.added, rep.conflicts) == (records_in(json.loads(x) for x in want), [])
            assert export_text(b) == want
            assert Ledger(b).verify(T).ok

        # The final files store holds the same files the first one does (seed files byte for byte).
        def tree(root: Path) -> dict[str, bytes]:
            return {
                str(p.relative_to(root)): p.read_bytes()
                for p in sorted(root.rglob("*"))
                if p.is_file() and p.name != ".lock" and not p.name.startswith(".meta_")
            }

        assert tree(tmp_path / "d") == tree(tmp_path / "a")
    finally:
        for s in chain:
            s.close()


def phaselog_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phaselog", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PHASELOG_HOME": "/nonexistent-phaselog-home"},
        check=False,
    )


def test_cli_copy_export_import_across_backends(tmp_path: Path, pg_schema_url: str) -> None:
    clock = Clock()
    source = FilesStore(tmp_path / "a")
    populate(Ledger(source, clock=clock), clock)
    n = records_in(export_records(source))
    n_lines = len(list(export_records(source)))  # the records and their pipelines' manifests
    source.close()
    urls = {
        "files": str(tmp_path / "a"),
        "sqlite": f"sqlite://{tmp_path}/b.db",
        "postgres": pg_schema_url,
    }
    for src, dst in (("files", "sqlite"), ("sqlite", "postgres")):
        for added, skipped in ((n, 0), (0, n)):  # the second copy finds everything present
            proc = phaselog_cli("copy", "--from", urls[src], "--to", urls[dst], "--no-progress")
            assert proc.returncode == 0, proc.stdout + proc.stderr
            out = json.loads(proc.stdout)
            assert (out["records"], out["added"], out["skipped"], out["conflicts"]) == (
                n,
                added,
                skipped,
                [],
            )
    exports = {name: phaselog_cli("export", "--store", url) for name, url in urls.items()}
    assert {p.returncode for p in exports.values()} == {0}
    assert exports["files"].stdout == exports["sqlite"].stdout == exports["postgres"].stdout
    assert len(exports["files"].stdout.splitlines()) == n_lines
    dump = tmp_path / "dump.jsonl"
    dump.write_text(exports["postgres"].stdout)
    target = f"sqlite://{tmp_path}/c.db"
    first = json.loads(phaselog_cli("import", "--input", str(dump), "--store", target).stdout)
    second = json.loads(phaselog_cli("import", "--input", str(dump), "--store", target).stdout)
    assert (first["added"], first["skipped"], second["added"], second["skipped"]) == (n, 0, 0, n)
    # A tampered dump is refused, naming the line.
    lines = dump.read_text().splitlines()
    doc = json.loads(lines[-1])
    doc["document"]["checkpoint"]["phase_payload"]["files_changed"] = ["src/forged.py"]
    lines[-1] = json.dumps(doc)
    dump.write_text("\n".join(lines) + "\n")
    proc = phaselog_cli("import", "--input", str(dump), "--store", f"sqlite://{tmp_path}/d.db")
    assert proc.returncode == 1
    err = json.loads(proc.stdout)
    assert err["error_code"] == "invalid"
    assert f"line {n_lines}" in err["error"]  # the last line, counting the manifests' lines


def cli(store_or_url: Store | str, *args: str, ok: bool = True) -> dict[str, Any]:
    url = store_or_url if isinstance(store_or_url, str) else store_or_url.url
    proc = subprocess.run(
        [sys.executable, "-m", "phaselog", *args, "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PHASELOG_HOME": "/nonexistent-phaselog-home"},
        check=False,
    )
    assert (proc.returncode == 0) == ok, (proc.returncode, proc.stdout, proc.stderr)
    data: dict[str, Any] = json.loads(proc.stdout)
    data.pop("correlation_id", None)
    return data


def write_fixed(led: Ledger) -> list[str]:
    """The same records, timestamps included, into any store; returns their content hashes."""
    out = [
        led.write(T, R1, "implement", None, status="failed", error="boom", timestamp=T0),
        led.write(
            T,
            R1,
            "implement",
            impl(2),
            timestamp=T0 + timedelta(minutes=1),
            repo_commit_map={"app": "a1b2c3d"},
            decisions=[decision("d1")],
        ),
        led.write(T, R1, "local_review", LOCAL_REVIEW, timestamp=T0 + timedelta(minutes=2)),
        led.write(T, R2, "implement", impl(3), timestamp=T0 + timedelta(minutes=3)),
    ]
    return [r.record.content_hash for r in out]


def test_same_record_same_hash_and_same_cli_json_on_every_backend(tmp_path: Path, pg_schema_url: str) -> None:
    stores = {
        "files": FilesStore(tmp_path / "files"),
        "sqlite": open_store(f"sqlite://{tmp_path}/x.db"),
        "postgres": open_store(pg_schema_url),
    }
    try:
        hashes = {name: write_fixed(Ledger(s)) for name, s in stores.items()}
        assert hashes["files"] == hashes["sqlite"] == hashes["postgres"]
        reads = {name: Ledger(s).read(T, R1, "implement").record for name, s in stores.items()}
        assert reads["files"] == reads["sqlite"] == reads["postgres"]
        commands = [
            ("read", "--ticket-id", T, "--run-id", R1, "--phase", "implement"),
            ("read", "--ticket-id", T, "--run-id", R1, "--phase", "implement", "--attempt", "1"),
            ("list", "--ticket-id", T),
            ("list", "--ticket-id", T, "--limit", "2"),
            ("status", "--ticket-id", T, "--run-id", R1),
            ("verify", "--ticket-id", T),
            ("decisions", "--ticket-id", T),
        ]
        for args in commands:
            outs = {name: cli(s, *args) for name, s in stores.items()}
            assert outs["files"] == outs["sqlite"] == outs["postgres"], args
            assert outs["files"]["success"] is True
        # Errors are the same too.
        errs = {
            name: cli(s, "read", "--ticket-id", T, "--run-id", R2, "--phase", "local_review", ok=False)
            for name, s in stores.items()
        }
        assert errs["files"] == errs["sqlite"] == errs["postgres"]
        assert errs["files"]["error_code"] == "not_found"
        dups = {
            name: cli(
                s,
                "write",
                "--ticket-id",
                T,
                "--run-id",
                R1,
                "--phase",
                "implement",
                "--attempt",
                "2",
                "--payload",
                json.dumps(IMPLEMENT),
                ok=False,
            )
            for name, s in stores.items()
        }
        assert dups["files"] == dups["sqlite"] == dups["postgres"]
        assert dups["files"]["error_code"] == "already_exists"
    finally:
        for s in stores.values():
            s.close()
