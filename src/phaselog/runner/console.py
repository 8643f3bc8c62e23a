"""What a run says while it runs, and where an attempt's log is.

One renderer for ``phaselog run`` and ``pipe.run``: a line per phase skipped, started, completed,
failed, retried or waiting for approval (the engine's ``echo`` lines), on stderr by default,
prefixed ``phaselog run:``; ``quiet=True`` silences it, ``echo=`` sends the lines elsewhere (a
worker prefixes them with its run). A shell phase's output goes to the same stderr as it comes.

``ctx.logger`` of a Python phase writes to the attempt's log — the file a shell phase's output
goes to, ``<files root>/logs/<ticket>/<run>/<N>_<phase>_a<k>.log`` (``<workdir>/.phaselog/logs/…``
on SQL stores, ``log_dir`` when given) — created on the first record, to the console, and (given a
:class:`~phaselog.runner.logsink.LogSink`) into the store with the attempt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from phaselog.stores.base import local_root

if TYPE_CHECKING:
    from phaselog.runner.logsink import LogSink
    from phaselog.stores.base import Store

PREFIX = "phaselog run: "
LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"


def to_stderr(text: str) -> None:
    """Print one of the run's lines on (the current) stderr."""
    print(f"{PREFIX}{text}", file=sys.stderr, flush=True)


def _stderr_bytes() -> IO[bytes] | None:
    return getattr(sys.stderr, "buffer", None)


@dataclass(frozen=True)
class Console:
    """Where a run's lines (``say``) and its shell phases' output (``shell``) go; None: nowhere."""

    line: Callable[[str], None] | None
    shell: IO[bytes] | None

    def say(self, text: str) -> None:
        """One line of the run (the engine's ``echo``)."""
        if self.line is not None:
            self.line(text)


def console(
    *, echo: Callable[[str], None] | None = None, quiet: bool = False, shell_output: IO[bytes] | None = None
) -> Console:
    """The run's console: lines to ``echo`` if given, else to stderr unless ``quiet``; shell output
    to ``shell_output`` if given, else to stderr when the lines go there."""
    if echo is not None:
        return Console(echo, shell_output)
    if quiet:
        return Console(None, shell_output)
    return Console(to_stderr, shell_output if shell_output is not None else _stderr_bytes())


# -- the attempt's log ---------------------------------------------------------------------------
def log_folder(store: Store, workdir: Path, ticket_id: str, run_id: str, log_dir: Path | None) -> Path:
    """Where a run's logs go: ``log_dir``, else ``<files root>/logs``, else ``<workdir>/.phaselog/logs``."""
    base = log_dir
    if base is None:
        root = local_root(store)
        base = Path(root) / "logs" if root is not None else workdir / ".phaselog" / "logs"
    return base / ticket_id / run_id


class Attempt(Protocol):
    """What names an attempt's log (a :class:`~phaselog.runner.context.PhaseContext` has it)."""

    @property
    def store(self) -> Store: ...

    workdir: Path
    ticket_id: str
    run_id: str
    phase: str
    attempt: int


def attempt_log(ctx: Attempt, ordinal: int, log_dir: Path | None) -> Path:
    """The log of attempt ``ctx.attempt`` of phase ``ctx.phase`` (shell output, ``ctx.logger``)."""
    folder = log_folder(ctx.store, ctx.workdir, ctx.ticket_id, ctx.run_id, log_dir)
    return folder / log_name(ordinal, ctx.phase, ctx.attempt)


def log_name(ordinal: int, phase: str, attempt: int) -> str:
    """The file name of an attempt's log in its run's log folder: ``<N>_<phase>_a<k>.log``."""
    return f"{ordinal}_{phase}_a{attempt}.log"


class _AttemptLog(logging.FileHandler):
    """Appends to the attempt's log, made (folder 0700, file 0600) on the first record only."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=True)

    def _open(self) -> Any:
        path = Path(self.baseFilename)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        return super()._open()


class _ToSink(logging.Handler):
    """Hands each formatted record, with its newline, to the attempt's log in the store."""

    def __init__(self, sink: LogSink) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.sink.write_text(self.format(record) + "\n")
        except Exception:  # a handler never breaks the phase
            self.handleError(record)


class _ToConsole(logging.Handler):
    def __init__(self, say: Callable[[str], None], where: str) -> None:
        super().__init__()
        self.say = say
        self.where = where

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level = "" if record.levelno == logging.INFO else f"{record.levelname}: "
            self.say(f"log {self.where}: {level}{record.getMessage()}")
        except Exception:  # a handler never breaks the phase
            self.handleError(record)


def phase_logger(phase: str) -> logging.Logger:
    """``ctx.logger``: a logger of this attempt alone, named ``phaselog.runner.<phase>``; its records
    also reach the handlers an application configured on that name (or its parents)."""
    parent = logging.getLogger(f"phaselog.runner.{phase}")
    own = logging.Logger(parent.name)
    own.parent = parent
    own.setLevel(min(logging.INFO, parent.getEffectiveLevel()))
    return own


class LogsTo(Protocol):
    """What :func:`logging_to` hangs the attempt's log on (a :class:`~phaselog.runner.context.PhaseContext`)."""

    def on_logger(self, attach: Callable[[logging.Logger], None] | None) -> None: ...


@contextlib.contextmanager
def logging_to(
    ctx: LogsTo, path: str | os.PathLike[str], out: Console, where: str, sink: LogSink | None = None
) -> Iterator[None]:
    """While the attempt runs, ``ctx.logger`` writes to its log at ``path``, to the console and to ``sink``.

    The handlers are made when the phase first uses ``ctx.logger`` (a phase that never logs pays
    for none of it); they are removed and closed when the attempt ends.
    """
    attached: list[tuple[logging.Logger, logging.Handler]] = []

    def attach(logger: logging.Logger) -> None:
        log = _AttemptLog(path)
        stamp = logging.Formatter(LOG_FORMAT, datefmt="%Y-%m-%dT%H:%M:%SZ")
        stamp.converter = time.gmtime
        log.setFormatter(stamp)
        handlers: list[logging.Handler] = [log]
        if sink is not None:
            kept = _ToSink(sink)
            kept.setFormatter(stamp)
            handlers.append(kept)
        if out.line is not None:
            handlers.append(_ToConsole(out.say, where))
        for h in handlers:
            logger.addHandler(h)
            attached.append((logger, h))

    ctx.on_logger(attach)
    try:
        yield
    finally:
        ctx.on_logger(None)
        for logger, h in attached:
            logger.removeHandler(h)
            h.close()
