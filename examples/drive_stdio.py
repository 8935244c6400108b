"""Drive meta-agent as a stdio subprocess with the MCP SDK client and print the progress it reports.

    python examples/drive_stdio.py "What time is it in Tokyo?" [--config servers.json] [--legacy]

meta-agent reads its model from the environment (META_AGENT_MODEL and the provider's API key), as it does
under any host.
"""

from __future__ import annotations

import argparse
import os
import sys

import anyio
from mcp import Client, StdioServerParameters


async def main(task: str, config: str, legacy: bool) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "meta_agent", "serve", "--config", config],
        env=dict(os.environ),  # the model's settings and keys travel with the environment
    )

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        # one write of the whole line: meta-agent's own log lines share this stderr, and print's two writes (the text,
        # then the newline) let one of them land in between
        sys.stderr.write(f"[{progress:g}] {message}\n")
        sys.stderr.flush()

    async with Client(server, mode="legacy" if legacy else "auto") as client:
        print(f"connected: {client.server_info.name if client.server_info else '?'} ({client.protocol_version})",
              file=sys.stderr)
        result = await client.call_tool("agent", {"task": task}, progress_callback=on_progress)
        for block in result.content:
            if block.type == "text":
                print(block.text)
        if result.is_error:
            sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("--config", default="servers.json")
    parser.add_argument("--legacy", action="store_true", help="use the 2025-11-25 protocol (sessions)")
    args = parser.parse_args()
    anyio.run(main, args.task, args.config, args.legacy)
