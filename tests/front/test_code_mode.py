"""Code mode as hosts meet it (docs/code-mode.md): the SDK's real Client in memory, over a real stdio subprocess and
over real HTTP, in both protocol eras; real children (mcp-server-time, our fault server with its mutating tools); the
real openai SDK against a fake model. A program's calls are asked about, refused in plan mode and reported as calls
the model made itself."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
from conftest import (
    FAULT_SERVER,
    TIME_COMMAND,
    ProgressLog,
    ServerLog,
    fault_entry,
    http_serving,
    openai_env,
    processes_with,
)
from fake_llm import FakeLLM, openai_reply
from host_doubles import User, accept, tool_message
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from test_tasks import APPROVAL, connected, start, status

from meta_agent.config.settings import Settings
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio
MODES = {"2026-07-28": "auto", "2025-11-25": "legacy"}
ZONES = [
    "Etc/UTC", "Europe/London", "Europe/Paris", "Europe/Berlin", "Europe/Madrid", "Europe/Rome", "Europe/Oslo",
    "Europe/Athens", "Europe/Kyiv", "Europe/Istanbul", "Asia/Tokyo", "Asia/Seoul", "Asia/Shanghai", "Asia/Kolkata",
    "Asia/Dubai", "Asia/Singapore", "Asia/Jakarta", "Asia/Manila", "Australia/Sydney", "Australia/Perth",
    "Pacific/Auckland", "America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles",
    "America/Toronto", "America/Mexico_City", "America/Sao_Paulo", "Africa/Cairo", "Africa/Nairobi",
]  # fmt: skip
# Thirty calls whose results feed one answer: each zone's own name back, counted, and the first checked.
THIRTY_CALLS = (
    f"zones = {ZONES!r}\n"
    "said = [call_tool('time.get_current_time', {'timezone': zone})['timezone'] for zone in zones]\n"
    "print(len(set(said)), said == zones)\n"
    "said[10]"
)
DELETE = (
    "try:\n"
    "    said = call_tool('f.delete_file', {'path': '/srv/x'})['result']\n"
    "except Exception as error:\n"
    "    said = 'refused: ' + str(error)\n"
    "print(said)"
)


def program(code: str) -> dict[str, Any]:
    return openai_reply(None, ("c1", "run_code", {"code": code}))


async def thirty_calls(client: Client, llm: FakeLLM) -> None:
    """The 30-call program as its model writes it, through `client`: its answer, its progress, its record."""
    llm.reply(program(THIRTY_CALLS))
    llm.reply(openai_reply("30 zones, all answered."))
    progress = ProgressLog()
    result = await client.call_tool("agent", {"task": "zones", "code": True}, progress_callback=progress)
    assert not result.is_error, result.content
    assert tool_message(llm) == "30 True\nAsia/Tokyo"
    assert [tool["function"]["name"] for tool in llm.requests[-2].body["tools"]] == ["run_code", "read_result"]
    structured = result.structured_content
    assert structured is not None and structured["usage"] == structured["usage"] | {"model_calls": 2, "tool_calls": 31}
    [step, _] = structured["steps"]
    assert [call.get("via") for call in step["tool_calls"]] == [None] + ["run_code"] * 30
    assert 'step 1 · call time.get_current_time {"timezone": "Asia/Tokyo"}' in progress.messages
    assert progress.messages[-1] == "done · final (2 model calls, 31 tool calls)"


@pytest.mark.parametrize("era", list(MODES))
@pytest.mark.parametrize(
    ("answer", "said"),
    [(accept("allow_once"), "deleted /srv/x"), (accept("deny"), "refused: the user did not allow f.delete_file")],
    ids=["allowed", "denied"],
)
async def test_a_call_from_code_is_asked_about_and_a_refusal_raises_in_the_program(
    era: str, answer: t.ElicitResult, said: str, llm: FakeLLM
) -> None:
    server = build_server(Settings(model="openai:fake-model", code_mode="on"), {"f": fault_entry()}, openai_env(llm))
    user = User(answer)
    llm.reply(program(DELETE))
    llm.reply(openai_reply("handled"))
    progress = ProgressLog()
    async with Client(server, mode=MODES[era], elicitation_callback=user) as client:
        result = await client.call_tool("agent", {"task": "delete /srv/x"}, progress_callback=progress)
    assert not result.is_error, result.content
    assert user.asked == ['meta-agent wants to run f.delete_file (destructive) with {"path": "/srv/x"}. Allow it?']
    assert tool_message(llm).startswith(said)
    assert 'step 1 · asking the user to allow f.delete_file {"path": "/srv/x"}' in progress.messages


async def test_plan_mode_refuses_a_write_from_code_and_runs_a_read(llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    llm.reply(program(f"print(call_tool('f.echo', {{'text': 'looked'}})['result'])\n{DELETE}"))
    llm.reply(openai_reply("1. Delete /srv/x"))
    async with Client(server) as client:
        result = await client.call_tool("plan", {"task": "plan deleting /srv/x", "code": True})
    assert not result.is_error, result.content
    assert tool_message(llm) == (
        "looked\nrefused: call_tool: 'f.delete_file' is not a tool of this run; plan mode offers read-only tools only;"
        " its tools are: describe_image, f.confirm, f.echo, f.hang, f.huge, f.image, f.peak, f.pid, f.slow,"
        " f.wait_for_file, f.write_stderr, read_result\n"
    )
    tools = {tool.name: tool for tool in (await _tools(server))}
    for name in ("agent", "plan"):
        assert tools[name].input_schema["properties"]["code"]["anyOf"] == [{"type": "boolean"}, {"type": "null"}]


async def _tools(server: Any) -> list[t.Tool]:
    async with Client(server) as client:
        return (await client.list_tools()).tools


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("code") / "servers.json"
    servers = {"time": TIME_COMMAND, "f": {"command": sys.executable, "args": [str(FAULT_SERVER)]}}
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_thirty_calls_over_stdio(mode: str, llm: FakeLLM, config: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "meta_agent", "serve", "--config", str(config)],
        env=openai_env(llm, model="openai:fake-model", base=os.environ),
    )
    async with Client(params, mode=mode) as client:
        await thirty_calls(client, llm)


@pytest.fixture(scope="module")
def http_server(llm_endpoint: FakeLLM, config: Path) -> Iterator[tuple[str, ServerLog]]:
    environ = openai_env(llm_endpoint, model="openai:fake-model", base=os.environ)
    with http_serving(config, environ) as served:
        yield served


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_thirty_calls_over_http(mode: str, http_server: tuple[str, ServerLog], llm: FakeLLM) -> None:
    url, _ = http_server
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,
    ):
        await thirty_calls(client, llm)


async def test_a_spinning_program_holds_neither_health_nor_other_runs_nor_sigterm(
    llm: FakeLLM, config: Path, tmp_path: Path
) -> None:
    """Over real HTTP: while a program spins, /health answers within a second and another caller's run finishes; then
    SIGTERM ends the server (exit 143, which `http_serving` checks) and the program's worker with it."""
    environ = openai_env(llm, model="openai:fake-model", base=os.environ, META_AGENT_CODE_TIME_LIMIT="120")
    llm.reply(program("while True:\n    pass"), match="[spin]")
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "still here"})), match="[other]")
    llm.reply(openai_reply("echoed"), match="[other]")
    workers_before = set(processes_with("bin/monty"))
    spinning = ProgressLog()
    async with anyio.create_task_group() as tg:
        with http_serving(config, environ) as (url, _):

            async def spin() -> None:
                with contextlib.suppress(Exception):  # the server goes away under it
                    async with Client(f"{url}/mcp") as client:
                        await client.call_tool("agent", {"task": "[spin]", "code": True}, progress_callback=spinning)

            tg.start_soon(spin)
            await spinning.until("call run_code", timeout=60)
            async with httpx2.AsyncClient(timeout=1) as http:  # a second is all /health may take
                for _ in range(5):
                    assert (await http.get(f"{url}/health")).status_code == 200
            async with Client(f"{url}/mcp") as other:
                result = await other.call_tool("agent", {"task": "[other]"})
            assert result.content[0].text == "echoed"  # type: ignore[union-attr]
            workers = set(processes_with("bin/monty")) - workers_before
            assert workers, "the program runs in a worker process of its own"
        # SIGTERM, the program still spinning: the server exits 143 (http_serving checks), its caller's call fails
    await until_gone(workers)


async def until_gone(pids: set[int]) -> None:
    with anyio.fail_after(30):
        while pids & set(processes_with("bin/monty")):
            await anyio.sleep(0.05)


async def test_a_task_asks_about_a_call_from_code_through_input_required(llm: FakeLLM) -> None:
    """A 2026-07-28 task (the tasks extension): the program's call waits while the task is `input_required`, and the
    answer given through tasks/update lets it run."""
    llm.reply(program(DELETE.replace("/srv/x", "/tmp/a")))
    llm.reply(openai_reply("finished"))
    async with connected(llm, "2026-07-28", code_mode="on") as raw:
        task_id = await start(raw, "delete /tmp/a")
        asking = await status(raw, task_id, "input_required")
        [(key, request)] = asking["inputRequests"].items()
        assert request["params"]["message"] == APPROVAL
        answer = {key: {"action": "accept", "content": {"decision": "allow_once"}}}
        await raw("tasks/update", {"taskId": task_id, "inputResponses": answer})
        done = await status(raw, task_id, "completed")
    assert done["result"]["content"] == [{"type": "text", "text": "finished"}]
    assert tool_message(llm) == "deleted /tmp/a\n"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_call_from_code_is_asked_about_over_http(
    mode: str, http_server: tuple[str, ServerLog], llm: FakeLLM
) -> None:
    """Over real HTTP in both eras, the mutating fixture's destructive tool from inside a program: asked, then run."""
    url, _ = http_server
    user = User(accept("allow_once"))
    llm.reply(program(DELETE))
    llm.reply(openai_reply("handled"))
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode, elicitation_callback=user) as client,
    ):
        result = await client.call_tool("agent", {"task": "delete /srv/x", "code": True})
    assert not result.is_error, result.content
    assert user.asked == ['meta-agent wants to run f.delete_file (destructive) with {"path": "/srv/x"}. Allow it?']
    assert tool_message(llm) == "deleted /srv/x\n"
