"""Any other host that reads an `mcpServers` map: the entry is printed (`--file PATH` writes it into that file)."""

from __future__ import annotations

from meta_agent.hosts.host import Host

HOST = Host(
    name="mcp-json",
    title="an mcpServers file",
    servers_key="mcpServers",
    typed=False,
    comments=False,
    user_file=None,
    project_file=None,
)
