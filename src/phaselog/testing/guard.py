"""The cron-loop guard kept in the store (``Capability.GUARD_STORAGE``)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from phaselog.guard import Guard
from phaselog.stores.base import Capability, Store
from phaselog.testing._harness import Fixtures, StoreFactory, cli_env, missing, require


class GuardTests(Fixtures):
    """Guards whose lock, state and history live in the store under test."""

    def test_guard_run_status_reset_history(self, factory: StoreFactory, store: Store) -> None:
        require(factory, store, Capability.GUARD_STORAGE)
        g = Guard(store, "nightly")
        first = g.run(["true"])
        assert first.state is not None
        assert (first.action, first.outcome, first.exit_code, first.state.pass_count) == ("ran", "success", 0, 1)
        for i in range(3):
            r = g.run(["false"])
            assert r.state is not None
            assert (r.action, r.outcome, r.state.consecutive_failures) == ("ran", "failure", i + 1)
        halted = g.run(["true"])
        assert (halted.action, halted.exit_code) == ("halt", 1)
        assert "phaselog guard reset --name nightly" in halted.message
        st = g.status()
        assert (
            st["breaker"],
            st["lock"],
            st["state"]["pass_count"],
            st["state"]["consecutive_failures"],
        ) == ("open", None, 4, 3)
        assert st["state"]["last_status"] == "failure"
        done = g.reset(by="ana")
        assert done["state"]["consecutive_failures"] == 0
        assert g.status()["breaker"] == "closed"
        assert g.run(["true"]).outcome == "success"
        hist = g.history()
        assert [(h["kind"], h.get("outcome")) for h in hist] == [
            ("pass", "success"),
            ("pass", "failure"),
            ("pass", "failure"),
            ("pass", "failure"),
            ("reset", None),
            ("pass", "success"),
        ]
        assert [h["seq"] for h in hist] == [1, 2, 3, 4, 5, 6]
        assert hist[4]["by"] == "ana"
        # Another guard's state is its own.
        assert Guard(store, "other").status()["state"]["pass_count"] == 0

    def test_guard_skips_while_a_live_holder_runs(self, factory: StoreFactory, store: Store, tmp_path: Path) -> None:
        require(factory, store, Capability.GUARD_STORAGE)
        if not factory.cli:
            missing(factory, "URLs that open in a new phaselog process (StoreFactory.cli)")
        # The command of the outer run is a second, real `phaselog guard run` on the same guard:
        # it must see the outer holder (this process, alive) and skip without running its command.
        marker = tmp_path / "inner-ran"
        inner = tmp_path / "inner.txt"
        cmd = [
            "sh",
            "-c",
            f"PYTHONPATH={shlex.quote(cli_env(tmp_path)['PYTHONPATH'])} "
            f'"{sys.executable}" -m phaselog guard run --store "{store.url}" --name nightly -- '
            f'touch "{marker}" > "{inner}" 2>&1',
        ]
        result = Guard(store, "nightly").run(cmd)
        assert result.action == "ran", result.message
        assert result.exit_code == 0
        out = inner.read_text()
        assert "SKIP: previous invocation still running" in out
        assert f"pid {os.getpid()}" in out
        assert not marker.exists()
        assert Guard(store, "nightly").status()["state"]["pass_count"] == 1
