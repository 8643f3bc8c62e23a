"""The CLI imports only the module of the command it runs (fast start), and AREAS says truly which
module registers which command (else a command would vanish from a lazy command line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers import cli_env
from phaselog.cli import cli
from phaselog.cli._main import AREAS


def test_areas_map_every_command_to_the_module_that_registers_it() -> None:
    found: dict[str, list[str]] = {}
    for name, cmd in cli.commands.items():
        assert cmd.callback is not None, name
        found.setdefault(cmd.callback.__module__.rpartition(".")[2], []).append(name)
    assert {area: sorted(names) for area, names in found.items()} == {
        area: sorted(names) for area, names in AREAS.items()
    }


def test_help_lists_commands_in_area_order() -> None:
    import click

    names = cli.list_commands(click.Context(cli))
    assert names == [name for names in AREAS.values() for name in names]


def test_a_command_imports_only_its_own_area() -> None:
    code = (
        "import json, sys, click\n"
        "from phaselog.cli import cli\n"
        "assert cli.get_command(click.Context(cli), 'read') is not None\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('phaselog.cli.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))
    assert "phaselog.cli.records" in loaded
    assert not loaded & {f"phaselog.cli.{area}" for area in AREAS if area != "records"}


# What `phaselog read` must not pay for at start (bench/bench_start.py): each was imported or compiled
# eagerly once, and made lazy because the read path never uses it.
READ_CODE = """
import json, re, sys
compiled = []
_compile = re.compile
def spy(pattern, flags=0):
    # Judge the caller by its module name, never by its file's path: a checkout or a virtualenv under a
    # folder named "phaselog…" would count a dependency's patterns as ours.
    where = sys._getframe(1).f_globals.get("__name__") or ""
    if (where == "phaselog" or where.startswith("phaselog.")) and where != "phaselog.model._lazyre":
        compiled.append((where, str(pattern)))
    return _compile(pattern, flags)
re.compile = spy
from phaselog.cli import _main
try:
    _main.main(sys.argv[1:])
except SystemExit as exc:
    assert exc.code == 0, exc.code
from phaselog.model._lazyre import LazyPattern
lazy = sorted(
    f"{name}.{attr}"
    for name, mod in list(sys.modules.items()) if name.startswith("phaselog")
    for attr, value in vars(mod).items() if isinstance(value, LazyPattern) and value._compiled is not None
)
sys.stderr.write(json.dumps({"modules": sorted(sys.modules), "compiled": compiled, "lazy_compiled": lazy}))
"""

#: Module-level patterns the read path uses anyway (identifiers, entry names): compiling them eagerly costs nothing.
READ_USES = {"phaselog.model.ids", "phaselog.stores.names"}


def _read_process(tmp_path: Path) -> dict[str, Any]:
    from phaselog.ledger.facade import Ledger
    from phaselog.stores.files.store import FilesStore

    root = tmp_path / "store"
    with Ledger(FilesStore(root)) as ledger:
        ledger.write("LAZY-1", "r1", "implement", {"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []})
    args = ["read", "--ticket-id", "LAZY-1", "--run-id", "r1", "--phase", "implement"]
    res = subprocess.run(
        [sys.executable, "-c", READ_CODE, *args], env=cli_env(root), capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["success"] is True
    report: dict[str, Any] = json.loads(res.stderr.strip().splitlines()[-1])
    return report


def test_read_does_not_import_what_only_other_commands_use(tmp_path: Path) -> None:
    modules = set(_read_process(tmp_path)["modules"])
    assert "phaselog.cli.records" in modules  # the probe did run the command
    # shutil (with bz2, lzma): only printing a spooled stream copies a file object.
    assert not modules & {"shutil", "bz2", "lzma"}
    # The Ledger builds a service (importing its module) when first used; a read validates nothing.
    services = {"writes", "status", "derive", "progress", "gates", "audit", "fork", "verify", "retention"}
    assert not modules & {f"phaselog.ledger.{name}" for name in services}
    assert not modules & {"phaselog.model.validation", "phaselog.model.formats"}
    # The stored names give the phase: no pipeline is resolved, so none of what resolving takes.
    resolving = {
        "model.pipelines",
        "model.entries",
        "ledger.markers",
        "ledger.recorded_pipelines",
        "stores.manifests",
        "stores.snapshot",
    }
    assert not modules & {f"phaselog.{name}" for name in resolving}
    # Leases and retention: their value types (dataclasses, ~3.5 M instructions each) and the files
    # store's lease module are built by the runner and prune, never by a read (D334).
    assert not modules & {"phaselog.stores.admin_values", "phaselog.stores.files.lease"}
    # Events (and the logging module they warn through) and a run's shape come with a write, a
    # judgement or a status; a read of a record raises nothing and draws nothing.
    assert not modules & {"phaselog.model.events", "phaselog.views.graph", "logging"}


def test_read_compiles_no_pattern_it_does_not_use(tmp_path: Path) -> None:
    report = _read_process(tmp_path)
    # The spy does see phaselog's own module-level patterns (the identifiers'), so an empty list below means
    # something.
    assert {where for where, _ in report["compiled"]} & READ_USES
    eager = [(where, pattern) for where, pattern in report["compiled"] if where not in READ_USES]
    assert eager == [], "compile these on first use (phaselog.model._lazyre.LazyPattern)"
    # Payload formats, manifest names and pipeline fields are checked by other commands only.
    assert not [
        name
        for name in report["lazy_compiled"]
        if name.startswith(("phaselog.model.formats.", "phaselog.model.pipelines."))
    ]
    assert not [name for name in report["lazy_compiled"] if name.startswith("phaselog.stores.manifests.")]


def test_the_command_line_collects_garbage_less_often_than_python_by_default() -> None:
    code = "import gc; from phaselog.cli import main; print(gc.get_threshold()[0], gc.isenabled())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) >= 10_000  # Python's default is 700: ~30 collections of a command's start
    assert out[1] == "True"  # less often, never off: long-running commands (ui, worker) free cycles


def test_a_read_from_sqlite_loads_no_snapshot(tmp_path: Path) -> None:
    """`phaselog read` on a SQL store is one statement (read_phase): the run snapshot's modules
    (stores.snapshot, the SQL snapshot) are imported by a write or a status, never at its start."""
    from phaselog.ledger.facade import Ledger
    from phaselog.stores.sql.sqlite import SqliteStore

    db = tmp_path / "l.db"
    with Ledger(SqliteStore(db)) as ledger:
        ledger.write("LAZY-1", "r1", "implement", {"branch_name": "b", "commit_sha": "a1b2c3d", "files_changed": []})
    args = ["read", "--store", f"sqlite:///{db}", "--ticket-id", "LAZY-1", "--run-id", "r1", "--phase", "implement"]
    res = subprocess.run(
        [sys.executable, "-c", READ_CODE, *args],
        env=cli_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["success"] is True
    modules = set(json.loads(res.stderr.strip().splitlines()[-1])["modules"])
    assert "phaselog.stores.sql.store" in modules  # the probe did read from SQLite
    assert not modules & {"phaselog.stores.snapshot", "phaselog.stores.sql.snapshot", "phaselog.ledger.status"}


def test_the_lease_and_retention_types_are_still_the_contracts_names() -> None:
    """``phaselog.stores.base`` re-exports them on first use (PEP 562), so a backend or a caller that
    imports them from the contract keeps working (D334)."""
    from phaselog.stores import admin_values, base

    for name in ("RunFence", "LeaseState", "Verdict", "Judge", "PruneTarget"):
        assert getattr(base, name) is getattr(admin_values, name)
        assert name in base.__all__
