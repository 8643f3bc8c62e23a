"""Moving data between stores: export (JSON Lines), import (verifying every hash), copy.

Each line is one record with its content hash, in a stable order: tickets sorted; per ticket its
marker revisions, then per run (sorted) its checkpoints by (phase ordinal, attempt), its progress
events, approvals, prune notes and log entries (kind ``logs``: chunks and kept logs) by name; a
ticket's anchoring seals (kind ``tree``, :mod:`phaselog.transfer.seals`) follow its markers. Import
recomputes every hash before writing anything of that record and is idempotent: a record already
present with the same hash is skipped; one present with another hash is reported as a conflict and
left as it is.

    {"type": "checkpoint", "ticket_id": …, "run_id": …, "content_hash": …, "document": {…}}
    {"type": "entry", "kind": "progress", "ticket_id": …, "run_id": …, "name": …, "content_hash": …,
     "document": {…}}
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phaselog.ledger.facade import Ledger
from phaselog.ledger.prune_notes import document_hash
from phaselog.ledger.seals import SEAL_KIND
from phaselog.model.entries import entry_bytes
from phaselog.model.errors import AlreadyExists, Conflict, Corrupt, InvalidRecord, PhaselogError
from phaselog.model.limits import MAX_RECORD_BYTES, json_loads
from phaselog.model.records import Checkpoint, PipelineRef
from phaselog.stores.base import Damaged, Store
from phaselog.stores.kernel import record_document
from phaselog.transfer.importing import Plan, entry_type, parse_line, plan_markers, plan_run
from phaselog.transfer.importing import check_entry_phases as check_phases
from phaselog.transfer.manifests import ExportManifests, is_manifest_line, parse_manifest_line, record_imported
from phaselog.transfer.seals import is_seal_line, parse_seal_line, plan_seals, seal_body, seal_hash
from phaselog.views.streams import spool

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger

EXPORT_VERSION = 1


def entry_hash(kind: str, document: Any) -> str:
    """The content hash of an audit entry's document (as its record class computes it)."""
    if kind == "pruned":
        return document_hash(document)
    if kind == SEAL_KIND:
        return seal_hash(document)
    return str(entry_type(kind, document).from_json(document).content_hash)


def _checkpoint_document(store: Store, record: Checkpoint) -> dict[str, Any]:

    doc: dict[str, Any] = json.loads(record_document(record))
    doc.pop("checkpoint_file_sha256", None)
    return doc


def export_records(store: Store, ticket_id: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield every record of a ticket (or of the store) as export lines, in a stable order."""

    manifests = ExportManifests(store)  # each pipeline's manifest once, before its first record
    tickets = [ticket_id] if ticket_id is not None else store.tickets()
    for tid in tickets:
        yield from _entry_lines(store, "markers", tid, None)
        yield from _entry_lines(store, SEAL_KIND, tid, None)
        for rid in store.runs(tid):
            for item in store.iter_records(tid, rid):
                if isinstance(item, Damaged):
                    raise Corrupt(
                        f"cannot export {item.location}: {item.message} (run `phaselog doctor`)", path=item.location
                    )
                rec = item.record
                yield from manifests.lines_for(rec.pipeline)
                yield {
                    "type": "checkpoint",
                    "ticket_id": tid,
                    "run_id": rid,
                    "content_hash": rec.content_hash,
                    "document": _checkpoint_document(store, rec),
                }
            for kind in ("progress", "approvals", "pruned", "logs"):
                yield from _entry_lines(store, kind, tid, rid)


def _entry_lines(store: Store, kind: str, ticket_id: str, run_id: str | None) -> Iterator[dict[str, Any]]:
    try:
        items = store.entries(kind, ticket_id, run_id)
    except PhaselogError:
        return
    for name, location, data in items:
        if isinstance(data, Corrupt):
            raise Corrupt(f"cannot export {location}: {data.message}", path=location)
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise Corrupt(f"cannot export {location}: not JSON ({exc})", path=location) from None
        yield {
            "type": "entry",
            "kind": kind,
            "ticket_id": ticket_id,
            "run_id": run_id,
            "name": name,
            "content_hash": entry_hash(kind, doc),
            "document": doc,
        }


@dataclass
class ImportReport:
    """What an import did."""

    added: int = 0
    skipped: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    #: Pipeline manifests recorded in the target (new ones; those it held already are not counted).
    pipelines_recorded: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "added": self.added,
            "skipped": self.skipped,
            "conflicts": self.conflicts,
            "pipelines_recorded": self.pipelines_recorded,
        }


def import_records(
    store: Store,
    lines: Iterable[Any],
    *,
    on_record: Callable[[], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    pipelines_root: str | os.PathLike[str] | None = None,
) -> ImportReport:
    """Write export lines into ``store`` (see :mod:`phaselog.transfer.importing`). Idempotent.

    Every line is checked as a write checks its record, and linked to what is stored, before
    anything is stored; a bad line raises InvalidRecord naming it (nothing is stored), a record
    that does not link is refused with what depends on it (``conflicts``), the rest is stored.
    ``pipelines_root``: where the records' pipeline manifests are (``copy`` passes the source's
    root); by default the target's own, as for a write.

    Memory stays flat: ``lines`` is read once, each line checked and kept in a spooled file;
    then, run by run (an export lists each run's lines together), the lines are planned and
    stored. Lines not grouped by run (not an export's order) are planned all at once in memory.
    ``on_total`` gets the number of lines once they are all checked; ``on_record`` one call per line.
    """

    ledger = Ledger(store, pipelines_root=pipelines_root)
    manifests: dict[tuple[str, str], Any] = {}  # the import's own pipeline lines (manifest_transfer)

    def check_entry_phases(items: list[Any], led: Ledger) -> None:
        check_phases(items, led, manifests)

    with spool() as saved:
        # Pass 1: check every line on its own (and each run's entries against its pipeline).
        total, grouped, key = 0, True, None
        group: list[Any] = []
        deferred: InvalidRecord | None = None  # the first phase error, raised after every line parsed
        for n, line in enumerate(lines, start=1):
            saved.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
            if is_manifest_line(line):  # an export writes it before the records that name it
                pipeline = parse_manifest_line(n, line)
                manifests[(pipeline.name, pipeline.manifest_hash)] = pipeline
                continue
            item = _parse(n, line, ledger, manifests)
            total += 1
            here = (item.ticket_id, item.run_id or "")
            if grouped and key is not None and here < key:
                grouped = False  # not in export order: checked and planned all at once below
            if grouped and here != key:
                deferred = deferred or _phase_error(check_entry_phases, group, ledger)
                group = []
            key = here
            if grouped:
                group.append(item)
        if grouped:
            deferred = deferred or _phase_error(check_entry_phases, group, ledger)
            if deferred is not None:
                raise deferred
        group = []
        if on_total:
            on_total(total)
        saved.seek(0)
        parsed = ((n, json_loads(text)) for n, text in enumerate(saved, start=1))
        items = (_parse(n, line, ledger, manifests) for n, line in parsed if not is_manifest_line(line))
        # The manifests first: a record stored here never lacks its pipeline's manifest.
        recorded = record_imported(store, manifests, [PipelineRef(n, "", h) for n, h in manifests])
        if grouped:
            rep = _import_groups(store, ledger, _consecutive(items), on_record)
        else:
            everything = list(items)
            check_entry_phases(everything, ledger)
            rep = _import_groups(store, ledger, _by_run(everything), on_record)
        rep.pipelines_recorded = recorded
        return rep


def _phase_error(check: Callable[[list[Any], Ledger], None], group: list[Any], ledger: Ledger) -> InvalidRecord | None:
    try:
        check(group, ledger)
    except InvalidRecord as exc:
        return exc
    return None


def _parse(n: int, line: Any, ledger: Ledger, manifests: dict[tuple[str, str], Any]) -> Any:
    return parse_seal_line(n, line) if is_seal_line(line) else parse_line(n, line, ledger, manifests)


def _group_key(item: Any) -> tuple[str, str | None, bool]:
    return item.ticket_id, item.run_id, item.type == SEAL_KIND


def _consecutive(items: Iterable[Any]) -> Iterator[list[Any]]:
    """Runs of items with the same (ticket, run) — a ticket's seals apart — in input order."""
    group: list[Any] = []
    for item in items:
        if group and _group_key(item) != _group_key(group[0]):
            yield group
            group = []
        group.append(item)
    if group:
        yield group


def _by_run(items: list[Any]) -> list[list[Any]]:
    """Items grouped by (ticket, run) wherever they are: every ticket's markers first, then runs."""
    markers: dict[tuple[str, str | None, bool], list[Any]] = {}
    runs: dict[tuple[str, str], list[Any]] = {}
    for item in items:
        if item.run_id is None:
            markers.setdefault(_group_key(item), []).append(item)
        else:
            runs.setdefault((item.ticket_id, item.run_id), []).append(item)
    return [*markers.values(), *runs.values()]


def _import_groups(
    store: Store, ledger: Ledger, groups: Iterable[list[Any]], on_record: Callable[[], None] | None
) -> ImportReport:
    """Plan and store each group (one ticket's markers, or one run) in turn."""

    rep = ImportReport()
    latest: dict[tuple[str, str], dict[int, int]] = {}  # (ticket, run) -> ordinal -> newest attempt
    for group in groups:
        first = group[0]
        plan = Plan()
        if first.type == SEAL_KIND:
            plan_seals(store, first.ticket_id, group, plan)
        elif first.run_id is None:
            plan_markers(ledger, first.ticket_id, group, plan)
        else:
            plan_run(ledger, first.ticket_id, first.run_id, group, plan)
        rep.skipped += plan.skipped
        rep.conflicts.extend(plan.refused)
        for item in plan.store:
            try:
                _store(store, item, latest)
            except (AlreadyExists, Conflict) as exc:  # a writer got there meanwhile
                rep.conflicts.append({"line": item.where, "path": item.ticket_id, "message": exc.message})
            else:
                rep.added += 1
            if on_record:
                on_record()
        if on_record:
            for _ in range(len(group) - len(plan.store)):
                on_record()
    rep.conflicts.sort(key=lambda c: int(str(c["line"]).split()[-1]))
    return rep


def _store(store: Store, item: Any, latest: dict[tuple[str, str], dict[int, int]]) -> None:
    if item.type == "checkpoint":
        cp = item.record
        key = (cp.ticket_id, cp.run_id)
        for fresh in (False, True):
            if fresh or key not in latest:  # the run's newest attempts, listed once per run (not per record)
                latest[key] = {}
                for r in store.attempts(*key):
                    latest[key][r.phase_ordinal] = max(latest[key].get(r.phase_ordinal, 0), r.attempt_number)
            newest = latest[key]
            try:
                store.append(cp, expected_latest=newest.get(cp.phase_ordinal, 0))
            except Conflict:
                if fresh:
                    raise
                continue  # another writer appended to the run meanwhile: list it again, once
            newest[cp.phase_ordinal] = max(newest.get(cp.phase_ordinal, 0), cp.attempt_number)
            return
        return
    if item.type == SEAL_KIND:
        store.put_entry(SEAL_KIND, item.ticket_id, None, item.name, seal_body(item))
        return
    if item.type == "pruned":
        note = item.record.note
        body = note.body() if note is not None else (json.dumps(item.document, ensure_ascii=False) + "\n").encode()
    else:
        body = entry_bytes(item.record)
    store.put_entry(item.type, item.ticket_id, item.run_id, item.name, body)


#: The longest export line import reads (a record at the size cap, JSON-escaped, with room).
MAX_LINE_BYTES = 8 * MAX_RECORD_BYTES


def read_lines(stream: Any) -> Iterator[Any]:
    """Parse JSON Lines from a binary (or text) stream, naming the line of any error.

    Each line must be UTF-8 JSON of at most MAX_LINE_BYTES; NaN, Infinity, numbers that overflow
    and nesting too deep for the parser are refused as InvalidRecord, never a crash.
    """
    n = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        n += 1
        if len(raw) > MAX_LINE_BYTES:
            raise _line_error(n, f"longer than {MAX_LINE_BYTES} bytes", "max_line_bytes")
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _line_error(n, f"not UTF-8 text (byte {exc.start})", "utf8") from None
        text = raw.strip()
        if not text:
            continue
        try:
            yield json_loads(text)
        except RecursionError:
            raise _line_error(n, "nested too deeply", "json_depth") from None
        except ValueError as exc:
            raise _line_error(n, f"not valid JSON ({exc})", "json") from None


def _line_error(n: int, message: str, rule: str) -> InvalidRecord:
    return InvalidRecord(
        f"line {n}: {message}; nothing was imported",
        line=n,
        rule=rule,
        errors=[{"field": f"line {n}", "rule": rule, "message": message}],
    )
