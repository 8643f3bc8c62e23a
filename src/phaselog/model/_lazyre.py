"""Regular expressions compiled on first use, so importing a module does not compile them.

A command's start-up pays for every ``re.compile`` at module level of every module it imports,
also for patterns only another command uses (manifest checks, URL forms, payload formats).
``LazyPattern`` has the ``re.Pattern`` methods those modules call; ``tests/test_cli_lazy.py``
checks that ``phaselog read`` compiles none of them.
"""

from __future__ import annotations

import re


class LazyPattern:
    """A ``re.Pattern`` compiled on the first call of one of its methods."""

    __slots__ = ("_compiled", "flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now if it was not yet)."""
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def fullmatch(self, string: str) -> re.Match[str] | None:
        """``re.Pattern.fullmatch``."""
        return self.compiled.fullmatch(string)

    def match(self, string: str) -> re.Match[str] | None:
        """``re.Pattern.match``."""
        return self.compiled.match(string)

    def search(self, string: str) -> re.Match[str] | None:
        """``re.Pattern.search``."""
        return self.compiled.search(string)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"
