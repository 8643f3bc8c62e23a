"""Named fault points for crash tests (DBOS ``_debug_trigger`` style).

``PHASELOG_FAULT=name`` (read once at import) makes :func:`point` end the process abruptly with
``os._exit(137)`` when execution reaches that name: the same effect as SIGKILL at that step,
but deterministic. Production code pays one set lookup per point.
"""

from __future__ import annotations

import os

_ARMED = frozenset(filter(None, os.environ.get("PHASELOG_FAULT", "").split(",")))


def point(name: str) -> None:
    """Die here if the fault ``name`` is armed."""
    if _ARMED and name in _ARMED:
        os._exit(137)
