"""How the conformance suite damages a jsondir store from outside (phaselog.testing.Damage)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from example_backend.store import JsonDirStore, record_file
from phaselog.stores.base import Store
from phaselog.testing import EntryRef, RecordRef


class JsonDirDamage:
    """Edits and garbles the JSON files themselves, as a hand edit or a bad disk would."""

    @staticmethod
    def _record(store: Store, ref: RecordRef) -> Path:
        assert isinstance(store, JsonDirStore)
        name = record_file(ref.phase_ordinal, ref.attempt, ref.phase, completed=ref.completed)
        return store.root / ref.ticket_id / ref.run_id / name

    @staticmethod
    def _entry(store: Store, entry: EntryRef) -> Path:
        assert isinstance(store, JsonDirStore)
        folder = store.root / entry.ticket_id
        if entry.run_id is not None:
            folder = folder / entry.run_id
        return folder / f".{entry.kind}" / f"{entry.name}.json"

    @staticmethod
    def _edit(path: Path, change: Any) -> None:
        doc = json.loads(path.read_bytes())
        change(doc)
        path.write_text(json.dumps(doc), "utf-8")

    def garble_record(self, store: Store, ref: RecordRef) -> None:
        self._record(store, ref).write_bytes(b'{"kind": "phaselog.checkp')

    def edit_payload(self, store: Store, ref: RecordRef, key: str, value: Any) -> None:
        self._edit(self._record(store, ref), lambda doc: doc["checkpoint"]["phase_payload"].__setitem__(key, value))

    def set_schema_version(self, store: Store, ref: RecordRef, version: str) -> None:
        self._edit(self._record(store, ref), lambda doc: doc.__setitem__("schema_version", version))

    def garble_entry(self, store: Store, entry: EntryRef) -> None:
        self._entry(store, entry).write_bytes(b'{"kind": "phaselog.')

    def edit_entry(self, store: Store, entry: EntryRef, fields: Mapping[str, Any]) -> None:
        self._edit(self._entry(store, entry), lambda doc: doc.update(fields))
