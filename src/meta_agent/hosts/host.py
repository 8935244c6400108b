"""What meta-agent knows of a host: where it reads its MCP servers on this machine (for the user, and in a project
where it has project scope), and the shape of its file. Each host's module (claude_desktop.py, cursor.py, vscode.py,
claude_code.py, mcp_json.py) says it in one `HOST`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

System = Literal["linux", "darwin", "win32"]


@dataclass(frozen=True, kw_only=True)
class Place:
    """Where this user's files are, as the hosts find them: the home directory, and the applications' data directory
    (`app_data`: `$XDG_CONFIG_HOME` or `~/.config` on Linux, `~/Library/Application Support` on macOS, `%APPDATA%` on
    Windows), where Electron applications such as Claude Desktop and VS Code keep their settings."""

    system: System
    home: Path
    app_data: Path

    @classmethod
    def here(cls) -> Place:
        """This machine's, for this user (platformdirs finds the data directory as the applications do)."""
        from platformdirs import user_config_path

        system: System = "win32" if sys.platform == "win32" else "darwin" if sys.platform == "darwin" else "linux"
        return cls(system=system, home=Path.home(), app_data=user_config_path(roaming=True))


@dataclass(frozen=True, kw_only=True)
class Host:
    """One host: its name on the command line, its own name, the key of its servers map, whether its entries name
    their transport (`"type": "stdio"`), whether it reads its file as JSON with comments, and where that file is:
    for this user (`user_file`; None: it has none, the entry is printed) and in a project (`project_file`; None: it
    has no project scope)."""

    name: str
    title: str
    servers_key: Literal["mcpServers", "servers"]
    typed: bool
    comments: bool
    user_file: Callable[[Place], Path] | None
    project_file: Callable[[Path], Path] | None

    def entry(self, command: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
        """A stdio entry in this host's shape; an empty `env` is left out."""
        entry: dict[str, Any] = {"type": "stdio"} if self.typed else {}
        entry |= {"command": command, "args": args}
        if env:
            entry["env"] = env
        return entry
