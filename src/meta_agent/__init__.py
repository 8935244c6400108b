"""meta-agent: an MCP server that is itself an agent."""

__version__ = "0.1.0"
