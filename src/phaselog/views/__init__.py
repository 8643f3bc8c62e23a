"""Read models and JSON views: what the CLI prints, the dashboard renders and the MCP server returns."""
