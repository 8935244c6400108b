"""The MCP edge towards the host: the server, its transports, progress and approvals."""
