"""Hostile load on one `meta-agent serve --transport http` (issue 44): 500 `agent` calls at once, after 100 sessions
that were opened and never called. Every call gets its own answer, `/health` answers all along, and the run index
holds every run, done. How fast is benchmarks/'s to say (concurrency.py); this only bounds a hang."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import anyio
import httpx2
import mcp.types as t
import pytest
from conftest import http_serving, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

CALLS = 500
IDLE_SESSIONS = 100
HANG = 180.0  # a bound on the whole burst that only a hang reaches


async def test_a_burst_of_500_runs_after_100_idle_sessions_answers_each_and_health_all_along(
    llm: FakeLLM, tmp_path: Path
) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    store = tmp_path / "state.sqlite3"
    environ = openai_env(llm, model="openai:fake-model", base=os.environ, META_AGENT_CONVERSATIONS_DB=str(store))
    for n in range(CALLS):
        llm.reply(openai_reply(f"answer {n}"), match=f"run {n}.")
    answers: dict[int, t.CallToolResult] = {}
    health: list[int] = []
    with http_serving(config, environ) as (url, _):
        async with (
            httpx2.AsyncClient(timeout=httpx2.Timeout(60, read=HANG)) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as first,
        ):
            idle = [
                await http.post(
                    f"{url}/mcp",
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-11-25",
                            "capabilities": {},
                            "clientInfo": {"name": f"idle-{n}", "version": "0"},
                        },
                    },
                    headers={"accept": "application/json, text/event-stream"},
                )
                for n in range(IDLE_SESSIONS)
            ]
            assert all(response.status_code == 200 and response.headers.get("mcp-session-id") for response in idle)
            assert (await first.list_tools()).tools  # a session opened before the idle ones still serves

            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                burst_done = anyio.Event()

                async def one(n: int) -> None:
                    answers[n] = await client.call_tool("agent", {"task": f"run {n}."})

                async def watch_health() -> None:
                    while not burst_done.is_set():
                        health.append((await http.get(f"{url}/health")).status_code)
                        await anyio.sleep(0.2)  # a probe's pace, not a wait for something to happen

                with anyio.fail_after(HANG):
                    async with anyio.create_task_group() as watcher:
                        watcher.start_soon(watch_health)
                        async with anyio.create_task_group() as calls:
                            for n in range(CALLS):
                                calls.start_soon(one, n)
                        burst_done.set()
    wrong = {
        n: r for n, r in answers.items() if r.is_error or (r.structured_content or {}).get("answer") != f"answer {n}"
    }
    assert len(answers) == CALLS and not wrong, list(wrong.items())[:1]
    assert health and set(health) == {200}
    with sqlite3.connect(store) as database:
        rows = database.execute("select status, count(*) from runs group by status").fetchall()
    assert rows == [("done", CALLS)]
