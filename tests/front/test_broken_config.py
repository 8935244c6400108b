"""`meta-agent serve` started by a host on a servers.json it cannot use: it serves anyway, with no children, and says
the one-line error where the person reads it in the host (`initialize`'s instructions, each run's answer, /health);
fixed while serving, the file's children start and the error goes. Real subprocesses, the SDK's real client."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import mcp.types as t
import pytest
from conftest import FAULT_SERVER, http_serving, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client, StdioServerParameters

from meta_agent import __version__
from meta_agent.config.servers import load_servers
from meta_agent.errors import ConfigError
from meta_agent.front.instructions import CONFIG_UNUSABLE, INSTRUCTIONS
from meta_agent.front.tool_results import NOT_READY

pytestmark = [pytest.mark.anyio, pytest.mark.processes]
WAIT = 60
MISSING = "/nonexistent/meta-agent-test-command"
FAULT = {"command": sys.executable, "args": [str(FAULT_SERVER)]}
BROKEN = {
    "trailing-comma": '{"mcpServers": {"f": ' + json.dumps(FAULT) + ",}}\n",
    "unknown-key": json.dumps({"mcpServers": {}, "servers": {"f": FAULT}}),
    "not-json": "mcpServers: f\n",
}


def the_error(config: Path) -> str:
    """What meta-agent says of `config`, as any command would say it."""
    with pytest.raises(ConfigError) as refused:
        load_servers(config, os.environ)
    return str(refused.value)


def text_of(result: t.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, t.TextContent)]


async def ask(client: Client, llm: FakeLLM) -> list[str]:
    llm.reply(openai_reply("hello"))
    with anyio.fail_after(WAIT):
        result = await client.call_tool("ask", {"prompt": "hi"})
    assert not result.is_error, result.content
    return text_of(result)


@pytest.mark.parametrize(
    ("broken", "mode"), [("trailing-comma", "auto"), ("unknown-key", "legacy"), ("not-json", "auto")]
)
async def test_stdio_serves_a_broken_config_and_says_why(broken: str, mode: str, llm: FakeLLM, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(BROKEN[broken])
    error = the_error(config)
    told = f"{CONFIG_UNUSABLE}{error}; meta-agent runs with no child servers until it is fixed"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "meta_agent", "serve", "--config", str(config)],
        env=openai_env(llm, model="openai:fake-model", base=os.environ),
    )
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        assert client.instructions == f"{INSTRUCTIONS} {told}"
        assert await ask(client, llm) == ["hello", told]
        box = json.loads((await client.read_resource("meta-agent://toolbox")).contents[0].text)  # type: ignore[union-attr]
    assert "\n" not in told
    assert box["servers"] == [] and box["config_file"]["problem"] == told.removeprefix(CONFIG_UNUSABLE)


@pytest.fixture
def broken_config(tmp_path: Path) -> Path:
    config = tmp_path / "servers.json"
    config.write_text(BROKEN["trailing-comma"])
    return config


@pytest.fixture
def served(broken_config: Path, llm: FakeLLM) -> Iterator[str]:
    with http_serving(broken_config, openai_env(llm, model="openai:fake-model", base=os.environ)) as (url, _log):
        yield url


async def health(url: str) -> dict[str, object]:
    async with httpx2.AsyncClient() as http:
        answer = await http.get(f"{url}/health")
    assert answer.status_code == 200
    body: dict[str, object] = answer.json()
    return body


async def test_http_serves_a_broken_config_until_it_is_fixed(served: str, broken_config: Path, llm: FakeLLM) -> None:
    """Over HTTP in both eras the error is said as on stdio, and in /health; the file fixed while serving, its
    children start and every one of those says nothing more of it. A child whose command does not exist is `failed`,
    saying so, in /health and in a run's answer."""
    problem = f"{the_error(broken_config)}; meta-agent runs with no child servers until it is fixed"
    told = f"{CONFIG_UNUSABLE}{problem}"
    assert await health(served) == {
        "status": "ok",
        "version": __version__,
        "children": {},
        "errors": {},
        "problems": [problem],
    }
    for mode in ("auto", "legacy"):
        async with Client(f"{served}/mcp", mode=mode) as client:  # type: ignore[arg-type]
            assert client.instructions == f"{INSTRUCTIONS} {told}"
            assert await ask(client, llm) == ["hello", told]

    fixed = {"f": FAULT, "gone": {"command": MISSING}}
    await anyio.Path(broken_config).write_text(json.dumps({"mcpServers": fixed}))
    with anyio.fail_after(WAIT):
        while (now := await health(served))["children"] != {"f": "ready", "gone": "failed"}:
            await anyio.sleep(0.1)  # the server looks at the file every second; /health is polled as a probe would
    assert now["problems"] == [] and now["errors"] == {"gone": f"command not found: {MISSING}"}
    for mode in ("auto", "legacy"):
        async with Client(f"{served}/mcp", mode=mode) as client:  # type: ignore[arg-type]
            assert client.instructions == INSTRUCTIONS
            assert await ask(client, llm) == ["hello"]
    llm.reply(openai_reply("done"))
    async with Client(f"{served}/mcp") as client:
        with anyio.fail_after(WAIT):
            answer = text_of(await client.call_tool("agent", {"task": "go"}))
    assert answer == ["done", f"{NOT_READY}gone (failed: command not found: {MISSING})"]
