"""Python phases named in a manifest: ``call: package.module:function``.

A worker (or ``phaselog run``) imports the module the first time the phase runs and calls the
function with the phase's ``ctx``, exactly like a ``@pipe.phase`` function. The module is found
on ``sys.path`` (the worker adds its ``--pipelines`` folder first, so code can sit next to the
manifests). An import that fails is a usage error naming the phase and the module, before the
run's lease is taken. So is a module that raises anything or calls ``sys.exit`` while it is
imported (D109): the manifest's ``call:`` is refused, named, before any phase runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from phaselog.model.errors import UsageError
from phaselog.model.pipelines import Phase


def resolve_call(phase: Phase) -> Callable[..., Any]:
    """The function ``phase.execution.call`` names; UsageError (rule ``call``) if it cannot be found."""
    target = phase.execution.call
    if target is None:
        raise UsageError(f"phase {phase.name} has no call:", field="call")
    module_name, _, attr = target.partition(":")
    where = f"phase {phase.name}: call: {target}"
    key = f"phases[{phase.ordinal - 1}].call"  # the manifest key, as the other manifest errors name it
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"{where}: cannot import {module_name} ({exc}); put it on the worker's path (--pipelines DIR "
            "or PYTHONPATH)",
            field=key,
            rule="call_import",
        ) from None
    except (Exception, SystemExit) as exc:  # the module itself raised (or exited) while importing: named
        raise UsageError(
            f"{where}: importing {module_name} raised {type(exc).__name__}: {str(exc)[:200]}; nothing was run",
            field=key,
            rule="call_import",
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{where}: {module_name} has no {attr}", field=key, rule="call_missing") from None
        except (Exception, SystemExit) as exc:  # a module __getattr__ that raises or exits
            raise UsageError(
                f"{where}: looking up {attr} in {module_name} raised {type(exc).__name__}: {str(exc)[:200]}",
                field=key,
                rule="call_missing",
            ) from None
    if not callable(obj):
        raise UsageError(f"{where}: {attr} is not callable", field=key, rule="call_missing")
    fn: Callable[..., Any] = obj
    return fn
