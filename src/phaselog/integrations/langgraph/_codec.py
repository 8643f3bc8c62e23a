"""How LangGraph's objects map onto phaselog records (see docs/langgraph.md).

* a thread is a ticket: a thread id that is a ticket id is its key, any other maps to a safe key
  (:func:`thread_ticket`) and is kept, as given, in the payload;
* a checkpoint namespace is a run: ``run_id = normalize_run_id("ns:" + checkpoint_ns)``, so the
  root namespace is ``--run-id ns:`` on the command line;
* each checkpoint is one attempt of the phase ``checkpoint`` of the built-in ``langgraph``
  pipeline, in append order, chained by ``prev_hash``; LangGraph's parent is in the payload;
* pending writes are progress events of the checkpoint's own attempt (one event per
  ``put_writes`` call).

The checkpoint and each write's value go through LangGraph's serializer protocol
(``serde.dumps_typed``/``loads_typed``) and are kept as ``{"type", "data"}`` with the bytes in
base64, so the records stay JSON (and YAML in the files store) and every type the serializer
handles round-trips.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from phaselog.ledger import inputs
from phaselog.model._json import dumps_compact
from phaselog.model.entries import ProgressEvent
from phaselog.model.errors import InvalidIdentifier
from phaselog.model.ids import normalize_run_id, validate_ticket_id
from phaselog.model.limits import json_loads
from phaselog.model.records import Checkpoint, PipelineRef
from phaselog.stores.names import event_prefix, parse_event_name

PIPELINE = "langgraph"
PHASE = "checkpoint"
ORDINAL = 1
NS_PREFIX = "ns:"
PROVIDER = "langgraph"


#: A ticket key made from a thread id that is no ticket id: ``<slug>.<16 hex of its SHA-256>``.
MAPPED_KEY = re.compile(r".*\.[0-9a-f]{16}")
SLUG_MAX = 40


def thread_ticket(thread_id: object) -> str:
    """The ticket key of a LangGraph thread (``str(thread_id)``), for the store's paths and queries.

    A thread id that is a ticket id (1-64 of ``[A-Za-z0-9._-]``) is its own key, as before. Any
    other string LangGraph accepts (``user:42``, ``a b``, ``tenant/123``, ``é``, a long one, ``""``)
    maps to ``<readable slug>.<16 hex digits of its SHA-256>``, and so does an id that already
    looks like such a key (so no two thread ids share a key). The given id is kept in the
    record's payload (``thread_id``) and handed back to LangGraph as it was given.
    """
    if thread_id is None:
        raise InvalidIdentifier(
            "thread_id: missing; pass config={'configurable': {'thread_id': ...}}", field="thread_id", rule="required"
        )
    text = thread_id if isinstance(thread_id, str) else str(thread_id)
    return _thread_ticket(text)


@lru_cache(maxsize=4096)
def _thread_ticket(text: str) -> str:
    if not MAPPED_KEY.fullmatch(text):
        try:
            return validate_ticket_id(text, field="thread_id")
        except InvalidIdentifier:
            pass
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", ascii_text).lstrip("-_")[:SLUG_MAX].rstrip("-_") or "thread"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return validate_ticket_id(f"{slug}.{digest}", field="thread_id")  # contained by construction; checked anyway


def given_thread_id(record: Checkpoint) -> str:
    """The thread id a record was written for, exactly as it was given."""
    given = (record.phase_payload or {}).get("thread_id")
    return given if isinstance(given, str) else record.ticket_id


def ns_run_id(checkpoint_ns: object) -> str:
    """The run id (a UUID) of a checkpoint namespace."""
    if not isinstance(checkpoint_ns, str):
        raise InvalidIdentifier("checkpoint_ns: must be a string", field="checkpoint_ns", rule="type")
    return _ns_run_id(checkpoint_ns)


@lru_cache(maxsize=4096)
def _ns_run_id(checkpoint_ns: str) -> str:
    return normalize_run_id(NS_PREFIX + checkpoint_ns, field="checkpoint_ns")


@lru_cache(maxsize=4096)
def attempt_prefix(attempt: int) -> str:
    """Entry-name prefix of every progress event of one attempt."""
    return event_prefix(ORDINAL, PHASE, attempt)


def attempt_of_event_name(name: str) -> int | None:
    """The attempt an event entry name belongs to (None: not a ``checkpoint`` event)."""
    parsed = parse_event_name(name)
    if parsed is None or parsed.ordinal != ORDINAL or parsed.phase != PHASE:
        return None
    return parsed.attempt


# -- values -------------------------------------------------------------------------------------
def typed(serde: Any, value: Any) -> dict[str, str]:
    """``{"type", "data"}``: the serializer's type tag and its bytes in base64."""
    kind, data = serde.dumps_typed(value)
    return {"type": kind, "data": base64.b64encode(data).decode("ascii")}


def untyped(serde: Any, doc: Mapping[str, Any]) -> Any:
    """The value a :func:`typed` document holds."""
    return serde.loads_typed((str(doc["type"]), binascii.a2b_base64(doc["data"])))


def _plain_json(value: Any) -> Any | None:
    """``value`` normalised through JSON (tuples become lists), or None if it is not JSON."""
    plain = _plain_copy(value, 0)
    if plain is not _NOT_PLAIN:
        return plain  # what the round trip below gives, without serialising
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError):
        return None


_NOT_PLAIN: Any = object()
_PLAIN_DEPTH = 64
_INT_BOUND = 2**63


def _plain_copy(value: Any, depth: int) -> Any:
    """A copy of ``value`` when it holds only what a JSON round trip gives back unchanged (exact
    str, bool, None, bounded int, finite float, str-keyed dict, list; a tuple becomes a list);
    else :data:`_NOT_PLAIN` (subclasses, other key types, NaN, deep or cyclic values: the caller
    takes the round trip, which decides as it always did)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if -_INT_BOUND < value < _INT_BOUND else _NOT_PLAIN
    if kind is float:
        return value if math.isfinite(value) else _NOT_PLAIN
    if depth >= _PLAIN_DEPTH:
        return _NOT_PLAIN
    if kind is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                return _NOT_PLAIN
            item = _plain_copy(v, depth + 1)
            if item is _NOT_PLAIN:
                return _NOT_PLAIN
            out[k] = item
        return out
    if kind is list or kind is tuple:
        items = []
        for v in value:
            item = _plain_copy(v, depth + 1)
            if item is _NOT_PLAIN:
                return _NOT_PLAIN
            items.append(item)
        return items
    return _NOT_PLAIN


# -- checkpoints --------------------------------------------------------------------------------
def checkpoint_payload(
    serde: Any,
    checkpoint: Mapping[str, Any],
    metadata: Mapping[str, Any],
    *,
    checkpoint_ns: str,
    parent_id: str | None,
    parent_hash: str | None,
    thread_id: str | None = None,
) -> dict[str, Any]:
    """The ``checkpoint`` phase payload of one LangGraph checkpoint.

    The checkpoint itself is one serialised value (as LangGraph's own savers keep it); beside it,
    readable, the ids, the metadata and the names of the channels that hold a value.
    ``thread_id``: the thread id as given, when it is not the ticket key itself.
    """
    payload: dict[str, Any] = {
        "phase": PHASE,
        "checkpoint_id": str(checkpoint["id"]),
        "parent_checkpoint_id": parent_id,
        "parent_hash": parent_hash,
        "checkpoint_ns": checkpoint_ns,
        "metadata": None,
        "channels": sorted(str(k) for k in checkpoint.get("channel_values", {})),
        "checkpoint": typed(serde, dict(checkpoint)),
    }
    if thread_id is not None:  # a thread id that is not its own ticket key: kept as given
        payload["thread_id"] = thread_id
    plain_md = _plain_json(dict(metadata))
    if plain_md is None:
        payload["metadata_typed"] = typed(serde, dict(metadata))
    else:
        payload["metadata"] = plain_md
    return payload


def parse_ts(text: Any, fallback: datetime) -> datetime:
    """The checkpoint's own time (LangGraph's ``ts``) as an aware UTC datetime."""
    if isinstance(text, str):
        try:
            ts = datetime.fromisoformat(text)
        except ValueError:
            return fallback
        if ts.tzinfo is not None:
            return ts.astimezone(UTC)
    return fallback


def make_record(
    thread: str,
    run_id: str,
    attempt: int,
    payload: Mapping[str, Any],
    *,
    timestamp: datetime,
    prev_hash: str | None,
    pipeline: PipelineRef,
) -> Checkpoint:
    """The phaselog record of one checkpoint (attempt ``attempt`` of the ``checkpoint`` phase)."""
    return Checkpoint(
        ticket_id=thread,
        run_id=run_id,
        phase=PHASE,
        phase_ordinal=ORDINAL,
        attempt_number=attempt,
        timestamp_utc=timestamp,
        phase_payload=payload,
        pipeline=pipeline,
        basis={},
        prev_hash=prev_hash,
    )


def checkpoint_of(serde: Any, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The LangGraph checkpoint a payload holds."""
    return dict(untyped(serde, payload["checkpoint"]))


def metadata_of(serde: Any, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The LangGraph metadata a payload holds."""
    if payload.get("metadata") is not None:
        return dict(payload["metadata"])
    if "metadata_typed" in payload:
        return dict(untyped(serde, payload["metadata_typed"]))
    return {}


def is_langgraph(record: Checkpoint) -> bool:
    """True for a record this integration wrote (pipeline ``langgraph``, phase ``checkpoint``)."""
    return (
        record.phase == PHASE
        and record.pipeline is not None
        and record.pipeline.name == PIPELINE
        and isinstance(record.phase_payload, Mapping)
        and isinstance(record.phase_payload.get("checkpoint_id"), str)
    )


# -- pending writes -----------------------------------------------------------------------------
#: LangGraph's special channels: the question an ``interrupt()`` asks, and the answer given.
INTERRUPT, RESUME = "__interrupt__", "__resume__"
RESUME_HINT = "graph.invoke(Command(resume=answer), config)"


def questions(serde: Any, value: Any) -> list[dict[str, Any]]:
    """The questions an ``__interrupt__`` write asks, as phaselog.ledger.inputs keeps them: each
    interrupt's id and its value as JSON. The value is shown only under LangGraph's default
    serializer (which keeps it as plain msgpack anyway); under another one (an encrypting one)
    it stays only serialised."""
    shown = type(serde) is JsonPlusSerializer
    out = []
    for intr in value if isinstance(value, list | tuple) else [value]:
        plain = _plain_json(getattr(intr, "value", None)) if shown else None
        out.append({"id": getattr(intr, "id", None), "value": plain, "shown": shown and plain is not None})
    return out


def writes_output(
    serde: Any, checkpoint_id: str, task_id: str, task_path: str, writes: Iterable[tuple[int, str, Any]]
) -> str:
    """The ``output`` text of the progress event holding one ``put_writes`` call.

    An ``interrupt()`` (an ``__interrupt__`` write) is marked as the question the checkpoint waits
    on, a ``Command(resume=…)`` (a ``__resume__`` write) as its answer: phaselog.ledger.inputs reads them.
    """
    writes = list(writes)
    doc: dict[str, Any] = {
        "checkpoint_id": checkpoint_id,
        "task_id": task_id,
        "task_path": task_path,
        "writes": [{"idx": idx, "channel": ch, **typed(serde, value)} for idx, ch, value in writes],
    }
    asked = [q for _idx, ch, value in writes if ch == INTERRUPT for q in questions(serde, value)]
    if asked:
        doc[inputs.REQUEST], doc["resume"] = asked, RESUME_HINT
    if any(ch == RESUME for _idx, ch, _value in writes):
        doc[inputs.ANSWER] = True
    return dumps_compact(doc).decode("utf-8")  # the bytes json.dumps(ensure_ascii=False, compact) writes


def writes_event(
    record: Checkpoint,
    output: str,
    *,
    seq: int,
    prev_hash: str | None,
    now: datetime,
    timestamp: datetime | None = None,
) -> ProgressEvent:
    """A progress event of ``record``'s attempt holding one ``put_writes`` call."""
    raw = output.encode("utf-8")
    md = (record.phase_payload or {}).get("metadata") or {}
    step = md.get("step")
    return ProgressEvent(
        ticket_id=record.ticket_id,
        run_id=record.run_id,
        phase=PHASE,
        phase_ordinal=ORDINAL,
        attempt_number=record.attempt_number,
        seq=seq,
        event="step",
        timestamp=timestamp or now,
        step=step if isinstance(step, int) and step >= 0 else None,
        provider=PROVIDER,
        output=output,
        output_sha256=hashlib.sha256(raw).hexdigest(),
        output_length=len(raw),
        prev_hash=prev_hash,
    )


def pending_writes(serde: Any, events: Sequence[ProgressEvent], checkpoint_id: str) -> list[tuple[str, str, Any]]:
    """The checkpoint's pending writes, deduplicated as LangGraph's savers do, in
    ``writes_sort_key`` order: a regular write (idx >= 0) is kept once per (task, idx), the first
    one wins; a special write (ERROR, INTERRUPT, …: idx < 0) is replaced by a later one."""
    chosen: dict[tuple[str, int], tuple[str, str, int, str, Mapping[str, Any]]] = {}
    for ev in sorted(events, key=lambda e: e.seq):
        doc = json_loads(ev.output or "{}")  # orjson where it reads the same as json.loads
        if doc.get("checkpoint_id") != checkpoint_id:
            continue
        for w in doc.get("writes", []):
            key = (doc["task_id"], int(w["idx"]))
            if key in chosen and key[1] >= 0:
                continue
            chosen[key] = (doc.get("task_path", ""), doc["task_id"], int(w["idx"]), w["channel"], w)
    ordered = sorted(chosen.values(), key=lambda t: (t[0], t[1], t[2]))
    return [(task_id, channel, untyped(serde, w)) for _path, task_id, _idx, channel, w in ordered]
