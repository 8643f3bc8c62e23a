"""Stores behind a registry keyed by URL scheme: phaselog's three registered, a third party's added by
one call (or an entry point), each backend imported only when its URL is opened, errors that list
every accepted form, and a conformance suite that skips only by declared capability."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from example_backend import BACKEND, JsonDirStore
from phaselog.model.errors import UsageError
from phaselog.stores import FILES, POSTGRES, SQLITE, open_store
from phaselog.stores.base import Capability
from phaselog.stores.registry import (
    Backend,
    OpenOptions,
    StoreURL,
    accepted_forms,
    backend_for,
    backends,
    register_backend,
    schemes,
    unregister_backend,
)
from phaselog.stores.urls import ACCEPTED_FORMS, parse_store_url
from phaselog.testing import StoreFactory
from phaselog.testing._harness import missing, require
from test_example_backend import install_example


@pytest.fixture
def jsondir() -> Iterator[Backend]:
    """The example backend registered by the public function, unregistered afterwards."""
    register_backend(BACKEND)
    yield BACKEND
    unregister_backend(BACKEND)


def test_phaselog_registers_its_three_backends_in_the_order_errors_list_them() -> None:
    assert backends()[:3] == [FILES, SQLITE, POSTGRES]
    assert schemes()[:4] == ("file", "sqlite", "postgresql", "postgres")
    assert accepted_forms() == ACCEPTED_FORMS
    assert [backend_for(s) for s in ("FILE", "sqlite", "Postgres", "postgresql")] == [FILES, SQLITE, POSTGRES, POSTGRES]


def test_a_registered_scheme_opens_its_store_and_lists_its_form(jsondir: Backend, tmp_path: Path) -> None:
    store = open_store(f"jsondir://{tmp_path}/s")
    assert isinstance(store, JsonDirStore)
    assert store.root == tmp_path / "s"
    assert parse_store_url(f"JSONDIR://{tmp_path}/s").kind == "jsondir"
    with pytest.raises(UsageError) as info:
        parse_store_url("mysql://u@h/db")
    assert info.value.context["accepted"] == [*ACCEPTED_FORMS, *jsondir.forms]
    assert jsondir.forms[0] in info.value.message
    # The backend's own grammar refuses with the same error, listing every form.
    with pytest.raises(UsageError) as info:
        parse_store_url("jsondir://host/x")
    assert info.value.context["accepted"] == [*ACCEPTED_FORMS, *jsondir.forms]
    # The checks every URL gets come first: a registered scheme glued to a path is named as such.
    with pytest.raises(UsageError, match="':' missing after the scheme"):
        parse_store_url("jsondir//x")
    with pytest.raises(UsageError, match="needs '//'"):
        parse_store_url("jsondir:x")
    with pytest.raises(UsageError, match="read-only"):
        open_store(f"jsondir://{tmp_path}/s", read_only=True)


def test_unregistering_makes_the_scheme_unknown_again(tmp_path: Path) -> None:
    register_backend(BACKEND)
    register_backend(BACKEND)  # the same backend again: nothing changes
    unregister_backend(BACKEND)
    with pytest.raises(UsageError, match="unsupported scheme 'jsondir'") as info:
        open_store(f"jsondir://{tmp_path}/s")
    assert info.value.context["rule"] == "scheme"
    assert info.value.context["accepted"] == list(ACCEPTED_FORMS)


def test_a_taken_scheme_is_refused_unless_replaced(tmp_path: Path) -> None:
    def opened(url: StoreURL, options: OpenOptions) -> JsonDirStore:
        assert url.path is not None
        return JsonDirStore(url.path / "mine", create=options.create)

    mine = Backend("mine", ("sqlite",), BACKEND.parse, opened, ("sqlite:///x (mine)",))
    with pytest.raises(UsageError) as info:
        register_backend(mine)
    assert (info.value.context["rule"], info.value.context["scheme"]) == ("scheme_taken", "sqlite")
    assert "'sqlite'" in info.value.message
    assert backend_for("sqlite") is SQLITE
    try:
        register_backend(mine, replace=True)
        assert backend_for("sqlite") is mine
    finally:
        unregister_backend(mine)
        register_backend(SQLITE)
    assert backend_for("sqlite") is SQLITE
    assert backends()[:3] == [FILES, POSTGRES, SQLITE]  # re-registered last; put the order back
    for builtin in (SQLITE, POSTGRES):
        unregister_backend(builtin)
        register_backend(builtin)
    assert accepted_forms() == ACCEPTED_FORMS


@pytest.mark.parametrize("scheme", ["", "Json", "1db", "my_db", "a b"])
def test_a_backend_names_lowercase_url_schemes(scheme: str) -> None:
    with pytest.raises(UsageError) as info:
        Backend("bad", (scheme,), BACKEND.parse, BACKEND.open)
    assert info.value.context["rule"] == "scheme"
    with pytest.raises(UsageError):
        Backend("none", (), BACKEND.parse, BACKEND.open)


def run_python(code: str, *, site: Path | None = None) -> Any:
    """Run ``code`` in a new interpreter (this phaselog and tests/ on the path); its last stdout line as JSON."""
    tests = Path(__file__).resolve().parent
    src = tests.parent / "src"
    path = [str(p) for p in (site, src, tests) if p is not None]
    env = {"PYTHONPATH": ":".join(path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_each_backend_is_imported_only_when_its_url_is_opened_and_entry_points_only_for_unknown_schemes(
    tmp_path: Path,
) -> None:
    code = f"""
import json, sys
from phaselog.stores import open_store
open_store("sqlite://{tmp_path}/x.db").close()
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("phaselog.stores.", "importlib.metadata", "psycopg")))))
"""
    loaded = set(run_python(code))
    assert "phaselog.stores.sql.sqlite" in loaded
    assert not loaded & {"phaselog.stores.sql.postgres", "phaselog.stores.files.store", "psycopg"}
    assert "importlib.metadata" not in loaded  # no scan of installed packages for a known scheme


def test_an_installed_backend_is_loaded_from_its_entry_point(tmp_path: Path) -> None:
    site = install_example(tmp_path / "site")
    code = f"""
import json, sys
from phaselog.stores import open_store
from phaselog.stores.registry import schemes
before = "example_backend" in sys.modules
store = open_store("jsondir://{tmp_path}/s")
print(json.dumps({{"before": before, "type": type(store).__name__, "schemes": list(schemes())}}))
"""
    out = run_python(code, site=site)
    assert out == {
        "before": False,
        "type": "JsonDirStore",
        "schemes": ["file", "sqlite", "postgresql", "postgres", "jsondir"],
    }


def test_a_broken_entry_point_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    site = install_example(tmp_path / "site")
    points = next(site.glob("*.dist-info")) / "entry_points.txt"
    points.write_text("[phaselog.stores]\njsondir = example_backend:NO_SUCH_NAME\nbadtype = example_backend:parse\n")
    code = """
import json
from phaselog.model.errors import UsageError
from phaselog.stores import open_store
out = {}
for url in ("jsondir:///tmp/x", "badtype:///tmp/x"):
    try:
        open_store(url)
    except UsageError as exc:
        out[url] = [exc.context["rule"], exc.message]
print(json.dumps(out))
"""
    out = run_python(code, site=site)
    assert out["jsondir:///tmp/x"][0] == "backend_load"
    assert "example_backend:NO_SUCH_NAME" in out["jsondir:///tmp/x"][1]
    assert out["badtype:///tmp/x"][0] == "backend_load"
    assert "must name a phaselog.stores.registry.Backend" in out["badtype:///tmp/x"][1]


def test_importing_phaselog_imports_neither_the_suite_nor_pytest() -> None:
    code = """
import json, sys
import phaselog
from phaselog.stores import open_store
from phaselog.ledger.facade import Ledger
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("phaselog.testing", "pytest", "_pytest")))))
"""
    assert run_python(code) == []


def test_the_suite_skips_by_declared_capability_and_a_strict_factory_fails_instead(tmp_path: Path) -> None:
    store = JsonDirStore(tmp_path / "s")
    assert store.capabilities == frozenset()
    lenient = StoreFactory(lambda: store)
    strict = StoreFactory(lambda: store, strict=True)
    with pytest.raises(pytest.skip.Exception, match=r"lacks Capability\.RETENTION"):
        require(lenient, store, Capability.RETENTION)
    with pytest.raises(pytest.fail.Exception, match=r"lacks Capability\.RETENTION, Capability\.QUARANTINE.*strict"):
        require(strict, store, Capability.RETENTION, Capability.QUARANTINE)
    with pytest.raises(pytest.fail.Exception, match="strict"):
        missing(strict, "a hook")
    require(strict, store)  # nothing asked for: nothing missing
