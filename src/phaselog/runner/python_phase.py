"""Running a decorated Python phase (sync or ``async def``) for one attempt."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phaselog.runner.outcome import Failure, Success, from_exception, normalize, phase_exit
from phaselog.runner.signals import Interrupt, PhaseTimeout, alarm, runner_owns_sigint

if TYPE_CHECKING:
    from phaselog.runner.context import PhaseContext


def code_fingerprint(fn: Callable[..., Any]) -> str:
    """``sha256:<hex>`` of the function's source (its bytecode and constants if the source is gone)."""
    try:
        text = inspect.getsource(fn).encode("utf-8")
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        text = repr((code.co_code, code.co_consts)).encode() if code is not None else repr(fn).encode()
    return "sha256:" + hashlib.sha256(text).hexdigest()


def run_python(
    fn: Callable[..., Any], ctx: PhaseContext, *, timeout: float | None, workdir: Path, is_async: bool | None = None
) -> Success | Failure:
    """Call ``fn(ctx)`` once; never raises for the phase's own errors (they become a Failure).

    A sync function's timeout is a SIGALRM in the main thread (the runner checks it can use
    one); an async function's is ``asyncio.wait_for``. ``is_async``: whether ``fn`` is an
    ``async def`` (None: ask ``inspect``; the runner asks once per phase, not per attempt).
    """
    if is_async is None:
        is_async = inspect.iscoroutinefunction(fn)
    try:
        if is_async:
            result = asyncio.run(_await(fn, ctx, timeout))
        else:
            with alarm(timeout):
                result = fn(ctx)
                if inspect.isawaitable(result):  # a sync wrapper around a coroutine
                    result = asyncio.run(_await_value(result, timeout))
    except Interrupt as exc:
        return Failure(
            "interrupted", f"interrupted by {exc.args[0]}", {"signal": exc.args[0]}, cause=exc, signum=exc.signum
        )
    except SystemExit as exc:
        return phase_exit(exc)
    except KeyboardInterrupt as exc:
        if runner_owns_sigint():
            return phase_exit(exc)  # the runner's handler turns a real SIGINT into Interrupt
        # No handler of ours: a real Ctrl-C and the phase's own raise look the same; a stop.
        return Failure("interrupted", "interrupted by SIGINT (KeyboardInterrupt)", {"signal": "SIGINT"},
                       cause=exc, signum=signal.SIGINT)  # fmt: skip
    except (PhaseTimeout, TimeoutError) as exc:
        if isinstance(exc, TimeoutError) and timeout is None:
            return from_exception(exc)  # the phase's own TimeoutError, not ours
        return Failure("timeout", f"the phase ran longer than its timeout of {timeout:g} s", {"timeout_sec": timeout})
    except Exception as exc:
        return from_exception(exc)
    return normalize(result, workdir)


async def _await(fn: Callable[..., Any], ctx: PhaseContext, timeout: float | None) -> Any:
    return await asyncio.wait_for(fn(ctx), timeout)


async def _await_value(value: Any, timeout: float | None) -> Any:
    return await asyncio.wait_for(value, timeout)
