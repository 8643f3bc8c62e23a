"""Streamed output: ``list``, ``history`` and ``copy`` print exactly what the whole-list JSON printed,
on every store, while reading records through the store's iterator and holding only a few at once.

Memory itself is measured by ``python -m bench --only memory`` (peak RSS of real processes), not
here; these tests pin the output (byte for byte against the in-memory views) and the way records
are read (a counting store proxy: which store calls, how many records alive at once).
"""

from __future__ import annotations

import json
import weakref
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import phaselog
from conftest import IMPLEMENT, LOCAL_REVIEW
from helpers import Clock
from phaselog.cli import main
from phaselog.cli._render import json_text
from phaselog.model.ids import normalize_run_id
from phaselog.stores.base import Store, Stored
from phaselog.stores.sql import checkpoints as sql_pages
from phaselog.transfer.jsonl import export_records
from phaselog.views import results as views
from phaselog.views import streams

T = "STREAM-1"
RUNS = [normalize_run_id(f"run-{i}") for i in range(4)]
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
RESEARCH = {"summary": "s", "sources": ["https://example.org/a"]}
PROPOSAL = {"title": "Launch ✓ ünïcode", "concept": "c"}


def fill(store: Store) -> phaselog.Ledger:
    """A ticket with a marker, four runs, failed attempts, progress events and approvals."""
    clock = Clock(T0)  # moves only when told: records of different runs share instants
    led = phaselog.Ledger(store, clock=clock)
    for i, run in enumerate(RUNS):
        if i == 3:  # a gated pipeline: approvals
            led.write(T, run, "research", RESEARCH, pipeline="video-pipeline")
            led.progress(T, run, "proposal", "start", pid=None, pipeline="video-pipeline")
            led.write(T, run, "proposal", PROPOSAL, pipeline="video-pipeline")
            led.approve(T, run, "proposal", by="ana", comment="ok", pipeline="video-pipeline")
            clock.tick(0.5)  # a sub-second time: "…:00.5Z" must sort after "…:00Z"
            led.write(T, run, "proposal", PROPOSAL, pipeline="video-pipeline")
            led.approve(T, run, "proposal", by="bo", decision="reject", comment="again", pipeline="video-pipeline")
            continue
        led.progress(T, run, "implement", "start", pid=None)
        led.progress(T, run, "implement", "step", step=1, tokens=10, pid=None)
        led.write(T, run, "implement", None, status="failed", error=f"flaky {i}")
        if i % 2:
            clock.tick()
        led.write(T, run, "implement", IMPLEMENT)
        led.write(T, run, "local_review", LOCAL_REVIEW)
    led.init_ticket(T, title="Streams", pipeline="ticket-pipeline")  # after the video run: it names another
    return led


def cli(capsys: pytest.CaptureFixture[str], store: Store, *args: str) -> str:
    """Run the CLI in this process on ``store``; its stdout (exit 0 required)."""
    where = ["--root", str(store.root)] if hasattr(store, "root") and store.url.startswith("file") else []
    where = where or ["--store", store.url]
    extra = [] if args[0] == "copy" else ["--correlation-id", "C"]
    with pytest.raises(SystemExit) as exc:
        main([*args, *where, *extra])
    out = capsys.readouterr().out
    assert exc.value.code == 0, out
    return out


def whole(data: dict[str, Any]) -> str:
    """What the CLI printed before streaming: the whole object, rendered in memory."""
    return json_text({"success": True, **data, "correlation_id": "C"})


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQL pages of 3 rows and sort chunks of a few records: every boundary is crossed."""
    monkeypatch.setattr(sql_pages, "PAGE_ROWS", 3)
    monkeypatch.setattr(streams, "SORT_CHUNK_BYTES", 3000)
    monkeypatch.setattr(streams, "SORT_FAN_IN", 2)


# -- the same bytes as the whole-list JSON, on every store -------------------------------------------
@pytest.mark.all_stores
@pytest.mark.usefixtures("small_pages")
def test_streamed_list_prints_the_whole_list_json(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    led = fill(store)
    full = led.list(T)
    assert len(full.items) == 12
    assert not full.damaged
    assert cli(capsys, store, "list", "--ticket-id", T) == whole(views.page(full))
    assert cli(capsys, store, "list", "--ticket-id", T, "--run-id", RUNS[1]) == whole(views.page(led.list(T, RUNS[1])))
    cursor = f"{RUNS[1]}:1:1"
    out = cli(capsys, store, "list", "--ticket-id", T, "--after", cursor)
    assert out == whole(views.page(led.list(T, after=cursor)))
    assert json.loads(out)["count"] < 9
    empty = cli(capsys, store, "list", "--ticket-id", "NOBODY")
    assert empty == whole(views.page(led.list("NOBODY")))


@pytest.mark.all_stores
@pytest.mark.usefixtures("small_pages")
def test_streamed_history_prints_the_whole_history_json(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    led = fill(store)
    entries = led.history(T)
    assert {e["kind"] for e in entries} == {"marker", "progress", "checkpoint", "approval"}
    assert cli(capsys, store, "history", "--ticket-id", T) == whole(views.history(entries))
    run_only = cli(capsys, store, "history", "--ticket-id", T, "--run-id", RUNS[3])
    assert run_only == whole(views.history(led.history(T, RUNS[3])))
    phase_only = cli(capsys, store, "history", "--ticket-id", T, "--phase", "1")  # implement, or research
    assert phase_only == whole(views.history(led.history(T, phase="1")))


@pytest.mark.all_stores
@pytest.mark.usefixtures("small_pages")
def test_streamed_copy_copies_every_record(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    fill(store)
    source = list(export_records(store, T))
    n = sum(1 for line in source if line.get("type") != "pipeline")  # the manifests travel too, not counted
    assert 0 < n < len(source)
    target = tmp_path / "copy.db"
    out = json.loads(cli(capsys, store, "copy", "--to", f"sqlite:///{target}"))
    assert (out["records"], out["added"], out["skipped"], out["conflicts"]) == (n, n, 0, [])
    again = json.loads(cli(capsys, store, "copy", "--to", f"sqlite:///{target}"))
    assert (again["records"], again["added"], again["skipped"]) == (n, 0, n)
    from phaselog.stores.sql.sqlite import SqliteStore

    copied = SqliteStore(target)
    try:
        assert list(export_records(copied, T)) == source
    finally:
        copied.close()


def test_import_of_lines_out_of_export_order_stores_the_same(tmp_path: Path) -> None:
    """Lines not grouped by run are planned all at once (in memory), with the same result."""
    from phaselog.stores.files.store import FilesStore
    from phaselog.transfer.jsonl import import_records

    src = FilesStore(tmp_path / "a")
    fill(src)
    lines = list(export_records(src, T))
    shuffled = lines[1::2] + lines[0::2]  # runs interleaved, markers in the middle
    dst = FilesStore(tmp_path / "b")
    rep = import_records(dst, shuffled)
    n = sum(1 for line in lines if line.get("type") != "pipeline")
    assert (rep.added, rep.skipped, rep.conflicts, rep.pipelines_recorded) == (n, 0, [], len(lines) - n)
    assert list(export_records(dst, T)) == lines


# -- tables: capped, with the way to the rest --------------------------------------------------------
def test_a_long_list_table_stops_with_the_cursor_to_continue(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from phaselog.cli import records

    fill(store)
    monkeypatch.setattr(records, "TABLE_MAX_ROWS", 5)
    out = cli(capsys, store, "list", "--ticket-id", T, "--format", "table")
    assert out.count("completed") + out.count("failed") == 5  # one status per row
    cursor = out.split("more: --after ")[1].split()[0]
    assert "a table shows at most 5 rows" in out
    rest = json.loads(cli(capsys, store, "list", "--ticket-id", T, "--after", cursor))
    assert rest["count"] + len(rest["failed_attempts"]) == 12 - 5


def test_a_long_history_table_says_how_many_more(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from phaselog.cli import audit

    led = fill(store)
    monkeypatch.setattr(audit, "TABLE_MAX_ROWS", 4)
    out = cli(capsys, store, "history", "--ticket-id", T, "--format", "table")
    entries = led.history(T)
    assert f"and {len(entries) - 4:,} more" in out
    assert all(e["hash"][:12] in out for e in entries[:4])  # the first entries, in time order
    assert not any(e["hash"][:12] in out for e in entries[4:])


# -- records are read through the iterator, a few at a time -----------------------------------------
class Counting:
    """A store proxy: counts the calls made on it, and how many records it handed out are alive."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()
        self.alive = 0
        self.most_alive = 0
        self.handed_out = 0

    def _gone(self) -> None:
        self.alive -= 1

    def _track(self, entry: Any) -> Any:
        if isinstance(entry, Stored):
            self.alive += 1
            self.handed_out += 1
            self.most_alive = max(self.most_alive, self.alive)
            weakref.finalize(entry, self._gone)
        return entry

    def iter_records(self, *args: Any, **kw: Any) -> Iterator[Any]:
        self.calls["iter_records"] += 1
        for entry in self._inner.iter_records(*args, **kw):
            yield self._track(entry)

    def close(self) -> None:
        self.calls["close"] += 1  # the store fixture closes the store itself

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def counted(*args: Any, **kw: Any) -> Any:
            self.calls[name if name != "snapshot" or not kw.get("history") else "snapshot(history)"] += 1
            return attr(*args, **kw)

        return counted


@pytest.fixture
def counting(store: Store, monkeypatch: pytest.MonkeyPatch) -> Counting:
    """The store the CLI opens is ``store`` behind a Counting proxy."""
    import phaselog.stores

    proxy = Counting(store)
    real = phaselog.stores.open_store

    def opener(url: Any = None, *, create: bool = True, **kw: Any) -> Any:
        return real(url, create=create, **kw) if create else proxy  # copy's target is a real store

    monkeypatch.setattr(phaselog.stores, "open_store", opener)
    return proxy


def _many(store: Store, runs: int) -> int:
    led = phaselog.Ledger(store)
    for i in range(runs):
        led.write(T, f"many-{i}", "implement", None, status="failed", error="flaky")
        led.write(T, f"many-{i}", "implement", IMPLEMENT)
        led.write(T, f"many-{i}", "local_review", LOCAL_REVIEW)
    return 3 * runs


@pytest.mark.all_stores
@pytest.mark.usefixtures("small_pages")
@pytest.mark.parametrize("command", ["list", "history"])
def test_a_whole_ticket_is_read_through_the_iterator_a_few_records_at_a_time(
    store: Store, counting: Counting, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    n = _many(store, 15)
    out = json.loads(cli(capsys, store, command, "--ticket-id", T))
    assert (out["count"] + len(out["failed_attempts"]) if command == "list" else out["count"]) == n
    assert counting.handed_out == n
    # The whole-list commands held every record at once (most_alive == n); streamed, one at a time.
    assert counting.most_alive <= 2, counting.most_alive
    assert counting.calls["iter_records"] == (1 if command == "list" else 15)
    for whole_reads in ("snapshot(history)", "get"):
        assert counting.calls[whole_reads] == 0, counting.calls


@pytest.mark.all_stores
def test_copy_reads_the_source_through_the_iterator_a_few_records_at_a_time(
    store: Store, counting: Counting, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    n = _many(store, 12)
    out = json.loads(cli(capsys, store, "copy", "--to", str(tmp_path / "copy")))
    assert out["added"] == n
    assert counting.handed_out == n
    assert counting.most_alive <= 2, counting.most_alive
    assert counting.calls["snapshot(history)"] == 0


# -- the pieces: JSON written item by item, external sort ----------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=6), JSON, max_size=4), st.lists(JSON, max_size=5), st.lists(JSON, max_size=5))
def test_write_object_writes_what_json_dumps_writes(head: dict[str, Any], a: list[Any], b: list[Any]) -> None:
    import io

    spooled = streams.SpooledArray()
    for item in b:
        spooled.append(item)
    out = io.StringIO()
    streams.write_object(out, [*head.items(), ("a", streams.Items(iter(a))), ("b", spooled)])
    spooled.close()
    expected = {**head, "a": a, "b": b}
    if "a" in head or "b" in head:  # a repeated key: json.dumps of a dict cannot say it twice
        return
    assert out.getvalue() == json.dumps(expected, indent=2, ensure_ascii=False) + "\n"
    assert streams.ascii_escaped(out.getvalue()) == json.dumps(expected, indent=2, ensure_ascii=True) + "\n"


@given(st.lists(st.tuples(st.integers(0, 4), st.text(max_size=2), JSON), max_size=60), st.integers(1, 400))
def test_external_sort_is_a_stable_sort(items: list[tuple[int, str, Any]], chunk: int) -> None:
    with streams.ExternalSort(chunk_bytes=chunk, fan_in=2) as s:
        for i, (k1, k2, value) in enumerate(items):
            s.add((k1, k2), {"i": i, "v": value})
        got = list(s)
    expected = [{"i": i, "v": v} for i, (_, _, v) in sorted(enumerate(items), key=lambda x: (x[1][0], x[1][1]))]
    assert got == json.loads(json.dumps(expected))
    assert s.count == len(items)


# -- the dashboard's run page -----------------------------------------------------------------------
@pytest.mark.all_stores
def test_the_run_timeline_streams_the_run_instead_of_loading_it(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spans are the ones built from the whole run, read without ``run_records`` (a span keeps
    no payload, so the records need not all be in memory at once)."""
    from phaselog.ledger.derive import judge
    from phaselog.ledger.reads import Reads
    from phaselog.views import timeline

    led = fill(store)
    for run in (RUNS[0], RUNS[3]):
        items, damaged = led.run_records(T, run)
        pipeline = led.pipeline_for(T, run)
        expected = timeline.spans(
            ((s.record, s.location) for s in items),
            led.event_index(T, run),
            verdicts=judge(led.approvals(T, run)),
            gated=[p.name for p in pipeline.phases if p.requires_approval],
            damaged=[(d.phase, d.phase_ordinal, d.attempt_number) for d in damaged],
        )
        with monkeypatch.context() as m:
            m.setattr(Reads, "run_records", lambda *a, **kw: pytest.fail("the timeline loaded the whole run"))
            assert timeline.run_timeline(led, T, run) == expected
