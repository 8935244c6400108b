"""Cold start: from spawning a server on stdio to its first `tools/list` answer, and to all its tools listed, with 1,
4 and 8 echo children; next to a bare one-tool MCPServer and FastMCP's multi-server proxy of the same children,
interleaved round by round.

The two moments differ by server. meta-agent answers before its children are ready (its own tools need none of
them), and has every child's tools once all its children are ready (read from its toolbox resource). FastMCP's proxy
answers its first `tools/list` only once every child has started, so its first answer is also all its tools listed.
A bare server has one tool and no children: both moments are one. Like is compared with like: first answer with
first answer, all tools listed with all tools listed."""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import anyio
from common import HERE, QUIET, bench_config, clock, spread
from concurrency import baseline_source
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

CHILDREN = (1, 4, 8)
READY_TIMEOUT = 120
# The code before the OpenTelemetry SDK set-up and the GenAI spans and metrics (issue 35): with telemetry off, the
# first answer is to be what it was then.
BEFORE_TELEMETRY = "94e2ed7"
TELEMETRY_ON = "meta-agent, 1 children, telemetry on"
BEFORE = f"meta-agent at {BEFORE_TELEMETRY} (before telemetry), 1 children"
# Telemetry configured: the SDK and its OTLP exporters are imported and set up before the first answer. The
# collector (a port nothing listens on) is never reached before it: spans leave in batches, from a thread.
OTEL_ON = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
    "OTEL_BSP_SCHEDULE_DELAY": "60000",
    "OTEL_METRIC_EXPORT_INTERVAL": "60000",
}


async def _first_answer(args: list[str]) -> float:
    started = clock()
    params = StdioServerParameters(command=sys.executable, args=args)
    async with Client(stdio_client(params, errlog=QUIET)) as client:
        await client.list_tools()
        return clock() - started


async def bare() -> dict[str, float]:
    first = await _first_answer([str(HERE / "bare_server.py")])
    return {"first answer": first}


async def meta_agent(children: int, extra: dict[str, str] | None = None) -> dict[str, float]:
    """meta-agent's first answer and all its children ready; `extra`: more environment (PYTHONPATH for other code,
    OTEL_* variables)."""
    with tempfile.TemporaryDirectory() as state:
        config, env = bench_config(state, children=children)
        args = ["-m", "meta_agent", "serve", "--config", str(config), "--log-level", "error"]
        started = clock()
        params = StdioServerParameters(command=sys.executable, args=args, env=env | (extra or {}))
        # a configured exporter whose collector is away says so at the end, where the client stops it: not shown
        async with Client(stdio_client(params, errlog=QUIET if extra else sys.stderr)) as client:
            await client.list_tools()
            first = clock() - started
            with anyio.fail_after(READY_TIMEOUT):
                while True:  # a benchmark may poll: it measures, it does not synchronise a test
                    toolbox = json.loads((await client.read_resource("meta-agent://toolbox")).contents[0].text)
                    if all(server["status"] == "ready" for server in toolbox["servers"]):
                        break
                    await anyio.sleep(0.005)
            ready = clock() - started
    return {"first answer": first, "all children ready": ready}


async def fastmcp(children: int) -> dict[str, float]:
    first = await _first_answer([str(HERE / "fastmcp_proxy.py"), str(children)])
    return {"first answer": first}


# What `meta-agent serve` imports before it can answer, next to what a bare MCPServer imports: the part of the
# first-answer gap that is importing.
SERVE_IMPORTS = (
    "import meta_agent.cli.main, meta_agent.cli.serving, meta_agent.front.server, meta_agent.front.stdio.serve"
)
BARE_IMPORTS = "from mcp.server import MCPServer"


# The dataclasses those imports make beyond a bare server's, timed as they are made (Python's dataclasses.py builds
# each class's generated methods from source: on 3.11 one compile per method).
DATACLASSES = f"""
import dataclasses, time
{BARE_IMPORTS}
spent, made, process = 0.0, 0, dataclasses._process_class
def timed(*args, **kwargs):
    global spent, made
    started = time.perf_counter()
    try:
        return process(*args, **kwargs)
    finally:
        spent += time.perf_counter() - started
        made += 1
dataclasses._process_class = timed
{SERVE_IMPORTS}
print(made, spent)
"""


async def _dataclasses() -> tuple[int, float]:
    """How many dataclasses `serve`'s imports make beyond a bare server's, and the seconds making them took."""
    done = await anyio.run_process([sys.executable, "-c", DATACLASSES])
    made, spent = done.stdout.decode().split()[-2:]
    return int(made), float(spent)


async def _imports(code: str) -> float:
    """Seconds a new interpreter takes to run `code`, timed inside it: its own start and exit are not counted."""
    timed = f"import time\nstarted = time.perf_counter()\n{code}\nprint(time.perf_counter() - started)"
    done = await anyio.run_process([sys.executable, "-c", timed])
    return float(done.stdout.decode().split()[-1])


async def measure(rounds: int) -> dict[str, Any]:
    per: dict[str, list[float]] = {}

    def add(system: str, figures: dict[str, float]) -> None:
        for what, seconds in figures.items():
            per.setdefault(f"{system}: {what}", []).append(seconds * 1000)

    ratios: dict[str, list[float]] = {}
    listed: dict[str, list[float]] = {}
    telemetry: dict[str, list[float]] = {}
    with baseline_source(BEFORE_TELEMETRY) as before:
        for _ in range(rounds):
            yardstick = await bare()
            add("bare MCPServer", yardstick)
            for n in CHILDREN:
                ours = await meta_agent(n)
                add(f"meta-agent, {n} children", ours)
                add(f"FastMCP 4.1 proxy, {n} children", await fastmcp(n))
                theirs = per[f"FastMCP 4.1 proxy, {n} children: first answer"][-1] / 1000
                first = ours["first answer"] / yardstick["first answer"]
                ratios.setdefault(f"meta-agent, {n} children", []).append(first)
                listed.setdefault(f"{n} children", []).append(ours["all children ready"] / theirs)
            # beside the 1-child start of this round: telemetry on, and the code before telemetry (where git has it)
            off = per["meta-agent, 1 children: first answer"][-1]
            on = (await meta_agent(1, OTEL_ON))["first answer"] * 1000
            add(TELEMETRY_ON, {"first answer": on / 1000})
            telemetry.setdefault("telemetry on / telemetry off", []).append(on / off)
            if before is not None:
                then = (await meta_agent(1, {"PYTHONPATH": str(before)}))["first answer"] * 1000
                add(BEFORE, {"first answer": then / 1000})
                telemetry.setdefault("telemetry off / before telemetry", []).append(off / then)
            add("imports of meta-agent serve", {"seconds": await _imports(SERVE_IMPORTS)})
            add("imports of a bare MCPServer", {"seconds": await _imports(BARE_IMPORTS)})
            made, spent = await _dataclasses()
            add("dataclasses of meta-agent serve's imports", {"seconds": spent})
            per.setdefault("dataclasses of meta-agent serve's imports: made", []).append(made)
    figures: dict[str, Any] = {name: spread(values) for name, values in per.items()}
    return figures | {
        "first answer / bare, per round": {name: spread(v) for name, v in ratios.items()},
        "all tools listed, meta-agent / FastMCP, per round": {name: spread(v) for name, v in listed.items()},
        "telemetry, 1 child's first answer, per round": {name: spread(v) for name, v in telemetry.items()},
    }
