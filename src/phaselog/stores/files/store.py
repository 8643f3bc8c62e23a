"""The files store: the default, needs nothing, and keeps the seed tool's files pure.

Layout under the root (``--root``, ``PHASELOG_HOME`` or ``~/.phaselog``)::

    checkpoints/<ticket_id>/<run_uuid>/
        phase_<N>_<name>_a<k>.yaml        the seed contract, byte-compatible with the seed tool
        .meta_<N>_<name>_a<k>.json        phaselog's part of a completed attempt (written first)
        .failed_<N>_<name>_a<k>.json      a failed attempt (no seed file: the seed has none)
        .lock                             flock: serialises appends within the run
        .tmp-<pid>-<hex>                  temp files; a crash may leave them, a later writer
                                          removes them once older than a minute

Publishing never renames onto a final name: temp file → write → fsync → ``link`` to the final
name (fails if it exists) → fsync the directory. Every path below the root is opened segment by
segment with ``O_NOFOLLOW`` relative to its parent's descriptor, so no symlink is ever followed
below the root. See docs/record-format.md and docs/decisions.md.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from phaselog import _faults
from phaselog.model.errors import (
    AlreadyExists,
    Corrupt,
    NotFound,
    PhaselogError,
    StoreError,
    StoreNotFound,
    UnsupportedVersion,
)
from phaselog.model.ids import is_canonical_uuid, validate_ticket_id
from phaselog.model.limits import SIDECAR_SLACK_BYTES
from phaselog.model.records import Checkpoint
from phaselog.stores import kernel
from phaselog.stores import names as _names
from phaselog.stores.base import AttemptRef, Damaged, RunFence, Stored
from phaselog.stores.files.admin import FILES_CAPABILITIES, FilesAdminMixin
from phaselog.stores.files.io import (
    DIR_FLAGS,
    check_segment,
    clean_temps,
    exists,
    lock_run,
    read_capped,
    same_folder,
    write_temp,
)
from phaselog.stores.files.publish import publish_completed, publish_failed
from phaselog.stores.files.seed import RunView
from phaselog.stores.names import checkpoint_name as cp_name
from phaselog.stores.names import failed_name, meta_name

if TYPE_CHECKING:
    from phaselog.stores.files.lease import FileRunLeases
    from phaselog.stores.manifests import ManifestDoc
    from phaselog.stores.snapshot import RunSnapshot

# Audit entry kinds and their folders: ``<run>/.progress/``, ``<run>/.approvals/``,
# ``<run>/.pruned/`` (notes of what prune removed), ``<ticket>/.markers/``. Every name format
# lives in phaselog.stores.names.


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
        self._root_fd: int | None = None
        self._leases: FileRunLeases | None = None
        # Audit entries may hold up to 8 MiB of progress output, which JSON escaping can grow
        # sixfold (control characters become \uXXXX): their cap leaves room for that.
        self.max_entry_bytes = kernel.entry_cap(self.max_record_bytes)
        # A sidecar is the stored document plus the YAML file's hash.
        self._sidecar_cap = self.max_record_bytes + SIDECAR_SLACK_BYTES
        #: Opened for reading only: nothing is ever written, locked or created through this object.
        self.read_only = read_only
        #: A missing root may be created by a write (else every access raises StoreNotFound).
        self.may_create = create and not read_only
        self._check_root()

    def refuse_if_read_only(self, what: str) -> None:
        """Raise StoreError (rule ``read_only``) when this store object was opened read-only."""
        if self.read_only:
            raise StoreError(f"{self.url} is open read-only: cannot {what}", rule="read_only", path=str(self.root))

    def _missing(self) -> StoreNotFound:
        return StoreNotFound(
            f"no store at {self.root}: the directory does not exist (check the path; a command that writes creates it)",
            path=str(self.root),
        )

    def _check_root(self) -> None:
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            return  # reads say so (StoreNotFound, or an empty store if it may be created); writes create it
        except OSError as exc:
            raise StoreError(f"cannot open store root {self.root}: {exc.strerror}", path=str(self.root)) from None
        if not stat.S_ISDIR(st.st_mode):
            raise StoreError(
                f"{self.root} is not a directory; a files store is a directory (a SQLite file needs a sqlite:/// URL)",
                path=str(self.root),
                rule="not_a_directory",
            )

    def __repr__(self) -> str:
        return f"FilesStore({str(self.root)!r})"

    # -- directories ------------------------------------------------------------------------------
    def _open_root(self, *, create: bool) -> int:
        # The root is opened once per store and dup'ed per call: resolving its path on every
        # operation cost as much as the rest of a read. (The root itself may be a symlink.)
        cached = getattr(self, "_root_fd", None)
        if cached is not None:
            try:
                return os.dup(cached)
            except OSError:
                self._root_fd = None
        fd = self._open_root_path(create=create)
        self._root_fd = os.dup(fd)
        return fd

    def _open_root_path(self, *, create: bool) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not self.may_create:
                raise self._missing() from None
            if not create:
                raise NotFound(f"store root {self.root} does not exist", path=str(self.root)) from None
        except OSError as exc:
            raise StoreError(f"cannot open store root {self.root}: {exc.strerror}") from None
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreError(f"cannot create store root {self.root}: {exc.strerror}") from None

    def open_dir(self, *segments: str, create: bool = False) -> int:
        """A descriptor of the folder ``root/segments…``, opened without following any symlink below the
        root (the caller closes it); NotFound when absent unless ``create``."""
        return self._open_dir(*segments, create=create)

    def _open_dir(self, *segments: str, create: bool = False) -> int:
        """Open ``root/segments…`` without following any symlink below the root."""
        for seg in segments:
            check_segment(seg, self.root)
        # Only the root descriptor is cached: a cached descriptor of a folder below it would follow
        # that folder if it were moved away and replaced by a symlink (tests/test_security.py).
        fd = self._open_root(create=create)
        try:
            for i, seg in enumerate(segments):
                nfd = self._open_child(fd, seg, create=create, rel="/".join(segments[: i + 1]))
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_child(self, parent_fd: int, seg: str, *, create: bool, rel: str) -> int:
        """Open the folder ``seg`` below ``parent_fd`` (never through a symlink)."""
        check_segment(seg, self.root)
        try:
            return os.open(seg, DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                raise NotFound(f"{rel} does not exist in {self.root}", path=rel) from None
            return self._mkdir(parent_fd, seg)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise StoreError(
                    f"refusing to follow a symlink or non-directory at {rel} under {self.root}",
                    path=rel,
                    rule="no_symlinks",
                ) from None
            raise StoreError(f"cannot open {seg}: {exc.strerror}") from None

    def _open_run(self, ticket_id: str, run_id: str, *, create: bool, shared: bool = False) -> tuple[int, int]:
        """Open a run folder and take its lock; return (run folder fd, lock fd).

        Appends and prunes take the lock exclusively, audit entries of the run shared. A prune
        that removes the run whole moves its folder aside while holding the lock, so a writer that
        waited for the lock checks that its folder is still the run's; if not, it starts over
        (with ``create``: in a new folder). Closing the lock fd releases the lock.
        """
        for _ in range(1000):
            ticket_fd = self._open_dir("checkpoints", ticket_id, create=create)
            try:
                run_fd = self._open_child(ticket_fd, run_id, create=create, rel=f"{ticket_id}/{run_id}")
                try:
                    lock_fd = self._lock(run_fd, shared=shared)
                except OSError as exc:
                    os.close(run_fd)
                    raise StoreError(f"cannot lock run {ticket_id}/{run_id}: {exc.strerror}") from None
                except BaseException:
                    os.close(run_fd)
                    raise
                if same_folder(ticket_fd, run_id, run_fd):
                    return run_fd, lock_fd
                os.close(lock_fd)
                os.close(run_fd)
            finally:
                os.close(ticket_fd)
        raise StoreError(f"run {ticket_id}/{run_id} kept being removed while waiting for its lock")

    def _mkdir(self, parent_fd: int, name: str) -> int:
        self.refuse_if_read_only(f"create {name}")
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            os.fsync(parent_fd)  # the new directory entry must survive a crash too
        except FileExistsError:
            pass
        except OSError as exc:  # a read-only or full filesystem, no permission: say so, typed
            raise StoreError(f"cannot create {name}: {exc.strerror}", path=name) from None
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise StoreError(f"refusing to follow a symlink at {name}", rule="no_symlinks") from None
            raise StoreError(f"cannot open {name}: {exc.strerror}") from None
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) != 0o700 and st.st_uid == os.getuid():
            os.fchmod(fd, 0o700)  # whatever the umask
        return fd

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
        run_fd, lock_fd = self._open_run(record.ticket_id, record.run_id, create=True)
        try:
            try:
                names = os.listdir(run_fd)
                clean_temps(run_fd, names)
                latest = max((g[3] for g in _names.record_groups(names) if g[0] == ordinal), default=0)
                kernel.decide_append(
                    record,  # an attempt at or below the latest: look it up among every name (rare)
                    exists=attempt <= latest and (ordinal, attempt) in _names.parse_record_names(names),
                    latest=latest,
                    expected_latest=expected_latest,
                    check_fence=None if fence is None else lambda: _check_fence(run_fd, fence),
                )
                self.record_manifest(manifest)  # before the record: a record never lacks its manifest
                if record.completed:
                    publish_completed(run_fd, record, set(names), files)
                else:
                    publish_failed(run_fd, record, files[0])
            finally:
                os.close(lock_fd)  # releases the flock
        except PhaselogError:
            raise  # AlreadyExists and StoreError are OSErrors too: keep their type and context
        except OSError as exc:
            raise StoreError(f"cannot write {self._rel(record)}: {exc.strerror}") from None
        finally:
            os.close(run_fd)
        return self._rel(record)

    def _lock(self, run_fd: int, *, shared: bool = False) -> int:
        self.refuse_if_read_only("lock a run")  # only writers lock (and creating .lock is a write)
        return lock_run(run_fd, shared=shared)

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
        validate_ticket_id(ticket_id)
        try:
            run_fd = self._open_dir("checkpoints", ticket_id, run_id)
        except NotFound:
            return []
        try:
            return os.listdir(run_fd)
        finally:
            os.close(run_fd)

    def get(self, ticket_id: str, run_id: str, phase_ordinal: int, phase: str, attempt: int) -> Stored:
        """Read one record (see Store.get)."""
        validate_ticket_id(ticket_id)
        try:
            run_fd = self._open_dir("checkpoints", ticket_id, run_id)
        except NotFound:
            raise NotFound(f"no run {run_id} for ticket {ticket_id}", ticket_id=ticket_id, run_id=run_id) from None
        try:
            return self._get_in(run_fd, ticket_id, run_id, phase_ordinal, phase, attempt)
        finally:
            os.close(run_fd)

    def _get_in(
        self,
        run_fd: int,
        ticket_id: str,
        run_id: str,
        ordinal: int,
        phase: str,
        attempt: int,
        run_view: RunView | None = None,
    ) -> Stored:
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
        try:
            fd = self._open_dir("checkpoints")
        except NotFound:
            return []
        try:
            out = []
            for n in os.listdir(fd):
                try:
                    validate_ticket_id(n)
                except PhaselogError:
                    continue
                out.append(n)
            return sorted(out)
        finally:
            os.close(fd)

    def runs(self, ticket_id: str) -> list[str]:
        """Every run directory (canonical UUID names) of a ticket, sorted."""
        validate_ticket_id(ticket_id)
        try:
            fd = self._open_dir("checkpoints", ticket_id)
        except NotFound:
            return []
        try:
            return sorted(n for n in os.listdir(fd) if is_canonical_uuid(n))
        finally:
            os.close(fd)

    def iter_records(self, ticket_id: str, run_id: str | None = None) -> Iterator[Stored | Damaged]:
        """Yield records in (run, phase ordinal, attempt) order; damaged ones as Damaged."""
        run_ids = [run_id] if run_id is not None else self.runs(ticket_id)
        for rid in run_ids:
            try:
                run_fd = self._open_dir("checkpoints", ticket_id, rid)
            except NotFound:
                continue
            try:
                names = os.listdir(run_fd)
                view = RunView(self._sidecar_cap, run_fd, f"{ticket_id}/{rid}", names)
                for ref in _refs(names):  # sorted
                    try:
                        yield self._get_in(
                            run_fd, ticket_id, rid, ref.phase_ordinal, ref.phase, ref.attempt_number, view
                        )
                    except (Corrupt, UnsupportedVersion) as exc:
                        yield kernel.damaged_from(exc, ticket_id, rid, ref.phase_ordinal, ref.phase, ref.attempt_number)
            finally:
                os.close(run_fd)

    # -- audit entries (progress events, approvals, markers) -------------------------------------
    def _entry_dir(self, kind: str, ticket_id: str, run_id: str | None, *, create: bool) -> int:
        return self._open_dir(*self._entry_dir_segments(kind, ticket_id, run_id), create=create)

    @staticmethod
    def _entry_dir_segments(kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        kernel.check_entry_key(kind, ticket_id, run_id)
        return ["checkpoints", ticket_id, *([] if run_id is None else [run_id]), f".{kind}"]

    def put_entry(self, kind: str, ticket_id: str, run_id: str | None, name: str, body: bytes) -> str:
        """Publish an audit entry durably under a new name; AlreadyExists if the name is taken."""
        self.refuse_if_read_only("record an audit entry")
        kernel.check_entry(name, body, self.max_record_bytes)
        rel = kernel.entry_location(kind, ticket_id, run_id, name)
        lock_fd = None
        if run_id is None:
            dir_fd = self._entry_dir(kind, ticket_id, run_id, create=True)
        else:
            # A run's entries wait for a prune of that run (shared lock; appends and prunes hold it
            # exclusively), so a prune never removes an entry it did not decide on.
            self._entry_dir_segments(kind, ticket_id, run_id)
            run_fd, lock_fd = self._open_run(ticket_id, run_id, create=True, shared=True)
            try:
                dir_fd = self._open_child(run_fd, f".{kind}", create=True, rel=f"{ticket_id}/{run_id}/.{kind}")
            except BaseException:
                os.close(lock_fd)
                raise
            finally:
                os.close(run_fd)
        try:
            names = os.listdir(dir_fd)
            clean_temps(dir_fd, names)
            tmp = write_temp(dir_fd, body)
            try:
                _faults.point("files.after_entry_temp")
                try:
                    os.link(tmp, f"{name}.json", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except FileExistsError:
                    raise AlreadyExists(f"{rel} already exists", path=rel) from None
                _faults.point("files.after_entry_link")
                os.fsync(dir_fd)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
        except PhaselogError:
            raise  # AlreadyExists is a FileExistsError: callers retry on it, keep its type
        except OSError as exc:
            raise StoreError(f"cannot write {rel}: {exc.strerror}") from None
        finally:
            os.close(dir_fd)
            if lock_fd is not None:
                os.close(lock_fd)
        return rel

    def entry_names(self, kind: str, ticket_id: str, run_id: str | None) -> list[str]:
        """Names of a kind's entries (sorted), without reading them."""
        try:
            dir_fd = self._entry_dir(kind, ticket_id, run_id, create=False)
        except NotFound:
            return []
        try:
            return sorted(n[:-5] for n in os.listdir(dir_fd) if n.endswith(".json") and _names.is_entry_name(n[:-5]))
        finally:
            os.close(dir_fd)

    def entries(
        self, kind: str, ticket_id: str, run_id: str | None, prefix: str = ""
    ) -> list[tuple[str, str, bytes | Corrupt]]:
        """Every entry of a kind as (name, location, bytes), sorted by name.

        An unreadable entry comes back as a Corrupt error in place of its bytes.
        """
        try:
            dir_fd = self._entry_dir(kind, ticket_id, run_id, create=False)
        except NotFound:
            return []
        rel_dir = kernel.entry_dir_location(kind, ticket_id, run_id)
        out: list[tuple[str, str, bytes | Corrupt]] = []
        try:
            for n in sorted(os.listdir(dir_fd)):
                if not n.endswith(".json") or not n.startswith(prefix):
                    continue
                stem = n[:-5]
                if not _names.is_entry_name(stem):
                    continue
                try:
                    data = read_capped(dir_fd, n, rel_dir, self.max_entry_bytes)
                except Corrupt as exc:
                    out.append((stem, f"{rel_dir}/{n}", exc))
                    continue
                if data is not None:
                    out.append((stem, f"{rel_dir}/{n}", data))
        finally:
            os.close(dir_fd)
        return out

    def location(self, record: Checkpoint) -> str:
        """Path of ``record`` relative to the checkpoints root."""
        return kernel.record_location(record)

    _rel = staticmethod(kernel.record_location)

    def run_leases(self) -> FileRunLeases:
        """The run-lease service (one per store object: it keeps held leases' locks open)."""
        if self._leases is None:
            from phaselog.stores.files.lease import FileRunLeases

            self._leases = FileRunLeases(self)
        return self._leases

    @property
    def checkpoints_root(self) -> Path:
        """The folder that ``checkpoint_path`` values are relative to."""
        return self.root / "checkpoints"

    def snapshot(self, ticket_id: str, run_id: str, *, history: bool = False) -> RunSnapshot:
        """Everything a write or a status needs about a run (see :mod:`phaselog.stores.snapshot`)."""
        from phaselog.stores.snapshot import build_snapshot

        ticket_id = validate_ticket_id(ticket_id)  # one listing, summarised per phase (no ref per attempt)
        groups = None if history else lambda: _names.record_groups(self._listing(ticket_id, run_id))
        return build_snapshot(self, ticket_id, run_id, history=history, groups=groups)

    def close(self) -> None:
        """Release the cached root descriptor and any run lease still held."""
        leases = getattr(self, "_leases", None)
        if leases is not None:
            leases.close()
        for attr in ("_root_fd",):
            fd = getattr(self, attr, None)
            setattr(self, attr, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _refs(listing: list[str]) -> list[AttemptRef]:
    refs = _names.parse_record_names(listing)
    # Sorted by the int key in C (AttemptRef's generated __lt__ cost more than reading the folder).
    return [AttemptRef(key[0], key[1], *refs[key]) for key in sorted(refs)]


def _check_fence(run_fd: int, fence: RunFence) -> None:
    from phaselog.stores.files.lease import check_fence

    check_fence(run_fd, fence)
