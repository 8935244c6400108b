"""MCP Apps on our server: the views as ui:// resources, the tools they call, who sees them, their approvals."""
