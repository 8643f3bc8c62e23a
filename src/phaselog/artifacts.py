"""Artifact hashes: taken when a checkpoint is written, compared when a phase would be skipped.

An artifact is a path relative to an artifacts root (the runner's working directory). A file
hashes to the SHA-256 of its bytes; a folder to the SHA-256 of its sorted ``path NUL sha256``
lines (every regular file below it), so a changed, added or removed file changes the folder's
hash. Symlinks are not followed out of the root: a path that resolves outside it is refused.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from phaselog import formats
from phaselog.errors import InvalidRecord

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """SHA-256 hex of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def tree_sha256(path: Path) -> str:
    """SHA-256 hex of a folder: its regular files' relative paths and hashes, sorted."""
    lines = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if full.is_file() and not full.is_symlink():
                rel = full.relative_to(path).as_posix()
                lines.append(f"{rel}\0{file_sha256(full)}\n")
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
    return file_sha256(target)


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
