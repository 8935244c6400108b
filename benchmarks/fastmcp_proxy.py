"""FastMCP's proxy of N echo children over stdio (one child: a plain proxy; several: its multi-server proxy).

python fastmcp_proxy.py N
"""

from __future__ import annotations

import sys

from common import ECHO_ENTRY
from fastmcp.server import create_proxy

if __name__ == "__main__":
    count = int(sys.argv[1])
    if count == 1:
        target = {"mcpServers": {"echo": ECHO_ENTRY}}
    else:
        target = {"mcpServers": {f"echo{i}": ECHO_ENTRY for i in range(count)}}
    create_proxy(target, name="proxy").run(show_banner=False)
