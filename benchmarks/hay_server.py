"""The child of the result-handles benchmark: a stdio MCP server whose one tool returns a long text with the answer
on its last line (the shape of tests/internal/test_result_handles.py's child)."""

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("hay")
LINE = "hay " * 14 + "hay\n"  # 60 characters, about 4 to a token: as dense in tokens as English prose


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def haystack(size: int, needle: str) -> str:
    """Return about `size` characters of hay, 60 to a line, with `needle` as the last line."""
    return LINE * ((size - len(needle)) // len(LINE)) + needle


if __name__ == "__main__":
    server.run()
