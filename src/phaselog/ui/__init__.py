"""``phaselog ui``: a local dashboard over the same library views as the CLI.

Server-rendered pages (Starlette + Jinja2, served by uvicorn), one small script for live
refresh, assets shipped in this package (works offline). Needs the ``ui`` extra:
``pip install 'phaselog[ui]'``. Pages: docs/ui.md. Safety model: :mod:`phaselog.ui.security`.

Nothing here is imported by ``import phaselog`` or by the CLI's other commands.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Settings", "create_app", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from phaselog.ui import app  # lazy: the ui extra may be absent

        return getattr(app, name)
    raise AttributeError(f"module 'phaselog.ui' has no attribute {name!r}")
