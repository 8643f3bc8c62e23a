"""One invocation of a command: what its body returns (:class:`Result`, :class:`Streamed`) and
the :class:`Call` it is handed (the shared options' values, the ledger opened on first use, rendering)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from phaselog.cli import _render
from phaselog.model.errors import PhaselogError, UsageError

if TYPE_CHECKING:  # the ledger and the stores are imported when a command first opens one (start-up time)
    from phaselog.ledger.facade import Ledger
    from phaselog.ledger.resolve import PipelineArg
    from phaselog.stores.base import Store

TableFn = Callable[[dict[str, Any]], str]


@dataclass
class Result:
    """What a command's body returns: a JSON view, how to show it to people, and the exit code.

    ``data`` is wrapped as ``{"success": …, **data, "correlation_id": …}`` unless
    ``envelope`` is false (the body built the whole object, e.g. a best-effort warning).
    ``success`` is false whenever the exit code says the command failed (a check that says no,
    a refused skip, conflicts), and the object then has ``error`` and ``error_code`` as every
    error object does (:func:`envelope`).
    ``table`` renders the wrapped object as text for ``--format table`` (or ``text``).
    """

    data: dict[str, Any]
    table: TableFn | None = None
    exit_code: int = 0
    envelope: bool = True
    #: Why the command failed, when ``exit_code`` says it did: the JSON's ``error`` and ``error_code``.
    error: str | None = None
    error_code: str | None = None
    #: The exit code says "not done yet", not "failed" (``run`` stopped at a gate exits 3).
    pending: bool = False

    @property
    def success(self) -> bool:
        """The JSON's ``success``: false whenever the command failed (a non-zero exit code that is not ``pending``)."""
        return self.exit_code == 0 or self.pending


@dataclass
class Streamed:
    """A result written piece by piece (listings of a whole ticket): memory stays flat.

    ``fields`` yields the JSON object's (key, value) pairs; a value may be
    :class:`phaselog.views.streams.Items` or :class:`~phaselog.views.streams.SpooledArray`, written item by
    item (the bytes are those of the whole-list JSON). ``table`` writes the ``--format table``
    output into a text sink. Either is written into a spooled buffer first and printed only once
    complete, so a failure half-way still prints just the error. ``close`` runs at the end.
    """

    fields: Callable[[], Iterable[tuple[str, Any]]]
    table: Callable[[IO[str]], None] | None = None
    exit_code: int = 0
    close: Callable[[], None] | None = None

    @property
    def success(self) -> bool:
        """The JSON's ``success``: the exit code is 0."""
        return self.exit_code == 0


def envelope(result: Result) -> dict[str, Any]:
    """The JSON object of ``result``: ``success`` first, and for a failure ``error`` and ``error_code``.

    The one place a command's ``success`` is decided (D105): true exactly when the command did not
    fail (exit 0, or ``pending``), so no failing command says ``"success": true``.
    """
    if not result.envelope:
        return result.data
    out = {"success": result.success, **result.data}
    if not result.success:
        out.setdefault("error", result.error or f"the command failed (exit {result.exit_code})")
        out.setdefault("error_code", result.error_code or "failed")
    return out


class Call:
    """One invocation: the shared options' values, and what was opened for it (closed at the end)."""

    def __init__(
        self,
        *,
        root: str | None = None,
        store_url: str | None = None,
        correlation_id: str | None = None,
        fmt: str = "json",
        pipeline_name: str | None = None,
        pipeline_file: str | None = None,
        writes: bool = False,
    ) -> None:
        self.root = root
        #: The command records something: a store that does not exist yet may be created.
        self.writes = writes
        self.store_url = store_url
        self.correlation_id = correlation_id or _render.new_correlation_id()
        self.fmt = fmt
        self.pipeline_name = pipeline_name
        self.pipeline_file = pipeline_file
        self._ledger: Ledger | None = None
        self._opened: list[Store] = []

    @property
    def ledger(self) -> Ledger:
        """The :class:`~phaselog.ledger.facade.Ledger` on ``--store`` / ``--root``, opened on first use."""
        if self._ledger is None:
            from phaselog.ledger.facade import Ledger  # lazy: `--help` opens no ledger

            self.check_root_and_store()
            # --store (or PHASELOG_STORE) names the store completely, so it wins over PHASELOG_HOME.
            self._ledger = Ledger(self.open_store(self.store_url or self.root))
        return self._ledger

    def open_store(self, url: str | None, *, create: bool | None = None, migrate: bool = False) -> Store:
        """Open a store by URL or path; it is closed when the command ends (SQLite: WAL checkpointed).

        A command that only reads (``writes`` false, or ``create=False``) gets StoreNotFound for a
        store that does not exist, and creates nothing; one that writes creates it on its first write.
        """

        from phaselog.stores import open_store  # lazy: `--help` opens no store

        store = open_store(url, create=self.writes if create is None else create, migrate=migrate)
        self._opened.append(store)
        return store

    @property
    def pipeline(self) -> PipelineArg:
        """``--pipeline NAME`` (a name), ``--pipeline-file PATH`` (a loaded manifest), or None."""
        if self.pipeline_name and self.pipeline_file:
            raise UsageError("give --pipeline or --pipeline-file, not both", field="pipeline")
        if self.pipeline_file:
            from phaselog.model.pipelines import load_manifest  # lazy: `phaselog read` loads no pipeline

            return load_manifest(self.pipeline_file)
        return self.pipeline_name

    def check_root_and_store(self) -> None:
        """Both given on the command line is ambiguous; an environment default yields to a flag."""
        if not (self.root and self.store_url):
            return
        ctx = click.get_current_context(silent=True)
        if ctx is None:
            return

        explicit = {ParameterSource.COMMANDLINE}
        if ctx.get_parameter_source("root") in explicit and ctx.get_parameter_source("store_url") in explicit:
            raise UsageError("give --root or --store, not both", field="store")

    def close(self) -> None:
        """Close every store opened for this call (newest first); a failing close is not the command's."""
        while self._opened:
            store = self._opened.pop()
            with contextlib.suppress(Exception):
                store.close()

    def render(self, result: Result) -> str:
        """The whole output of ``result`` as text (a table renderer that fails falls back to JSON)."""
        data = envelope(result)
        data.setdefault("correlation_id", self.correlation_id)
        if self.fmt != "json" and result.table is not None:
            try:
                return result.table(data)
            except Exception:  # rendering must not turn a success into a failure
                if os.environ.get("PHASELOG_DEBUG"):
                    raise
        return _render.json_text(data)

    def render_stream(self, result: Streamed) -> IO[str]:
        """The whole output of a streamed result, in a spooled buffer (rewound by the printer)."""
        from phaselog.views import streams  # lazy: `phaselog read` streams nothing

        out = streams.spool()
        try:
            if self.table_of(result):
                assert result.table is not None
                try:
                    result.table(out)
                except PhaselogError:
                    raise
                except Exception:  # rendering must not turn a success into a failure: JSON instead
                    if os.environ.get("PHASELOG_DEBUG"):
                        raise
                    out.seek(0)
                    out.truncate()
                    streams.write_object(out, self._envelope(result))
            else:
                streams.write_object(out, self._envelope(result))
        except BaseException:
            out.close()
            raise
        return out

    def table_of(self, result: Streamed) -> bool:
        """Whether ``result`` is shown as a table (else JSON)."""
        return self.fmt != "json" and result.table is not None

    def _envelope(self, result: Streamed) -> Iterator[tuple[str, Any]]:
        seen = False
        yield "success", result.success
        for key, value in result.fields():
            seen = seen or key == "correlation_id"
            yield key, value
        if not seen:
            yield "correlation_id", self.correlation_id
