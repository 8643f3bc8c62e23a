"""`/live`, the dashboard's event stream, over real HTTP (docs/ui.md "Live pages", D231).

A real ``phaselog ui`` process serves the stream; records are written by this process through the
library. The frames' ids are the feed's ``event_id``; ``Last-Event-ID`` resumes just after the event
it names; the stream obeys the same access rules as the pages; at most ``max_streams`` are open
(a 503 beyond), and a stream whose browser left gives its place back.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import phaselog
from ui_data import Http, Server

DEADLINE_S = 15.0  # a frame that has not come by then is missing (a bound, not a measurement)


class Stream:
    """One open ``GET /live`` connection, read frame by frame."""

    def __init__(self, base: str, path: str, headers: dict[str, str] | None = None) -> None:
        port = int(base.rsplit(":", 1)[1])
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
        self.conn.request("GET", path, headers={"Accept": "text/event-stream", **(headers or {})})
        self.resp = self.conn.getresponse()

    def frame(self) -> dict[str, str]:
        """The next frame that is not a comment or a ``retry:`` (socket.timeout when none comes)."""
        while True:
            fields: dict[str, str] = {}
            while True:
                line = self.resp.readline().decode("utf-8")
                if line == "":
                    raise EOFError("the stream ended")
                line = line.rstrip("\n")
                if line == "":
                    break
                if line.startswith(":"):
                    fields.setdefault("comment", line[1:].strip())
                    continue
                name, _, value = line.partition(": ")
                fields[name] = value
            if "data" in fields or "id" in fields:
                return fields

    def opened(self) -> None:
        """Read up to the stream's ``open`` comment (the server has taken its cursor)."""
        while True:
            line = self.resp.readline().decode("utf-8")
            if line == "":
                raise EOFError("the stream ended before it opened")
            if line.startswith(": open"):
                self.resp.readline()
                return

    def close(self) -> None:
        self.resp.close()
        self.conn.close()


@pytest.fixture
def stream_of(server: Server) -> Iterator[Any]:
    opened: list[Stream] = []

    def make(path: str, headers: dict[str, str] | None = None) -> Stream:
        s = Stream(server.base, path, headers)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


PR = {"pr_url": "https://github.com/o/r/pull/1", "pr_number": 1, "head_sha": "a1b2c3d"}


def test_a_runs_stream_sends_the_feeds_events_with_their_ids(
    server: Server, built: tuple[Path, dict[str, str]], stream_of: Any
) -> None:
    root, runs = built
    run = runs["proj"]
    ledger = phaselog.Ledger(phaselog.open_store(str(root)))
    before = ledger.feed(ticket_id="PROJ-1234", run_id=run).cursor
    s = stream_of(f"/live?ticket=PROJ-1234&run={run}")
    assert s.resp.status == 200
    assert s.resp.getheader("content-type", "").startswith("text/event-stream")
    assert s.resp.getheader("cache-control") == "no-store"
    assert "script-src 'self'" in s.resp.getheader("content-security-policy", "")
    s.opened()
    ledger.write("PROJ-1234", run, "create_pr", PR)
    ledger.write("VID-7", runs["vid"], "research", {"summary": "another run: not this stream's", "sources": []})
    expected = ledger.feed(ticket_id="PROJ-1234", run_id=run, after=before).events
    assert [e.type for e in expected] == ["checkpoint.written"]
    got = s.frame()
    assert got["id"] == expected[0].event_id
    assert json.loads(got["data"]) == json.loads(json.dumps(expected[0].to_json()))
    ledger.close()


def test_last_event_id_resumes_just_after_that_event(
    server: Server, built: tuple[Path, dict[str, str]], stream_of: Any
) -> None:
    root, runs = built
    ledger = phaselog.Ledger(phaselog.open_store(str(root)))
    events = ledger.feed(ticket_id="PROJ-1234").events
    assert len(events) >= 3
    seen = events[0]
    s = stream_of("/live?ticket=PROJ-1234", {"Last-Event-ID": seen.event_id})
    ids = [s.frame()["id"] for _ in events[1:]]
    assert ids == [e.event_id for e in events[1:]]  # everything after it, in the feed's order, once
    # ... then what comes next, live: the reconnect lost nothing and repeated nothing.
    ledger.write("PROJ-1234", runs["proj"], "create_pr", PR)
    new = ledger.feed(ticket_id="PROJ-1234", after=ledger.feed(ticket_id="PROJ-1234", limit=len(events)).cursor)
    assert s.frame()["id"] == new.events[0].event_id
    # An id this feed does not hold starts from now: nothing old is replayed.
    fresh = stream_of("/live?ticket=PROJ-1234", {"Last-Event-ID": "checkpoint.written:" + "0" * 64})
    fresh.opened()
    fresh.conn.sock.settimeout(1.5)
    with pytest.raises(TimeoutError):
        fresh.frame()
    ledger.close()


def test_the_whole_stores_stream_sees_every_ticket(
    server: Server, built: tuple[Path, dict[str, str]], stream_of: Any
) -> None:
    root, _ = built
    s = stream_of("/live")
    s.opened()
    ledger = phaselog.Ledger(phaselog.open_store(str(root)))
    ledger.init_ticket("VID-8", title="Another video", pipeline="video-pipeline")
    ledger.write("VID-8", "second", "research", {"summary": "one angle", "sources": []})
    ledger.write("VID-8", "second", "proposal", {"title": "Second", "concept": "calm"})
    types = [json.loads(s.frame()["data"])["type"] for _ in range(3)]
    assert types == ["checkpoint.written", "checkpoint.written", "phase.awaiting_approval"]
    ledger.close()


def test_bad_scopes_are_400_naming_the_parameter(server: Server) -> None:
    http_ = Http(server.base)
    for path, field in (("/live?ticket=%00", "ticket_id"), ("/live?run=abc", "run"), ("/live?ticket=T&run=%00", "run")):
        status, headers, body = http_.get(path)
        assert status == 400, (path, status, body)
        assert headers["content-type"].startswith("application/json")
        assert json.loads(body)["field"] == field


def test_the_stream_needs_the_token_like_every_page(built: tuple[Path, dict[str, str]]) -> None:
    token = "s3cret-token-0123456789"
    srv = Server(str(built[0]), "--token", token)
    try:
        assert Http(srv.base).get("/live")[0] == 401
        assert Http(srv.base, host="evil.example").get("/live")[0] == 400  # DNS rebinding: refused
        s = Stream(srv.base, "/live", {"Authorization": f"Bearer {token}"})
        assert s.resp.status == 200
        s.opened()
        s.close()
    finally:
        srv.stop()


# -- bounded: a cap, places given back, pages still served ------------------------------------------------
class InProcess:
    """The dashboard app on uvicorn in a thread of this process (to look at its open streams)."""

    def __init__(self, store: str, max_streams: int) -> None:
        import uvicorn

        from phaselog.ui.app import Settings, bind, create_app

        sock = bind("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self.app = create_app(Settings(store=store, port=self.port, max_streams=max_streams))
        self.streams = self.app.streams
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.streams.stopping = lambda: self.server.should_exit
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        self.base = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)
        assert not self.thread.is_alive(), "the server did not stop with streams open"


def _until(check: Any) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.05)


def test_streams_are_capped_give_their_place_back_and_pages_stay_served(built: tuple[Path, dict[str, str]]) -> None:
    srv = InProcess(str(built[0]), max_streams=3)
    streams: list[Stream] = []
    try:
        streams += [Stream(srv.base, "/live") for _ in range(3)]
        for s in streams:
            s.opened()
        assert srv.streams.open == 3
        assert list(srv.streams.pollers) == [(None, None)]  # one poll of the store for the three
        over = Stream(srv.base, "/live")
        assert over.resp.status == 503
        assert over.resp.getheader("retry-after") == "30"
        over.close()
        # Pages do not wait for the streams: no stream holds a worker thread while it waits.
        for path in ("/tickets", "/approvals", "/tickets/VID-7"):
            assert Http(srv.base).get(path)[0] == 200
        # A browser that goes away gives its place back (the server sees the disconnect).
        streams[0].conn.sock.shutdown(socket.SHUT_RDWR)
        streams[0].close()
        _until(lambda: srv.streams.open == 2)
        again = Stream(srv.base, "/live")
        assert again.resp.status == 200
        again.opened()
        streams.append(again)
    finally:
        srv.stop()  # with three streams still open: shutting down ends them
        for s in streams:
            s.close()
    assert srv.streams.open == 0
    assert srv.streams.pollers == {}


def test_streams_of_one_ticket_share_a_poller_and_each_gets_its_events_once(
    built: tuple[Path, dict[str, str]],
) -> None:
    root, runs = built
    run = runs["proj"]
    srv = InProcess(str(root), max_streams=8)
    opened: list[Stream] = []
    ledger = phaselog.Ledger(phaselog.open_store(str(root)))
    try:
        early = Stream(srv.base, f"/live?ticket=PROJ-1234&run={run}")
        opened.append(early)
        early.opened()
        cursor = ledger.feed(ticket_id="PROJ-1234", run_id=run).cursor
        ledger.write("PROJ-1234", run, "create_pr", None, status="failed", error="flaky")
        failed = [e.event_id for e in ledger.feed(ticket_id="PROJ-1234", run_id=run, after=cursor).events]
        assert [early.frame()["id"] for _ in failed] == failed
        late = Stream(srv.base, f"/live?ticket=PROJ-1234&run={run}")  # joins the running poller
        opened.append(late)
        late.opened()
        ticket_page = Stream(srv.base, "/live?ticket=PROJ-1234")  # the ticket's page: the same poller
        opened.append(ticket_page)
        ticket_page.opened()
        other_run = Stream(srv.base, f"/live?ticket=PROJ-1234&run={runs['vid']}")  # no such run here: nothing
        opened.append(other_run)
        other_run.opened()
        assert list(srv.streams.pollers) == [("PROJ-1234", None)]
        ledger.write("PROJ-1234", run, "create_pr", PR)
        second = ledger.feed(ticket_id="PROJ-1234", run_id=run).events[-1].event_id
        assert second not in failed
        assert early.frame()["id"] == second
        assert late.frame()["id"] == second  # not the event from before it opened
        assert ticket_page.frame()["id"] == second
        for s in (early, late, ticket_page, other_run):  # each only once; the other run's stream nothing
            s.conn.sock.settimeout(1.5)
            with pytest.raises(TimeoutError):
                s.frame()
        for s in opened:
            s.close()
        _until(lambda: srv.streams.pollers == {})  # nobody left: the poller stops
    finally:
        srv.stop()
        for s in opened:
            s.close()
        ledger.close()
