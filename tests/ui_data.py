"""A store with one of everything the dashboard shows, written through the library.

- ``VID-7`` (video-pipeline, marker "Launch video"): research completed after progress events;
  proposal attempt 1 rejected, attempt 2 awaiting approval (a gated phase).
- ``PROJ-1234`` (ticket-pipeline): implement attempt 1 failed, attempt 2 completed (both with
  progress events); local_review completed; create_pr in flight (this process is alive).
- ``XSS-1``: a marker title and a payload holding ``<script>`` and an ``onerror`` image.
- guard ``closeout``: three failing passes of a real ``false``: its breaker is open.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW, PAYLOADS
from phaselog.guard import Guard, GuardConfig

__all__ = ["PAYLOADS"]
SCRIPT = "<script>window.__pwned = 1; document.title = 'pwned'</script>"
IMG = '<img src=x onerror="window.__pwned = 2">'
RUN_VID = "launch-run"
RUN_PROJ = "a1b2c3d4"
RUN_XSS = "xss-run"


class Clock:
    """A clock that moves forward a few seconds per call (stable, readable timelines)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or (datetime.now(UTC) - timedelta(hours=2))

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=7)
        return self.now


def build(ledger: Any) -> dict[str, str]:
    """Fill ``ledger``'s store; returns the run UUIDs by label."""
    ledger.init_ticket("VID-7", title="Launch video", pipeline="video-pipeline")
    vid = ledger.run("VID-7", RUN_VID)
    ledger.progress("VID-7", RUN_VID, "research", "start")
    ledger.progress("VID-7", RUN_VID, "research", "step", step=1, tokens=1200)
    ledger.progress("VID-7", RUN_VID, "research", "complete", step=2)
    vid.write("research", {"summary": "three angles", "sources": ["https://example.com/a"]})
    vid.write("proposal", {"title": "Launch", "concept": "short and bright"})
    ledger.reject("VID-7", RUN_VID, "proposal", by="ana", comment="too long")
    vid.write("proposal", {"title": "Launch v2", "concept": "shorter, brighter"})

    proj = ledger.run("PROJ-1234", RUN_PROJ)
    ledger.progress("PROJ-1234", RUN_PROJ, "implement", "start")
    ledger.progress("PROJ-1234", RUN_PROJ, "implement", "step", step=1)
    proj.fail("implement", error="tests failed: 3 of 40")
    ledger.progress("PROJ-1234", RUN_PROJ, "implement", "start")
    ledger.progress("PROJ-1234", RUN_PROJ, "implement", "step", step=1)
    ledger.progress("PROJ-1234", RUN_PROJ, "implement", "step", step=2)
    proj.write("implement", IMPLEMENT, repo_commit_map={"app": "a1b2c3d"}, artifact_paths=["out/report.md"])
    ledger.progress("PROJ-1234", RUN_PROJ, "local_review", "start")
    proj.write("local_review", LOCAL_REVIEW)
    ledger.progress("PROJ-1234", RUN_PROJ, "create_pr", "start")
    ledger.progress("PROJ-1234", RUN_PROJ, "create_pr", "step", step=1)

    ledger.init_ticket("XSS-1", title=f"title {SCRIPT}", pipeline="ticket-pipeline")
    ledger.write(
        "XSS-1",
        RUN_XSS,
        "implement",
        {"branch_name": f"feat/{SCRIPT}", "commit_sha": "a1b2c3d", "files_changed": [IMG, SCRIPT]},
        repo_commit_map={"<b>repo</b>": "a1b2c3d"},
    )
    return {
        "vid": phaselog.normalize_run_id(RUN_VID),
        "proj": phaselog.normalize_run_id(RUN_PROJ),
        "xss": phaselog.normalize_run_id(RUN_XSS),
    }


def failing_guard(store: Any, name: str = "closeout", passes: int = 3) -> None:
    """``passes`` failing passes of a real ``false`` under the guard: with max 3 the breaker opens."""
    false = shutil.which("false") or "/bin/false"
    guard = Guard(store, name)
    for _ in range(passes):
        guard.run([false], GuardConfig(max_failures=3))


def make_store(root: Path) -> dict[str, str]:
    """A files store at ``root`` holding everything above."""
    ledger = phaselog.Ledger(phaselog.open_store(str(root)), clock=Clock())
    try:
        runs = build(ledger)
        failing_guard(ledger.store)
    finally:
        ledger.close()
    return runs


# -- a long run: many attempts, many progress events -----------------------------------------------
LONG_TICKET = "LONG-1"
RUN_LONG = "long-run"
LONG_IMPLEMENT = 120  # attempts of implement (every seventh failed)
LONG_REVIEW = 3  # attempts of local_review
LONG_EVENTS = 130  # progress events of create_pr's attempt in flight


def make_long_store(root: Path) -> str:
    """A files store at ``root`` holding one run retried many times; returns its UUID.

    Its ~250 records end minutes ago: the attempt in flight (this process's) is not abandoned."""
    ledger = phaselog.Ledger(phaselog.open_store(str(root)), clock=Clock(datetime.now(UTC) - timedelta(minutes=45)))
    try:
        for i in range(1, LONG_IMPLEMENT + 1):
            if i % 7 == 0:
                ledger.write(LONG_TICKET, RUN_LONG, "implement", None, status="failed", error=f"flaky {i}")
            else:
                ledger.write(LONG_TICKET, RUN_LONG, "implement", {**IMPLEMENT, "commit_sha": f"{i:07x}"})
        for _ in range(LONG_REVIEW):
            ledger.write(LONG_TICKET, RUN_LONG, "local_review", LOCAL_REVIEW)
        ledger.progress(LONG_TICKET, RUN_LONG, "create_pr", "start")
        for step in range(1, LONG_EVENTS):
            ledger.progress(LONG_TICKET, RUN_LONG, "create_pr", "step", step=step, tokens=10 * step)
    finally:
        ledger.close()
    return phaselog.normalize_run_id(RUN_LONG)


# -- a real `phaselog ui` process ------------------------------------------------------------------
class Server:
    """``phaselog ui`` in a subprocess on a free port; ``url`` is where it listens."""

    def __init__(self, store: str, *args: str, env: dict[str, str] | None = None) -> None:
        import os
        import subprocess
        import sys
        import time

        exe = Path(sys.executable).parent / "phaselog"
        cmd = [str(exe), "ui", "--store", store, "--port", "0", *args]
        self.proc = subprocess.Popen(
            cmd,
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.url = ""
        deadline = time.monotonic() + 60
        assert self.proc.stderr is not None
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "open http" in line:
                self.url = line.split("open ", 1)[1].split()[0]
                break
        if not self.url:
            self.stop()
            out = self.proc.stdout.read() if self.proc.stdout else ""
            raise AssertionError(f"phaselog ui did not start: {''.join(lines)} {out}")
        # http://127.0.0.1:PORT/tickets[?token=…]
        self.base = self.url.split("/tickets", 1)[0]
        self.port = int(self.base.rsplit(":", 1)[1])

    def stop(self) -> None:
        """Interrupt the server (as Ctrl-C does) and wait for it."""
        import signal
        import subprocess

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stderr, self.proc.stdout):
            if stream is not None:
                stream.close()


class Http:
    """A tiny HTTP client on urllib with a cookie jar (no redirects followed unless asked)."""

    def __init__(self, base: str, host: str | None = None) -> None:
        self.base = base
        self.host = host
        self.cookies: dict[str, str] = {}

    def request(
        self,
        method: str,
        path: str,
        data: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:
        """``(status, headers, body)``; cookies set by the server are kept."""
        import http.client
        from urllib.parse import urlencode, urlsplit

        parts = urlsplit(self.base)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
        hdrs = dict(headers or {})
        if self.host is not None:
            hdrs["Host"] = self.host
        if self.cookies:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if data is not None:
            body = urlencode(data)
            hdrs.setdefault("Content-Type", "application/x-www-form-urlencoded")
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        out_headers = {k.lower(): v for k, v in resp.getheaders()}
        for k, v in resp.getheaders():
            if k.lower() == "set-cookie":
                name, _, rest = v.partition("=")
                self.cookies[name] = rest.split(";", 1)[0]
        conn.close()
        return resp.status, out_headers, text

    def get(self, path: str, **kw: Any) -> tuple[int, dict[str, str], str]:
        return self.request("GET", path, **kw)

    def post(self, path: str, data: dict[str, str], **kw: Any) -> tuple[int, dict[str, str], str]:
        return self.request("POST", path, data=data, **kw)


def csrf_of(html: str) -> str:
    """The CSRF token of the first form on a page."""
    import re

    m = re.search(r'name="csrf_token" value="([0-9a-f]{64})"', html)
    assert m, "no CSRF token in the page"
    return m.group(1)
