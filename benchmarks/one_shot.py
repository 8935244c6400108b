"""One-shot: `meta-agent run` of a one-tool task end to end (a new process, its child, two turns of a model endpoint
on 127.0.0.1 that answers at once, the answer on stdout) against a bare SDK client script that starts the same child
and makes the same call, interleaved round by round."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from common import ECHO, HERE, bench_config, clock, model_env, spread

BARE_CLIENT = f"""
import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command={sys.executable!r}, args=[{str(ECHO)!r}])
    async with Client(stdio_client(params)) as client:
        result = await client.call_tool("echo", {{"text": "hello"}})
    print(result.content[0].text)

anyio.run(main)
"""


@contextmanager
def model_endpoint(delay: float = 0.0, tool_turns: int = 1) -> Iterator[str]:
    """The benchmark model endpoint in its own process; yields its base URL."""
    args = [sys.executable, str(HERE / "model_server.py"), "--delay", str(delay), "--tool-turns", str(tool_turns)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{line.split()[1]}/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _timed(args: list[str], env: dict[str, str]) -> float:
    started = clock()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)
    elapsed = clock() - started
    assert done.returncode == 0 and done.stdout.strip().endswith(("hello", "done")), (done.stdout, done.stderr[-2000:])
    return elapsed * 1000


def measure(rounds: int) -> dict[str, Any]:
    per: dict[str, list[float]] = {"bare SDK client script": [], "meta-agent run": []}
    with tempfile.TemporaryDirectory() as state, model_endpoint() as base_url:
        config, state_env = bench_config(state)
        env = {**os.environ, **model_env(base_url), **state_env}
        run = [sys.executable, "-m", "meta_agent", "run", "Echo hello.", "--config", str(config), "--tools", "echo.*"]
        bare = [sys.executable, "-c", BARE_CLIENT]
        ratios = []
        for _ in range(rounds):
            per["bare SDK client script"].append(_timed(bare, env))
            per["meta-agent run"].append(_timed(run, env))
            ratios.append(per["meta-agent run"][-1] / per["bare SDK client script"][-1])
    return {name: spread(values) for name, values in per.items()} | {"ratio per round": spread(ratios)}
