"""A child with one slow tool, for the recovery benchmark: a run killed while this call is under way."""

import anyio
from mcp.server import MCPServer
from mcp.types import ToolAnnotations

SECONDS = 0.5
server = MCPServer("slow")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow(text: str) -> str:
    """Return the text unchanged, after half a second."""
    await anyio.sleep(SECONDS)
    return text


if __name__ == "__main__":
    server.run()
