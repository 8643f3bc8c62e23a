"""`phaselog ui` over real HTTP: a real server process, real requests, every store.

The safety model (docs/ui.md): Host check, token, CSRF, Origin, read-only, escaping, headers,
and that opening a store for the dashboard never writes to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import phaselog
import ui_data
from phaselog.stores.base import Store
from ui_data import SCRIPT, Http, Server, csrf_of

REPO = Path(__file__).resolve().parent.parent
PHASELOG = str(Path(sys.executable).parent / "phaselog")


def _pages(runs: dict[str, str]) -> list[str]:
    vid, proj, xss = runs["vid"], runs["proj"], runs["xss"]
    return [
        "/tickets",
        "/tickets?q=video",
        "/tickets?state=awaiting_approval",
        "/tickets/VID-7",
        f"/tickets/VID-7/runs/{vid}",
        f"/tickets/PROJ-1234/runs/{proj}",
        f"/tickets/PROJ-1234/runs/{proj}/version",
        f"/tickets/PROJ-1234/runs/{proj}/explain",
        f"/tickets/VID-7/runs/{vid}/phases/proposal/attempts/2",
        f"/tickets/VID-7/runs/{vid}/phases/proposal/attempts/2.yaml",
        f"/tickets/VID-7/runs/{vid}/phases/proposal/attempts/2.json",
        f"/tickets/XSS-1/runs/{xss}/phases/implement/attempts/1",
        f"/tickets/XSS-1/runs/{xss}",
        "/tickets/XSS-1",
        f"/diff?ticket=PROJ-1234&a={proj}:implement:1&b={proj}:implement:2",
        "/approvals",
        "/guards",
        "/guards/closeout",
        "/health",
        "/health?ticket=PROJ-1234",
    ]


def _judge_path(run: str, attempt: int = 2) -> str:
    return f"/tickets/VID-7/runs/{run}/phases/proposal/attempts/{attempt}"


# -- pages ------------------------------------------------------------------------------------------
def test_every_page_renders_and_escapes_record_values(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    http = Http(server.base)
    for path in _pages(built[1]):
        status, _headers, body = http.get(path)
        assert status == 200, (path, body[:500])
        assert SCRIPT not in body, f"{path} echoes a record's <script> unescaped"
        assert '<img src=x onerror="window.__pwned' not in body, path
    _, _, body = http.get(f"/tickets/XSS-1/runs/{built[1]['xss']}/phases/implement/attempts/1")
    assert "&lt;script&gt;window.__pwned = 1;" in body  # shown as text
    _, _, tickets = http.get("/tickets")
    assert "title &lt;script&gt;" in tickets


def test_pages_show_what_the_library_derives(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    ledger = phaselog.open(str(built[0]))
    runs = built[1]
    http = Http(server.base)
    _, _, body = http.get("/tickets")
    for ticket in ledger.store.tickets():
        summary = ledger.status(ticket, ledger.store.runs(ticket)[0]).summary
        row = re.search(rf'<tr data-ticket="{ticket}">(.*?)</tr>', body, re.S)
        assert row, ticket
        assert f"st-{summary}" in row.group(1), (ticket, summary)
    _, _, body = http.get("/tickets?state=awaiting_approval")
    assert 'data-ticket="VID-7"' in body
    assert 'data-ticket="PROJ-1234"' not in body
    _, _, body = http.get("/tickets?q=launch")
    assert 'data-ticket="VID-7"' in body
    assert 'data-ticket="XSS-1"' not in body
    _, _, body = http.get(f"/tickets/PROJ-1234/runs/{runs['proj']}")
    st = ledger.status("PROJ-1234", runs["proj"])
    for ps in st.phases:
        assert f'data-phase="{ps.phase}" data-state="{ps.state}"' in body
    assert 'id="timeline"' in body
    assert "tests failed: 3 of 40" in body
    _, _, body = http.get("/approvals")
    assert 'data-ticket="VID-7" data-phase="proposal"' in body
    _, _, raw = http.get(f"/tickets/VID-7/runs/{runs['vid']}/phases/proposal/attempts/2.json")
    assert (
        json.loads(raw)["metadata"]["content_hash"]
        == ledger.read("VID-7", runs["vid"], "proposal", 2).record.content_hash
    )


def test_runs_are_shown_by_the_id_they_were_given(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    """`a1b2c3d4` is stored as its UUID v5; the dashboard shows the name the run was given."""
    http = Http(server.base)
    _, _, body = http.get("/tickets/PROJ-1234")
    assert f'title="{built[1]["proj"]}">{ui_data.RUN_PROJ}</a>' in body
    _, _, body = http.get(f"/tickets/PROJ-1234/runs/{built[1]['proj']}")
    assert re.search(rf"<h1>Run <span [^>]*>{ui_data.RUN_PROJ}</span>", body), body[:2000]


def test_unknown_things_are_404_pages_not_tracebacks(server: Server) -> None:
    http = Http(server.base)
    for path in ("/tickets/NOPE-1", "/guards/nope", "/tickets/PROJ-1234/runs/zzz/phases/implement/attempts/9"):
        status, _, body = http.get(path)
        assert status == 404, (path, status)
        assert "Traceback" not in body
        assert "Cannot show this" in body
    status, _, body = http.get("/tickets/bad..id")
    assert status == 400
    assert "Traceback" not in body


def test_security_headers_on_every_response(server: Server) -> None:
    status, headers, _ = Http(server.base).get("/tickets")
    assert status == 200
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "'unsafe-inline'" not in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["server-timing"].startswith("app;dur=")


# -- Host header (DNS rebinding) --------------------------------------------------------------------
def test_a_foreign_host_header_is_refused(server: Server) -> None:
    status, _, body = Http(server.base, host=f"evil.example:{server.port}").get("/tickets")
    assert status == 400
    assert "not allowed" in body
    status, _, _ = Http(server.base, host=f"localhost:{server.port}").get("/tickets")
    assert status == 200


def test_allow_host_admits_a_reverse_proxy_name(built: tuple[Path, dict[str, str]]) -> None:
    srv = Server(str(built[0]), "--allow-host", "ledger.internal")
    try:
        assert Http(srv.base, host="ledger.internal").get("/tickets")[0] == 200
        assert Http(srv.base, host="other.internal").get("/tickets")[0] == 400
    finally:
        srv.stop()


# -- changes: CSRF, Origin, required fields, the hash shown -------------------------------------------
def test_approve_over_http_records_the_judgement(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    root, runs = built
    http = Http(server.base)
    _, _, page = http.get(_judge_path(runs["vid"]))
    shown = phaselog.open(str(root)).read("VID-7", runs["vid"], "proposal", 2).record.content_hash
    assert shown in page
    status, headers, _ = http.post(
        _judge_path(runs["vid"]) + "/judge",
        {"csrf_token": csrf_of(page), "decision": "approve", "by": "ana", "comment": "ok", "content_hash": shown},
    )
    assert status == 303, headers
    ledger = phaselog.open(str(root))
    assert ledger.status("VID-7", runs["vid"]).phase("proposal").state == "completed"
    last = ledger.approvals("VID-7", runs["vid"])[-1]
    assert (last.by, last.comment, last.checkpoint_hash, last.decision) == ("ana", "ok", shown, "approve")


def test_a_judgement_made_through_mcp_says_so_on_the_checkpoint_page(
    server: Server, built: tuple[Path, dict[str, str]]
) -> None:
    root, _ = built
    ledger = phaselog.open(str(root))
    run = ledger.run("VIA-1", "r1", pipeline="video-pipeline")
    run.write("research", {"summary": "s", "sources": ["https://example.com/a"]})
    run.write("proposal", {"title": "T", "concept": "c"})
    run.approve("proposal", by="agent-7", via="mcp")
    _, _, page = Http(server.base).get("/tickets/VIA-1/runs/r1/phases/proposal/attempts/1")
    judged = page.split('id="judgements"', 1)[1].split("</table>", 1)[0]
    assert "agent-7" in judged
    assert "via mcp" in judged  # beside the name given: the door it came through (D240)


def test_a_post_without_the_csrf_token_is_refused(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    root, runs = built
    before = len(phaselog.open(str(root)).approvals("VID-7", runs["vid"]))
    http = Http(server.base)
    _, _, page = http.get(_judge_path(runs["vid"]))
    shown = re.search(r'name="content_hash" value="([0-9a-f]{64})"', page)
    assert shown
    form = {"decision": "approve", "by": "mallory", "comment": "x", "content_hash": shown.group(1)}
    assert http.post(_judge_path(runs["vid"]) + "/judge", form)[0] == 403  # no token
    other = Http(server.base)  # another browser's token does not fit this browser's cookie
    _, _, other_page = other.get(_judge_path(runs["vid"]))
    assert http.post(_judge_path(runs["vid"]) + "/judge", {**form, "csrf_token": csrf_of(other_page)})[0] == 403
    fresh = Http(server.base)  # a token without any cookie (a forged cross-site form)
    assert fresh.post(_judge_path(runs["vid"]) + "/judge", {**form, "csrf_token": csrf_of(page)})[0] == 403
    assert (
        http.post(
            _judge_path(runs["vid"]) + "/judge",
            {**form, "csrf_token": csrf_of(page)},
            headers={"Origin": "http://evil.example"},
        )[0]
        == 403
    )
    assert len(phaselog.open(str(root)).approvals("VID-7", runs["vid"])) == before


def test_a_judgement_needs_a_name_a_comment_and_the_hash_shown(
    server: Server, built: tuple[Path, dict[str, str]]
) -> None:
    root, runs = built
    http = Http(server.base)
    _, _, page = http.get(_judge_path(runs["vid"]))
    token = csrf_of(page)
    shown = phaselog.open(str(root)).read("VID-7", runs["vid"], "proposal", 2).record.content_hash
    base = {"csrf_token": token, "decision": "reject", "by": "ana", "comment": "no", "content_hash": shown}
    status, _, body = http.post(_judge_path(runs["vid"]) + "/judge", {**base, "comment": "  "})
    assert status == 400
    assert "a comment is required" in body
    status, _, body = http.post(_judge_path(runs["vid"]) + "/judge", {**base, "by": ""})
    assert status == 400
    assert "your name is required" in body
    status, _, body = http.post(_judge_path(runs["vid"]) + "/judge", {**base, "content_hash": "0" * 64})
    assert status == 409
    assert "hash_mismatch" in body
    # attempt 1 was rejected already: approving it now is refused by the library
    status, _, body = http.post(_judge_path(runs["vid"], 1) + "/judge", {**base, "decision": "approve"})
    assert status == 409
    assert len(phaselog.open(str(root)).approvals("VID-7", runs["vid"])) == 1  # only the fixture's rejection


def test_guard_reset_over_http_is_recorded_with_who(server: Server, built: tuple[Path, dict[str, str]]) -> None:
    root, _ = built
    http = Http(server.base)
    _, _, page = http.get("/guards/closeout")
    assert "breaker open" in page
    status, _, _ = http.post("/guards/closeout/reset", {"csrf_token": csrf_of(page), "by": "ops-oncall"})
    assert status == 303
    from phaselog.guard import Guard

    g = Guard(str(root), "closeout")
    assert g.status()["breaker"] == "closed"
    assert g.history()[-1]["kind"] == "reset"
    assert g.history()[-1]["by"] == "ops-oncall"


# -- read-only ----------------------------------------------------------------------------------------
def test_read_only_hides_every_button_and_refuses_every_post(built: tuple[Path, dict[str, str]]) -> None:
    root, runs = built
    srv = Server(str(root), "--read-only")
    try:
        http = Http(srv.base)
        for path in _pages(runs):
            status, _, body = http.get(path)
            assert status == 200, path
            assert 'method="post"' not in body, f"{path} shows a form in read-only mode"
        shown = phaselog.open(str(root)).read("VID-7", runs["vid"], "proposal", 2).record.content_hash
        forged = {"csrf_token": "0" * 64, "decision": "approve", "by": "x", "comment": "x", "content_hash": shown}
        status, _, body = http.post(_judge_path(runs["vid"]) + "/judge", forged)
        assert status == 403
        assert "read-only" in body
        status, _, body = http.post("/guards/closeout/reset", {"by": "x"})
        assert status == 403
        assert "read-only" in body
    finally:
        srv.stop()
    ledger = phaselog.open(str(root))
    assert ledger.status("VID-7", runs["vid"]).phase("proposal").state == "awaiting_approval"
    from phaselog.guard import Guard

    assert Guard(str(root), "closeout").status()["breaker"] == "open"


# -- token --------------------------------------------------------------------------------------------
def test_with_a_token_every_request_needs_it(built: tuple[Path, dict[str, str]]) -> None:
    token = "t0ken-" + "x" * 20
    srv = Server(str(built[0]), env={"PHASELOG_UI_TOKEN": token})
    try:
        assert "token=" in srv.url
        assert Http(srv.base).get("/tickets")[0] == 401
        assert Http(srv.base).get("/static/app.css")[0] == 401
        assert Http(srv.base).get("/tickets", headers={"Authorization": "Bearer wrong-token-xxxxxxxx"})[0] == 401
        assert Http(srv.base).get("/tickets", headers={"Authorization": f"Bearer {token}"})[0] == 200
        browser = Http(srv.base)
        status, headers, _ = browser.get(f"/tickets?token={token}&q=vid")
        assert status == 303
        assert headers["location"] == "/tickets?q=vid"
        assert browser.get("/tickets")[0] == 200  # … and lives in a cookie
        assert Http(srv.base).post("/guards/closeout/reset", {"by": "x"})[0] == 401
    finally:
        srv.stop()


def test_listening_beyond_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PHASELOG_UI_TOKEN"}
    proc = subprocess.run(
        [PHASELOG, "ui", "--store", str(tmp_path / "s"), "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert proc.returncode == 2
    out = json.loads(proc.stdout)
    assert out["field"] == "token"
    assert "--token" in out["error"]


def test_without_the_ui_extra_the_message_says_what_to_install(tmp_path: Path) -> None:
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'starlette':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from phaselog.cli import main\n"
        f"main(['ui', '--store', {str(tmp_path / 's')!r}, '--port', '0'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    out = json.loads(proc.stdout)
    assert "pip install 'phaselog[ui]'" in out["error"]
    assert "starlette" in out["error"]
    assert out["rule"] == "missing_dependency"


def test_phaselog_import_does_not_import_the_web_stack() -> None:
    code = "import sys, phaselog.cli; print([m for m in ('starlette', 'uvicorn', 'jinja2') if m in sys.modules])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "[]"


# -- opening never writes (every store) ---------------------------------------------------------------
def _snapshot(store: Store, tmp_path: Path) -> Any:
    url = store.url
    if url.startswith("file://"):
        root = Path(url[len("file://") :])
        out = {}
        for p in sorted(root.rglob("*")):
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            out[str(p.relative_to(root))] = (st.st_size if p.is_file() else None, st.st_mtime_ns, digest)
        return out
    if url.startswith("sqlite://"):
        path = Path(url[len("sqlite://") :])
        files = {}
        for suffix in ("", "-wal"):
            f = Path(f"{path}{suffix}")
            # a -wal file that is absent or empty holds no transaction: the same to a reader
            files[suffix] = hashlib.sha256(f.read_bytes() if f.exists() else b"").hexdigest()
        return files
    import psycopg

    base, schema = url.split("?schema=")
    with psycopg.connect(base) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (schema,)
            )
        ]
        return {t: sorted(map(str, conn.execute(f'SELECT * FROM "{schema}"."{t}"').fetchall())) for t in tables}


@pytest.mark.all_stores
def test_browsing_every_page_never_writes_to_the_store(store: Store, tmp_path: Path) -> None:
    ledger = phaselog.Ledger(store, clock=ui_data.Clock())
    runs = ui_data.build(ledger)
    ui_data.failing_guard(store)
    store.close()
    before = _snapshot(store, tmp_path)
    srv = Server(store.url)
    try:
        http = Http(srv.base)
        for path in _pages(runs):
            status, _, body = http.get(path)
            assert status == 200, (path, body[:300])
        assert _snapshot(store, tmp_path) == before
        # … and the one kind of change it makes goes through the library (a sanity check of the snapshot)
        _, _, page = http.get(_judge_path(runs["vid"]))
        shown = re.search(r'name="content_hash" value="([0-9a-f]{64})"', page)
        assert shown
        form = {"csrf_token": csrf_of(page), "decision": "approve", "by": "ana", "comment": "fine"}
        assert http.post(_judge_path(runs["vid"]) + "/judge", {**form, "content_hash": shown.group(1)})[0] == 303
    finally:
        srv.stop()
    assert _snapshot(store, tmp_path) != before


def test_a_missing_store_is_not_created(tmp_path: Path) -> None:
    target = tmp_path / "no-such-store"
    proc = subprocess.run(
        [PHASELOG, "ui", "--store", str(target), "--port", "0"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["error_code"] == "store_not_found"
    assert not target.exists()
    proc = subprocess.run(
        [PHASELOG, "ui", "--store", f"sqlite:///{tmp_path}/none/x.db", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert not (tmp_path / "none").exists()


# -- a run's JSON: the overview and its pages ------------------------------------------------------------
def test_a_runs_json_endpoints_give_the_librarys_views_page_by_page(
    long_server: Server, long_built: tuple[Path, str]
) -> None:
    from phaselog.views import results as views
    from phaselog.views.run_page import overview

    root, run = long_built
    ticket = ui_data.LONG_TICKET
    ledger = phaselog.open(str(root))
    http = Http(long_server.base)
    base = f"/tickets/{ticket}/runs/{run}"

    status, headers, body = http.get(f"{base}/overview.json")
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    got = json.loads(body)
    assert got == json.loads(json.dumps(views.run_overview(overview(ledger, ticket, run))))
    assert got["status"] == json.loads(json.dumps(ledger.status(ticket, run).to_json()))  # as `phaselog status`
    assert [p["latest_attempt"] for p in got["status"]["phases"]] == [120, 3, 1, None, None]

    # Every attempt once, newest first, in pages of 40 that follow the cursor to the oldest.
    keys, cursor, pages = [], "", 0
    while True:
        status, _, body = http.get(f"{base}/attempts.json?limit=40" + (f"&before={cursor}" if cursor else ""))
        assert status == 200, body
        page = json.loads(body)
        assert len(page["attempts"]) <= 40
        keys += [(a["phase"], a["attempt_number"]) for a in page["attempts"]]
        pages += 1
        if page["next_before"] is None:
            break
        cursor = page["next_before"]
    expected = [("create_pr", 1)] + [("local_review", a) for a in (3, 2, 1)]
    expected += [("implement", a) for a in range(120, 0, -1)]
    assert (keys, pages) == (expected, 4)
    _, _, body = http.get(f"{base}/attempts.json?phase=implement&before=1:3")
    assert [a["attempt_number"] for a in json.loads(body)["attempts"]] == [2, 1]
    assert json.loads(body)["next_before"] is None

    # The attempt in flight's events, oldest first, as `progress show --all` prints each one (with
    # the start of each one's output).
    events, after = [], 0
    while after is not None:
        status, _, body = http.get(f"{base}/phases/create_pr/attempts/1/events.json?limit=60&after={after}")
        assert status == 200, body
        page = json.loads(body)
        events += page["events"]
        after = page["next_after"]
    shown = [
        views.progress_event(e, preview=views.OUTPUT_PREVIEW_CHARS)
        for e in ledger.progress_events(ticket, run, "create_pr", 1)
    ]
    assert events == json.loads(json.dumps(shown))
    assert len(events) == ui_data.LONG_EVENTS


def test_a_runs_json_endpoints_refuse_bad_input_with_json(long_server: Server, long_built: tuple[Path, str]) -> None:
    _, run = long_built
    http = Http(long_server.base)
    base = f"/tickets/{ui_data.LONG_TICKET}/runs/{run}"
    for path, status, field in (
        (f"{base}/attempts.json?before=nope", 400, "before"),
        (f"{base}/attempts.json?limit=0", 400, "limit"),
        (f"{base}/attempts.json?limit=100000", 400, "limit"),
        (f"{base}/attempts.json?phase=nosuch", 400, None),
        (f"{base}/phases/create_pr/attempts/1/events.json?after=-1", 400, "after"),
        (f"/tickets/{ui_data.LONG_TICKET}/runs/nobody/overview.json", 404, None),
    ):
        got, headers, body = http.get(path)
        assert got == status, (path, got, body)
        assert headers["content-type"].startswith("application/json"), path
        error = json.loads(body)
        assert "Traceback" not in body
        if field:
            assert error["field"] == field, (path, error)
