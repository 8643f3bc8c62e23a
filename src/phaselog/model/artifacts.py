"""Artifact hashes: taken when a checkpoint is written, compared when a phase would be skipped.

An artifact is a path relative to an artifacts root (the runner's working directory). A file
hashes to the SHA-256 of its bytes; a folder to the SHA-256 of its sorted ``path NUL sha256``
lines (every regular file below it), so a changed, added or removed file changes the folder's
hash. Symlinks are not followed out of the root: a path that resolves outside it is refused.

A file's digest is remembered for the life of the process under its stat signature (path, device,
inode, size, mtime and ctime in ns), once the file has been still for a second (D90): a dashboard,
a worker or a runner that checks the same artifacts again pays one ``stat`` per file, not a read.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from phaselog.model import formats
from phaselog.model.errors import InvalidRecord

_CHUNK = 1 << 20
#: How long a file must have been unchanged before its digest is remembered (a write in the
#: same clock tick as the hash would leave the stat signature as it was).
_SETTLED_NS = 1_000_000_000
_MEMO_MAX = 4096
_memo: dict[tuple[str, int, int, int, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """SHA-256 hex of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _signature(path: Path, st: os.stat_result) -> tuple[str, int, int, int, int, int]:
    return (os.fspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _digest(path: Path) -> str:
    """:func:`file_sha256`, remembered under the file's stat signature once the file has settled."""
    before = os.stat(path)
    key = _signature(path, before)
    known = _memo.get(key)
    if known is not None:
        return known
    digest = file_sha256(path)
    settled = time.time_ns() - max(before.st_mtime_ns, before.st_ctime_ns) > _SETTLED_NS
    if settled and _signature(path, os.stat(path)) == key:
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        _memo[key] = digest
    return digest


def tree_sha256(path: Path) -> str:
    """SHA-256 hex of a folder: its regular files' relative paths and hashes, sorted."""
    lines = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if full.is_file() and not full.is_symlink():
                rel = full.relative_to(path).as_posix()
                lines.append(f"{rel}\0{_digest(full)}\n")
    return hashlib.sha256("".join(sorted(lines)).encode("utf-8")).hexdigest()


def resolve(root: str | os.PathLike[str], rel: str) -> Path:
    """The artifact's path under ``root``; ValueError naming the rule if it is not a safe relative path."""
    reason = formats.relative_path(rel)
    if reason:
        raise ValueError(f"relative-path: {reason}")
    base = Path(root).resolve()
    target = (base / rel).resolve()
    if not target.is_relative_to(base):
        raise ValueError(f"artifact_outside_root: {rel!r} resolves outside {base}")
    return target


def sha256_of(root: str | os.PathLike[str], rel: str) -> str | None:
    """The artifact's current hash, or None when it does not exist (ValueError if unsafe)."""
    target = resolve(root, rel)
    if target.is_dir():
        return tree_sha256(target)
    if not target.is_file():
        return None
    return _digest(target)


def hash_artifacts(root: str | os.PathLike[str], paths: Iterable[str]) -> dict[str, str]:
    """Hash every artifact now (at write time); InvalidRecord naming the first bad path."""
    out: dict[str, str] = {}
    for i, rel in enumerate(paths):
        field = f"artifact_paths[{i}]"
        try:
            digest = sha256_of(root, rel)
        except ValueError as exc:
            rule, _, message = str(exc).partition(": ")
            raise InvalidRecord(
                f"{field}: {message}", errors=[{"field": field, "rule": rule, "message": message}]
            ) from None
        except OSError as exc:
            raise InvalidRecord(
                f"{field}: cannot read {rel!r}: {exc.strerror}",
                errors=[{"field": field, "rule": "artifact_unreadable", "message": str(exc.strerror)}],
            ) from None
        if digest is None:
            raise InvalidRecord(
                f"{field}: {rel!r} does not exist under {Path(root).resolve()}; an artifact is hashed when "
                "its checkpoint is written",
                errors=[{"field": field, "rule": "artifact_missing", "message": "does not exist"}],
            )
        out[rel] = digest
    return out


def changed_artifacts(root: str | os.PathLike[str], recorded: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """Artifacts that are missing or whose hash differs from the one recorded.

    Returns (path, rule, message) for each: rule ``artifact_missing`` or ``artifact_changed``.
    """
    problems = []
    for rel, digest in sorted(recorded.items()):
        try:
            now = sha256_of(root, rel)
        except ValueError as exc:
            rule, _, message = str(exc).partition(": ")
            problems.append((rel, rule, message))
            continue
        except OSError as exc:
            problems.append((rel, "artifact_unreadable", f"{rel!r} cannot be read: {exc.strerror}"))
            continue
        if now is None:
            problems.append((rel, "artifact_missing", f"{rel!r} no longer exists"))
        elif now != digest:
            problems.append(
                (
                    rel,
                    "artifact_changed",
                    f"{rel!r} changed since it was recorded (sha256 {digest[:12]}, now {now[:12]})",
                )
            )
    return problems


def drift(root: str | os.PathLike[str], recorded: Mapping[str, str]) -> str | None:
    """Why the artifacts a checkpoint recorded (path → SHA-256) no longer match the files under
    ``root``, or None when every one is there with its hash (D89).

    The one test of "are this checkpoint's artifacts still what it recorded": the run's state
    (``status``), and so ``explain`` and the runner's skip, use it. Paths recorded without a hash
    made no claim about their content and are not judged here (``validate --artifacts-root``
    checks that they exist).
    """
    problems = []
    base = Path(root).resolve()
    for rel, rule, message in changed_artifacts(base, recorded):
        problems.append(f"{rel!r} does not exist under {base}" if rule == "artifact_missing" else message)
    if not problems:
        return None
    more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
    return "; ".join(problems[:2]) + more
