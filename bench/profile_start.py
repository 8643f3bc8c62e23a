"""``python -m bench --profile-start``: where the start-up of ``phaselog read`` goes.

Two views, each over several fresh processes (medians):

1. ``python -X importtime`` of the console script: top modules by cumulative and by own import
   time, and own import time summed per top-level package;
2. the phases of one process: interpreter start (``python -c pass``), ``import phaselog.cli``,
   the modules the command imports lazily (ledger, files store), the command itself, and what
   is left (interpreter shutdown, process spawn).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from bench import bench_start

PHASES_CODE = """
import time
t0 = time.time()
import json, sys
import phaselog.cli
t1 = time.time()
import phaselog.ledger.facade, phaselog.stores.files.store
t2 = time.time()
try:
    phaselog.cli.main(sys.argv[1:])  # raises SystemExit when given argv (in-process use)
except SystemExit:
    pass
t3 = time.time()
sys.stderr.write(json.dumps([t0, t1, t2, t3]))
"""


def _importtime(cmd: list[str], env: dict[str, str]) -> dict[str, tuple[int, int]]:
    res = subprocess.run(
        [sys.executable, "-X", "importtime", *cmd],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, tuple[int, int]] = {}
    for line in res.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:") :].split("|")
        try:
            own, cumulative = int(parts[0]), int(parts[1])
        except ValueError:
            continue  # the header line
        name = parts[2][1:].rstrip()  # one space, then two per nesting level
        out[name] = (own, cumulative)
    return out


def importtime(env: dict[str, str], args: list[str], runs: int) -> None:
    """View 1: -X importtime, medians over ``runs`` processes."""
    script = bench_start.console_script()
    cmd = [script, *args] if script else ["-m", "phaselog", *args]
    samples = [_importtime(cmd, env) for _ in range(runs)]
    names = set().union(*samples)
    own = {n: statistics.median(s.get(n, (0, 0))[0] for s in samples) for n in names}
    cum = {n: statistics.median(s.get(n, (0, 0))[1] for s in samples) for n in names}
    top_level = [n for n in names if not n.startswith(" ")]
    total = sum(cum[n] for n in top_level)
    print("")
    print(f"== python -X importtime {' '.join(cmd[:2])} …: median of {runs} processes")
    print(f"   all imports: {total / 1e3:.1f} ms (sum of top-level cumulative times)")
    print("   top 20 by cumulative time (indentation = imported by the line above it):")
    print(f"   {'cumulative':>10} {'own':>8}  module")
    for n in sorted(names, key=lambda n: -cum[n])[:20]:
        print(f"   {cum[n] / 1e3:>7.1f} ms {own[n] / 1e3:>5.1f} ms  {n}")
    print("")
    print("   top 15 by own time:")
    for n in sorted(names, key=lambda n: -own[n])[:15]:
        print(f"   {own[n] / 1e3:>7.1f} ms  {n.strip()}")
    per_pkg: dict[str, float] = defaultdict(float)
    for n in names:
        per_pkg[n.strip().split(".")[0]] += own[n]
    print("")
    print("   own import time per top-level package:")
    for pkg, v in sorted(per_pkg.items(), key=lambda kv: -kv[1])[:15]:
        print(f"   {v / 1e3:>7.1f} ms  {v / total:>6.1%}  {pkg}")


def phases(env: dict[str, str], args: list[str], runs: int) -> None:
    """View 2: the phases of one `phaselog read` process (wall-clock stamps, parent and child)."""
    floors: list[float] = []
    parts: list[list[float]] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        floors.append(time.perf_counter() - t0)
        start = time.time()
        res = subprocess.run(
            [sys.executable, "-c", PHASES_CODE, *args],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        end = time.time()
        c0, c1, c2, c3 = json.loads(res.stderr.strip().splitlines()[-1])
        parts.append([c0 - start, c1 - c0, c2 - c1, c3 - c2, end - c3, end - start])
    floor = statistics.median(floors)
    med = [statistics.median(p[i] for p in parts) for i in range(6)]
    labels = [
        "spawn + interpreter start + site, up to the first line",
        "import json + phaselog.cli (click, the phaselog package …)",
        "import phaselog.ledger.facade + stores.files (lazy in the command)",
        "the command: parse options, Ledger.read, print JSON",
        "after the command: interpreter shutdown, process exit",
    ]
    wall = med[5]
    print("")
    print(f"== phases of one `phaselog read` process: medians of {runs} processes")
    print(f"   {'python -c pass, for comparison (start + exit)':<62} {floor * 1e3:>7.1f} ms")
    for label, v in zip(labels, med, strict=False):
        print(f"   {label:<62} {v * 1e3:>7.1f} ms {v / wall:>6.1%}")
    print(f"   {'total (wall time of the process)':<62} {wall * 1e3:>7.1f} ms")


def run(workdir: Path, *, quick: bool) -> None:
    """Both views."""
    env, args = bench_start.setup(workdir)
    runs = 3 if quick else 11
    importtime(env, args, runs)
    phases(env, args, runs)
