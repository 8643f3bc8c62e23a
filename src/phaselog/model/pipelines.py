"""Pipelines and phases: manifests (YAML), built-in pipelines, payload schemas.

A manifest declares ``name``, ``version``, ``description``, ``order`` (``strict`` or ``free``)
and ordered ``phases``; each phase has ``name``, ``description``, ``payload_schema`` (a JSON
Schema, Draft 2020-12) and ``requires_approval``. Lookup order for ``--pipeline NAME``:
``<root>/pipelines/NAME.yaml``, then each folder of ``PHASELOG_PIPELINES``, then the built-ins.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from phaselog.model._lazyre import LazyPattern
from phaselog.model.errors import Corrupt, PipelineError, TooLarge, UnknownPhase
from phaselog.model.execution import EXECUTION_KEYS, Execution, execution_from_dict
from phaselog.model.graph import Graph, default_needs, parse_needs
from phaselog.model.hooks import check_hooks
from phaselog.model.limits import MAX_MANIFEST_BYTES, MAX_PHASE_ORDINAL, is_digits, is_phase_ordinal, read_file_bounded
from phaselog.model.params import check_metaschema, params_of
from phaselog.model.records import PipelineRef
from phaselog.model.schemas import Problem, schema_problems, schema_validator

DEFAULT_PIPELINE = "ticket-pipeline"
BUILTIN_DIR = Path(__file__).parent / "manifests"
_NAME_RE = LazyPattern(r"[a-z][a-z0-9_]{0,62}")
_PIPELINE_NAME_RE = LazyPattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MANIFEST_MAX_BYTES = MAX_MANIFEST_BYTES


def is_pipeline_name(name: str) -> bool:
    """Whether ``name`` is a valid pipeline name: 1-64 of ``[A-Za-z0-9._-]``, starting with a letter or digit."""
    return _PIPELINE_NAME_RE.fullmatch(name) is not None


@dataclass(frozen=True)
class Phase:
    """One step of a pipeline."""

    name: str
    ordinal: int
    description: str = ""
    payload_schema: Mapping[str, Any] = field(default_factory=dict)
    requires_approval: bool = False
    execution: Execution = field(default_factory=Execution)
    #: Its newest checkpoint may wait for input (a LangGraph ``interrupt()``): see phaselog.ledger.inputs.
    awaits_input: bool = False
    #: Its ``notify:`` hooks, as the manifest gives them (checked by phaselog.model.hooks).
    notify: tuple[Mapping[str, Any], ...] = ()
    #: The phases it needs, by name (model/graph.py); None (no ``needs:``): the phase before it.
    needs: tuple[str, ...] | None = None

    @property
    def file_stem(self) -> str:
        """Return ``<ordinal>_<name>``, the part of the file name that identifies the phase."""
        return f"{self.ordinal}_{self.name}"

    def order_payload(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Order payload keys as the schema declares them (``phase`` first), others after."""
        props = self.payload_schema.get("properties") or {}
        ordered = {"phase": payload["phase"]} if "phase" in payload else {}
        for key in props:
            if key in payload and key not in ordered:
                ordered[key] = payload[key]
        for key, value in payload.items():
            if key not in ordered:
                ordered[key] = value
        return ordered

    def check_payload(self, payload: Any, *, prefix: str = "phase_payload") -> list[Problem]:
        """Validate ``payload`` against this phase's JSON Schema; return every problem."""
        if not self.payload_schema:
            return []
        return schema_problems(self._schema_key, self.ordinal, self.name, payload, prefix)

    @cached_property
    def _schema_key(self) -> str:
        return json.dumps(self.payload_schema, sort_keys=True)


@dataclass(frozen=True)
class Pipeline:
    """A named, versioned, ordered list of phases."""

    name: str
    version: str
    phases: tuple[Phase, ...]
    description: str = ""
    order: str = "strict"
    source: str = "<python>"
    #: The run's ``notify:`` hooks (every phase's events), as the manifest gives them.
    notify: tuple[Mapping[str, Any], ...] = ()
    #: Why this pipeline was chosen when nothing named it (added to an unknown-phase error).
    fallback_note: str = field(default="", compare=False, repr=False)
    params: Mapping[str, Any] | None = None  #: the run parameters' JSON Schema (model/params.py); None: none

    @cached_property
    def manifest_hash(self) -> str:
        """SHA-256 over the canonical JSON of the manifest's content."""
        doc: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "order": self.order,
            "phases": [_phase_doc(p) for p in self.phases],
            **({"notify": [dict(h) for h in self.notify]} if self.notify else {}),  # only when set: other
            **({"params": self.params} if self.params is not None else {}),  # manifests keep their hash
        }
        blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    @property
    def ref(self) -> PipelineRef:
        """Return the reference a checkpoint records."""
        return PipelineRef(self.name, self.version, self.manifest_hash)

    @property
    def phase_names(self) -> list[str]:
        """Phase names in order."""
        return [p.name for p in self.phases]

    def phase(self, name_or_ordinal: str | int) -> Phase:
        """Return a phase by name or 1-based ordinal; UnknownPhase lists the valid ones."""
        if isinstance(name_or_ordinal, int) or (isinstance(name_or_ordinal, str) and is_digits(name_or_ordinal)):
            n = int(name_or_ordinal)
            for p in self.phases:
                if p.ordinal == n:
                    return p
        else:
            for p in self.phases:
                if p.name == name_or_ordinal:
                    return p
        valid = ", ".join(f"{p.ordinal}={p.name}" for p in self.phases)
        note = f"; {self.fallback_note}" if self.fallback_note else ""
        raise UnknownPhase(
            f"unknown phase {name_or_ordinal!r} for pipeline {self.name}; valid phases: {valid}{note}",
            field="phase",
            valid_phases=self.phase_names,
        )

    def phase_by_ordinal(self, ordinal: int) -> Phase | None:
        """Return the phase with this ordinal, or None."""
        for p in self.phases:
            if p.ordinal == ordinal:
                return p
        return None

    @cached_property
    def graph(self) -> Graph:
        """The phases' needs, and what follows from them (model/graph.py)."""
        names = self.phase_names
        return Graph.of(
            names, [default_needs(names, i) if p.needs is None else p.needs for i, p in enumerate(self.phases)]
        )

    def earlier(self, phase: Phase) -> tuple[Phase, ...]:
        """The phases ``phase`` needs, directly or not, in order (in a chain: every phase before it)."""
        names = set(self.graph.ancestors(phase.name))
        return tuple(p for p in self.phases if p.name in names)


def _phase_doc(p: Phase) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": p.name,
        "description": p.description,
        "payload_schema": p.payload_schema,
        "requires_approval": p.requires_approval,
    }
    if p.awaits_input:  # only when set: other manifests keep the hash they had
        doc["awaits_input"] = True
    if p.notify:  # only when set: other manifests keep the hash they had
        doc["notify"] = [dict(h) for h in p.notify]
    if p.needs is not None:  # only when given: manifests without needs keep the hash they had
        doc["needs"] = list(p.needs)
    execution = p.execution.to_json()
    if execution:  # only when set: manifests without runner keys keep the hash they had
        doc["execution"] = execution
    return doc


def manifest_dict(pipeline: Pipeline) -> dict[str, Any]:
    """The pipeline as a manifest document (``load_manifest``/``pipeline_from_dict`` read it back)."""
    phases = []
    for p in pipeline.phases:
        doc = {k: v for k, v in _phase_doc(p).items() if k != "execution"}
        doc.update(p.execution.to_json())
        phases.append(doc)
    return {
        "name": pipeline.name,
        "version": pipeline.version,
        "description": pipeline.description,
        "order": pipeline.order,
        "phases": phases,
        **({"notify": [dict(h) for h in pipeline.notify]} if pipeline.notify else {}),
        **({"params": dict(pipeline.params)} if pipeline.params is not None else {}),
    }


# -- building and loading -------------------------------------------------------------------------
#: The keys a manifest may have (docs/pipelines.md describes each; a test checks it does).
MANIFEST_KEYS = frozenset({"name", "version", "description", "order", "phases", "notify", "params"})
#: The keys a phase of a manifest may have: its own, and the runner's.
PHASE_KEYS = frozenset(
    {"name", "description", "payload_schema", "requires_approval", "awaits_input", "notify", "needs", *EXECUTION_KEYS}
)


def pipeline_from_dict(doc: Any, *, source: str = "<dict>") -> Pipeline:
    """Build a Pipeline from a parsed manifest, checking every field."""
    where = f"pipeline manifest {source}"
    if not isinstance(doc, Mapping):
        raise PipelineError(f"{where}: must be a mapping", field="manifest", rule="type")
    name = doc.get("name")
    if not isinstance(name, str) or not _PIPELINE_NAME_RE.fullmatch(name):
        raise PipelineError(f"{where}: name must be 1-64 of [A-Za-z0-9._-] (got {name!r})", field="name")
    version = doc.get("version")
    if isinstance(version, int | float) and not isinstance(version, bool):
        version = str(version)
    if not isinstance(version, str) or not version:
        raise PipelineError(f"{where}: version must be a non-empty string", field="version")
    order = doc.get("order", "strict")
    if order not in ("strict", "free"):
        raise PipelineError(f"{where}: order must be 'strict' or 'free'", field="order")
    raw_phases = doc.get("phases")
    if not isinstance(raw_phases, Sequence) or isinstance(raw_phases, str) or not raw_phases:
        raise PipelineError(f"{where}: phases must be a non-empty list", field="phases")
    if not is_phase_ordinal(len(raw_phases)):
        raise PipelineError(
            f"{where}: phases has {len(raw_phases)} phases; a pipeline has at most {MAX_PHASE_ORDINAL} "
            f"(the highest phase ordinal a record can carry; phases[{MAX_PHASE_ORDINAL}] is one too many)",
            field="phases",
            rule="max_phase_ordinal",
        )
    phases: list[Phase] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_phases, start=1):
        at = f"phases[{i - 1}]"
        if not isinstance(raw, Mapping):
            raise PipelineError(f"{where}: {at} must be a mapping", field=at)
        pname = raw.get("name")
        if not isinstance(pname, str) or not _NAME_RE.fullmatch(pname):
            raise PipelineError(
                f"{where}: {at}.name must match [a-z][a-z0-9_]* (got {pname!r})",
                field=f"{at}.name",
            )
        if pname in seen:
            raise PipelineError(f"{where}: duplicate phase name {pname!r}", field=f"{at}.name")
        seen.add(pname)
        schema = raw.get("payload_schema", {}) or {}
        if not isinstance(schema, Mapping):
            raise PipelineError(
                f"{where}: {at}.payload_schema must be a JSON Schema object",
                field=f"{at}.payload_schema",
            )
        approval, awaits = raw.get("requires_approval", False), raw.get("awaits_input", False)
        for key, value in (("requires_approval", approval), ("awaits_input", awaits)):
            if not isinstance(value, bool):
                raise PipelineError(f"{where}: {at}.{key} must be true or false", field=f"{at}.{key}")
        desc = raw.get("description", "") or ""
        unknown = set(raw) - PHASE_KEYS
        if unknown:
            raise PipelineError(
                f"{where}: {at} has unknown keys: {', '.join(sorted(unknown))} (a phase may have name, description, "
                f"needs, payload_schema, requires_approval, awaits_input, notify and the runner's keys "
                f"{', '.join(EXECUTION_KEYS)})",
                field=f"{at}.{sorted(unknown)[0]}",
                rule="unknown_key",
            )
        execution = execution_from_dict(raw, where, at)
        hooks = check_hooks(raw["notify"], where, f"{at}.notify") if "notify" in raw else ()
        phases.append(Phase(pname, i, str(desc), dict(schema), approval, execution, awaits, hooks))
    phases = [replace(p, needs=n) for p, n in zip(phases, parse_needs(raw_phases, where), strict=True)]
    unknown_top = set(doc) - MANIFEST_KEYS
    if unknown_top:
        raise PipelineError(f"{where}: unknown keys: {', '.join(sorted(unknown_top))}")
    hooks = check_hooks(doc["notify"], where, "notify") if "notify" in doc else ()
    desc = str(doc.get("description", "") or "")
    return Pipeline(name, version, tuple(phases), desc, order, source, notify=hooks, params=params_of(doc, where))


def load_manifest(path: str | os.PathLike[str]) -> Pipeline:
    """Load and check a manifest file."""
    p = Path(path)
    try:
        data = read_file_bounded(p, MANIFEST_MAX_BYTES, what=f"pipeline manifest {p}")
    except TooLarge as exc:
        raise PipelineError(exc.message, path=str(p), rule="max_manifest_bytes") from None
    except FileNotFoundError:
        raise PipelineError(f"pipeline manifest not found: {p}", path=str(p)) from None
    except OSError as exc:
        raise PipelineError(f"pipeline manifest {p}: {exc.strerror}", path=str(p)) from None
    try:
        if p.suffix == ".json" and p.parent == BUILTIN_DIR:
            # Built-ins are read from their generated JSON twin: reading a record must not pay
            # for importing YAML (tests/test_pipelines.py checks the twins match the YAML).
            doc = json.loads(data)
        else:
            from phaselog.model import _yaml  # lazy: PyYAML only when a manifest file is read (start-up)

            doc = _yaml.load(data, json_only=True)
    except Corrupt as exc:
        raise PipelineError(f"pipeline manifest {p}: {exc.message}", path=str(p), **exc.context) from None
    # The payload schemas are checked against the JSON Schema metaschema on first use
    # (``Phase.check_payload``), not here: reading checkpoints must not pay for jsonschema.
    return pipeline_from_dict(doc, source=str(p))


def search_dirs(root: str | os.PathLike[str] | None) -> list[Path]:
    """Folders searched for ``NAME.yaml``, in order (built-ins come last)."""
    dirs: list[Path] = []
    if root is not None:
        dirs.append(Path(root) / "pipelines")
    env = os.environ.get("PHASELOG_PIPELINES", "")
    dirs.extend(Path(d) for d in env.split(os.pathsep) if d)
    dirs.append(BUILTIN_DIR)
    return dirs


def find_pipeline(name: str, root: str | os.PathLike[str] | None = None) -> Pipeline:
    """Find a pipeline by name in the search folders."""
    if not _PIPELINE_NAME_RE.fullmatch(name):
        raise PipelineError(f"pipeline name must be 1-64 of [A-Za-z0-9._-] (got {name!r})")
    for d in search_dirs(root):
        candidate = d / f"{name}.yaml"
        if candidate.is_file():
            return _cached_manifest(str(candidate), candidate.stat().st_mtime_ns)
    where = ", ".join(str(d) for d in search_dirs(root))
    raise PipelineError(f"pipeline {name!r} not found (looked for {name}.yaml in: {where})", pipeline=name)


@cache
def _cached_manifest(path: str, _mtime: int) -> Pipeline:
    p = Path(path)
    if p.parent == BUILTIN_DIR and p.suffix == ".yaml" and p.with_suffix(".json").is_file():
        pipeline = load_manifest(p.with_suffix(".json"))
        return replace(pipeline, source=str(p))
    return load_manifest(path)


def available_pipelines(root: str | os.PathLike[str] | None = None) -> list[Pipeline]:
    """Every pipeline found in the search folders (the first of each name wins)."""
    found: dict[str, Pipeline] = {}
    for d in search_dirs(root):
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.yaml")):
            if f.stem not in found and _PIPELINE_NAME_RE.fullmatch(f.stem):
                found[f.stem] = _cached_manifest(str(f), f.stat().st_mtime_ns)
    return list(found.values())


#: The built-in pipelines found so far, by name: package files, read once (as _cached_manifest
#: already did, mtime 0), so a status does not stat the package folder each time (D194).
_BUILTINS: dict[str, Pipeline] = {}


def builtin(name: str = DEFAULT_PIPELINE) -> Pipeline:
    """Return a built-in pipeline (``ticket-pipeline`` or ``video-pipeline``)."""
    found = _BUILTINS.get(name)
    if found is not None:
        return found
    path = BUILTIN_DIR / f"{name}.yaml"
    if not path.is_file():
        raise PipelineError(f"no built-in pipeline {name!r}")
    found = _BUILTINS[name] = _cached_manifest(str(path), 0)
    return found


def check_schemas(pipeline: Pipeline) -> None:
    """Check every payload schema of ``pipeline`` against the JSON Schema metaschema (Draft 2020-12,
    the draft payloads are validated with); PipelineError naming the phase and its payload_schema."""
    check_metaschema(pipeline.params, f"pipeline manifest {pipeline.source}")  # the run parameters' schema
    for phase in pipeline.phases:
        if not phase.payload_schema:
            continue
        try:
            schema_validator(phase._schema_key, phase.ordinal)
        except PipelineError as exc:
            raise PipelineError(
                f"pipeline manifest {pipeline.source}: phase {phase.name}: {exc.message}", **exc.context
            ) from None
