"""What every benchmark shares: the echo child, statistics, and a clock."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).parent
ECHO = HERE / "echo_server.py"
ECHO_ENTRY = {"command": sys.executable, "args": [str(ECHO)]}
clock = time.perf_counter
# Where the peers' own stderr goes (FastMCP logs a banner and warnings): not into the benchmark's report.
QUIET = open(os.devnull, "w")  # noqa: SIM115  # one for the process, closed when it exits


def echo_client() -> Client:
    """The SDK's own client of the echo child: the 'direct' baseline."""
    return Client(stdio_client(StdioServerParameters(command=sys.executable, args=[str(ECHO)])))


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median with min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def gaps_ms(stamps: Sequence[float]) -> list[float]:
    """Milliseconds between consecutive time stamps."""
    return [(b - a) * 1000 for a, b in pairwise(stamps)]


def bench_config(state: str, *, children: int = 1) -> tuple[Path, dict[str, str]]:
    """A servers.json of echo children in the directory `state`, and the environment that keeps meta-agent's traces
    and conversations there too."""
    config = Path(state) / "servers.json"
    entries = {"echo": ECHO_ENTRY} if children == 1 else {f"echo{i}": ECHO_ENTRY for i in range(children)}
    config.write_text(json.dumps({"mcpServers": entries}))
    return config, {"META_AGENT_TRACE_DIR": f"{state}/traces", "META_AGENT_CONVERSATIONS_DB": f"{state}/c.db"}


def model_env(base_url: str) -> dict[str, str]:
    """The environment that points meta-agent at the benchmark model endpoint."""
    return {"META_AGENT_MODEL": "openai:bench", "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "bench"}
