"""Pipeline manifests in exports: they travel with the records that name them.

``export`` writes a run's manifest once, just before the first checkpoint that names it::

    {"type": "pipeline", "name": "data-job", "content_hash": "<its manifest hash>", "document": {…}}

The manifest comes from the store's recorded manifests (:mod:`phaselog.ledger.recorded_pipelines`), else,
for records written before stores recorded them, from the source's pipeline folders when the
manifest there still has the hash the records name. ``import`` checks each such line as it checks
a record (a manifest of at most MAX_MANIFEST_BYTES, every field, valid payload schemas, and a
content that hashes to the line's ``manifest_hash``), validates the records that name it against
it, and records it in the target store with them; ``copy`` is an export piped into an import.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from phaselog.ledger import recorded_pipelines as pipeline_shelf
from phaselog.model.errors import Corrupt, NotFound, PhaselogError
from phaselog.model.limits import MAX_MANIFEST_BYTES
from phaselog.model.pipelines import DEFAULT_PIPELINE, Pipeline, builtin, find_pipeline, manifest_dict
from phaselog.model.records import PipelineRef
from phaselog.stores.base import local_root
from phaselog.stores.manifests import HASH_RE, NAME_RE
from phaselog.transfer.lines import bad_line

if TYPE_CHECKING:
    from phaselog.ledger.facade import Ledger
    from phaselog.stores.base import Store

Key = tuple[str, str]


class ExportManifests:
    """The manifest lines of one export: each (name, hash) once, before its first record."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.seen: set[Key] = set()

    def lines_for(self, ref: PipelineRef | None) -> list[dict[str, Any]]:
        """The line for ``ref``'s manifest if it was not written yet (none when it cannot be found)."""
        if ref is None or not ref.manifest_hash or (ref.name, ref.manifest_hash) in self.seen:
            return []
        self.seen.add((ref.name, ref.manifest_hash))
        pipeline = self._manifest(ref)
        if pipeline is None:
            return []
        return [
            {
                "type": "pipeline",
                "name": pipeline.name,
                "content_hash": pipeline.manifest_hash,
                "document": manifest_dict(pipeline),
            }
        ]

    def _manifest(self, ref: PipelineRef) -> Pipeline | None:
        if not NAME_RE.fullmatch(ref.name) or not HASH_RE.fullmatch(ref.manifest_hash):
            return None
        try:
            return pipeline_shelf.read(self.store, ref.name, ref.manifest_hash)
        except NotFound:
            pass
        except Corrupt as exc:
            raise Corrupt(
                f"cannot export: {exc.message} (run `phaselog doctor`)", path=exc.context.get("path")
            ) from None
        # Records written before stores recorded manifests: the source's own folders, same hash only.
        root = local_root(self.store)
        try:
            found = (
                builtin(ref.name) if ref.name == DEFAULT_PIPELINE and root is None else find_pipeline(ref.name, root)
            )
        except PhaselogError:
            return None
        return found if found.manifest_hash == ref.manifest_hash else None


def is_manifest_line(line: Any) -> bool:
    """True for an export line of type ``pipeline``."""
    return isinstance(line, dict) and line.get("type") == "pipeline"


def parse_manifest_line(n: int, line: dict[str, Any]) -> Pipeline:
    """Check one ``pipeline`` line as a manifest file is checked; InvalidRecord naming the field."""
    name, manifest_hash, doc = line.get("name"), line.get("content_hash"), line.get("document")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise bad_line(n, f"name: must be a pipeline name, 1-64 of [A-Za-z0-9._-] (got {name!r:.80})", "name", "name")
    if not isinstance(manifest_hash, str) or not HASH_RE.fullmatch(manifest_hash):
        raise bad_line(n, "content_hash: must be the manifest hash, 64 lowercase hex digits", "content_hash", "sha256")
    if not isinstance(doc, dict):
        raise bad_line(n, "document: must be an object (the pipeline manifest)", "document", "type")
    size = len(json.dumps(doc, ensure_ascii=False).encode("utf-8"))
    if size > MAX_MANIFEST_BYTES:
        raise bad_line(
            n,
            f"document: the manifest is {size} bytes, over the cap of {MAX_MANIFEST_BYTES}",
            "document",
            "max_manifest_bytes",
        )
    try:
        return pipeline_shelf.pipeline_from_document(doc, name, manifest_hash, source=f"line {n}")
    except PhaselogError as exc:
        fld = str(exc.context.get("field") or "document")
        raise bad_line(
            n,
            exc.message,
            f"document.{fld}" if fld != "manifest_hash" else "content_hash",
            str(exc.context.get("rule") or "manifest"),
        ) from None


def split_lines(lines: Iterable[Any]) -> tuple[list[tuple[int, Any]], dict[Key, Pipeline]]:
    """The numbered record lines, and the manifests of the ``pipeline`` lines (each checked)."""
    records: list[tuple[int, Any]] = []
    manifests: dict[Key, Pipeline] = {}
    for n, line in enumerate(lines, start=1):
        if is_manifest_line(line):
            pipeline = parse_manifest_line(n, line)
            manifests[(pipeline.name, pipeline.manifest_hash)] = pipeline
        else:
            records.append((n, line))
    return records, manifests


def resolve(ledger: Ledger, imported: dict[Key, Pipeline], ref: PipelineRef | None) -> Pipeline:
    """The pipeline a record names: the import's own manifest of that hash, else as a write finds it."""
    if ref is not None:
        found = imported.get((ref.name, ref.manifest_hash))
        if found is not None:
            return found
    pipeline: Pipeline = ledger.load_pipeline(
        ref.name if ref else None, manifest_hash=(ref.manifest_hash or None) if ref else None
    )
    return pipeline


def record_imported(store: Store, imported: dict[Key, Pipeline], named: Iterable[PipelineRef | None]) -> int:
    """Record in ``store`` the imported manifests its records name; return how many were new."""
    added = 0
    for key in sorted({(r.name, r.manifest_hash) for r in named if r is not None}):
        pipeline = imported.get(key)
        if pipeline is not None and pipeline_shelf.record(store, pipeline):
            added += 1
    return added
