"""What every benchmark shares: the echo child, statistics, and a clock."""

from __future__ import annotations

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
