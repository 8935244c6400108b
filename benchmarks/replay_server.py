"""A child MCP server that replays recorded tool definitions (benchmarks/toolsets/*.json) over stdio.

It lists the tools exactly as the real servers listed them (schemas and annotations verbatim) and answers any call
with one short line, so a toolbox of 150+ real tools runs as a real child without the servers, their accounts or
the network. Standard library only: it starts in milliseconds (importing the SDK would take a second of CPU).
It speaks the 2025-11-25 handshake and answers `server/discover` with "method not found", as handshake-era servers do.

    python replay_server.py [--prefix] TOOLSET.json...

With one file the tools keep their own names; with several, or with --prefix, each is named `server.tool` (a legal
MCP name) so that tools of different servers cannot collide.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def load(paths: list[str], prefix: bool) -> list[dict[str, Any]]:
    """The tools of every file, named `server.tool` when asked or when there are several files."""
    tools = []
    for path in paths:
        toolset = json.loads(Path(path).read_text())
        for tool in toolset["tools"]:
            name = f"{toolset['server']}.{tool['name']}" if prefix or len(paths) > 1 else tool["name"]
            tools.append({**tool, "name": name})
    return tools


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def answer(method: str, params: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "replay", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": tools}
    if method == "ping":
        return {}
    if method == "tools/call":
        name = params["name"]
        if not any(tool["name"] == name for tool in tools):
            return {"content": [{"type": "text", "text": f"unknown tool {name}"}], "isError": True}
        arguments = json.dumps(params.get("arguments") or {}, sort_keys=True)
        return {"content": [{"type": "text", "text": f"{name} done with {arguments}"}], "isError": False}
    raise LookupError(method)


def main() -> None:
    args = sys.argv[1:]
    prefix = "--prefix" in args
    tools = load([a for a in args if a != "--prefix"], prefix)
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue  # notifications and responses need no answer
        try:
            send({"id": message["id"], "result": answer(message["method"], message.get("params") or {}, tools)})
        except LookupError:
            send({"id": message["id"], "error": {"code": -32601, "message": f"method not found: {message['method']}"}})


if __name__ == "__main__":
    main()
