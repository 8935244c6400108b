"""Proxy hop: one call of the echo child's tool made directly with the SDK client, through meta-agent, and through
FastMCP's proxy of the same child, all over stdio and interleaved round by round.

meta-agent has no pass-through of child tools: its shortest path to a child tool is an `agent` call whose model
(here the instant in-process model) asks for that one tool and then answers with its result. So the meta-agent
figure is a whole run: MCP request, two model turns, the child call, the trace and the conversation record.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as t
from common import HERE, QUIET, bench_config, clock, echo_client, spread
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

CALLS = 100


def _client(script: str, *args: str, env: dict[str, str] | None = None) -> Client:
    params = StdioServerParameters(command=sys.executable, args=[str(HERE / script), *args], env=env)
    return Client(stdio_client(params, errlog=QUIET))


def _text(result: t.CallToolResult) -> str:
    assert not result.is_error, result
    return "".join(block.text for block in result.content if isinstance(block, t.TextContent))


async def _timed(call: Callable[[str], Awaitable[str]], calls: int) -> list[float]:
    assert await call("warm-up") == "warm-up"
    times = []
    for i in range(calls):
        started = clock()
        answer = await call(f"call {i}")
        times.append((clock() - started) * 1000)
        assert answer == f"call {i}", answer
    return times


async def direct(calls: int = CALLS) -> list[float]:
    async with echo_client() as client:
        return await _timed(lambda text: _call(client, "echo", {"text": text}), calls)


async def meta_agent(calls: int = CALLS) -> list[float]:
    with tempfile.TemporaryDirectory() as state:
        config, env = bench_config(state)
        async with _client("serve_instant.py", str(config), env=env) as client:

            async def through(text: str) -> str:
                return await _call(client, "agent", {"task": f"echo__echo {text}", "tools": ["echo.echo"]})

            return await _timed(through, calls)


async def fastmcp(calls: int = CALLS) -> list[float]:
    async with _client("fastmcp_proxy.py", "1") as client:
        return await _timed(lambda text: _call(client, "echo", {"text": text}), calls)


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    return _text(await client.call_tool(tool, arguments))


SYSTEMS = {"direct SDK call": direct, "meta-agent (agent run, 1 call)": meta_agent, "FastMCP 4.1 proxy": fastmcp}


async def measure(rounds: int) -> dict[str, Any]:
    """Per system, the median call of each round."""
    per: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    for _ in range(rounds):
        for name, system in SYSTEMS.items():
            per[name].append(spread(await system())["median"])
    return {name: spread(values) for name, values in per.items()}
