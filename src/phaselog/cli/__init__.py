"""The ``phaselog`` command line: parse, call the library, print its JSON view (or a table).

Layout: :mod:`phaselog.cli._group` holds the group and the map of areas to modules;
:mod:`phaselog.cli._call` the invocation (``Call``: the shared options, the ledger opened on first
use, rendering) and what a body returns; :mod:`phaselog.cli._scaffold` the shared options, the one
``@command`` decorator (error mapping, closing) and the entry point;
:mod:`phaselog.cli._render` builds the text; :mod:`phaselog.cli._args` parses shared option
values; one module per area registers its commands on import. JSON views live in
:mod:`phaselog.views.results` so a dashboard renders the same data.
"""

from __future__ import annotations

import gc

# A command's start creates ~100k long-lived objects (modules, classes, functions): with Python's
# default threshold (700) that sets off some 30 young-generation collections which free nothing
# and cost ~8% of `phaselog read`. Collect less often; cycles are still collected (D77).
gc.set_threshold(20_000, 10, 10)

from phaselog.cli._main import cli, main  # noqa: E402 - after the threshold: click and the scaffold allocate most

# Importing an area registers its commands on ``cli``. The group imports an area when one of its
# commands is used (or all of them, for help): see ``AREAS`` in _main.py.

__all__ = ["cli", "main"]

if __name__ == "__main__":  # pragma: no cover
    main()
