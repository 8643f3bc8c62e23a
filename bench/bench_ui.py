"""[ui] `phaselog ui`: server time of its pages over a ticket with 10,000 checkpoints.

A real `phaselog ui` process (read-only) serves a files store built with Ledger.write; each
sample is one real HTTP request, and the figure is the server's own time for it (the
``Server-Timing`` header the dashboard sets: routing, library calls, template rendering), so
the client's share of the noisy machine does not count. Pages are paginated (50 rows; the
run page's chart draws at most 400 attempts).

The tickets page and a ticket's runs come from ``phaselog.views.catalog``, which remembers each run's
summary until the run changes: the *first* request after start reads every run (reported as
``cold``, one sample), later ones re-read only what changed.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import _data
from bench._timing import INFO, SUBJECT, Contestant, Section, summarise

TICKET = "BENCH-UI"
LONG_TICKET = "BENCH-UI-LONG"
LIMIT_NS = 150e6


def start_ui(root: Path, *options: str) -> tuple[subprocess.Popen[str], int]:
    """A read-only `phaselog ui` process on a free port (``options``: more of its flags), and the port."""
    exe = Path(sys.executable).parent / "phaselog"
    proc = subprocess.Popen(
        [str(exe), "ui", "--store", str(root), "--port", "0", "--read-only", *options],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "open http" in line:
            return proc, int(line.split("open http://127.0.0.1:", 1)[1].split("/", 1)[0])
    raise RuntimeError("phaselog ui did not start")


def stop_ui(proc: subprocess.Popen[str]) -> None:
    """Stop a server ``start_ui`` started: SIGINT, then SIGKILL after 30 s."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


class _Server:
    def __init__(self, root: Path) -> None:
        self.proc, self.port = start_ui(root)

    def get(self, path: str) -> tuple[float, float]:
        """(server time, round trip) of one GET, in ns."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        t0 = time.perf_counter_ns()
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{self.port}"})
        resp = conn.getresponse()
        resp.read()
        rtt = time.perf_counter_ns() - t0
        conn.close()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {resp.status}")
        timing = resp.getheader("server-timing") or ""
        return float(timing.split("dur=", 1)[1]) * 1e6, float(rtt)

    def stop(self) -> None:
        stop_ui(self.proc)


def run(
    workdir: Path, *, rounds: int, checkpoints: int = 10_000, long_run: int = 1_000, progress: Any = None
) -> Section:
    """Build the store once, then time the pages in interleaved rounds."""
    from phaselog.stores.stamps import RACY_WINDOW_S

    root = workdir / "ui-store"
    ledger = _data.open_ledger(root, clock=_data.Clock())
    t0 = time.perf_counter()
    with _data.no_fsync():
        runs = _data.build_ticket(ledger, TICKET, checkpoints)
        long_id = _data.run_id("one-long-run")
        _data.build_run(ledger, LONG_TICKET, long_id, long_run)
    built_s = time.perf_counter() - t0
    run_id = ledger.store.runs(TICKET)[0]
    ledger.close()
    time.sleep(RACY_WINDOW_S + 0.2)  # folders written this very second are never remembered
    server = _Server(root)
    try:
        pages = {
            "tickets": ("/tickets", SUBJECT, "tickets page (every ticket, page 1)"),
            "ticket": (f"/tickets/{TICKET}", INFO, f"the ticket's runs ({runs:,} runs, page 1 of {-(-runs // 50)})"),
            "run": (f"/tickets/{TICKET}/runs/{run_id}", SUBJECT, "run page (one of its runs, 8 attempts)"),
            "checkpoint": (
                f"/tickets/{TICKET}/runs/{run_id}/phases/implement/attempts/1",
                INFO,
                "checkpoint page (payload, links, validate)",
            ),
            "run_long": (
                f"/tickets/{LONG_TICKET}/runs/{long_id}",
                INFO,
                f"run page of a run with {long_run:,} attempts (one run)",
            ),
        }
        cold_ns, cold_rtt = server.get(pages["tickets"][0])
        contestants = [Contestant(k, label, role, lambda _: None) for k, (_, role, label) in pages.items()]
        rtt = Contestant("tickets_rtt", "tickets page, client round trip (HTTP + server)", INFO, lambda _: None)
        warmup = 1
        for r in range(warmup + rounds):
            k = r % len(contestants)
            for c in contestants[k:] + contestants[:k]:
                server_ns, trip_ns = server.get(pages[c.key][0])
                if r >= warmup:
                    c.samples_ns.append(server_ns)
                    if c.key == "tickets":
                        rtt.samples_ns.append(trip_ns)
            if progress is not None and rounds >= 8 and (r + 1 - warmup) % max(1, rounds // 4) == 0:
                progress(f"round {r + 1 - warmup}/{rounds}")
    finally:
        server.stop()
    cold = Contestant("tickets_cold", "tickets page, first request after start (reads every run)", INFO, lambda _: None)
    cold.samples_ns.append(cold_ns)
    rtt_cold = cold_rtt
    section = Section(
        "ui",
        f"[ui] phaselog ui: server time (Server-Timing) of its pages; a ticket with {checkpoints:,} checkpoints "
        f"in {runs:,} runs, and a run with {long_run:,} attempts",
        [
            f"store {root} on {_data.filesystem_of(root, options=False)} (warm page cache), read-only server",
            f"built once with Ledger.write (fsync off) in {built_s:.1f} s; {rounds} rounds, interleaved, 1 warm-up",
            f"cold tickets page: server {cold_ns / 1e6:.1f} ms, round trip {rtt_cold / 1e6:.1f} ms (one sample)",
            f"pid {os.getpid()} drives; the server is a separate `phaselog ui` process",
        ],
    )
    section.stats = [summarise(c) for c in [*contestants, rtt, cold]]
    section.limit("tickets", LIMIT_NS, note="issue 13: tickets page <= 150 ms server time (median)")
    section.limit("run", LIMIT_NS, note="issue 13: run page <= 150 ms server time (median)")
    return section
