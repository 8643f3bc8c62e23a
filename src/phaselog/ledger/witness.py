"""A directory witness: an append-only JSON Lines file of signed heads, and the public keys that signed them.

Layout (docs/anchoring.md)::

    DIR/heads.jsonl          one head per line (Head.to_json), appended, fsynced
    DIR/keys/<key_id>.pem    each signing key's public half, created once, never rewritten

The witness is meant to live where the store's writer cannot rewrite it (another machine, another
account, a WORM bucket mounted read-append). phaselog only ever appends to it: lines are written
with ``O_APPEND`` under an ``flock`` in one ``write`` each and fsynced; the directory is fsynced
when a file is created. A torn last line (a crash mid-append) is reported, never used.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaselog.model.errors import InvalidRecord, PhaselogError, StoreError, UsageError
from phaselog.model.heads import Head

__all__ = ["GIT_MESSAGE", "HEADS_FILE", "WITNESS_GUARD", "DirectoryWitness", "HeadLine", "StoreWitness", "open_witness"]

#: The message of the commit made in a witness that is a git repository.
GIT_MESSAGE = "phaselog anchor: {n} head(s)"

HEADS_FILE = "heads.jsonl"
KEYS_DIR = "keys"


@dataclass(frozen=True)
class HeadLine:
    """One line of the witness: its number (from 1), and the head or why it cannot be read."""

    line: int
    head: Head | None
    error: str | None = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectoryWitness:
    """The heads file and key directory under ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @property
    def describe(self) -> str:
        """The witness as a report names it."""
        return str(self.path)

    def key_pem(self, key_id: str) -> bytes | None:
        """The public key ``key_id`` the witness keeps, or None."""
        try:
            return self.key_file(key_id).read_bytes()
        except OSError:
            return None

    def close(self) -> None:
        """Nothing to release."""

    @property
    def heads_file(self) -> Path:
        """Where the heads are appended."""
        return self.path / HEADS_FILE

    def key_file(self, key_id: str) -> Path:
        """Where the public key ``key_id`` is kept."""
        return self.path / KEYS_DIR / f"{key_id}.pem"

    def _ensure_dir(self, path: Path) -> None:
        if path.is_dir():
            return
        if path.exists():
            raise UsageError(f"--to {self.path}: {path} exists and is not a directory", field="--to", rule="directory")
        path.mkdir(parents=True, exist_ok=True)  # two first anchorings may race to create it
        _fsync_dir(path.parent)

    def keep_key(self, key_id: str, pem: bytes) -> None:
        """Keep the public key ``key_id`` (created if absent; an existing copy is left as it is)."""
        self._ensure_dir(self.path / KEYS_DIR)
        target = self.key_file(key_id)
        if target.exists():
            return
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:  # another anchoring kept it first
            return
        try:
            os.write(fd, pem)
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(target.parent)

    def append(self, heads: Iterable[Head]) -> int:
        """Append ``heads`` (one line each) and fsync; return how many were written.

        A witness that is a git repository (``DIR/.git``) also gets a commit of what changed, so
        its history is git's too and a rewrite needs a force-push a clone would notice.
        StoreError (naming ``--to``) when the directory cannot be written.
        """
        try:
            n = self._append(heads)
        except OSError as exc:
            raise StoreError(
                f"--to {self.path}: cannot append to the witness ({exc.strerror or exc})", field="--to", rule="io"
            ) from None
        if (self.path / ".git").exists():
            self._commit(n)
        return n

    def _commit(self, n: int) -> None:
        import subprocess  # lazy: only a git witness runs git

        git = ["git", "-C", str(self.path)]
        who = subprocess.run([*git, "config", "user.email"], capture_output=True, check=False)
        ident = [] if who.returncode == 0 else ["-c", "user.name=phaselog", "-c", "user.email=phaselog@localhost"]
        for argv in (
            [*git, "add", "--", *(p for p in (HEADS_FILE, KEYS_DIR) if (self.path / p).exists())],
            [*git, *ident, "commit", "-q", "-m", GIT_MESSAGE.format(n=n)],
        ):
            done = subprocess.run(argv, capture_output=True, check=False)
            if done.returncode != 0:
                why = (done.stderr or done.stdout).decode("utf-8", "replace").strip()[:300]
                raise StoreError(
                    f"--to {self.path}: the heads were appended and fsynced, but git failed ({why})",
                    field="--to",
                    rule="git",
                )

    def keep_key_safely(self, key_id: str, pem: bytes) -> None:
        """:meth:`keep_key`, with an unwritable directory as a StoreError naming ``--to``."""
        try:
            self.keep_key(key_id, pem)
        except OSError as exc:
            raise StoreError(
                f"--to {self.path}: cannot keep the public key ({exc.strerror or exc})", field="--to", rule="io"
            ) from None

    def _append(self, heads: Iterable[Head]) -> int:
        self._ensure_dir(self.path)
        data = b"".join(json.dumps(h.to_json(), sort_keys=True, separators=(",", ":")).encode() + b"\n" for h in heads)
        created = not self.heads_file.exists()
        fd = os.open(self.heads_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # anchorings beside each other never interleave their lines
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_dir(self.path)
        return data.count(b"\n")

    def lines(self) -> Iterator[HeadLine]:
        """Every head in the witness, in the order appended; unreadable lines as errors."""
        if not self.heads_file.is_file():
            raise UsageError(
                f"--against {self.path}: no {HEADS_FILE} here (anchor to it first: phaselog anchor --to …)",
                field="--against",
                rule="witness",
            )
        with self.heads_file.open("rb") as fh:
            for number, raw in enumerate(fh, start=1):
                if not raw.endswith(b"\n"):
                    yield HeadLine(number, None, "the last line is torn (no newline): an append did not finish")
                    continue
                try:
                    yield HeadLine(number, Head.from_json(json.loads(raw)))
                except (ValueError, RecursionError) as exc:
                    reason = exc.message if isinstance(exc, InvalidRecord) else f"not valid JSON ({exc})"
                    yield HeadLine(number, None, reason)


#: The guard whose history holds a store witness's heads and keys.
WITNESS_GUARD = "phaselog-witness"
_HEADS, _KEY = "phaselog.heads", "phaselog.key"


class StoreWitness:
    """Another phaselog store as the witness (D322): heads appended to the history of its guard
    ``phaselog-witness`` (the guard storage every backend has: a file beside a files store, rows of
    ``phaselog_guard_history`` on SQL), one history entry per anchoring, and each key once.
    """

    def __init__(self, url: str, *, field: str) -> None:
        self.url = url
        self.field = field
        self._store: Any = None

    @property
    def describe(self) -> str:
        """The witness as a report names it."""
        return self.url

    def _storage(self, *, create: bool) -> Any:
        from phaselog.stores import open_store  # lazy: only a store witness opens a second store
        from phaselog.stores.base import guard_keeper  # lazy: as above

        if self._store is None:
            try:
                self._store = open_store(self.url, create=create)
            except PhaselogError as exc:
                raise UsageError(
                    f"{self.field} {self.url}: cannot open the witness store ({exc.message})",
                    field=self.field,
                    rule="witness",
                ) from None
        keeper = guard_keeper(self._store)
        if keeper is None:
            raise UsageError(
                f"{self.field} {self.url}: this store keeps no guard storage", field=self.field, rule="witness"
            )
        return keeper.guard_storage(WITNESS_GUARD)

    def _entries(self) -> list[dict[str, Any]]:
        try:
            return list(self._storage(create=False).history())
        except UsageError:
            raise
        except PhaselogError as exc:
            raise UsageError(
                f"{self.field} {self.url}: cannot read the witness store ({exc.message})",
                field=self.field,
                rule="witness",
            ) from None

    def append(self, heads: Iterable[Head]) -> int:
        """Append ``heads`` as one history entry of the witness guard; return how many."""
        data = [h.to_json() for h in heads]
        self._storage(create=True).append_history({"kind": _HEADS, "heads": data})
        return len(data)

    def keep_key_safely(self, key_id: str, pem: bytes) -> None:
        """Keep the public key ``key_id`` (once)."""
        if self.key_pem(key_id, create=True) is None:
            self._storage(create=True).append_history({"kind": _KEY, "key_id": key_id, "pem": pem.decode()})

    def key_pem(self, key_id: str, *, create: bool = False) -> bytes | None:
        """The public key ``key_id`` the witness keeps, or None."""
        for e in self._storage(create=create).history():
            if e.get("kind") == _KEY and e.get("key_id") == key_id and isinstance(e.get("pem"), str):
                return str(e["pem"]).encode()
        return None

    def lines(self) -> Iterator[HeadLine]:
        """Every head, numbered from 1 in the order appended; an unreadable entry as an error."""
        number = 0
        entries = self._entries()
        if not any(e.get("kind") == _HEADS for e in entries):
            raise UsageError(
                f"{self.field} {self.url}: this store holds no anchored heads "
                "(anchor to it first: phaselog anchor --to …)",
                field=self.field,
                rule="witness",
            )
        for e in entries:
            if e.get("kind") == _KEY:
                continue
            heads = e.get("heads") if e.get("kind") == _HEADS else None
            if not isinstance(heads, list):
                number += 1
                yield HeadLine(
                    number, None, f"witness entry {e.get('seq')}: not a list of heads ({e.get('error', e.get('kind'))})"
                )
                continue
            for data in heads:
                number += 1
                try:
                    yield HeadLine(number, Head.from_json(data))
                except InvalidRecord as exc:
                    yield HeadLine(number, None, exc.message)

    def close(self) -> None:
        """Close the witness store."""
        if self._store is not None:
            self._store.close()
            self._store = None


def open_witness(spec: str, *, field: str) -> DirectoryWitness | StoreWitness:
    """A directory path is a directory (or git) witness; a store URL (``sqlite://``, ``postgresql://``,
    ``file://``) is a store witness."""
    if "://" in spec:
        return StoreWitness(spec, field=field)
    return DirectoryWitness(spec)
