"""History entries: every record of a ticket (or a run, or a phase), as JSON, with its sort key.

The records are read run by run (one run's records at a time, through ``Store.iter_records``), so
memory does not grow with the number of records. The order the keys give is the one ``history``
always had: time, then kind (marker, progress, checkpoint, approval), run, phase ordinal, attempt,
sequence; records with no time (damaged) first. ``Ledger.history`` sorts them in memory;
:func:`phaselog.views.history.sorted_history` streams them through an external sort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from phaselog.model.ids import normalize_run_id, run_name_of, validate_ticket_id
from phaselog.model.records import format_timestamp, parse_timestamp
from phaselog.stores.base import Damaged

if TYPE_CHECKING:
    from phaselog.model.entries import Approval, Marker, ProgressEvent
    from phaselog.model.pipelines import Pipeline
    from phaselog.stores.base import Store

_KIND_ORDER = {"marker": 0, "progress": 1, "checkpoint": 2, "approval": 3}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
#: Damaged entries have no time: they sort first (before any real time).
_NO_TIME = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICRO

HistoryKey = tuple[int, int, str, int, int, int]


def _key(entry: dict[str, Any], ordinal: int) -> HistoryKey:
    # The time itself, not its text: as strings "…:00.5Z" sorts before "…:00Z" ('.' < 'Z').
    at = (parse_timestamp(entry["at"], field="at") - _EPOCH) // _MICRO if entry["at"] else _NO_TIME
    return (
        at,
        _KIND_ORDER.get(entry["kind"], 9),
        entry["run_id"] or "",
        ordinal,
        entry["attempt_number"] or 0,
        entry["seq"] or 0,
    )


def _entry(
    at: datetime,
    kind: str,
    run_id: str | None,
    phase: str | None,
    attempt: int | None,
    seq: int | None,
    summary: str,
    digest: str,
    record: dict[str, Any],
    run_name: str | None = None,
) -> dict[str, Any]:
    return {
        "at": format_timestamp(at),
        "kind": kind,
        "run_id": run_id,
        "run_name": run_name,
        "phase": phase,
        "attempt_number": attempt,
        "seq": seq,
        "summary": summary,
        "hash": digest,
        "record": record,
    }


def history_items(
    store: Store,
    ticket_id: str,
    run_id: str | None = None,
    phase: str | None = None,
    *,
    markers: Callable[[str], Iterable[Marker]],
    pipeline_for: Callable[[str, str], Pipeline],
    event_index: Callable[[str, str], Mapping[tuple[int, int], Sequence[ProgressEvent]]],
    approvals: Callable[[str, str], Iterable[Approval]],
) -> Iterator[tuple[HistoryKey, dict[str, Any]]]:
    """(sort key, entry) of every record, run by run, in the order they are read.

    Records come from ``store.iter_records`` one run at a time; ``markers``, ``pipeline_for``,
    ``event_index`` and ``approvals`` are the ledger's (a ticket's markers, a run's pipeline, its
    progress events by (ordinal, attempt), its approvals).
    """
    ticket_id = validate_ticket_id(ticket_id)
    runs = [normalize_run_id(run_id)] if run_id is not None else store.runs(ticket_id)
    if run_id is None and phase is None:
        for m in markers(ticket_id):
            what = f"ticket marker revision {m.revision}: {m.title!r} ({m.pipeline})"
            e = _entry(m.timestamp, "marker", None, None, None, None, what, m.content_hash, m.to_json())
            yield _key(e, 0), e
    for rid in runs:
        phase_name = pipeline_for(ticket_id, rid).phase(phase).name if phase is not None else None
        damaged: list[Damaged] = []
        name: str | None = None  # the run's records name it (never how the caller typed it: history is pure)
        for s in store.iter_records(ticket_id, rid):
            if isinstance(s, Damaged):
                damaged.append(s)
                continue
            cp = s.record
            name = run_name_of(rid, name, cp.run_name)
            if phase_name and cp.phase != phase_name:
                continue
            what = "completed" if cp.completed else f"failed: {cp.error}"
            e = _entry(
                cp.timestamp_utc,
                "checkpoint",
                rid,
                cp.phase,
                cp.attempt_number,
                None,
                f"{cp.phase} attempt {cp.attempt_number} {what}",
                cp.content_hash,
                {**cp.to_json(), "checkpoint_path": s.location},
                name,
            )
            yield _key(e, cp.phase_ordinal), e
        for (ordinal, attempt), events in event_index(ticket_id, rid).items():
            for ev in events:
                if phase_name and ev.phase != phase_name:
                    continue
                if ev.event == "step":  # "step 3", never "step step 3"
                    what = f"step {ev.step}" if ev.step is not None else "step"
                else:
                    what = f"{ev.event} (step {ev.step})" if ev.step is not None else ev.event
                e = _entry(
                    ev.timestamp,
                    "progress",
                    rid,
                    ev.phase,
                    attempt,
                    ev.seq,
                    f"{ev.phase} attempt {attempt} {what}",
                    ev.content_hash,
                    ev.to_json(),
                    name,
                )
                yield _key(e, ordinal), e
        for a in approvals(ticket_id, rid):
            if phase_name and a.phase != phase_name:
                continue
            verb = "approved" if a.approved else "rejected"
            note = f": {a.comment}" if a.comment else ""
            e = _entry(
                a.timestamp,
                "approval",
                rid,
                a.phase,
                a.attempt_number,
                a.seq,
                f"{a.phase} attempt {a.attempt_number} {verb} by {a.by}{note}",
                a.content_hash,
                a.to_json(),
                name,
            )
            yield _key(e, a.phase_ordinal), e
        for d in damaged:
            e = {
                "at": None,
                "kind": "damaged",
                "run_id": rid,
                "run_name": name,
                "phase": d.phase,
                "attempt_number": d.attempt_number,
                "seq": None,
                "summary": f"damaged: {d.location}: {d.message}",
                "hash": None,
                "record": d.to_json(),
            }
            yield _key(e, 0), e


__all__ = ["HistoryKey", "history_items"]
