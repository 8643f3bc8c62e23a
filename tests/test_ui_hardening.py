"""The dashboard under hostile requests (issue 20), over a real `phaselog ui` process.

A form body is capped before it is read, an ``Origin`` must be one of the server's own (scheme,
host and port), the ``?token=`` redirect never leaves the server, and no URL answers 5xx: every
number a page takes is parsed by one helper (``limits.parse_number``) into a 400 naming it.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

import psutil

import phaselog
from ui_data import Http, Server, csrf_of

FORM = "application/x-www-form-urlencoded"


def _judge(run: str) -> str:
    return f"/tickets/VID-7/runs/{run}/phases/proposal/attempts/2"


def _raw(port: int, head: bytes, body_chunks: int = 0, chunk: bytes = b"") -> tuple[int, bytes, int]:
    """Send ``head`` then up to ``body_chunks`` chunks on a raw socket while a thread reads the answer.

    Returns (status, the answer's bytes, how many chunks were sent before the server stopped taking
    them). The reader runs from the start: the answer is read as soon as the server sends it, even if
    the server then closes a connection whose body it did not want."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    answer = bytearray()
    done = threading.Event()

    def read() -> None:
        try:
            while data := sock.recv(65536):
                answer.extend(data)
                if b"\r\n\r\n" in answer:
                    head_part, _, rest = bytes(answer).partition(b"\r\n\r\n")
                    m = re.search(rb"content-length: *(\d+)", head_part, re.I)
                    if m and len(rest) >= int(m.group(1)):
                        break
        except OSError:
            pass
        finally:
            done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    sent = 0
    try:
        sock.sendall(head)
        for _ in range(body_chunks):
            if done.is_set():
                break
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += 1
        else:
            if body_chunks and not done.is_set():
                sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the server closed the connection: it stopped taking the body
    assert done.wait(60), "no answer"
    reader.join(5)
    sock.close()
    status = int(bytes(answer).split(b" ", 2)[1]) if answer else 0
    return status, bytes(answer), sent


# -- 1. the form cap ---------------------------------------------------------------------------------
def test_a_form_over_the_cap_is_refused_by_length_and_while_streaming(
    server: Server, built: tuple[Path, dict[str, str]]
) -> None:
    path = (_judge(built[1]["vid"]) + "/judge").encode()
    host = f"127.0.0.1:{server.port}".encode()
    # A Content-Length of 300 MB: refused before a byte of the body is sent.
    head = b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: 300000000\r\n\r\n" % (
        path,
        host,
        FORM.encode(),
    )
    status, answer, _ = _raw(server.port, head)
    assert status == 413, answer[:300]
    assert b"form too large" in answer

    # 100 MB chunked, no Content-Length: cut off at the cap, the server's memory stays small.
    head = b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n" % (
        path,
        host,
        FORM.encode(),
    )
    status, answer, sent = _raw(server.port, head, body_chunks=1600, chunk=b"a" * 65536)  # 100 MiB
    assert status == 413, answer[:300]
    assert sent < 1600  # the server stopped taking the body
    assert psutil.Process(server.proc.pid).memory_info().rss < 200 * 1024 * 1024

    # … and it keeps serving; a small chunked form still reaches the CSRF check.
    http = Http(server.base)
    assert http.get("/tickets")[0] == 200
    status, answer, _ = _raw(server.port, head, body_chunks=1, chunk=b"decision=approve&by=x")
    assert status == 403, answer[:300]
    assert b"CSRF" in answer
    assert len(phaselog.open(str(built[0])).approvals("VID-7", built[1]["vid"])) == 1  # the fixture's only


# -- 2. Origin: scheme, host and port --------------------------------------------------------------
def test_an_origin_with_another_scheme_or_port_is_refused(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    root, runs = built
    http = Http(server.base)
    _, _, page = http.get(_judge(runs["vid"]))
    shown = phaselog.open(str(root)).read("VID-7", runs["vid"], "proposal", 2).record.content_hash
    form = {"csrf_token": csrf_of(page), "decision": "approve", "by": "ana", "comment": "ok", "content_hash": shown}
    for origin in (
        "http://127.0.0.1",  # port 80: another server on this machine
        "https://localhost",
        f"https://127.0.0.1:{server.port}",
        f"http://127.0.0.1:{server.port + 1}",
        f"http://127.0.0.1:{server.port}.evil.example",
        f"http://user@127.0.0.1:{server.port}",
        "null",
    ):
        status, _, body = http.post(_judge(runs["vid"]) + "/judge", form, headers={"Origin": origin})
        assert status == 403, (origin, status, body[:200])
        assert "cross-site request refused" in body
    assert len(phaselog.open(str(root)).approvals("VID-7", runs["vid"])) == 1
    status, _, _ = http.post(
        _judge(runs["vid"]) + "/judge", form, headers={"Origin": f"HTTP://LOCALHOST:{server.port}"}
    )  # the server's own origin, however it is capitalised
    assert status == 303
    assert phaselog.open(str(root)).approvals("VID-7", runs["vid"])[-1].by == "ana"


# -- 3. the token redirect -------------------------------------------------------------------------
def test_the_token_redirect_stays_on_the_server_in_ascii(built: tuple[Path, dict[str, str]]) -> None:
    token = "t0ken-" + "y" * 20
    srv = Server(str(built[0]), env={"PHASELOG_UI_TOKEN": token})
    try:
        host = f"127.0.0.1:{srv.port}".encode()
        cases = {
            b"/tickets/%E2%98%83?q=%C3%A9&token=T": "/tickets/%E2%98%83?q=%C3%A9",  # a snowman: was a 500
            b"/tickets/%C3%A9?token=T": "/tickets/%C3%A9",  # was a raw byte \xe9 in Location
            b"//evil.example/?token=T": "/evil.example/",
            b"///evil.example/x?token=T&a=1": "/evil.example/x?a=1",
            b"/\\evil.example/?token=T": "/%5Cevil.example/",
            b"/tickets?q=a+b&token=T&state=": "/tickets?q=a+b&state=",
        }
        for given, expected in cases.items():
            target = given.replace(b"token=T", b"token=" + token.encode())
            status, answer, _ = _raw(srv.port, b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, host))
            assert status == 303, (target, answer[:300])
            location = re.search(rb"\r\nlocation: ([^\r]*)", answer, re.I)
            assert location, answer[:300]
            value = location.group(1).decode("ascii")  # ASCII, or this raises
            assert value == expected, (target, value)
            parts = urlsplit(value)
            assert (parts.scheme, parts.netloc) == ("", "")
            assert value.startswith("/")
            assert not value.startswith("//")
        assert Http(srv.base).get("/tickets?token=wrong")[0] == 401
    finally:
        srv.stop()


# -- 4 and 5. no URL answers 5xx ---------------------------------------------------------------------
# One of each kind: a non-ASCII digit, 5,000 digits, a sign, a fullwidth digit, a bad cursor, a NUL.
HOSTILE = ["%C2%B2", "9" * 5000, "-1", "%EF%BC%91", "1:%C2%B2", "%00"]
PARAMS = ["page", "limit", "after", "before", "phase", "ticket", "a", "b", "q"]


ATTEMPT = "/tickets/{ticket}/runs/{run}/phases/{phase}/attempts/{attempt}"


def _routes(runs: dict[str, str]) -> dict[str, str]:
    """A real URL for every route of the app, keyed by the route's path template."""
    vid, proj = runs["vid"], runs["proj"]
    run = f"/tickets/PROJ-1234/runs/{proj}"
    attempt = f"{run}/phases/create_pr/attempts/1"
    done = f"{run}/phases/implement/attempts/2"
    return {
        "/": "/",
        "/tickets": "/tickets",
        "/tickets/{ticket}": "/tickets/VID-7",
        "/tickets/{ticket}/runs/{run}": run,
        "/tickets/{ticket}/runs/{run}/overview.json": f"{run}/overview.json",
        "/tickets/{ticket}/runs/{run}/attempts.json": f"{run}/attempts.json",
        "/tickets/{ticket}/runs/{run}/version": f"{run}/version",
        "/tickets/{ticket}/runs/{run}/explain": f"{run}/explain",
        "/tickets/{ticket}/runs/{run}/phases/{phase}/attempts/{attempt}/events": f"{attempt}/events",
        "/tickets/{ticket}/runs/{run}/phases/{phase}/attempts/{attempt}/events.json": f"{attempt}/events.json",
        ATTEMPT + "/events/{seq}/output": f"{attempt}/events/1/output",
        "/tickets/{ticket}/runs/{run}/phases/{phase}/attempts/{attempt}": f"/tickets/VID-7/runs/{vid}"
        "/phases/proposal/attempts/2",
        "/tickets/{ticket}/runs/{run}/phases/{phase}/attempts/{attempt}.{fmt}": f"{done}.json",
        "/tickets/{ticket}/runs/{run}/phases/{phase}/attempts/{attempt}/judge": f"{done}/judge",
        "/diff": f"/diff?ticket=PROJ-1234&a={proj}:implement:1&b={proj}:implement:2",
        "/approvals": "/approvals",
        "/guards": "/guards",
        "/guards/{name}": "/guards/closeout",
        "/guards/{name}/reset": "/guards/closeout/reset",
        "/health": "/health",
        "/live": f"/live?run={proj}",  # a run without its ticket: a 400 whatever is added (a valid one streams on)
        "/static": "/static/app.css",
    }


def test_the_crawl_covers_every_route(built: tuple[Path, dict[str, str]]) -> None:
    from phaselog.ui.app import Settings, create_app

    app = create_app(Settings(store=str(built[0])))
    declared = {re.sub(r":\w+}", "}", r.path) for r in app.app.routes}  # type: ignore[attr-defined]
    assert declared == set(_routes(built[1]))


def test_no_url_answers_a_server_error(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    runs = built[1]
    http = Http(server.base)
    urls = list(_routes(runs).values())
    for url in urls:
        sep = "&" if "?" in url else "?"
        for param in PARAMS:
            for value in HOSTILE:
                path = f"{url}{sep}{param}={value}"
                status, _, body = http.get(path)
                assert status < 500, (path[:200], status, body[:300])
                assert "Traceback" not in body
    # hostile path segments: the attempt, the phase, the ids, the format
    run = f"/tickets/PROJ-1234/runs/{runs['proj']}"
    for path in (
        f"{run}/phases/implement/attempts/{'9' * 5000}",
        f"{run}/phases/implement/attempts/{'9' * 5000}/events.json",
        f"{run}/phases/implement/attempts/{'9' * 5000}.json",
        f"{run}/phases/implement/attempts/0",
        f"{run}/phases/create_pr/attempts/1/events/{'9' * 5000}/output",
        f"{run}/phases/create_pr/attempts/{'9' * 5000}/events/1/output",
        f"{run}/phases/%C2%B2/attempts/1",
        f"{run}/phases/{'9' * 5000}/attempts/1",
        f"{run}/phases/implement/attempts/1.%C2%B2",
        f"{run}/phases/%EF%BC%91/attempts/1/events",
        "/tickets/%C2%B2",
        "/tickets/%FF/runs/%00",
        "/guards/%C2%B2",
        "/tickets/PROJ-1234/runs/nobody/version",
    ):
        status, _, body = http.get(path)
        assert 400 <= status < 500, (path[:200], status, body[:300])
    assert http.get(f"{run}/phases/create_pr/attempts/1/events/1/output")[0] == 200  # digits routes still work
    status, _, _ = http.post(f"{run}/phases/implement/attempts/{'9' * 5000}/judge", {"x": "1"})
    assert 400 <= status < 500


def test_a_bad_number_is_a_400_naming_the_parameter(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    run = f"/tickets/PROJ-1234/runs/{built[1]['proj']}"
    http = Http(server.base)
    for path, field in (
        ("/tickets?page=%C2%B2", "page"),
        ("/tickets?page=" + "9" * 5000, "page"),
        ("/approvals?page=%C2%B2", "page"),
        ("/tickets/VID-7?page=-1", "page"),
        ("/guards/closeout?page=%EF%BC%91", "page"),
        (f"{run}?limit=%C2%B2", "limit"),
        (f"{run}/phases/create_pr/attempts/1/events?after=%C2%B2", "after"),
        (f"{run}/phases/create_pr/attempts/1/events?limit=" + "9" * 5000, "limit"),
    ):
        status, _, body = http.get(path)
        assert status == 400, (path[:100], status)
        assert f"{field}: must be a whole number" in body, (path[:100], body[:300])
    for suffix, field in (
        ("attempts.json?limit=%C2%B2", "limit"),
        ("attempts.json?before=1:%C2%B2", "before"),
        ("attempts.json?before=" + "9" * 5000 + ":1", "before"),
        ("phases/create_pr/attempts/1/events.json?after=" + "9" * 5000, "after"),
        ("phases/create_pr/attempts/" + "9" * 5000 + "/events.json", "attempt"),
    ):
        status, headers, body = http.get(f"{run}/{suffix}")
        assert status == 400, (suffix[:80], status, body[:200])
        assert headers["content-type"].startswith("application/json")
        assert json.loads(body)["field"] == field


def test_an_unknown_runs_version_is_404(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    http = Http(server.base)
    status, headers, body = http.get("/tickets/PROJ-1234/runs/nobody/version")
    assert status == 404, body
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body)["error_code"] == "not_found"
    status, _, body = http.get(f"/tickets/PROJ-1234/runs/{built[1]['proj']}/version")
    assert status == 200
    assert re.fullmatch(r"[0-9a-f]{16}", json.loads(body)["version"])
