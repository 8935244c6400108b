"""Concurrency: 50 `agent` calls at once over streamable HTTP to `meta-agent serve --transport http`, each a run of 3
model turns (two calls of the echo child, then the answer) against a model endpoint on 127.0.0.1 that answers every
turn after 100 ms. The ideal wall time is 3 × 100 ms = 0.3 s.

Beside today's code, the same bursts go to the code of `BASELINE` (its src/ from git, on the same machine, with the
same packages, interleaved burst by burst), so "CPU per run, halved" compares two figures of one run: absolute CPU
times differ from machine to machine, and on a shared one from hour to hour.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
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
# The commit whose CPU per run issue 15 set out to halve: the code before that work.
BASELINE = "f50f249"
OURS, THEIRS = "meta-agent", f"meta-agent at {BASELINE} (baseline)"
# The floor: the same burst served by a bare SDK server that makes the same model requests and child calls with the
# same libraries (bare_agent.py), in one process, and in two (a sessionless server, so either process takes any
# request). What a run costs below these is not meta-agent's to cut.
FLOOR = {"bare SDK server (the floor)": 1, "bare SDK server, 2 processes": 2}
MODES = {"2025-11-25 session": "legacy", "2026-07-28 (no session)": "auto"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def baseline_source(commit: str = BASELINE) -> Iterator[Path | None]:
    """The src/ directory of `commit`, exported from this repository's git history into a temporary directory; None
    where there is no git history to read it from (a copy without .git)."""
    root = Path(__file__).parent.parent
    with tempfile.TemporaryDirectory() as where:
        try:
            archive = subprocess.run(
                ["git", "archive", commit, "src"], cwd=root, capture_output=True, check=True, timeout=60
            ).stdout
            subprocess.run(["tar", "-x", "-C", where], input=archive, check=True, timeout=60)
            # compiled ahead, as today's code is (scripts/bench): a start measures the code, not its compiling
            subprocess.run([sys.executable, "-m", "compileall", "-q", f"{where}/src"], check=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            yield None
            return
        yield Path(where) / "src"


@contextmanager
def _serving(
    config: Path, port: int, env: dict[str, str], launcher: tuple[str, ...] = ("-m", "meta_agent")
) -> Iterator[subprocess.Popen[bytes]]:
    """`meta-agent serve --transport http` in its own process (the code on PYTHONPATH, where `env` sets it), started
    by `launcher`, what follows the interpreter on the command line before the command's arguments."""
    args = ["serve", "--transport", "http", "--port", str(port), "--config", str(config), "--log-level", "warning"]
    server = subprocess.Popen([sys.executable, *launcher, *args], env=env)
    try:
        yield server
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextmanager
def _bare(port: int, base_url: str, workers: int) -> Iterator[subprocess.Popen[bytes]]:
    """benchmarks/bare_agent.py serving on `port`, in `workers` processes."""
    args = ["--port", str(port), "--base-url", base_url, "--workers", str(workers)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    server = subprocess.Popen([sys.executable, str(Path(__file__).parent / "bare_agent.py"), *args], env=env)
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


async def _burst(url: str, mode: str) -> tuple[float, float]:
    """The wall time (ms) of CALLS calls at once, and of one such call alone just before, on one connection."""
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,
    ):
        results: list[t.CallToolResult] = []

        async def one(i: int) -> None:
            results.append(await client.call_tool("agent", {"task": f"echo hello ({i})", "tools": ["echo.*"]}))

        await one(-1)  # warm: the model client and the child's connection exist before the clock starts
        started = clock()
        await one(-2)  # the yardstick: one such run alone
        alone = clock() - started
        results.clear()
        started = clock()
        async with anyio.create_task_group() as tg:
            for i in range(CALLS):
                tg.start_soon(one, i)
        elapsed = clock() - started
    check_burst(results)
    return elapsed * 1000, alone * 1000


def check_burst(results: list[t.CallToolResult]) -> None:
    """Every call of a burst ended with its final answer, after its TURNS model turns, and its tool ran."""
    bad = [r for r in results if r.is_error or (r.structured_content or {}).get("stop_reason") != "final"]
    assert len(results) == CALLS and not bad, bad[:1]
    assert all(r.structured_content["usage"]["model_calls"] == TURNS for r in results)  # type: ignore[index]
    assert all(r.structured_content["answer"] == "done: hello" for r in results)  # type: ignore[index]  # the tool ran


async def measure(rounds: int) -> dict[str, Any]:
    """Per server (today's code, and the baseline's where git has it) and per era, the wall time of a burst; and each
    server's CPU per run over all its bursts."""
    per: dict[str, list[float]] = {}
    alone: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory() as state,
        model_endpoint(TURN_DELAY, TURNS - 1) as base_url,
        baseline_source() as baseline,
    ):
        config, state_env = bench_config(state)
        env = {**os.environ, **model_env(base_url), **state_env}
        sources = {OURS: None} | ({THEIRS: baseline} if baseline is not None else {})
        with ExitStack() as stack:
            servers = {}
            for i, (name, source) in enumerate(sources.items()):
                server_env = env if source is None else {**env, "PYTHONPATH": str(source)}
                # a store each: the two codes know different schema versions, and refuse a newer one
                server_env = {**server_env, "META_AGENT_CONVERSATIONS_DB": f"{state}/c{i}.db"}
                port = _free_port()
                servers[name] = (f"http://127.0.0.1:{port}", stack.enter_context(_serving(config, port, server_env)))
            for name, workers in FLOOR.items():
                port = _free_port()
                servers[name] = (f"http://127.0.0.1:{port}", stack.enter_context(_bare(port, base_url, workers)))
            for url, _ in servers.values():
                await _wait_healthy(url)
            before = {name: _cpu(process) for name, (_, process) in servers.items()}
            for _ in range(rounds):
                for era, mode in MODES.items():
                    for name, (url, _) in servers.items():
                        burst, single = await _burst(url, mode)
                        per.setdefault(f"{name}: {era}", []).append(burst)
                        alone.setdefault(f"{name}: {era}", []).append(single)
            runs = rounds * len(MODES) * (CALLS + 2)  # each burst makes a warm-up call and one alone too
            for name, (_, process) in servers.items():
                cpu[name] = (_cpu(process) - before[name]) * 1000 / runs
    return {name: spread(values) for name, values in per.items()} | {
        "server cpu ms per run": cpu,
        "one run alone ms": {name: spread(values) for name, values in alone.items()},
    }


def _cpu(process: subprocess.Popen[bytes]) -> float:
    """The CPU seconds so far, user and system, of the server's processes: the process, and its workers where it
    has them (not its children, the MCP servers it started)."""
    top = psutil.Process(process.pid)
    workers = [p for p in top.children() if "multiprocessing" in " ".join(p.cmdline())]
    return sum(sum(p.cpu_times()[:2]) for p in [top, *workers])
