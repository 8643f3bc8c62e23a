"""The one error of an export line that cannot be imported (shared by records and manifests)."""

from __future__ import annotations

from phaselog.model.errors import InvalidRecord


def bad_line(n: int, message: str, fld: str, rule: str) -> InvalidRecord:
    """The error refusing import line ``n`` (field ``fld`` broke ``rule``): nothing is imported."""
    return InvalidRecord(
        f"line {n}: {message}; nothing was imported",
        line=n,
        field=fld,
        rule=rule,
        errors=[{"field": fld, "rule": rule, "message": message}],
    )


__all__ = ["bad_line"]
