"""A run whose toolbox is short says so: the servers it could have used that were not ready are in its structured
result (`unavailable_servers`, each with why, as `meta-agent check` says it), in a line of its text, in its first
progress message, and on the stderr of `meta-agent run`, one line each, before the answer.

Real parts: our server in memory behind the SDK's client, real child processes (one that starts, one whose command
does not exist, one whose module is missing), and the real openai SDK against the fake model endpoint."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as t
import pytest
from conftest import FAULT_SERVER, ProgressLog, fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client

from meta_agent.config.servers import ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio

WAIT = 30.0  # generous for a loaded 2-core machine; the calls take well under a second
MISSING_COMMAND = "meta-agent-no-such-command"
MISSING_MODULE = "no_such_module_for_meta_agent"
NOT_READY = "Servers not ready, their tools left out of this run: "


def servers() -> dict[str, ServerEntry]:
    return {
        "f": fault_entry(),
        "gone": ServerEntry(command=MISSING_COMMAND),
        "nomod": ServerEntry(command=sys.executable, args=("-m", MISSING_MODULE)),
        "off": ServerEntry(command=MISSING_COMMAND, disabled=True),  # disabled on purpose: not "short"
    }


@pytest.fixture(scope="module")
async def client(llm_endpoint: FakeLLM) -> AsyncIterator[Client]:
    server = build_server(Settings(model="openai:fake-model"), servers(), openai_env(llm_endpoint))
    async with Client(server) as connected:
        engine = server.engine
        assert engine is not None
        with anyio.fail_after(WAIT):
            await engine.pool.wait_settled()
        yield connected


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[t.CallToolResult, ProgressLog]:
    progress = ProgressLog()
    with anyio.fail_after(WAIT):
        result = await client.call_tool(tool, arguments, progress_callback=progress)
    assert not result.is_error, result.content
    return result, progress


def texts(result: t.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, t.TextContent)]


def assert_short_of_both(unavailable: list[dict[str, Any]]) -> None:
    assert [(server["server"], server["status"]) for server in unavailable] == [
        ("gone", "failed"),  # no retry can mend a command that does not exist
        ("nomod", "restarting"),  # `serve` retries a child that fails otherwise
    ]
    assert unavailable[0]["reason"] == f"command not found: {MISSING_COMMAND}"
    assert f"No module named {MISSING_MODULE}" in unavailable[1]["reason"]
    assert all("\n" not in server["reason"] for server in unavailable)


async def test_an_agent_call_names_the_servers_it_went_without(client: Client, llm: FakeLLM) -> None:
    llm.reply(openai_reply("Done with what there was."))
    result, progress = await call(client, "agent", {"task": "Do it."})
    structured = result.structured_content
    assert structured is not None
    assert_short_of_both(structured["unavailable_servers"])
    # the answer first, then one line saying what was missing and why
    assert texts(result)[0] == "Done with what there was."
    [told] = [text for text in texts(result) if text.startswith(NOT_READY)]
    assert "\n" not in told
    assert f"gone (failed: command not found: {MISSING_COMMAND})" in told
    assert "nomod (restarting: " in told and MISSING_MODULE in told
    first = progress.messages[0]
    assert first.startswith("start · run ") and "gone (failed" in first and "nomod (restarting" in first
    assert "off" not in json.dumps(structured["unavailable_servers"])


async def test_plan_mode_could_use_their_read_only_tools(client: Client, llm: FakeLLM) -> None:
    llm.reply(openai_reply("1. Look."))
    result, _ = await call(client, "plan", {"task": "Plan it."})
    assert result.structured_content is not None
    assert_short_of_both(result.structured_content["unavailable_servers"])


async def test_a_run_that_could_not_use_them_says_nothing(client: Client, llm: FakeLLM) -> None:
    for tool, arguments in (("ask", {"prompt": "Hi?"}), ("agent", {"task": "Echo.", "tools": ["f.*"]})):
        llm.reply(openai_reply("Hello."))
        result, progress = await call(client, tool, arguments)
        assert result.structured_content is not None
        assert "unavailable_servers" not in result.structured_content  # omitted when all it could use were up
        assert texts(result) == ["Hello."]
        assert "not ready" not in progress.messages[0]


async def test_the_output_schema_declares_the_field(client: Client) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    schema = tools["agent"].output_schema
    assert schema is not None
    assert "unavailable_servers" in schema["properties"]
    assert "unavailable_servers" not in schema.get("required", [])


def test_meta_agent_run_prints_each_missing_server_before_the_answer(llm: FakeLLM, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    fault = {"command": sys.executable, "args": [str(FAULT_SERVER)]}
    missing = {"command": sys.executable, "args": ["-m", MISSING_MODULE]}
    config.write_text(json.dumps({"mcpServers": {"f": fault, "gone": {"command": MISSING_COMMAND}, "nomod": missing}}))
    llm.reply(openai_reply("Done."))
    environ = openai_env(llm, model="openai:fake-model", base=os.environ)
    result = subprocess.run(
        [sys.executable, "-m", "meta_agent", "run", "Do it.", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert re.fullmatch(r"start · run [0-9A-Z]{26} · agent with openai:fake-model · \d+ tools", lines[0]), lines
    assert lines[1] == (
        f"not ready · gone (failed): command not found: {MISSING_COMMAND} · its tools are not in this run"
    )
    assert lines[2].startswith("not ready · nomod (failed): ") and f"No module named {MISSING_MODULE}" in lines[2]
    structured = json.loads(result.stdout)
    assert structured["answer"] == "Done."
    assert [server["server"] for server in structured["unavailable_servers"]] == ["gone", "nomod"]
    assert {server["status"] for server in structured["unavailable_servers"]} == {"failed"}
