"""Regenerate the JSON twins of the built-in pipeline manifests (run by `make docs`).

The YAML files are the source people read and copy; the JSON twins are what phaselog loads at run
time, so that reading a record never imports YAML. tests/test_manifest_twins.py fails when they
drift apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

MANIFESTS = Path(__file__).resolve().parent.parent / "src" / "phaselog" / "model" / "manifests"


def render(yaml_path: Path) -> str:
    """The JSON twin's text for one YAML manifest."""
    return json.dumps(yaml.safe_load(yaml_path.read_text("utf-8")), indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    for y in sorted(MANIFESTS.glob("*.yaml")):
        y.with_suffix(".json").write_text(render(y), "utf-8")
        print(f"wrote {y.with_suffix('.json').relative_to(MANIFESTS.parent.parent.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
