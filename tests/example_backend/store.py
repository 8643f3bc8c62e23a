"""A tiny third-party store: every record and audit entry one JSON file in a directory.

It implements :class:`phaselog.stores.base.Store` with no optional capability, on the public seam
only: the shared rules come from :mod:`phaselog.stores.kernel` (keys, locations, the record codec,
the append decision, damage) and the snapshot from :func:`phaselog.stores.snapshot.build_snapshot`.
What is its own: where the bytes live, and a lock per run for check-and-publish.

    <root>/<ticket>/<run>/<ordinal>.<attempt>.<phase>.<status>.json   a record: the kernel's JSON document
    <root>/<ticket>/<run>/<kind>/<name>.json                  a run's audit entry (progress, approvals)
    <root>/<ticket>/<kind>/<name>.json                        a ticket's audit entry (markers)
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from phaselog.model.errors import AlreadyExists, Corrupt, NotFound, StoreError, StoreNotFound, UnsupportedVersion
from phaselog.model.records import Checkpoint
from phaselog.stores import kernel
from phaselog.stores.base import AttemptRef, Capability, Damaged, RunFence, Stored
from phaselog.stores.manifests import ManifestDoc
from phaselog.stores.snapshot import RunSnapshot, build_snapshot


def record_file(ordinal: int, attempt: int, phase: str, *, completed: bool) -> str:
    """The file name of a record."""
    return f"{ordinal}.{attempt}.{phase}.{'completed' if completed else 'failed'}.json"


def _parse_record_file(name: str) -> AttemptRef | None:
    parts = name.split(".")
    if len(parts) != 5 or parts[4] != "json" or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return AttemptRef(int(parts[0]), int(parts[1]), parts[2], parts[3] == "completed")


class JsonDirStore:
    """Records and audit entries as JSON files under ``root`` (see the module docstring)."""

    capabilities: frozenset[Capability] = frozenset()

    def __init__(
        self, root: str | os.PathLike[str], *, create: bool = True, max_record_bytes: int | None = None
    ) -> None:
        self.root = Path(root)
        self.url = f"jsondir://{self.root}"
        self.max_record_bytes = max_record_bytes or kernel.DEFAULT_MAX_RECORD_BYTES
        if not create and not self.root.is_dir():
            raise StoreNotFound(f"no store at {self.root}", path=str(self.root))

    # -- records ------------------------------------------------------------------------------------
    def append(
        self,
        record: Checkpoint,
        *,
        expected_latest: int,
        fence: RunFence | None = None,
        manifest: ManifestDoc | None = None,
    ) -> str:
        """Append ``record`` if its attempt is free and the phase's latest is ``expected_latest``."""
        if fence is not None or manifest is not None:
            raise StoreError("this store keeps neither run leases nor manifests (it declares no capability)")
        kernel.check_record_key(record)
        document = kernel.encode_record(record, self.max_record_bytes)
        folder = self.root / record.ticket_id / record.run_id
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder):
            mine = [a for a in self._refs(folder) if a.phase_ordinal == record.phase_ordinal]
            kernel.decide_append(
                record,
                exists=any(a.attempt_number == record.attempt_number for a in mine),
                latest=max((a.attempt_number for a in mine), default=0),
                expected_latest=expected_latest,
            )
            name = record_file(record.phase_ordinal, record.attempt_number, record.phase, completed=record.completed)
            _publish(folder, name, document, kernel.record_location(record))
        return kernel.record_location(record)

    def _refs(self, folder: Path) -> list[AttemptRef]:
        return sorted(ref for ref in map(_parse_record_file, _listdir(folder)) if ref is not None)

    def attempts(self, ticket_id: str, run_id: str) -> list[AttemptRef]:
        """Every stored attempt of a run, by (phase ordinal, attempt)."""
        kernel.check_run_key(ticket_id, run_id)
        return self._refs(self.root / ticket_id / run_id)

    def get(self, ticket_id: str, run_id: str, phase_ordinal: int, phase: str, attempt: int) -> Stored:
        """One record; NotFound if absent, Corrupt (or UnsupportedVersion) if damaged."""
        kernel.check_run_key(ticket_id, run_id)
        folder = self.root / ticket_id / run_id
        for completed in (True, False):
            try:
                raw = (folder / record_file(phase_ordinal, attempt, phase, completed=completed)).read_bytes()
            except FileNotFoundError:
                continue
            location = kernel.attempt_location(ticket_id, run_id, phase_ordinal, phase, attempt, completed=completed)
            break
        else:
            where = f"{ticket_id}/{run_id}: phase {phase} (ordinal {phase_ordinal}) attempt {attempt}"
            raise NotFound(f"no record {where}", path=where)
        doc = kernel.decode_document(raw, location)
        stored = kernel.record_from_document(doc, phase_ordinal, location)
        kernel.check_identity(stored, ticket_id, run_id, phase_ordinal, phase, attempt)
        return stored

    def snapshot(self, ticket_id: str, run_id: str, *, history: bool = False) -> RunSnapshot:
        """The run as a write or a status needs it, built from the primitives above."""
        return build_snapshot(self, ticket_id, run_id, history=history)

    def tickets(self) -> list[str]:
        """Every ticket with a run or an entry."""
        return sorted(name for name in _listdir(self.root) if (self.root / name).is_dir())

    def runs(self, ticket_id: str) -> list[str]:
        """Every run of a ticket (the ticket's own entry folders are not runs)."""
        folder = self.root / ticket_id
        return sorted(name for name in _listdir(folder) if (folder / name).is_dir() and not name.startswith("."))

    def iter_records(self, ticket_id: str, run_id: str | None = None) -> Iterator[Stored | Damaged]:
        """A ticket's (or one run's) records in (run, ordinal, attempt) order; damaged ones as Damaged."""
        for rid in [run_id] if run_id is not None else self.runs(ticket_id):
            for ref in self.attempts(ticket_id, rid):
                try:
                    yield self.get(ticket_id, rid, ref.phase_ordinal, ref.phase, ref.attempt_number)
                except (Corrupt, UnsupportedVersion) as exc:
                    yield kernel.damaged_from(exc, ticket_id, rid, ref.phase_ordinal, ref.phase, ref.attempt_number)

    def location(self, record: Checkpoint) -> str:
        """The kernel's logical location (the same string on every store)."""
        return kernel.record_location(record)

    # -- audit entries --------------------------------------------------------------------------------
    def _entry_dir(self, kind: str, ticket_id: str, run_id: str | None) -> Path:
        kernel.check_entry_key(kind, ticket_id, run_id)
        folder = self.root / ticket_id
        return (folder / run_id if run_id is not None else folder) / f".{kind}"

    def put_entry(self, kind: str, ticket_id: str, run_id: str | None, name: str, body: bytes) -> str:
        """Publish an entry under a new name; AlreadyExists if it is taken."""
        kernel.check_entry(name, body, self.max_record_bytes)
        folder = self._entry_dir(kind, ticket_id, run_id)
        folder.mkdir(parents=True, exist_ok=True)
        location = kernel.entry_location(kind, ticket_id, run_id, name)
        _publish(folder, f"{name}.json", body, location)
        return location

    def entry_names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        """A kind's entry names, sorted."""
        names = _listdir(self._entry_dir(kind, ticket_id, run_id))
        return sorted(n[: -len(".json")] for n in names if n.endswith(".json"))

    def entries(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind whose name starts with ``prefix``, sorted by name."""
        folder = self._entry_dir(kind, ticket_id, run_id)
        return [
            (name, kernel.entry_location(kind, ticket_id, run_id, name), (folder / f"{name}.json").read_bytes())
            for name in self.entry_names(kind, ticket_id, run_id)
            if name.startswith(prefix)
        ]

    def close(self) -> None:
        """Nothing to release: every call opens and closes its files."""


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


class _locked:
    """An exclusive ``flock`` on a run folder's lock file: appends of one run take turns."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / ".lock"
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing releases the lock


def _publish(folder: Path, name: str, data: bytes, location: str) -> None:
    """Write ``data`` as ``folder/name`` durably, never replacing a file: temp file, fsync, link, fsync dir."""
    tmp = folder / f".tmp-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, folder / name)  # create-if-absent: the first writer wins
    except FileExistsError:
        raise AlreadyExists(f"{location} already exists", path=location) from None
    finally:
        tmp.unlink()
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
