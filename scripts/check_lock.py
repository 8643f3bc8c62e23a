"""Check that requirements-dev.lock matches pyproject.toml (run by .ci/run; `make lock` refreshes the lock).

The lock pins the dev/CI environment that `make test` installs (``pip install -c requirements-dev.lock``),
so a fresh clone gets what was tested. It must pin every requirement that pyproject.toml names — the
package's dependencies and every extra — at a version inside its range. Exit 0 when it does; otherwise
print one line per problem (the requirement, its range, what the lock says) and exit 1.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements-dev.lock"
PYPROJECT = ROOT / "pyproject.toml"


def pins(text: str) -> dict[str, Version]:
    """The ``name==version`` lines of a pip-compile output, by canonical name."""
    found: dict[str, Version] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise SystemExit(f"{LOCK.name}:{number}: not a 'name==version' pin: {raw.strip()!r}")
        try:
            found[canonicalize_name(name.split("[", 1)[0].strip())] = Version(version.split(";", 1)[0].strip())
        except InvalidVersion:
            raise SystemExit(f"{LOCK.name}:{number}: not a version: {version.strip()!r}") from None
    return found


def requirements(project: dict[str, object]) -> list[tuple[str, Requirement]]:
    """Every requirement of the project and its extras, each with where it was named (self-references dropped)."""
    own = canonicalize_name(str(project["name"]))
    named: list[tuple[str, str]] = [("dependencies", text) for text in project.get("dependencies", [])]  # type: ignore[attr-defined]
    extras: dict[str, list[str]] = project.get("optional-dependencies", {})  # type: ignore[assignment]
    named += [(f"optional-dependencies.{extra}", text) for extra, texts in extras.items() for text in texts]
    out: list[tuple[str, Requirement]] = []
    for where, text in named:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise SystemExit(f"pyproject.toml [{where}]: {exc}") from None
        if canonicalize_name(req.name) != own:
            out.append((where, req))
    return out


def problems(project: dict[str, object], locked: dict[str, Version]) -> list[str]:
    """What in the lock does not satisfy pyproject.toml, one line each."""
    found = []
    for where, req in requirements(project):
        name = canonicalize_name(req.name)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        version = locked.get(name)
        if version is None:
            found.append(f"{req} (pyproject.toml [{where}]) is not pinned in {LOCK.name}")
        elif not req.specifier.contains(version, prereleases=True):
            found.append(f"{req} (pyproject.toml [{where}]): {LOCK.name} pins {name}=={version}, outside the range")
    return found


def main() -> int:
    """Print the lock's problems and return the exit code."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    found = problems(project, pins(LOCK.read_text(encoding="utf-8")))
    for line in found:
        print(f"check_lock: {line}", file=sys.stderr)
    if found:
        print("check_lock: run `make lock` to refresh requirements-dev.lock, then `make test`", file=sys.stderr)
        return 1
    print(f"check_lock: {LOCK.name} pins every requirement of pyproject.toml inside its range")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
