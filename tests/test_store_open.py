"""Opening stores (issues 8, 9, 10): reads never create, URLs have one grammar, errors are typed.

Each store-level test runs on every backend (``all_stores``): a store that does not exist is
a missing directory (files), a missing database file (SQLite) or a schema never created
(PostgreSQL). The CLI runs as a real subprocess; nothing here mocks a store.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import IMPLEMENT, LOCAL_REVIEW, PG_URL, require_postgres
from phaselog import StoreError, UsageError
from phaselog.ledger.facade import Ledger
from phaselog.model.errors import Corrupt, StoreNotFound
from phaselog.stores import open_store
from phaselog.stores.urls import ACCEPTED_FORMS, parse_store_url

T = "OPEN-1"


def phaselog_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """``python -m phaselog ARGS`` in a subprocess with no PHASELOG_* from outside."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PHASELOG_")}
    base["PHASELOG_HOME"] = str(cwd / "default-home")
    proc = subprocess.run(
        [sys.executable, "-m", "phaselog", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, **(env or {})},
        timeout=120,
        check=False,
        **kw,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "internal error" not in proc.stdout, proc.stdout
    return proc


def write_args(
    phase: str = "implement", payload: dict[str, Any] | None = None, *, via: Path | None = None
) -> list[str]:
    """Arguments of ``phaselog write`` for run r1; a big payload goes through the file ``via``."""
    text = json.dumps(payload or IMPLEMENT)
    if via is not None:
        via.write_text(text)
        text = f"@{via}"
    return ["write", "--ticket-id", T, "--run-id", "r1", "--phase", phase, "--payload", text]


# -- stores that do not exist ----------------------------------------------------------------------
def pg_schema_exists(schema: str) -> bool:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


@pytest.fixture
def missing(backend: str, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """(URL of a store that does not exist, a function telling whether anything of it exists now)."""
    if backend == "files":
        yield str(tmp_path / "typo" / "store"), (tmp_path / "typo").exists
    elif backend == "sqlite":
        yield f"sqlite://{tmp_path / 'typo' / 'ledger.db'}", (tmp_path / "typo").exists
    else:
        base = require_postgres()
        schema = f"t_{uuid.uuid4().hex[:16]}"
        yield f"{base}?schema={schema}", lambda: pg_schema_exists(schema)
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.all_stores
def test_a_read_of_a_store_that_does_not_exist_fails_and_creates_nothing(
    missing: tuple[str, Any], tmp_path: Path
) -> None:
    url, exists = missing
    store = open_store(url, create=False)
    ledger = Ledger(store)
    for read in (
        lambda: ledger.list(T),
        lambda: ledger.status(T, "r1"),
        store.tickets,
        lambda: ledger.verify(T),
    ):
        with pytest.raises(StoreNotFound) as info:
            read()
        assert info.value.exit_code == 1
        assert info.value.context["path"] in info.value.message
    store.close()
    assert not exists()
    for args in (["list", "--ticket-id", T], ["status", "--ticket-id", T, "--run-id", "r1"], ["export"]):
        proc = phaselog_cli(*args, "--store", url, cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout
        err = json.loads(proc.stdout)
        assert err["error_code"] == "store_not_found"
        assert err["path"] in err["error"]
        assert "typo" in err["path"] or "schema=" in err["path"]
    assert not exists()


@pytest.mark.all_stores
def test_a_write_creates_the_store_and_then_reads_find_it(missing: tuple[str, Any], tmp_path: Path) -> None:
    url, exists = missing
    lazy = open_store(url)  # create=True: a ledger to write to; opening still creates nothing
    assert lazy.tickets() == []
    assert not exists()
    lazy.close()
    proc = phaselog_cli(*write_args(), "--store", url, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert exists()
    listed = phaselog_cli("list", "--ticket-id", T, "--store", url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stdout
    assert json.loads(listed.stdout)["count"] == 1


@pytest.mark.all_stores
def test_a_store_without_phaselog_schema_names_store_migrate(backend: str, tmp_path: Path, pg_url: str) -> None:
    """An existing but empty database (or schema) is not a store yet: the error says how to make one."""
    if backend == "files":
        url = str(tmp_path / "empty-dir")
        (tmp_path / "empty-dir").mkdir()
        assert open_store(url, create=False).tickets() == []  # an empty directory is an empty files store
        return
    if backend == "sqlite":
        path = tmp_path / "foreign.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE other_app (x INTEGER)")
        con.commit()
        con.close()
        url = f"sqlite://{path}"
    else:
        url = pg_url
    proc = phaselog_cli("list", "--ticket-id", T, "--store", url, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    err = json.loads(proc.stdout)
    assert err["error_code"] == "store_not_found"
    assert "phaselog store migrate" in err["error"]
    migrated = phaselog_cli("store", "migrate", "--store", url, cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stdout
    assert json.loads(migrated.stdout)["from_version"] == 0
    again = phaselog_cli("list", "--ticket-id", T, "--store", url, cwd=tmp_path)
    assert (again.returncode, json.loads(again.stdout)["count"]) == (0, 0)


@pytest.fixture
def pg_url(backend: str, request: pytest.FixtureRequest) -> str:
    """A fresh PostgreSQL schema URL for the postgres backend ('' otherwise)."""
    return str(request.getfixturevalue("pg_schema_url")) if backend == "postgres" else ""


# -- the URL grammar -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "sqlite:rel.db",
        "sqlite:/abs.db",
        "postgres//x",
        "sqlite//x.db",
        "sqlite:///",
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite://host/x.db",
        "sqlite:///x.db?mode=ro",
        "sqlite:///dir/",
        "file:relative",
        "file://host/x",
        "file:///x?y=1",
        "mysql://u@h/db",
        "postgresql://h:99999/db",
        "postgresql://h:0/db",
        "postgresql://h:port/db",
        "postgresql://[::1/db",
        "postgresql://ho st/db",
        "postgresql://h/db?schema=information_schema",
        "postgresql://h/db?schema=pg_catalog",
        "postgresql://h/db?schema=pg_temp_1",
        "postgresql://h/db?schema=Bad-Name",
        "postgresql://h/db?schema=a&schema=b",
        "",
    ],
)
def test_a_malformed_store_url_is_a_usage_error_listing_the_accepted_forms(url: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        parse_store_url(url)
    assert info.value.exit_code == 2
    assert info.value.context["field"] == "store"
    assert info.value.context["accepted"] == list(ACCEPTED_FORMS)
    for form in ACCEPTED_FORMS:
        assert form in info.value.message
    if url:  # (the CLI treats an empty --store as "not given")
        work = tmp_path / "cwd"
        work.mkdir()
        proc = phaselog_cli("list", "--ticket-id", T, "--store", url, cwd=work)
        assert proc.returncode == 2, proc.stdout
        err = json.loads(proc.stdout)
        assert (err["error_code"], err["field"]) == ("usage", "store")
        assert "sqlite:///abs/path/ledger.db" in err["error"]
        write = phaselog_cli(*write_args(), "--store", url, cwd=work)
        assert write.returncode == 2, write.stdout
        assert list(work.iterdir()) == []  # nothing was taken for a files-store directory


def test_the_accepted_forms_mean_what_the_docs_say(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    home = Path.home()
    cases = {
        "/var/lib/phaselog": ("files", Path("/var/lib/phaselog")),
        "rel/dir": ("files", tmp_path / "rel" / "dir"),
        "./name:with:colon": ("files", tmp_path / "name:with:colon"),
        "~/pl": ("files", home / "pl"),
        "file:///var/lib/phaselog": ("files", Path("/var/lib/phaselog")),
        "file://localhost/srv/pl": ("files", Path("/srv/pl")),
        "sqlite:///var/lib/phaselog/ledger.db": ("sqlite", Path("/var/lib/phaselog/ledger.db")),
        "sqlite:////var/lib/phaselog/ledger.db": ("sqlite", Path("/var/lib/phaselog/ledger.db")),
        "sqlite://./data/ledger.db": ("sqlite", tmp_path / "data" / "ledger.db"),
        "sqlite://../ledger.db": ("sqlite", tmp_path.parent / "ledger.db"),
        "sqlite://~/ledger.db": ("sqlite", home / "ledger.db"),
        "sqlite:///tmp/a%20b.db": ("sqlite", Path("/tmp/a b.db")),
    }
    for text, (kind, path) in cases.items():
        spec = parse_store_url(text)
        assert (spec.kind, spec.path) == (kind, path), text
    pg = parse_store_url(
        "postgresql://ci@db.internal:6432/phaselog?options=-c%20search_path%3Dx&schema=pl&sslmode=disable"
    )
    assert (pg.kind, pg.schema) == ("postgresql", "pl")
    assert pg.dsn == "postgresql://ci@db.internal:6432/phaselog?options=-c%20search_path%3Dx&sslmode=disable"
    multi = parse_store_url("postgres://u@h1:5432,h2:5433/db")
    assert multi.dsn == "postgres://u@h1:5432,h2:5433/db"


def test_a_relative_sqlite_url_is_relative_to_the_current_directory(tmp_path: Path) -> None:
    proc = phaselog_cli(*write_args(), "--store", "sqlite://./data/ledger.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert (tmp_path / "data" / "ledger.db").is_file()
    assert not (tmp_path / "default-home").exists()


def test_postgres_url_parameters_reach_libpq_unchanged(pg_schema_url: str) -> None:
    """options=-c%20… must arrive as '-c …' (re-encoding it as '-c+…' breaks the connection)."""
    url = pg_schema_url.replace("?", "?options=-c%20statement_timeout%3D12345&", 1)
    ledger = Ledger(open_store(url))
    try:
        ledger.write(T, "r1", "implement", IMPLEMENT)
        store: Any = ledger.store
        assert store.session.query("SHOW statement_timeout") == [("12345ms",)]
        assert ledger.read(T, "r1", "implement").record.phase == "implement"
    finally:
        ledger.close()


def test_an_unknown_postgres_parameter_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    proc = phaselog_cli("list", "--ticket-id", T, "--store", "postgresql://u@127.0.0.1/db?bogus=1", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert "bogus" in json.loads(proc.stdout)["error"]


# -- typed errors for stores that cannot be used ---------------------------------------------------
def test_a_file_that_is_not_sqlite_is_named_not_an_internal_error(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.db"
    bogus.write_bytes(b"these are my notes, not a database\n" * 200)
    before = bogus.read_bytes()
    for args in (["list", "--ticket-id", T], write_args()):
        proc = phaselog_cli(*args, "--store", f"sqlite://{bogus}", cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout
        err = json.loads(proc.stdout)
        assert (err["error_code"], err["rule"], err["path"]) == ("io_error", "not_a_database", str(bogus))
    assert bogus.read_bytes() == before


def test_a_directory_as_a_sqlite_store_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "ledger.db"
    folder.mkdir()
    for args in (["list", "--ticket-id", T], write_args()):
        proc = phaselog_cli(*args, "--store", f"sqlite://{folder}", cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout
        err = json.loads(proc.stdout)
        assert (err["error_code"], err["rule"], err["path"]) == ("io_error", "is_a_directory", str(folder))
    assert list(folder.iterdir()) == []


def test_a_regular_file_as_a_files_store_is_named(tmp_path: Path) -> None:
    f = tmp_path / "ledger.db"
    f.write_bytes(b"x")
    proc = phaselog_cli(*write_args(), "--store", str(f), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert json.loads(proc.stdout)["rule"] == "not_a_directory"


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make ``path`` unwritable for this user, even for root (``chattr +i``)."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.fail("running as root needs chattr (e2fsprogs) to make a file read-only")
        subprocess.run(["chattr", "+i", str(path)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        mode = path.stat().st_mode
        path.chmod(0o444 if path.is_file() else 0o555)
        try:
            yield
        finally:
            path.chmod(mode)


def test_a_read_only_sqlite_store_reads_and_refuses_writes_by_name(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite://{db}"
    assert phaselog_cli(*write_args(), "--store", url, cwd=tmp_path).returncode == 0
    before = db.read_bytes()
    with read_only(db):
        proc = phaselog_cli(*write_args("local_review", LOCAL_REVIEW), "--store", url, cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout
        err = json.loads(proc.stdout)
        assert (err["error_code"], err["rule"], err["path"]) == ("io_error", "read_only", str(db))
        listed = phaselog_cli("list", "--ticket-id", T, "--store", url, cwd=tmp_path)
        assert (listed.returncode, json.loads(listed.stdout)["count"]) == (0, 1)
    assert db.read_bytes() == before


def test_a_read_only_postgres_session_refuses_writes_by_name(pg_schema_url: str) -> None:
    with Ledger(open_store(pg_schema_url)) as first:
        first.write(T, "r1", "implement", IMPLEMENT)
    url = pg_schema_url.replace("?", "?options=-c%20default_transaction_read_only%3Don&", 1)
    ledger = Ledger(open_store(url, create=False))
    try:
        with pytest.raises(StoreError) as info:
            ledger.write(T, "r1", "local_review", LOCAL_REVIEW)
        assert info.value.context["rule"] == "read_only"
        assert ledger.read(T, "r1", "implement").record.attempt_number == 1
    finally:
        ledger.close()


def _limit_file_size() -> None:
    # A real write that the kernel refuses (EFBIG) part-way, as on a full disk (ENOSPC).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))


@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_a_write_refused_by_the_disk_is_a_typed_error_and_leaves_no_half_record(kind: str, tmp_path: Path) -> None:
    url = str(tmp_path / "store") if kind == "files" else f"sqlite://{tmp_path}/ledger.db"
    assert phaselog_cli(*write_args(), "--store", url, cwd=tmp_path).returncode == 0
    big = {**LOCAL_REVIEW, "issue_fingerprints": [f"fp-{i:07d}-{'x' * 40}" for i in range(12_000)]}
    args = write_args("local_review", big, via=tmp_path / "big.json")
    proc = phaselog_cli(*args, "--store", url, cwd=tmp_path, preexec_fn=_limit_file_size)
    assert proc.returncode == 1, proc.stdout
    err = json.loads(proc.stdout)
    assert err["error_code"] == "io_error"
    listed = phaselog_cli("list", "--ticket-id", T, "--store", url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stdout
    data = json.loads(listed.stdout)
    assert [c["phase"] for c in data["checkpoints"]] == ["implement"]
    assert data["warnings"] == []


def test_a_full_sqlite_database_is_a_typed_error(tmp_path: Path) -> None:
    ledger = Ledger(open_store(f"sqlite://{tmp_path}/ledger.db"))
    ledger.write(T, "r1", "implement", IMPLEMENT)
    store: Any = ledger.store
    pages = store.session.query("PRAGMA page_count")[0][0]
    store.conn.execute(f"PRAGMA max_page_count = {pages + 1}")  # this connection may not grow the file
    big = {**LOCAL_REVIEW, "issue_fingerprints": [f"fp-{i:06d}" for i in range(5000)]}
    with pytest.raises(StoreError) as info:
        ledger.write(T, "r1", "local_review", big)
    assert info.value.context["rule"] == "disk_full"
    assert [r.phase for r in store.attempts(T, ledger.read(T, "r1", "implement").record.run_id)] == ["implement"]
    ledger.close()


def test_a_damaged_sqlite_file_is_reported_as_corrupt_with_its_path(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    ledger = Ledger(open_store(f"sqlite://{db}"))
    for i in range(30):
        ledger.write(T, f"r{i}", "implement", IMPLEMENT)
    ledger.close()
    page = 4096
    data = bytearray(db.read_bytes())
    assert len(data) > 4 * page
    for at in range(page, len(data), page):  # every page but the first (header and schema)
        data[at : at + 64] = b"\xa5" * 64
    db.write_bytes(bytes(data))
    proc = phaselog_cli("list", "--ticket-id", T, "--store", f"sqlite://{db}", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    err = json.loads(proc.stdout)
    assert (err["error_code"], err["rule"], err["path"]) == ("corrupt", "sqlite_corrupt", str(db))
    with pytest.raises(Corrupt), Ledger(open_store(f"sqlite://{db}")) as again:
        again.list(T)


def test_a_postgres_table_altered_behind_phaselog_is_a_typed_error(pg_schema_url: str, tmp_path: Path) -> None:
    import psycopg

    from phaselog.stores.sql.postgres import split_url

    with Ledger(open_store(pg_schema_url)) as first:
        first.write(T, "r1", "implement", IMPLEMENT)
    dsn, schema = split_url(pg_schema_url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{schema}".phaselog_checkpoints RENAME COLUMN body TO body_old')
    proc = phaselog_cli("list", "--ticket-id", T, "--store", pg_schema_url, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    err = json.loads(proc.stdout)
    assert (err["error_code"], err["rule"]) == ("io_error", "schema_mismatch")


# -- closing -----------------------------------------------------------------------------------
def test_after_a_cli_write_the_sqlite_file_alone_holds_every_record(tmp_path: Path) -> None:
    """What people do: copy ledger.db (without -wal) as a backup. It must hold what was acknowledged."""
    db = tmp_path / "live" / "ledger.db"
    url = f"sqlite://{db}"
    assert phaselog_cli(*write_args(), "--store", url, cwd=tmp_path).returncode == 0
    assert phaselog_cli(*write_args("local_review", LOCAL_REVIEW), "--store", url, cwd=tmp_path).returncode == 0
    wal = db.with_name("ledger.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    copy = tmp_path / "backup" / "ledger.db"
    copy.parent.mkdir()
    shutil.copyfile(db, copy)  # the database file only
    listed = phaselog_cli("list", "--ticket-id", T, "--store", f"sqlite://{copy}", cwd=tmp_path)
    assert listed.returncode == 0, listed.stdout
    assert [c["phase"] for c in json.loads(listed.stdout)["checkpoints"]] == ["implement", "local_review"]


def test_close_checkpoints_the_wal_and_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    store = open_store(f"sqlite://{db}")
    other = open_store(f"sqlite://{db}")  # a second connection keeps SQLite from checkpointing on its own
    Ledger(store).write(T, "r1", "implement", IMPLEMENT)
    assert other.tickets() == [T]
    store.close()
    store.close()
    wal = db.with_name("ledger.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    copy = tmp_path / "copy.db"
    shutil.copyfile(db, copy)
    assert open_store(f"sqlite://{copy}", create=False).tickets() == [T]
    other.close()


# -- copy --------------------------------------------------------------------------------------
@pytest.mark.all_stores
def test_copy_from_a_store_that_does_not_exist_fails_and_creates_nothing(
    missing: tuple[str, Any], tmp_path: Path
) -> None:
    url, exists = missing
    target = tmp_path / "target"
    proc = phaselog_cli("copy", "--from", url, "--to", str(target), "--no-progress", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert json.loads(proc.stdout)["error_code"] == "store_not_found"
    assert not exists()
    assert not target.exists()


@pytest.mark.all_stores
def test_copy_defaults_from_to_the_current_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if backend == "files":
        url = str(tmp_path / "src")
    elif backend == "sqlite":
        url = f"sqlite://{tmp_path}/src.db"
    else:
        url = str(request.getfixturevalue("pg_schema_url"))
    assert phaselog_cli(*write_args(), "--store", url, cwd=tmp_path).returncode == 0
    dst = f"sqlite://{tmp_path}/dst.db"
    proc = phaselog_cli("copy", "--to", dst, "--no-progress", cwd=tmp_path, env={"PHASELOG_STORE": url})
    assert proc.returncode == 0, proc.stdout
    out = json.loads(proc.stdout)
    assert (out["records"], out["added"]) == (1, 1)
    listed = phaselog_cli("list", "--ticket-id", T, "--store", dst, cwd=tmp_path)
    assert json.loads(listed.stdout)["count"] == 1
    both = phaselog_cli("copy", "--from", url, "--store", url, "--to", dst, cwd=tmp_path)
    assert both.returncode == 2, both.stdout
    assert json.loads(both.stdout)["field"] == "from"
