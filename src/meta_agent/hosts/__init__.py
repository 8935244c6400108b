"""meta-agent in the hosts' own config files: where each host reads its MCP servers and in what shape (a module per
host), the entry that starts this installation of meta-agent (entry.py), the file changed without losing any of it
(config_file.py, with jsonc.py and edits.py), the entry started as its host would start it (check.py), and the MCP
bundle for Claude Desktop (bundle.py). Imported by `meta-agent install`, `uninstall` and `bundle` only."""

from __future__ import annotations

from meta_agent.hosts import claude_code, claude_desktop, cursor, mcp_json, vscode
from meta_agent.hosts.host import Host

# The name of meta-agent's entry in a host's servers map, unless `--name` gives another.
DEFAULT_NAME = "meta-agent"
HOSTS: dict[str, Host] = {
    host.name: host for host in (claude_desktop.HOST, cursor.HOST, vscode.HOST, claude_code.HOST, mcp_json.HOST)
}
