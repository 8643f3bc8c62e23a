"""phaselog under LangGraph: ``PhaselogSaver``, a checkpoint saver with an audit trail.

Install with ``pip install 'phaselog[langgraph]'``. A thread is a ticket, a checkpoint namespace
is a run, each checkpoint an append-only, hash-chained record of the built-in ``langgraph``
pipeline, and pending writes are progress events: ``phaselog history/verify/diff/export/copy/
prune`` work on LangGraph threads unchanged. docs/langgraph.md has the full mapping and an example.
"""

from __future__ import annotations

from phaselog.integrations.langgraph._codec import NS_PREFIX, PHASE, PIPELINE, ns_run_id, thread_ticket
from phaselog.integrations.langgraph._saver import PhaselogSaver

__all__ = ["NS_PREFIX", "PHASE", "PIPELINE", "PhaselogSaver", "ns_run_id", "thread_ticket"]
