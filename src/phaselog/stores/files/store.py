"""The files store: the default, needs nothing, and keeps the seed tool's files pure.

Layout under the root (``--root``, ``PHASELOG_HOME`` or ``~/.phaselog``)::

    checkpoints/<ticket_id>/<run_uuid>/
        phase_<N>_<name>_a<k>.yaml        the seed contract, byte-compatible with the seed tool
        .meta_<N>_<name>_a<k>.json        phaselog's part of a completed attempt (written first)
        .failed_<N>_<name>_a<k>.json      a failed attempt (no seed file: the seed has none)
        .lock                             flock: serialises appends within the run; its bytes hold
                                          the newest-attempt hint the last append left (derived,
                                          checked before use: stores/files/hints.py, D185)
        .tmp-<pid>-<hex>                  temp files; a crash may leave them, a later writer
                                          removes them once older than a minute

Publishing never renames onto a final name: temp file → write → fsync → ``link`` to the final name (fails if
it exists) → fsync the directory. Every path below the root is opened segment by segment with ``O_NOFOLLOW``
relative to its parent's descriptor, so no symlink is ever followed below the root. See docs/record-format.md.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from phaselog.model.errors import Corrupt, NotFound, PhaselogError, UnsupportedVersion
from phaselog.model.ids import validate_ticket_id
from phaselog.model.limits import SIDECAR_SLACK_BYTES
from phaselog.model.records import Checkpoint
from phaselog.stores import kernel
from phaselog.stores import names as _names
from phaselog.stores.base import AttemptRef, Damaged, Stored
from phaselog.stores.files import hints
from phaselog.stores.files.admin import FILES_CAPABILITIES, FilesAdminMixin
from phaselog.stores.files.carried import CarriedRuns, run_stamp
from phaselog.stores.files.entries import FileEntries
from phaselog.stores.files.folders import Folders
from phaselog.stores.files.io import clean_temps, exists, os_errors, read_capped
from phaselog.stores.files.publish import publish_completed, publish_failed
from phaselog.stores.files.seed import RunView
from phaselog.stores.names import checkpoint_name as cp_name
from phaselog.stores.names import failed_name, meta_name

if TYPE_CHECKING:
    from phaselog.stores.admin_values import RunFence
    from phaselog.stores.files.lease import FileRunLeases
    from phaselog.stores.files.manifests import FilesManifests
    from phaselog.stores.manifests import ManifestDoc
    from phaselog.stores.snapshot import RunSnapshot

# Audit entry kinds and their folders: ``<run>/.progress/``, ``<run>/.approvals/``, ``<run>/.pruned/`` (notes of
# what prune removed), ``<ticket>/.markers/``. Every name format lives in phaselog.stores.names.


def _fence_check(run_fd: int, fence: RunFence) -> Callable[[], None]:
    from phaselog.stores.files.lease import check_fence  # lazy: only a runner's fenced write checks one (D334)

    return lambda: check_fence(run_fd, fence)


def default_root() -> Path:
    """``PHASELOG_HOME`` if set, else ``~/.phaselog``."""
    env = os.environ.get("PHASELOG_HOME")
    return Path(env).expanduser() if env else Path.home() / ".phaselog"


class FilesStore(FilesAdminMixin):
    """Append-only checkpoint store on a local filesystem."""

    capabilities = FILES_CAPABILITIES

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        max_record_bytes: int | None = None,
        read_only: bool = False,
    ) -> None:
        """Open the store at ``root``; nothing is created until the first write.

        ``create=False``: the root must exist (StoreNotFound otherwise), as a read requires.
        ``read_only``: every write, lock or folder creation is refused (StoreError, rule ``read_only``).
        """
        self.root = Path(root).expanduser() if root is not None else default_root()
        self.root = self.root.absolute()
        self.url = f"file://{self.root}"
        self.max_record_bytes = max_record_bytes or kernel.DEFAULT_MAX_RECORD_BYTES
        self._leases: FileRunLeases | None = None
        #: The runs this handle carries (the snapshot its writes decided on; stores/files/carried.py).
        self._carried = CarriedRuns()
        # Audit entries may hold up to 8 MiB of progress output, which JSON escaping can grow
        # sixfold (control characters become \uXXXX): their cap leaves room for that.
        self.max_entry_bytes = kernel.entry_cap(self.max_record_bytes)
        # A sidecar is the stored document plus the YAML file's hash.
        self._sidecar_cap = self.max_record_bytes + SIDECAR_SLACK_BYTES
        #: Opened for reading only: nothing is ever written, locked or created through this object.
        self.read_only = read_only
        #: A missing root may be created by a write (else every access raises StoreNotFound).
        self.may_create = create and not read_only
        #: Every folder below the root, opened without following a symlink (shared by the parts).
        self.folders = Folders(self.root, self.url, read_only=read_only, may_create=self.may_create)
        #: The audit entries below the root (progress events, approvals, markers, prune notes).
        self.audit = FileEntries(
            self.folders, max_record_bytes=self.max_record_bytes, max_entry_bytes=self.max_entry_bytes
        )
        self.folders.check_root()

    def refuse_if_read_only(self, what: str) -> None:
        """Raise StoreError (rule ``read_only``) when this store object was opened read-only."""
        self.folders.refuse_if_read_only(what)

    def __repr__(self) -> str:
        return f"FilesStore({str(self.root)!r})"

    def open_dir(self, *segments: str, create: bool = False) -> int:
        """Open ``root/segments…`` without following any symlink below the root (see Folders.open_dir).

        The seam for code outside the package that keeps files below the root (the recorded
        pipeline manifests); the caller closes the descriptor.
        """
        return self.folders.open_dir(*segments, create=create)

    def open_child(self, parent_fd: int, seg: str, *, create: bool, rel: str) -> int:
        """Open the folder ``seg`` below ``parent_fd`` (never through a symlink; see Folders.open_child)."""
        return self.folders.open_child(parent_fd, seg, create=create, rel=rel)

    # -- appending --------------------------------------------------------------------------------
    def append(
        self,
        record: Checkpoint,
        *,
        expected_latest: int,
        fence: RunFence | None = None,
        manifest: ManifestDoc | None = None,
    ) -> str:
        """Append ``record`` (see Store.append)."""
        kernel.check_record_key(record)
        ordinal, attempt = record.phase_ordinal, record.attempt_number
        self.refuse_if_read_only("append a record")
        # Serialise (and check the size) before creating anything: a refused record leaves no trace.
        files = self._serialise(record)
        run_fd, lock_fd = self.folders.open_run(record.ticket_id, record.run_id, create=True)
        try:
            with os_errors(f"cannot write {self._rel(record)}"):
                try:
                    # The folder's groups from the hint the last append left (D185), else a listing.
                    names: list[str] | None = None
                    hinted = hints.read(run_fd)
                    groups, temps = hinted if hinted is not None else ([], True)
                    latest = max((g[3] for g in groups if g[0] == ordinal), default=0)
                    if temps or attempt <= latest:  # no usable hint, leftovers to clean, or a rare lookup
                        names = os.listdir(run_fd)
                        temps = clean_temps(run_fd, names) > 0
                        groups = _names.record_groups(names)
                        latest = max((g[3] for g in groups if g[0] == ordinal), default=0)
                    kernel.decide_append(
                        record,  # an attempt at or below the latest: look it up among every name (rare)
                        exists=names is not None
                        and attempt <= latest
                        and (ordinal, attempt) in _names.parse_record_names(names),
                        latest=latest,
                        expected_latest=expected_latest,
                        check_fence=None if fence is None else _fence_check(run_fd, fence),
                    )
                    # The snapshot this write was decided on, if this handle carries it and it still holds (D186).
                    base = self._carried.begin(record, expected_latest, run_fd)
                    if base is None and not groups and expected_latest == 0:
                        base = self._carried.begin_empty(record, run_fd)
                    self.record_manifest(manifest)  # before the record: a record never lacks its manifest
                    if record.completed:
                        publish_completed(run_fd, record, None if names is None else set(names), files)
                    else:
                        publish_failed(run_fd, record, files[0])
                    groups = hints.with_attempt(groups, ordinal, record.phase, attempt, completed=record.completed)
                    hints.write(lock_fd, run_fd, groups, temps=temps)
                    if base is not None:
                        self._carried.appended(base, record, self._rel(record), run_fd)
                finally:
                    os.close(lock_fd)  # releases the flock
        finally:
            os.close(run_fd)
        return self._rel(record)

    def _serialise(self, record: Checkpoint) -> tuple[bytes, bytes]:
        """The sidecar (or failed record) and the YAML seed file (empty for a failed attempt), size-checked."""
        if not record.completed:
            return kernel.encode_record(record, self.max_record_bytes), b""
        yaml_bytes = kernel.render_seed_file(record)
        return kernel.encode_record(record, self.max_record_bytes, seed_file=yaml_bytes), yaml_bytes

    # -- reading ----------------------------------------------------------------------------------
    def attempts(self, ticket_id: str, run_id: str) -> list[AttemptRef]:
        """Every committed attempt of a run, from one directory listing."""
        return _refs(self._listing(ticket_id, run_id))

    def _listing(self, ticket_id: str, run_id: str) -> list[str]:
        return self.folders.listing("checkpoints", validate_ticket_id(ticket_id), run_id) or []

    def get(self, ticket_id: str, run_id: str, phase_ordinal: int, phase: str, attempt: int) -> Stored:
        """Read one record (see Store.get)."""
        validate_ticket_id(ticket_id)
        try:
            run_fd = self.folders.open_dir("checkpoints", ticket_id, run_id)
        except NotFound:
            raise NotFound(f"no run {run_id} for ticket {ticket_id}", ticket_id=ticket_id, run_id=run_id) from None
        try:
            return self.get_at(run_fd, ticket_id, run_id, phase_ordinal, phase, attempt)
        finally:
            os.close(run_fd)

    def read_phase(self, ticket_id: str, run_id: str, phase: str | int, attempt: int | None = None) -> Stored | None:
        """Attempt ``attempt`` of ``phase``, or (None) its latest checkpoint, from the run's hint (or
        one folder listing) and the files of the records it needs; None unless plainly there and intact (the caller then
        takes its general path, whose errors and hints are unchanged).

        The phase is found as a listing would (the lowest ordinal whose name or ordinal is the one
        asked for), by :func:`phaselog.stores.names.record_groups` (no object per name: 1,000
        attempts cost what 10 do); only the newest completed attempt and any newer (failed) one are
        read: a damaged newer attempt means the older checkpoint is not the latest.
        """
        validate_ticket_id(ticket_id)
        try:
            run_fd = self.folders.open_dir("checkpoints", ticket_id, run_id)
        except NotFound:
            return None
        try:
            hinted = hints.read(run_fd)  # the groups the last append left (D185), else a listing
            names = None if hinted is not None else os.listdir(run_fd)
            group = _phase_group(hinted[0] if hinted is not None else _names.record_groups(names or []), phase)
            if group is None:
                return None
            ordinal, name, _count, top, done = group
            if attempt is None:
                if done is None:
                    return None
                if top > done:
                    present = set(names) if names is not None else None
                    for newer in range(done + 1, top + 1):
                        failed = failed_name(ordinal, name, newer)
                        if failed in present if present is not None else exists(run_fd, failed):
                            self.get_at(run_fd, ticket_id, run_id, ordinal, name, newer)
                attempt = done
            return self.get_at(run_fd, ticket_id, run_id, ordinal, name, attempt)
        except (Corrupt, UnsupportedVersion, NotFound):
            return None  # the general path reads it again and says what is wrong, and where
        finally:
            os.close(run_fd)

    def get_at(
        self,
        run_fd: int,
        ticket_id: str,
        run_id: str,
        ordinal: int,
        phase: str,
        attempt: int,
        run_view: RunView | None = None,
    ) -> Stored:
        """Read one record of the run folder open as ``run_fd`` (see Store.get)."""
        rel_dir = f"{ticket_id}/{run_id}"
        cp_file = cp_name(ordinal, phase, attempt)
        cp_bytes = read_capped(run_fd, cp_file, rel_dir, self.max_record_bytes)
        if cp_bytes is None:
            failed_file = failed_name(ordinal, phase, attempt)
            raw = read_capped(run_fd, failed_file, rel_dir, self._sidecar_cap)
            if raw is None:
                raise NotFound(
                    f"no attempt {attempt} of phase {phase} in run {run_id}",
                    path=f"{rel_dir}/{cp_file}",
                )
            doc = kernel.decode_document(raw, f"{rel_dir}/{failed_file}")
            stored = kernel.record_from_document(doc, ordinal, f"{rel_dir}/{failed_file}")
        else:
            location = f"{rel_dir}/{cp_file}"
            meta_raw = read_capped(run_fd, meta_name(ordinal, phase, attempt), rel_dir, self._sidecar_cap)
            if meta_raw is None and not exists(run_fd, cp_file):
                # Removed by a prune while we read it (the seed file goes first, then the sidecar):
                # without this check its seed part alone would pass for a seed-tool checkpoint.
                raise NotFound(f"no attempt {attempt} of phase {phase} in run {run_id}", path=location)
            if meta_raw is None:
                tree = kernel.decode_seed_file(cp_bytes, location)
                cp, warns = kernel.checkpoint_at(tree, ordinal, None, location)
                stored = Stored(cp, location, None, tuple(warns))
                (run_view or RunView(self._sidecar_cap, run_fd, rel_dir)).check_unsidecared(cp, location)
            else:
                doc = kernel.decode_document(meta_raw, f"{rel_dir}/{meta_name(ordinal, phase, attempt)}")
                if doc.get("checkpoint_file_sha256") == hashlib.sha256(cp_bytes).hexdigest():
                    stored = kernel.record_from_document(doc, ordinal, location)
                else:
                    # The seed file changed after it was written: trust the file, flag the difference.
                    stored = kernel.record_from_document(
                        doc,
                        ordinal,
                        location,
                        seed=kernel.decode_seed_file(cp_bytes, location),
                        warnings=(f"{location}: file changed since phaselog wrote it",),
                    )
        kernel.check_identity(stored, ticket_id, run_id, ordinal, phase, attempt)
        return stored

    def tickets(self) -> list[str]:
        """Every ticket directory with a valid ticket id, sorted."""
        out = []
        for n in self.folders.listing("checkpoints") or ():
            try:
                validate_ticket_id(n)
            except PhaselogError:
                continue
            out.append(n)
        return sorted(out)

    def runs(self, ticket_id: str) -> list[str]:
        """Every run directory (canonical UUID names) of a ticket, sorted."""
        return self.folders.runs(ticket_id)

    def iter_records(self, ticket_id: str, run_id: str | None = None) -> Iterator[Stored | Damaged]:
        """Yield records in (run, phase ordinal, attempt) order; damaged ones as Damaged."""
        run_ids = [run_id] if run_id is not None else self.runs(ticket_id)
        for rid in run_ids:
            try:
                run_fd = self.folders.open_dir("checkpoints", ticket_id, rid)
            except NotFound:
                continue
            try:
                names = os.listdir(run_fd)
                view = RunView(self._sidecar_cap, run_fd, f"{ticket_id}/{rid}", names)
                for ref in _refs(names):  # sorted
                    try:
                        yield self.get_at(
                            run_fd, ticket_id, rid, ref.phase_ordinal, ref.phase, ref.attempt_number, view
                        )
                    except (Corrupt, UnsupportedVersion) as exc:
                        yield kernel.damaged_from(exc, ticket_id, rid, ref.phase_ordinal, ref.phase, ref.attempt_number)
            finally:
                os.close(run_fd)

    # -- audit entries (progress events, approvals, markers): stores/files/entries.py -------------
    def put_entry(self, kind: str, ticket_id: str, run_id: str | None, name: str, body: bytes) -> str:
        """Publish an audit entry durably under a new name; AlreadyExists if the name is taken."""
        return self.audit.put(kind, ticket_id, run_id, name, body)

    def entry_names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        """Names of a kind's entries (sorted), without reading them."""
        return self.audit.names(kind, ticket_id, run_id)

    def entries(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind as (name, location, bytes), sorted by name.

        An unreadable entry comes back as a Corrupt error in place of its bytes.
        """
        return self.audit.read_all(kind, ticket_id, run_id, prefix)

    def location(self, record: Checkpoint) -> str:
        """Path of ``record`` relative to the checkpoints root."""
        return kernel.record_location(record)

    _rel = staticmethod(kernel.record_location)

    def pipeline_manifests(self) -> FilesManifests:
        """The recorded pipeline manifests (``<root>/manifests/``: see stores/files/manifests.py)."""
        from phaselog.stores.files.manifests import FilesManifests  # lazy: `phaselog read` never needs them

        return FilesManifests(self.folders)

    def record_manifest(self, manifest: ManifestDoc | None) -> None:
        """Record ``manifest`` (None: nothing to record) in the append that hands it over."""
        if manifest is not None:
            self.pipeline_manifests().put(manifest)

    def run_leases(self) -> FileRunLeases:
        """The run-lease service (one per store object: it keeps held leases' locks open)."""
        if self._leases is None:
            from phaselog.stores.files.lease import FileRunLeases  # lazy: only the runner leases runs (D334)

            self._leases = FileRunLeases(self.folders)
        return self._leases

    @property
    def checkpoints_root(self) -> Path:
        """The folder that ``checkpoint_path`` values are relative to."""
        return self.root / "checkpoints"

    def snapshot(self, ticket_id: str, run_id: str, *, history: bool = False) -> RunSnapshot:
        """Everything a write or a status needs about a run (see :mod:`phaselog.stores.snapshot`)."""
        from phaselog.stores.snapshot import build_snapshot  # lazy: `phaselog read` builds no snapshot

        ticket_id = validate_ticket_id(ticket_id)
        if history:
            return build_snapshot(self, ticket_id, run_id, history=True)
        # The folder's groups from its hint or one listing (no ref per attempt), and each record,
        # progress name and approval it needs read through the same folder descriptor (no path
        # walk per record or entry folder).
        with _HeldRun(self, ticket_id, run_id) as held:
            return build_snapshot(held, ticket_id, run_id, groups=held.groups)

    def state_snapshot(self, ticket_id: str, run_id: str) -> RunSnapshot:
        """A status's snapshot (D192): always read afresh here; the files store carries runs for writes only (D186)."""
        return self.snapshot(ticket_id, run_id)

    def premise_snapshot(self, ticket_id: str, run_id: str) -> tuple[RunSnapshot, bool]:
        """The run as this handle last saw it, for a write (see stores/files/carried.py): the carried
        snapshot when nothing it was read from moved, else a fresh read (carried from now on)."""
        ticket_id = validate_ticket_id(ticket_id)
        key = (ticket_id, run_id)
        try:
            run_fd = self.folders.open_dir("checkpoints", ticket_id, run_id)
        except NotFound:
            self._carried.drop(key)
            return self.snapshot(ticket_id, run_id), False
        try:
            snap = self._carried.premise(key, run_fd)
            if snap is not None:
                return snap, False  # checked now: as fresh as a read (the append checks it again)
            before = run_stamp(run_fd, [])
            snap = self.snapshot(ticket_id, run_id)
            if run_stamp(run_fd, []) == before:  # nothing moved while it was read
                self._carried.keep(key, snap, run_fd)
            return snap, False
        finally:
            os.close(run_fd)

    def close(self) -> None:
        """Release the cached root descriptor and any run lease still held; carry nothing."""
        self._carried = CarriedRuns()
        if self._leases is not None:
            self._leases.close()
        self.folders.close()


class _HeldRun:
    """A snapshot's source: the store's reads, with one run folder's records read through one
    descriptor, opened anew by each listing (a snapshot that starts again lists and reads again)."""

    def __init__(self, store: FilesStore, ticket_id: str, run_id: str) -> None:
        self.store = store
        self.key = (ticket_id, run_id)
        self.fd: int | None = None

    def __enter__(self) -> _HeldRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def groups(self) -> list[_names.RecordGroup]:
        """The run folder's record groups (none when it does not exist), from one listing."""
        self.close()
        try:
            self.fd = self.store.folders.open_dir("checkpoints", *self.key)
        except NotFound:
            return []
        hinted = hints.read(self.fd)  # the groups the last append left (D185), else a listing
        return hinted[0] if hinted is not None else _names.record_groups(os.listdir(self.fd))

    def attempts(self, ticket_id: str, run_id: str) -> list[AttemptRef]:
        return self.store.attempts(ticket_id, run_id)

    def get(self, ticket_id: str, run_id: str, phase_ordinal: int, phase: str, attempt: int) -> Stored:
        if self.fd is None or (ticket_id, run_id) != self.key:
            return self.store.get(ticket_id, run_id, phase_ordinal, phase, attempt)
        return self.store.get_at(self.fd, ticket_id, run_id, phase_ordinal, phase, attempt)

    def _held(self, ticket_id: str, run_id: str | None) -> int | None:
        return self.fd if (ticket_id, run_id) == self.key else None

    def entry_names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        return self.store.audit.names(kind, ticket_id, run_id, self._held(ticket_id, run_id))

    def entries(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        return self.store.audit.read_all(kind, ticket_id, run_id, prefix, self._held(ticket_id, run_id))


def _phase_group(groups: list[_names.RecordGroup], phase: str | int) -> _names.RecordGroup | None:
    """The group of ``phase`` (by name or ordinal) with the lowest ordinal; None when there is none,
    or when that ordinal holds attempts under more than one name (the general path sorts it out)."""
    text = str(phase)
    mine = [g for g in groups if g[1] == phase or str(g[0]) == text]
    if not mine:
        return None
    ordinal = min(g[0] for g in mine)
    at = [g for g in groups if g[0] == ordinal]
    return at[0] if len(at) == 1 else None


def _refs(listing: list[str]) -> list[AttemptRef]:
    refs = _names.parse_record_names(listing)
    # Sorted by the int key in C (AttemptRef's generated __lt__ cost more than reading the folder).
    return [AttemptRef(key[0], key[1], *refs[key]) for key in sorted(refs)]
