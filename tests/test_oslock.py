"""``stores.oslock.open_locked``: the one "open and flock, None on failure" the backends share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from phaselog.stores import oslock
from phaselog.stores.oslock import open_locked

PROBE = "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"


def _taken_elsewhere(path: Path) -> bool:
    return subprocess.run([sys.executable, "-c", PROBE, str(path)], check=False, capture_output=True).returncode != 0


def test_the_lock_is_held_until_the_descriptor_closes(tmp_path: Path) -> None:
    (tmp_path / ".lock").write_bytes(b"")
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = open_locked(".lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    assert fd is not None
    assert _taken_elsewhere(tmp_path / ".lock")
    os.close(fd)
    assert not _taken_elsewhere(tmp_path / ".lock")
    folder = open_locked(str(tmp_path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # a folder locks too
    assert folder is not None
    assert _taken_elsewhere(tmp_path)
    os.close(folder)


def test_none_when_the_path_cannot_be_opened(tmp_path: Path) -> None:
    assert open_locked(str(tmp_path / "gone"), os.O_RDONLY) is None
    (tmp_path / "file").write_bytes(b"")
    assert open_locked(str(tmp_path / "file"), os.O_RDONLY | os.O_DIRECTORY) is None


def test_none_and_nothing_left_open_when_the_lock_cannot_be_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".lock").write_bytes(b"")
    opened: list[int] = []
    real_open = os.open

    def recording_open(*args: object, **kw: object) -> int:
        fd = real_open(*args, **kw)  # type: ignore[arg-type]  # passed through as given
        opened.append(fd)
        return fd

    def refuse(fd: int, op: int) -> None:
        raise OSError(37, "No locks available")

    monkeypatch.setattr(oslock.os, "open", recording_open)
    monkeypatch.setattr(oslock.fcntl, "flock", refuse)
    assert open_locked(str(tmp_path / ".lock"), os.O_RDWR) is None
    assert len(opened) == 1
    with pytest.raises(OSError):  # EBADF: the descriptor was closed
        os.fstat(opened[0])
