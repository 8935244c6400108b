"""Cursor: `~/.cursor/mcp.json` for every project, `.cursor/mcp.json` in a project; an `mcpServers` map."""

from __future__ import annotations

from meta_agent.hosts.host import Host

HOST = Host(
    name="cursor",
    title="Cursor",
    servers_key="mcpServers",
    typed=False,
    comments=False,
    user_file=lambda place: place.home / ".cursor" / "mcp.json",
    project_file=lambda project: project / ".cursor" / "mcp.json",
)
