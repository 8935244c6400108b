"""Memory: resident memory of `meta-agent serve` (stdio) with 8 idle echo children, and its growth over 1,000
sequential `agent` runs (each one call of a child tool; the instant in-process model, so only meta-agent's own
memory is measured). Growth is counted from after 100 warm-up runs, when caches and pools are full."""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import anyio
import psutil
from common import HERE, bench_config
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

CHILDREN = 8
RUNS = 1000
WARM_UP = 100
MB = 1024 * 1024


def _server_process(children: int) -> psutil.Process:
    """Our stdio server: the child of this process that runs serve_instant.py."""
    for process in psutil.Process().children():
        if any("serve_instant.py" in part for part in process.cmdline()):
            return process
    raise LookupError("the meta-agent server process was not found")


async def measure() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as state:
        config, env = bench_config(state, children=CHILDREN)
        params = StdioServerParameters(
            command=sys.executable, args=[str(HERE / "serve_instant.py"), str(config)], env=env
        )
        async with Client(stdio_client(params)) as client:
            with anyio.fail_after(120):
                while True:  # until every child is ready (a benchmark may poll)
                    toolbox = json.loads((await client.read_resource("meta-agent://toolbox")).contents[0].text)
                    if all(server["status"] == "ready" for server in toolbox["servers"]):
                        break
                    await anyio.sleep(0.05)
            server = _server_process(CHILDREN)
            idle = server.memory_info().rss
            children = sum(child.memory_info().rss for child in server.children())
            samples = []
            for i in range(RUNS + WARM_UP):
                result = await client.call_tool("agent", {"task": f"echo{i % CHILDREN}__echo run {i}"})
                assert not result.is_error and result.structured_content["answer"] == f"run {i}", result
                if i + 1 == WARM_UP or (i + 1 - WARM_UP) % 100 == 0:
                    samples.append(server.memory_info().rss)
    return {
        "idle with 8 children (meta-agent process)": idle / MB,
        "the 8 children together": children / MB,
        "after warm-up": samples[0] / MB,
        f"after {RUNS} more runs": samples[-1] / MB,
        f"growth over {RUNS} runs": (samples[-1] - samples[0]) / MB,
        "samples every 100 runs": [round(s / MB, 1) for s in samples],
    }
