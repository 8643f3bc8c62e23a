"""The pipelines a store has recorded: what a write hands its store, and what a read finds there.

Every write records its pipeline's manifest in the store (:mod:`phaselog.stores.manifests`),
content-addressed by ``Pipeline.manifest_hash``, the hash its checkpoints name. It costs one more
file or row once per (pipeline, hash) per store handle, and only on the first write of a run under
that manifest: the write hands the manifest to its one append (``Store.append(manifest=…)``).

Reading, a pipeline is looked up by name where it always was (``<root>/pipelines``,
``PHASELOG_PIPELINES``, the built-ins) and, when none of those has it, in the store: the manifest
whose hash the run's records name (or, with no hash to go by, the one manifest of that name the
store holds). ``--pipeline-file`` stays an override. A recorded manifest is checked when read: it
must parse as a manifest and hash to the name it is stored under.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import Corrupt, NotFound, PhaselogError, PipelineError
from phaselog.model.limits import json_loads
from phaselog.model.pipelines import Pipeline, check_schemas, manifest_dict, pipeline_from_dict
from phaselog.stores.manifests import NAME_RE, ManifestDoc, check_key, has_manifests, location, manifests_of

if TYPE_CHECKING:
    from phaselog.stores.base import Store
    from phaselog.stores.snapshot import RunSnapshot

#: Per store handle: the (name, hash) it has recorded or seen recorded, and the manifests it read.
_HANDLES: weakref.WeakKeyDictionary[Any, _Handle] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class _Handle:
    def __init__(self) -> None:
        self.recorded: set[tuple[str, str]] = set()
        self.loaded: dict[tuple[str, str], Pipeline] = {}


def _handle(store: Store) -> _Handle:
    with _LOCK:
        try:
            h = _HANDLES.get(store)
        except TypeError:  # a store that cannot be weakly referenced: no memo, still correct
            return _Handle()
        if h is None:
            h = _HANDLES[store] = _Handle()
        return h


def manifest_doc(pipeline: Pipeline) -> ManifestDoc:
    """The manifest as a store keeps it (JSON, readable back with ``--pipeline-file``)."""
    body = json.dumps(manifest_dict(pipeline), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    return ManifestDoc(pipeline.name, pipeline.manifest_hash, body.encode("utf-8"))


def pipeline_from_document(doc: Any, name: str, manifest_hash: str, *, source: str) -> Pipeline:
    """Build the pipeline of a recorded manifest; PipelineError unless it is a valid manifest of
    ``name`` whose content hashes to ``manifest_hash``."""
    pipeline = pipeline_from_dict(doc, source=source)
    if pipeline.name != name:
        raise PipelineError(
            f"{source}: the manifest names pipeline {pipeline.name!r}, not {name!r}", field="name", rule="name"
        )
    if pipeline.manifest_hash != manifest_hash:
        raise PipelineError(
            f"{source}: the manifest hashes to {pipeline.manifest_hash[:12]}, not {manifest_hash[:12]} "
            "(changed after it was recorded)",
            field="manifest_hash",
            rule="content_hash",
        )
    check_schemas(pipeline)
    return pipeline


def to_record(store: Store, snapshot: RunSnapshot, pipeline: Pipeline) -> ManifestDoc | None:
    """The manifest a write must hand its append, or None: recorded already by this handle, named
    by the run's records (the run's first write recorded it), or a store that keeps none."""
    key = (pipeline.name, pipeline.manifest_hash)
    handle = _handle(store)
    if key in handle.recorded or not has_manifests(store):
        return None
    ref = snapshot.pipeline_ref() if snapshot is not None else None
    if ref is not None and (ref.name, ref.manifest_hash) == key:
        handle.recorded.add(key)
        return None
    return manifest_doc(pipeline)


def recorded(store: Store, doc: ManifestDoc) -> None:
    """Remember that ``store`` holds ``doc`` (its append succeeded)."""
    _handle(store).recorded.add((doc.name, doc.manifest_hash))


def record(store: Store, pipeline: Pipeline) -> bool:
    """Record ``pipeline``'s manifest in ``store`` now (import, copy); True when it was added."""
    if not has_manifests(store):
        return False
    doc = manifest_doc(pipeline)
    added = manifests_of(store).put(doc)
    recorded(store, doc)
    return added


def read(store: Store, name: str, manifest_hash: str) -> Pipeline:
    """The recorded manifest (name, hash) of ``store``; NotFound, or Corrupt when it is damaged."""
    check_key(name, manifest_hash)
    handle = _handle(store)
    cached = handle.loaded.get((name, manifest_hash))
    if cached is not None:
        return cached
    if not has_manifests(store):
        raise NotFound(f"{store.url} keeps no pipeline manifests")
    data = manifests_of(store).get(name, manifest_hash)
    where = location(name, manifest_hash)
    source = f"{store.url} ({where})"
    try:
        pipeline = pipeline_from_document(json_loads(data), name, manifest_hash, source=source)
    except (ValueError, RecursionError) as exc:
        raise Corrupt(f"recorded manifest {where} is not JSON ({exc})", path=where, rule="json") from None
    except PipelineError as exc:
        raise Corrupt(f"recorded manifest {where} is damaged: {exc.message}", path=where, rule="manifest") from None
    if len(handle.loaded) > 1000:
        handle.loaded.clear()
    handle.loaded[(name, manifest_hash)] = pipeline
    handle.recorded.add((name, manifest_hash))
    return pipeline


def keys(store: Store) -> list[tuple[str, str]]:
    """Every (name, hash) the store has recorded (none for a store that keeps no manifests)."""
    if not has_manifests(store):
        return []
    return manifests_of(store).keys()


def find(store: Store, name: str, manifest_hash: str | None = None) -> Pipeline | None:
    """The store's manifest of ``name``: the one with ``manifest_hash``, or with no hash the only
    one of that name (PipelineError when there are several); None when it has none."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or not has_manifests(store):
        return None
    if manifest_hash:
        try:
            return read(store, name, manifest_hash)
        except NotFound:
            return None
    hashes = [h for n, h in keys(store) if n == name]
    if not hashes:
        return None
    if len(hashes) > 1:
        raise PipelineError(
            f"pipeline {name!r} is not in the pipeline folders, and the store holds {len(hashes)} recorded "
            f"manifests of it ({', '.join(h[:12] for h in hashes)}): name the manifest with --pipeline-file FILE",
            pipeline=name,
            rule="ambiguous",
        )
    return read(store, name, hashes[0])


def fallback(store: Store, name: str, manifest_hash: str | None, error: PhaselogError) -> Pipeline:
    """``name`` from the store when the pipeline folders lack it; else re-raise ``error``."""
    found = find(store, name, manifest_hash)
    if found is None:
        raise error
    return found
