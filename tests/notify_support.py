"""A real HTTP receiver on 127.0.0.1 for the notification tests, and the pipelines they write."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET = "s3cret-for-tests"
GATED = {
    "name": "gated",
    "version": "1",
    "phases": [{"name": "draft"}, {"name": "publish", "requires_approval": True}, {"name": "after"}],
}


@dataclass
class Receiver:
    """What the receiver got: every request's body, headers and whether its signature checked out."""

    url: str = ""
    #: Status codes to answer, in order, before answering 200 forever (per event id).
    script: list[int] = field(default_factory=list)
    #: Answer this to everything (a receiver down for good), when set.
    always: int | None = None
    #: Answer 503 to every event of these tickets (a destination down for them only).
    down_for: frozenset[str] = frozenset()
    #: Seconds to wait before answering (so that a kill finds deliveries in flight).
    delay: float = 0.0
    got: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    tries: dict[str, int] = field(default_factory=dict)

    def delivered(self) -> list[dict[str, Any]]:
        """The requests answered 200, in arrival order."""
        with self.lock:
            return [g for g in self.got if g["status"] == 200]


def _handler(rec: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            time.sleep(rec.delay)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            sig = self.headers.get("X-Phaselog-Signature", "")
            doc = json.loads(body)
            eid = self.headers.get("X-Phaselog-Event-Id", "")
            with rec.lock:
                n = rec.tries.get(eid, 0)
                rec.tries[eid] = n + 1
                status = (
                    503
                    if doc.get("ticket_id") in rec.down_for
                    else rec.always
                    if rec.always is not None
                    else (rec.script[n] if n < len(rec.script) else 200)
                )
                rec.got.append(
                    {"status": status, "body": doc, "signed": hmac.compare_digest(sig, expected), "path": self.path}
                )
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def receiver(**kwargs: Any) -> Iterator[Receiver]:
    """A receiver serving on a free port of 127.0.0.1 until the block ends."""
    rec = Receiver(**kwargs)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rec))
    rec.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
