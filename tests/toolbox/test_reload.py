"""A live toolbox: children whose tools change are heard, servers.json is reloaded while meta-agent serves (a change
to the file, or SIGHUP), and hosts subscribed to meta-agent://toolbox hear every change, in both eras and on both
transports."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as t
import psutil
import pytest
from conftest import FAULT_SERVER, Changes, ProgressLog, fault_entry, http_serving, openai_env, pid_alive
from fake_llm import FakeLLM, openai_reply
from host_doubles import Heard, subscribe, toolbox, until_toolbox
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated

from meta_agent import Settings, build_server
from meta_agent.children.pool import ChildPool
from meta_agent.config.servers import load_servers
from meta_agent.front.server import MetaAgentServer
from meta_agent.toolbox import TOOLBOX_URI

pytestmark = pytest.mark.anyio
FAULT = {"command": sys.executable, "args": [str(FAULT_SERVER)]}


def write_config(path: Path, servers: dict[str, Any]) -> None:
    path.write_text(json.dumps({"mcpServers": servers}))


def states(box: dict[str, Any]) -> dict[str, str]:
    return {server["name"]: server["status"] for server in box["servers"]}


def pid_of(result: t.CallToolResult) -> int:
    block = result.content[0]
    assert isinstance(block, t.TextContent), result
    return int(block.text)


@asynccontextmanager
async def serving(path: Path, llm: FakeLLM) -> AsyncIterator[MetaAgentServer]:
    server = build_server(
        Settings(model="openai:fake-model"), load_servers(path, os.environ), openai_env(llm), config_file=path
    )
    yield server


async def test_a_2026_child_whose_tools_change_is_heard_on_its_listen_stream() -> None:
    changes = Changes()
    async with ChildPool({"f": fault_entry()}, on_change=changes) as pool:
        child = pool["f"]
        await changes.until(lambda: child.status.state == "ready")
        assert child.status.protocol_version == "2026-07-28"
        await child.call("grow", {"tool": "fresh"})
        await changes.until(lambda: "fresh" in {tool.name for tool in child.tools})


async def test_an_edit_starts_the_added_stops_the_removed_restarts_the_changed_and_leaves_the_rest(
    tmp_path: Path, llm: FakeLLM
) -> None:
    path = tmp_path / "servers.json"
    write_config(path, {"same": FAULT, "changed": FAULT, "removed": FAULT})
    heard = Heard()
    async with serving(path, llm) as server, Client(server, mode="legacy", message_handler=heard) as client:
        await subscribe(client)
        await until_toolbox(client, lambda box: set(states(box).values()) == {"ready"}, heard)
        assert server.engine is not None
        pool = server.engine.pool
        before = {name: pid_of(await pool[name].call("pid", {})) for name in ("same", "changed", "removed")}

        write_config(path, {"same": FAULT, "changed": {**FAULT, "env": {"X": "1"}}, "added": FAULT})
        box = await until_toolbox(
            client, lambda box: states(box) == {"same": "ready", "changed": "ready", "added": "ready"}, heard
        )
        assert [server["name"] for server in box["servers"]] == ["same", "changed", "added"]  # the file's order
        assert {tool["name"] for tool in box["tools"]} >= {"same.echo", "changed.echo", "added.echo"}
        assert not any(tool["server"] == "removed" for tool in box["tools"])
        assert pid_of(await pool["same"].call("pid", {})) == before["same"]  # untouched: the same process
        assert pid_of(await pool["changed"].call("pid", {})) != before["changed"]
        with anyio.fail_after(30):  # the removed child's process is stopped
            while pid_alive(before["removed"]):
                await anyio.sleep(0.05)
        assert box["config_file"] == {"path": str(path), "problem": None}


async def test_an_invalid_edit_changes_nothing_and_the_toolbox_says_where_until_it_is_fixed(
    tmp_path: Path, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "servers.json"
    write_config(path, {"f": FAULT})
    heard = Heard()
    async with serving(path, llm) as server, Client(server, mode="legacy", message_handler=heard) as client:
        await subscribe(client)
        await until_toolbox(client, lambda box: states(box) == {"f": "ready"}, heard)
        assert server.engine is not None
        pid = pid_of(await server.engine.pool["f"].call("pid", {}))

        write_config(path, {"f": FAULT, "g": {"command": 5}})
        box = await until_toolbox(client, lambda box: box["config_file"]["problem"], heard)
        problem = box["config_file"]["problem"]
        assert problem.startswith(f"{path}: mcpServers.g.command: ")
        assert "the servers configured before go on unchanged" in problem
        assert problem in box["problems"]
        assert states(box) == {"f": "ready"}
        assert pid_of(await server.engine.pool["f"].call("pid", {})) == pid

        write_config(path, {"f": FAULT, "g": FAULT})
        box = await until_toolbox(client, lambda box: states(box) == {"f": "ready", "g": "ready"}, heard)
        assert box["config_file"]["problem"] is None
        assert problem not in box["problems"]


async def test_a_run_keeps_its_tools_and_a_call_to_a_child_removed_meanwhile_is_a_one_line_tool_error(
    tmp_path: Path, llm: FakeLLM
) -> None:
    path = tmp_path / "servers.json"
    write_config(path, {"a": FAULT, "b": FAULT})
    llm.reply(openai_reply(None, ("c1", "b__slow", {"seconds": 3, "steps": 30})))
    llm.reply(openai_reply(None, ("c2", "b__echo", {"text": "again"})))
    llm.reply(openai_reply("done"))
    async with serving(path, llm) as server, Client(server, mode="legacy") as client:
        await until_toolbox(client, lambda box: states(box) == {"a": "ready", "b": "ready"})
        assert server.engine is not None
        progress = ProgressLog()
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                result = await client.call_tool("agent", {"task": "t"}, progress_callback=progress)
                assert not result.is_error

            tg.start_soon(call)
            await progress.until("step 1 · call b.slow")
            write_config(path, {"a": FAULT})
            server.engine.toolbox.request_reload()
            await until_toolbox(client, lambda box: states(box) == {"a": "ready"})
    told = [request.body["messages"][-1]["content"] for request in llm.requests[1:]]
    assert told[0] == "slept 3.0"  # the call in flight ended on the child it began on
    assert told[1] == "[error] b: the server was removed from the configuration"


async def test_a_2026_caller_hears_of_changes_on_its_listen_stream(tmp_path: Path, llm: FakeLLM) -> None:
    path = tmp_path / "servers.json"
    write_config(path, {"f": FAULT})
    async with serving(path, llm) as server, Client(server) as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(resource_subscriptions=[TOOLBOX_URI]) as events:
            write_config(path, {"f": FAULT, "g": FAULT})
            with anyio.fail_after(30):
                async for event in events:
                    assert event == ResourceUpdated(uri=TOOLBOX_URI)
                    if "g" in states(await toolbox(client)):
                        break


async def test_an_unsubscribed_session_hears_nothing_more(tmp_path: Path, llm: FakeLLM) -> None:
    """Subscribing to another resource is accepted (as the conformance suite wants), and it never fires."""
    path = tmp_path / "servers.json"
    write_config(path, {"f": FAULT})
    quiet, loud = Heard(), Heard()
    async with (
        serving(path, llm) as server,
        Client(server, mode="legacy", message_handler=quiet) as first,
        Client(server, mode="legacy", message_handler=loud) as second,
    ):
        assert first.server_capabilities and first.server_capabilities.resources
        assert first.server_capabilities.resources.subscribe
        await subscribe(first, "meta-agent://runs/x")
        await subscribe(first)
        await subscribe(first, TOOLBOX_URI, first.unsubscribe_resource)
        await subscribe(second)
        write_config(path, {"f": FAULT, "g": FAULT})
        await until_toolbox(second, lambda box: states(box) == {"f": "ready", "g": "ready"}, loud)
    assert quiet.count == 0


def server_process(config: Path) -> psutil.Process:
    """The `meta-agent serve` process serving `config` (the SDK client started it; its pid is not handed out)."""
    for process in psutil.process_iter(["cmdline"]):
        if str(config) in (process.info["cmdline"] or []) and "serve" in process.info["cmdline"]:
            return process
    raise AssertionError("no meta-agent serve process")


async def test_sighup_reloads_a_stdio_server_and_its_subscribers_hear_it(tmp_path: Path, llm: FakeLLM) -> None:
    path = tmp_path / "servers.json"
    write_config(path, {"f": FAULT})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "meta_agent", "serve", "--config", str(path)],
        env=openai_env(llm, model="openai:fake-model", base=os.environ),
    )
    heard = Heard()
    async with Client(params, mode="legacy", message_handler=heard) as client:
        await subscribe(client)
        await until_toolbox(client, lambda box: states(box) == {"f": "ready"}, heard)
        process = server_process(path)
        seen = heard.count
        process.send_signal(signal.SIGHUP)  # the file did not change: the reload is the signal's doing
        await heard.more_than(seen)
        assert process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        write_config(path, {"f": FAULT, "g": FAULT})
        await until_toolbox(client, lambda box: states(box) == {"f": "ready", "g": "ready"}, heard)


@pytest.fixture
def http_serve(tmp_path: Path, llm_endpoint: FakeLLM) -> Iterator[tuple[str, Path]]:
    path = tmp_path / "servers.json"
    write_config(path, {"f": FAULT})
    with http_serving(path, openai_env(llm_endpoint, model="openai:fake-model", base=os.environ)) as (url, _):
        yield f"{url}/mcp", path


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_an_http_server_tells_its_subscribers_in_either_era(era: str, http_serve: tuple[str, Path]) -> None:
    url, path = http_serve
    heard = Heard()
    mode = "legacy" if era == "2025-11-25" else "auto"
    async with Client(url, mode=mode, message_handler=heard) as client:
        assert client.protocol_version == era
        await until_toolbox(client, lambda box: states(box) == {"f": "ready"})
        if era == "2025-11-25":
            await subscribe(client)
            write_config(path, {"f": FAULT, "g": FAULT})
            await until_toolbox(client, lambda box: states(box) == {"f": "ready", "g": "ready"}, heard)
            return
        async with client.listen(resource_subscriptions=[TOOLBOX_URI]) as events:
            write_config(path, {"f": FAULT, "g": FAULT})
            with anyio.fail_after(30):
                async for event in events:
                    assert event == ResourceUpdated(uri=TOOLBOX_URI)
                    if states(await toolbox(client)) == {"f": "ready", "g": "ready"}:
                        break
