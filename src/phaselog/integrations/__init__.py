"""Integrations with other tools. Each is imported only when used (``phaselog`` imports none of them).

* :mod:`phaselog.integrations.langgraph` — ``PhaselogSaver``, a LangGraph checkpoint saver
  (install ``phaselog[langgraph]``).
"""
