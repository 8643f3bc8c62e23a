"""The ``phaselog`` command line: parse, call the library, print its JSON view (or a table).

Layout: :mod:`phaselog.cli._scaffold` holds the group, the shared options and the one
``@command`` decorator (ledger opening, error mapping, rendering, closing);
:mod:`phaselog.cli._render` builds the text; :mod:`phaselog.cli._args` parses shared option
values; one module per area registers its commands on import. JSON views live in
:mod:`phaselog.views` so a dashboard renders the same data.
"""

from __future__ import annotations

from phaselog.cli._scaffold import cli, main

# Importing an area registers its commands on ``cli``. The group imports an area when one of its
# commands is used (or all of them, for help): see ``AREAS`` in _scaffold.py.

__all__ = ["cli", "main"]

if __name__ == "__main__":  # pragma: no cover
    main()
