"""``python -m bench``: run the benchmarks and print medians, p90s and ratios to baselines.

python -m bench                      # every row of issue 22's table, closed by the table (a few minutes)
python -m bench --quick              # the same rows at small counts, under a minute (smoke test)
python -m bench --all                # every benchmark
python -m bench --only write,start   # some benchmarks
python -m bench --only sql --scale 1m   # SQL stores vs LangGraph at 1M records (minutes to build)
python -m bench --profile-write      # diagnostic: where a write's time goes
python -m bench --profile-start      # diagnostic: where `phaselog read`'s start-up goes
python -m bench --profile-sql        # diagnostic: where the SQL stores' time goes
python -m bench --profile            # where a write's and a read's time goes (the user's path)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import _data, _sqldata
from bench._table import print_table, table_json
from bench._timing import Section, print_section, print_summary

NAMES = (
    "api",
    "write",
    "read",
    "status",
    "list",
    "start",
    "growth",
    "concurrent",
    "memory",
    "runner",
    "sql",
    "langgraph",
    "ui",
    "queue",
    "feed",
    "live",
)
#: What `python -m bench` (and `make bench`) runs by default: the benchmarks behind every row of
#: issue 22's table, closed by that table. `--all` adds the rest (list, memory, ui, sql at scale …).
TABLE = ("api", "concurrent", "langgraph", "runner", "growth", "start")
FULL: dict[str, dict[str, int]] = {
    "api": {"rounds": 5, "ops": 200, "warmup_ops": 20},
    "ui": {"rounds": 15, "checkpoints": 10_000, "long_run": 1_000},
    "write": {"rounds": 600},
    "read": {"rounds": 300},
    "status": {"rounds": 100, "attempts": 100},
    "list": {"rounds": 11, "checkpoints": 10_000},
    "start": {"rounds": 5, "ops": 8, "warmup_ops": 2},
    "growth": {"rounds": 5, "ops": 40, "warmup_ops": 4},
    "concurrent": {"rounds": 5, "per_writer": 25},
    "memory": {},
    "runner": {"rounds": 5, "ops": 12, "warmup_ops": 2},
    "sql": {"write_rounds": 300, "read_rounds": 200, "status_rounds": 200, "list_rounds": 15},
    "langgraph": {"rounds": 5, "ops": 200, "list_ops": 2, "warmup_ops": 10, "checkpoints": 100},
    "queue": {"rounds": 8, "batch": 40, "claims": 30},
    "feed": {"rounds": 15, "runs": 200},
    "live": {"rounds": 30, "runs": 200, "streams": 32},
}
QUICK: dict[str, dict[str, int]] = {
    "api": {"rounds": 3, "ops": 12, "warmup_ops": 3},
    "ui": {"rounds": 4, "checkpoints": 1_000, "long_run": 200},
    "write": {"rounds": 30},
    "read": {"rounds": 30},
    "status": {"rounds": 8, "attempts": 100},
    "list": {"rounds": 3, "checkpoints": 1_000},
    "start": {"rounds": 2, "ops": 2, "warmup_ops": 1},
    "growth": {"rounds": 2, "ops": 4, "warmup_ops": 1, "long": 200},
    "concurrent": {"rounds": 2, "per_writer": 5},
    "memory": {"scales": (1_000, 10_000)},
    "runner": {"rounds": 2, "ops": 2, "warmup_ops": 1},
    "sql": {"write_rounds": 20, "read_rounds": 20, "status_rounds": 20, "list_rounds": 3},
    "langgraph": {"rounds": 2, "ops": 10, "list_ops": 1, "warmup_ops": 2, "checkpoints": 30},
    "queue": {"rounds": 2, "batch": 12, "claims": 6},
    "feed": {"rounds": 3, "runs": 20},
    "live": {"rounds": 5, "runs": 20, "streams": 8},
}


def _parse_only(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    bad = [n for n in names if n not in NAMES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(NAMES)} (got {value!r})")
    return names


def _parse_scales(value: str) -> list[int]:
    try:
        return [_sqldata.parse_scale(v) for v in value.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="phaselog benchmarks: medians, p90s and ratios to baselines measured in the "
        "same run (interleaved). Compare ratios, not absolute times.",
    )
    p.add_argument("--quick", action="store_true", help="small counts (< 60 s): a smoke test")
    p.add_argument(
        "--only",
        type=_parse_only,
        action="extend",
        metavar="NAMES",
        help=f"comma-separated subset of: {', '.join(NAMES)} (repeatable)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help=f"every benchmark ({', '.join(NAMES)}); the default is the rows of issue 22's table: {', '.join(TABLE)}",
    )
    p.add_argument(
        "--dir",
        metavar="PATH",
        help="parent folder of the temporary stores (default: the system temp folder); its filesystem is printed",
    )
    p.add_argument(
        "--scale",
        type=_parse_scales,
        action="extend",
        metavar="SCALES",
        help="records per database for `sql`: comma-separated 10k, 100k, 1m (or any count like "
        f"2k); default {','.join(_sqldata.DEFAULT_SCALES)} "
        f"({','.join(_sqldata.QUICK_SCALES)} with --quick); 1m builds for several minutes",
    )
    p.add_argument(
        "--pg-url",
        default=os.environ.get("PHASELOG_BENCH_POSTGRES")
        or os.environ.get("PHASELOG_TEST_POSTGRES")
        or _sqldata.PG_URL,
        metavar="URL",
        help="PostgreSQL server for `sql` (a schema of its own is created and dropped); "
        "default $PHASELOG_BENCH_POSTGRES, $PHASELOG_TEST_POSTGRES or %(default)s",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary stores")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    p.add_argument(
        "--profile-write",
        action="store_true",
        help="diagnostic: break a durable write down (YAML, sidecar, validation, fsyncs …), "
        "cProfile it, and time fsync protocol variants",
    )
    p.add_argument(
        "--profile-start",
        action="store_true",
        help="diagnostic: -X importtime top offenders and the phases of `phaselog read`'s start",
    )
    p.add_argument(
        "--profile-sql",
        action="store_true",
        help="diagnostic: statements, driver vs Python time, cProfile and query plans of the SQL "
        "stores' write/read/status/list (at the first --scale, default 10k)",
    )
    p.add_argument(
        "--profile-runner",
        action="store_true",
        help="diagnostic: statements, commits and cProfile buckets of a no-op phase under the runner (SQLite)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="where a write's, a read's and a status's time goes on the user's path (SQLite, files): "
        "statements per call and cProfile's top functions by own time",
    )
    p.add_argument("--profile-all", action="store_true", help="--profile and every other diagnostic")
    return p.parse_args(argv)


def _progress(name: str) -> Callable[[str], None]:
    def report(msg: str) -> None:
        print(f"[bench] {name}: {msg}", file=sys.stderr, flush=True)

    return report


def _run_one(name: str, workdir: Path, cfg: dict[str, int], args: argparse.Namespace) -> Iterable[Section]:
    from bench import (
        bench_api,
        bench_concurrent,
        bench_feed,
        bench_growth,
        bench_langgraph,
        bench_list,
        bench_live,
        bench_memory,
        bench_queue,
        bench_read,
        bench_runner,
        bench_sql,
        bench_start,
        bench_status,
        bench_ui,
        bench_write,
    )

    modules: dict[str, Any] = {
        "api": bench_api,
        "write": bench_write,
        "read": bench_read,
        "status": bench_status,
        "list": bench_list,
        "start": bench_start,
        "growth": bench_growth,
        "concurrent": bench_concurrent,
        "memory": bench_memory,
        "runner": bench_runner,
        "sql": bench_sql,
        "langgraph": bench_langgraph,
        "ui": bench_ui,
        "queue": bench_queue,
        "feed": bench_feed,
        "live": bench_live,
    }
    extra: dict[str, Any] = {}
    if name == "sql":
        default = _sqldata.QUICK_SCALES if args.quick else _sqldata.DEFAULT_SCALES
        scales = args.scale or [_sqldata.parse_scale(s) for s in default]
        extra = {"scales": list(dict.fromkeys(scales)), "pg_url": args.pg_url, "keep": args.keep}
    elif name in ("queue", "api", "feed"):
        extra = {"pg_url": args.pg_url, "keep": args.keep}
    result = modules[name].run(workdir, progress=_progress(name), **cfg, **extra)
    # One section, or (sql) an iterator of sections, printed as each scale finishes.
    return [result] if isinstance(result, Section) else result  # one section, or a list/iterator


def main(argv: list[str] | None = None) -> int:
    """Run what was asked; print the figures."""
    args = parse_args(argv)
    mode = "quick" if args.quick else "full"
    started = time.perf_counter()
    workdir = _data.make_workdir(args.dir)
    if args.profile_all:
        args.profile_write = args.profile_start = args.profile_sql = args.profile_runner = args.profile = True
    profiling = args.profile or args.profile_write or args.profile_start or args.profile_sql or args.profile_runner
    print(f"phaselog benchmarks ({mode}{', diagnostics' if profiling else ''}), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    for line in _data.environment():
        print(f"  {line}")
    print(f"  work folder {workdir} on {_data.filesystem_of(workdir)}")
    print(
        "  figures: median and p90 per operation; ratio = median(subject) / median(baseline), both measured in this run"
    )
    sys.stdout.flush()
    sections: list[Section] = []
    try:
        if profiling:
            if args.profile:
                from bench import profile_api

                profile_api.run(workdir, quick=args.quick)
            if args.profile_write:
                from bench import profile_write

                profile_write.run(workdir, quick=args.quick)
            if args.profile_start:
                from bench import profile_start

                profile_start.run(workdir, quick=args.quick)
            if args.profile_runner:
                from bench import profile_runner

                profile_runner.run(workdir, quick=args.quick)
            if args.profile_sql:
                from bench import profile_sql

                scale = (args.scale or [_sqldata.parse_scale("10k")])[0]
                profile_sql.run(workdir, quick=args.quick, scale=scale, pg_url=args.pg_url)
        else:
            table = QUICK if args.quick else FULL
            for name in args.only or (NAMES if args.all else TABLE):
                print(f"[bench] {name} …", file=sys.stderr, flush=True)
                for section in _run_one(name, workdir, table[name], args):
                    sections.append(section)
                    print_section(section)
                    sys.stdout.flush()
            print_summary(sections)
            print_table(sections, quick=args.quick)
    finally:
        if args.keep:
            print(f"\n(kept {workdir})")
        else:
            _data.cleanup(workdir)
    if args.json:
        doc = {
            "mode": mode,
            "environment": _data.environment(),
            "sections": [s.to_json() for s in sections],
            "table": table_json(sections),
        }
        Path(args.json).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
