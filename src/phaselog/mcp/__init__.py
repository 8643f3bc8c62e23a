"""``phaselog mcp``: a Model Context Protocol server over the library, and the Agent Skill (``phaselog skill``).

An edge, built like :mod:`phaselog.cli` and :mod:`phaselog.ui`: :mod:`~phaselog.mcp.tools` is the
catalogue (names, descriptions, JSON Schemas, one library call and one view each),
:mod:`~phaselog.mcp.server` puts it on the official SDK (the ``mcp`` extra), :mod:`~phaselog.mcp.http`
serves it over Streamable HTTP with the dashboard's safety rules, :mod:`~phaselog.mcp.skill` installs
the SKILL.md kept beside them. Importing this package imports none of them (the SDK may be absent).
Guide: docs/agents.md.
"""
