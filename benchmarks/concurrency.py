"""Concurrency: 50 `agent` calls at once over streamable HTTP to `meta-agent serve --transport http`, each a run of 3
model turns (two calls of the echo child, then the answer) against a model endpoint on 127.0.0.1 that answers every
turn after 100 ms. The ideal wall time is 3 × 100 ms = 0.3 s."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import psutil
from common import bench_config, clock, model_env, spread
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from one_shot import model_endpoint

CALLS = 50
TURN_DELAY = 0.1
TURNS = 3
START_TIMEOUT = 60


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def _serving(config: Path, port: int, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """`meta-agent serve --transport http` in its own process."""
    args = ["-m", "meta_agent", "serve", "--transport", "http", "--port", str(port), "--config", str(config)]
    server = subprocess.Popen([sys.executable, *args, "--log-level", "warning"], env=env)
    try:
        yield server
    finally:
        server.terminate()
        server.wait(timeout=30)


async def _wait_healthy(url: str) -> None:
    """Until /health says every child is ready (polling is fine here: this measures, it is not a test)."""
    async with httpx2.AsyncClient() as http:
        with anyio.fail_after(START_TIMEOUT):
            while True:
                try:
                    health = (await http.get(f"{url}/health")).json()
                    if health.get("status") == "ok":
                        return
                except httpx2.TransportError:
                    pass
                await anyio.sleep(0.05)


async def _burst(url: str, mode: str) -> float:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,
    ):
        results: list[t.CallToolResult] = []

        async def one(i: int) -> None:
            results.append(await client.call_tool("agent", {"task": f"echo hello ({i})", "tools": ["echo.*"]}))

        await one(-1)  # warm: the model client and the child's connection exist before the clock starts
        results.clear()
        started = clock()
        async with anyio.create_task_group() as tg:
            for i in range(CALLS):
                tg.start_soon(one, i)
        elapsed = clock() - started
    bad = [r for r in results if r.is_error or (r.structured_content or {}).get("stop_reason") != "final"]
    assert len(results) == CALLS and not bad, bad[:1]
    assert all(r.structured_content["usage"]["model_calls"] == TURNS for r in results)  # type: ignore[index]
    return elapsed * 1000


async def measure(rounds: int) -> dict[str, Any]:
    per: dict[str, list[float]] = {"2025-11-25 session": [], "2026-07-28 (no session)": []}
    with tempfile.TemporaryDirectory() as state, model_endpoint(TURN_DELAY, TURNS - 1) as base_url:
        config, state_env = bench_config(state)
        env = {**os.environ, **model_env(base_url), **state_env}
        port = _free_port()
        with _serving(config, port, env) as server:
            url = f"http://127.0.0.1:{port}"
            await _wait_healthy(url)
            process = psutil.Process(server.pid)
            cpu_before = sum(process.cpu_times()[:2])
            for _ in range(rounds):
                per["2025-11-25 session"].append(await _burst(url, "legacy"))
                per["2026-07-28 (no session)"].append(await _burst(url, "auto"))
            cpu_ms = (sum(process.cpu_times()[:2]) - cpu_before) * 1000
    runs = rounds * len(per) * (CALLS + 1)  # each burst makes one warm-up call too
    return {name: spread(values) for name, values in per.items()} | {"server cpu ms per run": cpu_ms / runs}
