"""`meta-agent serve` (stdio) with the instant in-process model: our real server, children, loop and stdio transport
(the one `serve` uses), no model wait.

python serve_instant.py SERVERS_JSON
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from instant_model import InstantModel

from meta_agent import Settings, build_server, configure_logging, load_servers
from meta_agent.front.stdio.serve import serve_stdio
from meta_agent.shared.heap import settle_for_serving

if __name__ == "__main__":
    configure_logging("warning")
    settings = Settings()
    servers = load_servers(Path(sys.argv[1]), os.environ)
    server = build_server(settings, servers, os.environ, provider=InstantModel())
    settle_for_serving()  # as `serve` does
    anyio.run(serve_stdio, server)
