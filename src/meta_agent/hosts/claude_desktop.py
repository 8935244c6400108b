"""Claude Desktop: `claude_desktop_config.json` in its folder of the applications' data directory (Settings →
Developer → Edit Config opens it), an `mcpServers` map, strict JSON; no project scope."""

from __future__ import annotations

from meta_agent.hosts.host import Host

HOST = Host(
    name="claude-desktop",
    title="Claude Desktop",
    servers_key="mcpServers",
    typed=False,
    comments=False,
    user_file=lambda place: place.app_data / "Claude" / "claude_desktop_config.json",
    project_file=None,
)
