"""A store opened read-only (``open_store(url, read_only=True)``, what the dashboard reads through):
every read works as usual, every write is refused with a typed error, and SQLite and PostgreSQL
refuse writes themselves too (mode=ro, read-only sessions)."""

from __future__ import annotations

from pathlib import Path

import pytest

import phaselog
import ui_data
from phaselog.model.errors import StoreError, UsageError
from phaselog.stores import open_store
from phaselog.stores.base import Store

pytestmark = pytest.mark.all_stores


def _filled(store: Store) -> dict[str, str]:
    ledger = phaselog.Ledger(store, clock=ui_data.Clock())
    runs = ui_data.build(ledger)
    store.close()
    return runs


def test_reads_see_what_a_writable_store_sees(store: Store) -> None:
    runs = _filled(store)
    writable = phaselog.Ledger(open_store(store.url))
    reader = phaselog.Ledger(open_store(store.url, read_only=True))
    try:
        for ticket, run in (("VID-7", runs["vid"]), ("PROJ-1234", runs["proj"])):
            assert reader.status(ticket, run).to_json() == writable.status(ticket, run).to_json()
            assert reader.history(ticket) == writable.history(ticket)
        assert reader.verify("VID-7").ok
    finally:
        reader.close()
        writable.close()


def test_every_write_is_refused(store: Store) -> None:
    runs = _filled(store)
    reader = phaselog.Ledger(open_store(store.url, read_only=True))
    try:
        attempts = {
            "write": lambda: reader.write("PROJ-1234", runs["proj"], "create_pr", ui_data.PAYLOADS["create_pr"]),
            "progress": lambda: reader.progress("PROJ-1234", runs["proj"], "create_pr", "step", step=3),
            "approve": lambda: reader.approve("VID-7", runs["vid"], "proposal", by="ana"),
            "init": lambda: reader.init_ticket("NEW-1", title="x", pipeline="ticket-pipeline"),
        }
        for name, attempt in attempts.items():
            with pytest.raises(StoreError) as err:
                attempt()
            assert err.value.context.get("rule") == "read_only", name
    finally:
        reader.close()
    after = phaselog.Ledger(open_store(store.url))
    try:
        assert after.status("VID-7", runs["vid"]).phase("proposal").state == "awaiting_approval"
        assert after.store.tickets() == ["PROJ-1234", "VID-7", "XSS-1"]
    finally:
        after.close()


def test_the_database_itself_refuses_writes(store: Store) -> None:
    _filled(store)
    reader = open_store(store.url, read_only=True)
    try:
        if not hasattr(reader, "dialect"):
            # no engine below the files store: its lowest layer (folder creation, locks) refuses
            with pytest.raises(StoreError) as refused:
                reader.open_dir("checkpoints", "NEW-1", create=True)  # type: ignore[attr-defined]
            assert refused.value.context.get("rule") == "read_only"
            return
        reader.tickets()  # connected
        with pytest.raises(Exception) as err:
            reader.conn.execute("DELETE FROM phaselog_checkpoints")  # type: ignore[attr-defined]
        assert "read" in str(err.value).lower()  # "attempt to write a readonly database" / "read-only transaction"
    finally:
        reader.close()


def test_read_only_implies_never_created_and_never_migrated(store: Store, tmp_path: Path) -> None:
    url = store.url
    with pytest.raises(UsageError):
        open_store(url, read_only=True, migrate=True)
    missing = open_store(str(tmp_path / "absent"), read_only=True)
    with pytest.raises(Exception) as err:
        missing.tickets()
    assert getattr(err.value, "error_code", "") == "store_not_found"
    assert not (tmp_path / "absent").exists()
