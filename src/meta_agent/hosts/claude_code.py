"""Claude Code: the user scope is the top-level `mcpServers` of `~/.claude.json` (a file Claude Code also keeps its
own state in, and rewrites often), the project scope `.mcp.json` at the project's root; entries name their type, as
`claude mcp add` writes them."""

from __future__ import annotations

from meta_agent.hosts.host import Host

HOST = Host(
    name="claude-code",
    title="Claude Code",
    servers_key="mcpServers",
    typed=True,
    comments=False,
    user_file=lambda place: place.home / ".claude.json",
    project_file=lambda project: project / ".mcp.json",
)
