"""The views across replicas: two `meta-agent serve --transport http` on one PostgreSQL database, a host that renders
MCP Apps on each (the SDK's real Client, one Authorization header: one subject). A run on one replica is read live,
and its approval answered, through the other; a tool switched off through one is left out of a run on the other."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp.types as t
import pytest
from fake_llm import FakeLLM, openai_reply
from host_doubles import call_ids, tool_message
from mcp import Client
from mcp.client.extension import advertise
from mcp.client.streamable_http import streamable_http_client
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from replicas import fault_config, replica, replica_environ
from test_apps import app, pending_of

pytestmark = pytest.mark.anyio
UI = [advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})]


@asynccontextmanager
async def host(url: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": "Bearer same-user"}, timeout=httpx2.Timeout(60, read=300)) as http,
        Client(streamable_http_client(url, http_client=http), extensions=UI) as client,
    ):
        yield client


async def test_a_run_on_one_replica_is_seen_and_answered_through_the_other(
    database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/r"})))
    llm.reply(openai_reply("Done on the first replica."))
    results: list[t.CallToolResult] = []
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        async with host(one) as first, host(other) as second, anyio.create_task_group() as tg:

            async def call() -> None:
                with call_ids(first, "across-1"):
                    results.append(await first.call_tool("agent", {"task": "delete /tmp/r"}))

            tg.start_soon(call)
            run_id, question = await pending_of(second, "across-1")  # the call's id is the subject's, on any replica
            answer = await app(second, "app_answer", run_id=run_id, key=question["key"], decision="approve")
            assert answer["ok"]
        async with host(other) as second:
            seen = await app(second, "app_run", run_id=run_id)
    (result,) = results
    assert result.structured_content["steps"][0]["tool_calls"][0]["ok"] is True  # type: ignore[index]
    assert tool_message(llm) == "deleted /tmp/r"
    assert seen["run"]["status"] == "done" and seen["events"][-1]["kind"] == "run_finished"


async def test_a_tool_switched_off_through_one_replica_is_left_out_on_the_other(
    database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    llm.reply(openai_reply("ok"))
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        async with host(one) as first:
            await app(first, "app_set_tool", name="f.echo", enabled=False)
        async with host(other) as second:
            result = await second.call_tool("agent", {"task": "anything"})
            toolbox = await app(second, "app_toolbox")
    assert not result.is_error
    offered = {tool["function"]["name"] for tool in llm.requests[0].body["tools"]}
    assert "f__echo" not in offered and "f__pid" in offered
    echo = next(tool for tool in toolbox["servers"][0]["tools"] if tool["name"] == "f.echo")
    assert echo["enabled"] is False
