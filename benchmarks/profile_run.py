"""Where a run's CPU goes: `meta-agent serve --transport http` under cProfile through bursts of the concurrency
benchmark (benchmarks/concurrency.py), its own time summed by who spends it. The profile covers the bursts only (not
the start, whose imports would swamp it): benchmarks/profiled_serve.py switches it on and off by signals.

cProfile slows Python code several times over and the C code it calls not at all, so the shares are a map of where
to cut, not a measure: the CPU per run is measured without it, by the concurrency benchmark.
"""

from __future__ import annotations

import os
import pstats
import signal
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from common import HERE, bench_config, model_env
from concurrency import MODES, TURN_DELAY, TURNS, _burst, _free_port, _serving, _wait_healthy
from one_shot import model_endpoint

BURSTS = 2  # of each era
# Who spends the time, by where the code lives: the first group whose marker is in the file's path.
GROUPS = (
    ("meta-agent", ("meta_agent/",)),
    ("MCP SDK (front and child client)", ("/mcp/", "/mcp_types/", "sse_starlette")),
    (
        "model requests (openai SDK, httpx2, aiohttp)",
        ("/openai/", "/anthropic/", "/httpx2/", "/httpcore2/", "/aiohttp/", "/yarl/", "/multidict/"),
    ),
    ("HTTP server (uvicorn, starlette, h11)", ("/uvicorn/", "/starlette/", "/h11/")),
    ("pydantic", ("/pydantic/", "/pydantic_core/")),
    ("anyio and asyncio", ("/anyio/", "/asyncio/", "/sniffio/", "selectors.py")),
    ("JSON", ("/json/",)),
)


def _group(path: str, function: str) -> str:
    if path == "~":  # a built-in: named by what it is
        if "socket" in function or "epoll" in function or "posix" in function:
            return "system calls (sockets, pipes, files)"
        if "pydantic_core" in function:
            return "pydantic"
        return "built-ins"
    for name, markers in GROUPS:
        if any(marker in path for marker in markers):
            return name
    return "other (standard library, structlog, sqlite3, …)"


async def measure() -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as state,
        model_endpoint(TURN_DELAY, TURNS - 1) as base_url,
    ):
        config, state_env = bench_config(state)
        env = {**os.environ, **model_env(base_url), **state_env}
        stats = Path(state) / "serve.prof"
        port = _free_port()
        profiled = {**env, "BENCH_PROFILE_FILE": str(stats)}
        with _serving(config, port, profiled, launcher=(str(HERE / "profiled_serve.py"),)) as server:
            url = f"http://127.0.0.1:{port}"
            await _wait_healthy(url)
            await _burst(url, "auto")  # warm: the model client, its connections and every import of a run
            server.send_signal(signal.SIGUSR1)
            for _ in range(BURSTS):
                for mode in MODES.values():
                    await _burst(url, mode)
            server.send_signal(signal.SIGUSR2)
            with anyio.fail_after(60):
                while not stats.exists():  # a benchmark may poll: it measures, it does not synchronise a test
                    await anyio.sleep(0.05)
        return summary(pstats.Stats(str(stats)))


def summary(stats: pstats.Stats) -> dict[str, Any]:
    """Own time by group, as shares; the functions of ours that spend the most, with their share. Waiting in the
    event loop's `epoll` is not CPU and is left out."""
    own: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    for (path, line, function), (_, calls, own_time, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "epoll" in function or calls == 0:  # a frame already running when profiling began: its time is not known
            continue
        group = _group(path, function)
        own[group] += own_time
        if group == "meta-agent":
            ours[f"{path.split('meta_agent/')[-1]}:{line}({function})"] += own_time
    total = sum(own.values())
    return {
        "shares": {name: seconds / total for name, seconds in own.most_common()},
        "ours": {name: seconds / total for name, seconds in ours.most_common(8)},
    }
