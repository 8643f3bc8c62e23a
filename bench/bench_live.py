"""[live] What open live pages cost `phaselog ui`: the tickets page's server time and the server's CPU.

Three real `phaselog ui` processes over one files store (``runs`` runs of 3 checkpoints): one with
no live page open (the baseline), one with ``streams`` browsers' event streams on the tickets page
(``/live``: the whole store — they share one poller, D231), one with ``streams`` streams on as many
different runs of one ticket (run pages: they share their ticket's poller, each keeps its run's
events). The pages are requested in
interleaved rounds; the figure is the server's own time (``Server-Timing``). The notes give each
server's CPU per wall second over the rounds (``/proc/<pid>/stat``): what polling costs while
nothing is written.
"""

from __future__ import annotations

import http.client
import os
import time
from pathlib import Path
from typing import Any

from bench import _data
from bench._timing import BASELINE, SUBJECT, Contestant, Section, run_interleaved
from bench.bench_ui import start_ui, stop_ui

TICKET = "BENCH-LIVE"
PHASES = ("implement", "local_review", "create_pr")


class _Server:
    """A `phaselog ui` process, and ``streams`` open ``/live`` connections to it."""

    def __init__(self, root: Path, paths: list[str]) -> None:
        self.proc, self.port = start_ui(root, "--max-streams", str(len(paths) + 1))
        self.streams: list[tuple[http.client.HTTPConnection, http.client.HTTPResponse]] = []
        for path in paths:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            conn.request("GET", path, headers={"Host": f"127.0.0.1:{self.port}", "Accept": "text/event-stream"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status}")
            self.streams.append((conn, resp))

    def server_ns(self, path: str) -> float:
        """The server's own time for one GET of ``path`` (ns)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{self.port}"})
        resp = conn.getresponse()
        resp.read()
        conn.close()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {resp.status}")
        return float((resp.getheader("server-timing") or "").split("dur=", 1)[1]) * 1e6

    def cpu_s(self) -> float:
        """The server process's CPU time so far (user + system, s)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        for conn, resp in self.streams:
            resp.close()
            conn.close()
        stop_ui(self.proc)


def run(workdir: Path, *, rounds: int, runs: int, streams: int, progress: Any = None) -> Section:
    """Build the store, start the three servers, time the tickets page on each, interleaved."""
    root = workdir / "live-store"
    ledger = _data.open_ledger(root, clock=_data.Clock())
    with _data.no_fsync():
        for i in range(runs):
            for phase in PHASES:
                _data.write_phase(ledger, TICKET, f"r{i}", phase)
    run_ids = ledger.store.runs(TICKET)
    ledger.close()
    time.sleep(1.2)  # past the files store's racy window (a folder changed within 1 s has no stamp)
    servers = {
        "none": _Server(root, []),
        "shared": _Server(root, ["/live"] * streams),
        "apart": _Server(root, [f"/live?ticket={TICKET}&run={r}" for r in run_ids[:streams]]),
    }
    labels = {
        "none": "tickets page, no live page open",
        "shared": f"tickets page, {streams} live tickets pages open (the store's poller)",
        "apart": f"tickets page, {streams} live pages of {min(streams, len(run_ids))} runs open (the ticket's poller)",
    }
    try:
        time.sleep(1.0)  # every poller has started
        cpu0 = {k: s.cpu_s() for k, s in servers.items()}
        t0 = time.monotonic()
        contestants = [
            Contestant(k, labels[k], BASELINE if k == "none" else SUBJECT, lambda _, s=s: s.server_ns("/tickets"))
            for k, s in servers.items()
        ]
        stats = run_interleaved(contestants, rounds, warmup=2, progress=progress)
        wall = time.monotonic() - t0
        cpu = {k: (s.cpu_s() - cpu0[k]) / wall for k, s in servers.items()}
    finally:
        for s in servers.values():
            s.stop()
    section = Section(
        "live",
        f"[live] open live pages vs none: the tickets page's server time; {runs} runs of {len(PHASES)} checkpoints",
        [
            f"store {root} on {_data.filesystem_of(root, options=False)}; three read-only `phaselog ui` processes",
            f"{rounds} rounds, interleaved, 2 warm-up; {wall:.1f} s of rounds",
            "server CPU per wall second over the rounds (pages and polls): "
            + ", ".join(f"{k} {cpu[k] * 1000:.0f} ms/s" for k in servers),
        ],
    )
    section.stats = stats
    section.ratio("shared", "none", note=f"{streams} streams of the whole store")
    section.ratio("apart", "none", note=f"{streams} streams of {streams} runs")
    return section
