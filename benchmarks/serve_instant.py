"""`meta-agent serve` (stdio) with the instant in-process model: our real server, children and loop, no model wait.

python serve_instant.py SERVERS_JSON
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from instant_model import InstantModel

from meta_agent.config import Settings, load_servers
from meta_agent.server import build_server
from meta_agent.tracing import configure_logging

if __name__ == "__main__":
    configure_logging("warning")
    settings = Settings()
    servers = load_servers(Path(sys.argv[1]), os.environ)
    build_server(settings, servers, os.environ, provider=InstantModel()).run()
