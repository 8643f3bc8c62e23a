"""How a Ledger is composed: which service is built from what, each once and on first use.

A service is handed what it needs (the store, the clock, the resolver, the services it reads
through) and never knows the Ledger. Each is a ``functools.cached_property``; its module is
imported inside the property where start-up needs it: ``phaselog read`` builds only ``reads`` and
``pipelines`` and must not import the others (tests/test_cli_lazy.py; D77, D135). The public
methods over these services are :class:`phaselog.ledger.facade.Ledger`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING

from phaselog.ledger.reads import Reads
from phaselog.ledger.resolve import PipelineResolver
from phaselog.stores import Store, open_store
from phaselog.stores.base import local_root

if TYPE_CHECKING:
    from phaselog.ledger.audit import Audit
    from phaselog.ledger.feed import Feed
    from phaselog.ledger.fork import Forks
    from phaselog.ledger.gates import Gates
    from phaselog.ledger.logs import Logs
    from phaselog.ledger.markers import Markers
    from phaselog.ledger.progress import Progress
    from phaselog.ledger.retention import Pruner
    from phaselog.ledger.status import RunStates
    from phaselog.ledger.verify import Verifier
    from phaselog.ledger.writes import Writes


class Services:
    """A store, a clock, a pipelines root, and the services built over them."""

    def __init__(
        self,
        store: Store | None = None,
        *,
        pipelines_root: str | os.PathLike[str] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store: Store = store if store is not None else open_store()
        self.pipelines_root = pipelines_root if pipelines_root is not None else local_root(self.store)
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))

    @cached_property
    def pipelines(self) -> PipelineResolver:
        """A run's pipeline: recorded, marker, default (resolve.py)."""
        return PipelineResolver(self.store, self.pipelines_root)

    @cached_property
    def reads(self) -> Reads:
        """Read, list, run_records, validate (reads.py)."""
        return Reads(self.store, self.clock, self.pipelines)

    @cached_property
    def states(self) -> RunStates:
        """Status and can_skip_to from one snapshot (status.py)."""
        from phaselog.ledger.status import RunStates  # lazy: a read derives no state (start-up)

        return RunStates(self.store, self.clock, self.pipelines, self.reads)

    @cached_property
    def writes(self) -> Writes:
        """Write: one snapshot plus one append (writes.py)."""
        from phaselog.ledger.writes import Writes  # lazy: a read writes nothing (start-up)

        return Writes(self.store, self.clock, self.pipelines, self.states)

    @cached_property
    def events(self) -> Progress:
        """Progress events and attempts in flight (progress.py)."""
        from phaselog.ledger.progress import Progress  # lazy: a read of a checkpoint reads no events (start-up)

        return Progress(self.store, self.clock, self.pipelines)

    @cached_property
    def gates(self) -> Gates:
        """Approve, reject, approvals (gates.py)."""
        from phaselog.ledger.gates import Gates  # lazy: a read judges nothing (start-up)

        return Gates(self.store, self.clock, self.pipelines, states=self.states)

    @cached_property
    def tickets(self) -> Markers:
        """The ticket marker, ``init`` (markers.py)."""
        from phaselog.ledger.markers import Markers  # lazy: a read needs no marker (start-up)

        return Markers(self.store, self.clock, self.pipelines.load)

    @cached_property
    def audit(self) -> Audit:
        """Decisions, history, diffs (audit.py)."""
        from phaselog.ledger.audit import Audit  # lazy: only the audit commands use it (start-up)

        return Audit(
            self.store,
            pipelines=self.pipelines,
            reads=self.reads,
            events=self.events,
            gates=self.gates,
            tickets=self.tickets,
        )

    @cached_property
    def feed_reader(self) -> Feed:
        """The event feed: events derived from the store, with each run's change stamp (feed.py)."""
        from phaselog.ledger.feed import Feed  # lazy: only the feed, `events` and `notify` read it (start-up)
        from phaselog.ledger.feed_sources import OtherEvents  # lazy: as above

        return Feed(self.store, self.pipelines, sources=OtherEvents())

    @cached_property
    def logs_reader(self) -> Logs:
        """Attempts' logs: read, follow (logs.py)."""
        from phaselog.ledger.logs import Logs  # lazy: only `logs` and the checkpoint page read logs (start-up)

        return Logs(self.store, self.pipelines)

    @cached_property
    def forks(self) -> Forks:
        """Fork a run through a phase (fork.py)."""
        from phaselog.ledger.fork import Forks  # lazy: only `fork` uses it (start-up)

        return Forks(self.store, pipelines=self.pipelines, states=self.states, writes=self.writes)

    @cached_property
    def verifier(self) -> Verifier:
        """Verify the hash links (verify.py)."""
        from phaselog.ledger.verify import Verifier  # lazy: only `verify` uses it (start-up)

        return Verifier(self.store, reads=self.reads, events=self.events, gates=self.gates, tickets=self.tickets)

    @cached_property
    def retention(self) -> Pruner:
        """Prune, and finish an interrupted prune (retention.py)."""
        from phaselog.ledger.retention import Pruner  # lazy: most commands never prune (start-up)

        return Pruner(self.store, self.clock, reads=self.reads, events=self.events, gates=self.gates)


__all__ = ["Services"]
