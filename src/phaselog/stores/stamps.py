"""Change stamps: a cheap token per run that changes whenever a record is added to it or removed.

A listing that remembers per-run summaries (``phaselog.views.catalog``) asks for the stamps of a
ticket's runs and recomputes only the runs whose stamp changed. A stamp is never data: it only
says "this run may have changed". ``None`` means "cannot tell, do not remember" — a files-store
folder modified in the last second (a second write within the filesystem's timestamp
granularity would not move its mtime again, the "racy git" problem).

* files: (inode, mtime) of the run folder and of its ``.progress``, ``.approvals`` and
  ``.pruned`` folders — adding or removing an entry moves its folder's mtime;
* SQL: per run, the count and the sum of attempt numbers of its checkpoints and the count and
  the greatest name of its entries — one query per kind for the whole ticket
  (:mod:`phaselog.stores.sql.stamps`).
"""

from __future__ import annotations

import os
import time

from phaselog.model.ids import is_canonical_uuid, validate_ticket_id
from phaselog.stores.base import Store, stamper

#: A folder changed this recently (seconds) gets no stamp: it may change again unseen.
RACY_WINDOW_S = 1.0
_RUN_FOLDERS = ("", ".progress", ".approvals", ".pruned")


def run_stamps(store: Store, ticket_id: str) -> dict[str, str | None]:
    """Every run of a ticket with its stamp (None: do not remember what was read)."""
    ticket_id = validate_ticket_id(ticket_id)
    if (stamps := stamper(store)) is not None:
        return stamps.run_stamps(ticket_id)
    return dict.fromkeys(store.runs(ticket_id))  # a store without stamps: nothing is remembered


def ticket_stamp(store: Store, ticket_id: str) -> str | None:
    """A stamp of the ticket's own entries (its marker revisions)."""
    ticket_id = validate_ticket_id(ticket_id)
    if (stamps := stamper(store)) is not None:
        return stamps.ticket_stamp(ticket_id)
    return None


def files_ticket_stamp(checkpoints_root: str | os.PathLike[str], ticket_id: str) -> str | None:
    """The files store's ticket stamp: its ``.markers`` folder's (inode, mtime)."""
    return _folder_stamp(os.path.join(checkpoints_root, ticket_id, ".markers"), time.time())


def _folder_stamp(path: str, now: float) -> str | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return "-"
    if now - st.st_mtime < RACY_WINDOW_S:
        return None
    return f"{st.st_ino}.{st.st_mtime_ns}"


def files_run_stamps(checkpoints_root: str | os.PathLike[str], ticket_id: str) -> dict[str, str | None]:
    """The files store's run stamps (see the module docstring)."""
    base = os.path.join(checkpoints_root, ticket_id)
    now = time.time()
    out: dict[str, str | None] = {}
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return out
    for run_id in sorted(n for n in names if is_canonical_uuid(n)):
        parts = [_folder_stamp(os.path.join(base, run_id, sub), now) for sub in _RUN_FOLDERS]
        out[run_id] = None if any(p is None for p in parts) else "/".join(p or "" for p in parts)
    return out
