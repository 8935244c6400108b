"""VS Code: `mcp.json` in the user profile (`Code/User` in the applications' data directory) or `.vscode/mcp.json` in
a workspace; a `servers` map whose entries name their type, in JSON with comments (VS Code's own format for its
settings files, which may hold comments and trailing commas)."""

from __future__ import annotations

from meta_agent.hosts.host import Host

HOST = Host(
    name="vscode",
    title="VS Code",
    servers_key="servers",
    typed=True,
    comments=True,
    user_file=lambda place: place.app_data / "Code" / "User" / "mcp.json",
    project_file=lambda project: project / ".vscode" / "mcp.json",
)
