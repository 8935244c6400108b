"""One-shot: `meta-agent run` of a one-tool task end to end (a new process, its child, two turns of a model endpoint
on 127.0.0.1 that answers at once, the answer on stdout) against a bare SDK client script that starts the same child
and makes the same call, and against the same task run by the OpenAI Agents SDK and by pydantic-ai (each its own
script, the same child and model endpoint), interleaved round by round.

Every command must show that the tool ran: the bare script prints the tool's answer ("hello"); the agents print the
model's final answer, which quotes the tool result it was sent ("done: hello"), so a run whose tool call failed or
never happened does not count."""

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


def _timed(args: list[str], env: dict[str, str], answer: str) -> float:
    started = clock()
    done = subprocess.run(args, cwd=HERE, env=env, capture_output=True, text=True, timeout=120, check=False)
    elapsed = clock() - started
    last = done.stdout.strip().splitlines()[-1:] or [""]
    assert done.returncode == 0 and last[0].strip() == answer, (args, done.stdout[-500:], done.stderr[-2000:])
    return elapsed * 1000


BARE = "bare SDK client script"


def measure(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as state, model_endpoint() as base_url:
        config, state_env = bench_config(state)
        env = {**os.environ, **model_env(base_url), **state_env}
        run = [sys.executable, "-m", "meta_agent", "run", "Echo hello.", "--config", str(config), "--tools", "echo.*"]
        commands = {
            BARE: ([sys.executable, "-c", BARE_CLIENT], "hello"),
            "meta-agent run": (run, "done: hello"),
            "OpenAI Agents SDK script": ([sys.executable, str(HERE / "one_shot_agents_sdk.py")], "done: hello"),
            "pydantic-ai script": ([sys.executable, str(HERE / "one_shot_pydantic_ai.py")], "done: hello"),
        }
        per: dict[str, list[float]] = {name: [] for name in commands}
        ratios: dict[str, list[float]] = {name: [] for name in commands if name != BARE}
        for _ in range(rounds):
            for name, (args, answer) in commands.items():
                per[name].append(_timed(args, env, answer))
            for name, values in ratios.items():
                values.append(per[name][-1] / per[BARE][-1])
    return {name: spread(values) for name, values in per.items()} | {
        "ratio to the bare script, per round": {name: spread(values) for name, values in ratios.items()}
    }
