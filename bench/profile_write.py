"""``python -m bench --profile-write``: where the time of one durable Ledger.write goes.

Three views of the same operation (writing attempt 2 of implement into a run that has attempt 1):

1. a breakdown by timers wrapped around phaselog's functions for the duration of the
   diagnostic (exclusive time: a function's time minus that of wrapped functions it calls);
2. cProfile's top functions;
3. the raw I/O protocol in variants (one file, two files, two files fsynced concurrently,
   fdatasync, phaselog's extra syscalls) against Ledger.write with fsync on and off, so the
   floor that the goal (<= 1.5x the one-file protocol) leaves for Python is visible.

Nothing under src/ is changed: the wrappers are installed on module and class attributes and
removed afterwards.
"""

from __future__ import annotations

import contextlib
import cProfile
import fcntl
import importlib
import io
import itertools
import os
import pstats
import stat
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from bench import _data, _raw
from bench._timing import (
    BASELINE,
    INFO,
    SUBJECT,
    Contestant,
    Section,
    print_section,
    run_interleaved,
)
from phaselog.ledger import facade as ledger
from phaselog.model import records

TICKET = "BENCH-PW"

# What to time: "module:attribute" or "module:Class.attribute", the category printed, and the
# group the summary adds up. A target that the code no longer has is skipped (and said so).
OTHER, LISTING, READS, TEMP = (
    "Python: other",
    "listing, folders, lock",
    "reading earlier records",
    "temp files, links",
)
TARGETS: list[tuple[str, str, str]] = [
    ("phaselog.ledger.writes:Writes.write", "Writes.write own code (artifact hashes)", OTHER),
    ("phaselog.ledger.writes:Writes.write_record", "Writes.write_record own code (Checkpoint, retry loop)", OTHER),
    ("phaselog.ledger.resolve:PipelineResolver.for_run", "PipelineResolver.for_run own code", OTHER),
    ("phaselog.ledger.resolve:PipelineResolver.recorded", "PipelineResolver.recorded own code", OTHER),
    ("phaselog.ledger.writes:_basis", "writes._basis own code", OTHER),
    ("phaselog.ledger.writes:Writes._check_prerequisites", "Writes._check_prerequisites", OTHER),
    ("phaselog.stores.files.store:FilesStore.attempts", "FilesStore.attempts (listdir, names)", LISTING),
    ("phaselog.stores.files.store:FilesStore.entry_names", "FilesStore.entry_names", LISTING),
    (
        "phaselog.stores.files.folders:Folders.open_dir",
        "Folders.open_dir (O_NOFOLLOW walk)",
        LISTING,
    ),
    ("phaselog.stores.files.folders:Folders.lock", "Folders.lock (open, fchmod, flock)", LISTING),
    ("phaselog.stores.files.store:FilesStore.append", "FilesStore.append own code (listdir)", LISTING),
    ("phaselog.stores.files.store:FilesStore.get", "FilesStore.get own code", READS),
    ("phaselog.stores.files.io:read_capped", "files_io.read_capped (open, fstat, read)", READS),
    ("phaselog.stores.kernel:decode_document", "sidecar JSON parse (json.loads)", READS),
    ("phaselog.stores.kernel:checkpoint_from_seed", "checkpoint_from_seed (record from dict)", READS),
    ("phaselog.stores.files.publish:publish_completed", "publish_completed own code", OTHER),
    (
        "phaselog.stores.files.io:create_temp",
        "temp files: open, fchmod, write, close",
        TEMP,
    ),
    ("os:link", "os.link", TEMP),
    ("os:unlink", "os.unlink", TEMP),
    ("phaselog.model._yaml:dump", "YAML emission (_yaml.dump)", "YAML emission"),
    (
        "phaselog.stores.kernel:record_document",
        "JSON sidecar (record_document incl. json.dumps)",
        "JSON sidecar",
    ),
    ("phaselog.model.records:Checkpoint.seed_dict", "Checkpoint.seed_dict", "record -> dicts"),
    ("phaselog.model.records:Checkpoint.meta_dict", "Checkpoint.meta_dict", "record -> dicts"),
    ("phaselog.model.records:canonical_bytes", "content hash: canonical JSON", "content hash"),
    ("phaselog.ledger.writes:check_record", "validation: check_record own rules", "validation"),
    ("phaselog.model.pipelines:Phase.check_payload", "validation: jsonschema", "validation (jsonschema)"),
]
FSYNC_FILE = ("fsync of files (2 per write)", "fsync")
FSYNC_DIR = ("fsync of the run folder", "fsync")


class Breakdown:
    """Exclusive time per category, per write."""

    def __init__(self) -> None:
        self.stack: list[float] = []
        self.current: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.per_write: list[dict[str, float]] = []
        self.groups: dict[str, str] = {}

    def account(self, category: str, group: str, dt: float, child: float) -> None:
        """Book ``dt`` minus what wrapped callees took."""
        self.groups[category] = group
        self.current[category] += dt - child
        self.calls[category] += 1
        if self.stack:
            self.stack[-1] += dt

    def wrap(self, fn: Callable[..., Any], category: str, group: str) -> Callable[..., Any]:
        """``fn`` with its time booked to ``category``."""
        clock = time.perf_counter_ns

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.stack.append(0.0)
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = clock() - t0
                self.account(category, group, dt, self.stack.pop())

        return wrapper

    def wrap_fsync(self, real: Callable[[int], None]) -> Callable[[int], None]:
        """os.fsync, booked to 'files' or 'folder' by the descriptor's type."""
        clock = time.perf_counter_ns

        def fsync(fd: int) -> None:
            category, group = FSYNC_DIR if stat.S_ISDIR(os.fstat(fd).st_mode) else FSYNC_FILE
            t0 = clock()
            real(fd)
            self.account(category, group, clock() - t0, 0.0)

        return fsync

    def close_write(self) -> None:
        """End of one write: keep its figures."""
        self.per_write.append(dict(self.current))
        self.current.clear()


def _resolve(target: str) -> tuple[Any, str, Any, bool] | None:
    """(owner, attribute, raw value, defined on the owner itself) or None if absent."""
    module_name, _, path = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    *outer, attr = path.split(".")
    for name in outer:
        owner = getattr(owner, name, None)
        if owner is None:
            return None
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attr in klass.__dict__:
                return owner, attr, klass.__dict__[attr], klass is owner
        return None
    return (owner, attr, getattr(owner, attr), True) if hasattr(owner, attr) else None


def available_targets() -> tuple[list[tuple[str, str, str]], list[str]]:
    """The targets present in the code under test, and those missing."""
    present = [t for t in TARGETS if _resolve(t[0]) is not None]
    missing = [t[0] for t in TARGETS if _resolve(t[0]) is None]
    return present, missing


@contextlib.contextmanager
def instrumented(bd: Breakdown) -> Iterator[None]:
    """Install the timers on phaselog's functions; remove them afterwards."""
    saved: list[tuple[Any, str, Any, bool]] = []
    try:
        for target, category, group in TARGETS:
            found = _resolve(target)
            if found is None:
                continue
            owner, attr, raw, own = found
            saved.append((owner, attr, raw, own))
            if isinstance(raw, staticmethod):
                setattr(owner, attr, staticmethod(bd.wrap(raw.__func__, category, group)))
            else:
                setattr(owner, attr, bd.wrap(raw, category, group))
        real_hash = records.Checkpoint.__dict__["content_hash"]
        saved.append((records.Checkpoint, "content_hash", real_hash, True))
        prop = cached_property(bd.wrap(real_hash.func, "content hash: SHA-256", "content hash"))
        prop.__set_name__(records.Checkpoint, "content_hash")
        records.Checkpoint.content_hash = prop  # type: ignore[assignment]
        saved.append((os, "fsync", os.fsync, True))
        os.fsync = bd.wrap_fsync(os.fsync)  # type: ignore[assignment]
        yield
    finally:
        for owner, attr, raw, own in reversed(saved):
            if own:
                setattr(owner, attr, raw)
            else:
                delattr(owner, attr)  # it was inherited: uncover the base class's again


def _writer(ledger_: ledger.Ledger) -> tuple[Callable[[], str], Callable[[str], Any]]:
    runs = (_data.run_id(f"pw-{i}") for i in itertools.count())

    def prepare() -> str:
        run = next(runs)
        _data.write_phase(ledger_, TICKET, run, "implement")
        return run

    def write(run: str) -> Any:
        return _data.write_phase(ledger_, TICKET, run, "implement")

    return prepare, write


def breakdown(led: ledger.Ledger, n: int) -> None:
    """View 1: timers around phaselog's functions."""
    prepare, write = _writer(led)
    bd = Breakdown()
    for i in range(n + 3):
        run = prepare()
        with instrumented(bd):
            write(run)
        if i < 3:  # warm-up
            bd.current.clear()
            bd.calls.clear()
        else:
            bd.close_write()
    cats = sorted({c for w in bd.per_write for c in w})
    med = {c: statistics.median(w.get(c, 0.0) for w in bd.per_write) for c in cats}
    totals = [sum(w.values()) for w in bd.per_write]
    total = statistics.median(totals)
    print("")
    print(f"== write breakdown: exclusive time per category, median of {n} writes (attempt 2 of implement)")
    print(f"   median Ledger.write under the timers: {total / 1e3:.0f} µs (the timers add ~1 µs per wrapped call)")
    _, missing = available_targets()
    if missing:
        print(f"   not in the code under test, so not timed: {', '.join(missing)}")
    print(f"   {'category':<58} {'µs/write':>9} {'share':>7} {'calls/write':>12}")
    for c in sorted(cats, key=lambda c: -med[c]):
        calls = bd.calls[c] / n
        print(f"   {c:<58} {med[c] / 1e3:>9.1f} {med[c] / total:>7.1%} {calls:>12.1f}")
    groups: dict[str, float] = defaultdict(float)
    for c in cats:
        groups[bd.groups[c]] += med[c]
    print("")
    print("   by group (sums of the medians above):")
    for g, v in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"   {g:<58} {v / 1e3:>9.1f} {v / total:>7.1%}")


def profile(led: ledger.Ledger, n: int) -> None:
    """View 2: cProfile of n writes."""
    prepare, write = _writer(led)
    prof = cProfile.Profile()
    for _ in range(n):
        run = prepare()
        prof.enable()
        write(run)
        prof.disable()
    for key, title in (("tottime", "own time"), ("cumulative", "cumulative time")):
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key)
        stats.print_stats(22)
        lines = buf.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if "ncalls" in line)
        print("")
        print(f"== cProfile of {n} writes, top functions by {title} (seconds are totals)")
        for line in lines[start:]:
            if line.strip():
                print(f"   {line}")


def _phaselog_syscalls(root: Path, segments: list[str], name: str, data: bytes, side: bytes) -> None:
    """The two-file protocol plus phaselog's other syscalls: walk, lock, listdir."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for seg in segments:
        nfd = os.open(seg, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        os.close(fd)
        fd = nfd
    lock = os.open(".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600, dir_fd=fd)
    try:
        os.fchmod(lock, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.listdir(fd)
        _raw.durable_write_pair(str(root.joinpath(*segments)), name, data, side)
    finally:
        os.close(lock)
        os.close(fd)


def variants(workdir: Path, led: ledger.Ledger, rounds: int) -> None:
    """View 3: the I/O protocol in variants, interleaved with Ledger.write (fsync on and off)."""
    prepare, write = _writer(led)
    sample = write(prepare())
    root = Path(led.store.root)  # type: ignore[attr-defined]
    yaml_path = root / "checkpoints" / sample.location
    yaml_bytes, meta_bytes = yaml_path.read_bytes(), _data.sidecar_of(yaml_path).read_bytes()
    folder = workdir / "pw-raw" / "checkpoints" / "T" / "run"
    folder.mkdir(parents=True)
    names = (f"v{i:06d}.yaml" for i in itertools.count())
    f = str(folder)

    def write_no_fsync(run: str) -> None:
        real = os.fsync
        os.fsync = lambda fd: None
        try:
            write(run)
        finally:
            os.fsync = real

    contestants = [
        Contestant("ledger_write", "Ledger.write, next attempt", SUBJECT, write, prepare),
        Contestant(
            "ledger_nofsync",
            "Ledger.write, next attempt, os.fsync off (CPU + syscalls)",
            INFO,
            write_no_fsync,
            prepare,
        ),
        Contestant(
            "one_file",
            "raw: 1 file  (temp, fsync, link, dir fsync)",
            BASELINE,
            lambda n: _raw.durable_write(f, n, yaml_bytes),
            lambda: next(names),
        ),
        Contestant(
            "two_files",
            "raw: 2 files, fsyncs one after the other (phaselog)",
            INFO,
            lambda n: _raw.durable_write_pair(f, n, yaml_bytes, meta_bytes),
            lambda: next(names),
        ),
        Contestant(
            "two_concurrent",
            "raw: 2 files, both fsyncs at once (helper thread)",
            INFO,
            lambda n: _raw.durable_write_pair(f, n, yaml_bytes, meta_bytes, concurrent=True),
            lambda: next(names),
        ),
        Contestant(
            "two_fdatasync",
            "raw: 2 files, fdatasync instead of fsync",
            INFO,
            lambda n: _raw.durable_write_pair(f, n, yaml_bytes, meta_bytes, sync=os.fdatasync),
            lambda: next(names),
        ),
        Contestant(
            "two_files_syscalls",
            "raw: 2 files + phaselog's walk, lock, listdir",
            INFO,
            lambda n: _phaselog_syscalls(workdir / "pw-raw", ["checkpoints", "T", "run"], n, yaml_bytes, meta_bytes),
            lambda: next(names),
        ),
    ]
    section = Section(
        "protocol",
        "write protocol variants (raw Python) vs Ledger.write, interleaved",
        [f"{rounds} rounds; the same YAML ({len(yaml_bytes)} B) and sidecar ({len(meta_bytes)} B) bytes"],
    )
    section.stats = run_interleaved(contestants, rounds, warmup=3)
    for key in (
        "ledger_write",
        "ledger_nofsync",
        "two_files",
        "two_concurrent",
        "two_fdatasync",
        "two_files_syscalls",
    ):
        section.ratio(key, "one_file", goal=1.5 if key == "ledger_write" else None)
    print_section(section)


def run(workdir: Path, *, quick: bool) -> None:
    """All three views."""
    led = _data.open_ledger(workdir / "profile-write-store")
    breakdown(led, 30 if quick else 300)
    profile(led, 20 if quick else 200)
    variants(workdir, led, 30 if quick else 300)
