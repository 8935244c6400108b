"""The yardstick for start time: a bare one-tool MCPServer of the SDK on stdio."""

from mcp.server import MCPServer

server = MCPServer("bare")


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


if __name__ == "__main__":
    server.run()
