"""Baselines: what the same work costs in plain Python, with nothing of phaselog in the way."""

from __future__ import annotations

import glob
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import yaml

try:
    from yaml import CSafeLoader as Loader
except ImportError:  # pragma: no cover - depends on the PyYAML build
    from yaml import SafeLoader as Loader  # type: ignore[assignment]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def _temp(dir_fd: int, name: str, data: bytes, sync: Callable[[int], None] = os.fsync) -> None:
    fd = os.open(name, _CREATE, 0o600, dir_fd=dir_fd)
    try:
        os.write(fd, data)
        sync(fd)
    finally:
        os.close(fd)


@cache
def _helper() -> ThreadPoolExecutor:
    """One long-lived helper thread, as a library would keep it (no thread start per write)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-fsync")


def durable_write(folder: str, name: str, data: bytes) -> None:
    """The publish protocol with one file: temp → write → fsync → link → fsync the folder."""
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tmp = f".tmp-{name}"
        _temp(dir_fd, tmp, data)
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
        os.unlink(tmp, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def durable_write_pair(
    folder: str,
    name: str,
    data: bytes,
    side: bytes,
    *,
    concurrent: bool = False,
    sync: Callable[[int], None] = os.fsync,
) -> None:
    """Two files (sidecar, then seed file) published together: 2 file fsyncs + 1 folder fsync.

    ``concurrent`` fsyncs the two temp files at once, one on a helper thread (os.fsync releases
    the GIL), so the filesystem can commit both in one journal transaction. ``sync`` is the call
    used for the files (os.fsync or os.fdatasync); the folder always gets os.fsync.
    """
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        t_side, t_main = f".tmp-m-{name}", f".tmp-{name}"
        if concurrent:
            fds = [os.open(t, _CREATE, 0o600, dir_fd=dir_fd) for t in (t_side, t_main)]
            try:
                os.write(fds[0], side)
                os.write(fds[1], data)
                pending = _helper().submit(sync, fds[0])
                sync(fds[1])
                pending.result()
            finally:
                for fd in fds:
                    os.close(fd)
        else:
            _temp(dir_fd, t_side, side, sync)
            _temp(dir_fd, t_main, data, sync)
        os.link(t_side, f".meta-{name}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.link(t_main, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
        os.unlink(t_side, dir_fd=dir_fd)
        os.unlink(t_main, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def read_parse(path: str) -> Any:
    """open + read + CSafeLoader parse of one YAML file."""
    with open(path, "rb") as fh:
        return yaml.load(fh.read(), Loader=Loader)


def _is_record_file(name: str) -> bool:
    return (name.startswith("phase_") and name.endswith(".yaml")) or (
        name.startswith((".meta_", ".failed_")) and name.endswith(".json")
    )


def list_read(folder: str) -> int:
    """List one run folder and read every record file (seed YAML and JSON sidecars)."""
    n = 0
    for name in os.listdir(folder):
        if _is_record_file(name):
            with open(os.path.join(folder, name), "rb") as fh:
                fh.read()
            n += 1
    return n


def list_parse(folder: str) -> int:
    """List one run folder; read and CSafeLoader-parse every seed file (as the seed tool does)."""
    n = 0
    for name in os.listdir(folder):
        if name.startswith("phase_") and name.endswith(".yaml"):
            read_parse(os.path.join(folder, name))
            n += 1
    return n


def glob_read(patterns: list[str], *, parse: bool) -> int:
    """glob + read every file matching ``patterns``; with ``parse``, CSafeLoader-parse them."""
    n = 0
    for pattern in patterns:
        for path in glob.glob(pattern):
            with open(path, "rb") as fh:
                data = fh.read()
            if parse:
                yaml.load(data, Loader=Loader)
            n += 1
    return n


class SqliteInsert:
    """A durable sqlite3 insert: WAL, synchronous=FULL, one INSERT per transaction."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS cp (name TEXT PRIMARY KEY, body BLOB NOT NULL)")
        self.synchronous = self.conn.execute("PRAGMA synchronous").fetchone()[0]

    def insert(self, name: str, body: bytes) -> None:
        """Insert one row and commit (autocommit)."""
        self.conn.execute("INSERT INTO cp (name, body) VALUES (?, ?)", (name, body))

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()
