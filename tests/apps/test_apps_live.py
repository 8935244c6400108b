"""meta-agent's views end to end: a real `meta-agent serve` (over stdio, or over HTTP), the SDK's real Client as the
host's MCP client in both protocol eras, declaring the MCP Apps extension, and the views read from the server
(`resources/read`) and hosted in a real Chromium by the ext-apps SDK's own AppBridge; the fault fixture child and the
real openai SDK against a fake model. What the page shows before and after a run ends, what a click on a toggle, a
trust level or an approval changes in the model's next request and in the child's evidence, hostile text, and the web
console with and without credentials. The screenshots of docs/ are taken here."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
from app_host import hosted_app
from conftest import FAULT_SERVER, fault_entry, openai_env, serving_asgi
from fake_llm import FakeLLM, openai_reply
from host_doubles import call_ids, tool_message
from mcp import Client, StdioServerParameters
from mcp.client.extension import advertise
from mcp.client.streamable_http import streamable_http_client
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID

from meta_agent.config.settings import Settings
from meta_agent.front.http.app import http_app
from meta_agent.front.server import build_server

try:
    from playwright.async_api import Browser, FrameLocator, expect
except ImportError:  # the browser fixture says why, and fails under CI
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("Python's playwright is not installed", allow_module_level=True)

pytestmark = pytest.mark.anyio
UI = [advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})]
ERAS = {"2026-07-28": "auto", "2025-11-25": "legacy"}
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> \x1b[31mred\x1b[0m \u202eevil'
TOKEN = "live-console-token"
expect.set_options(timeout=30_000)


@asynccontextmanager
async def host(transport: str, era: str, llm: FakeLLM, tmp_path: Path) -> AsyncIterator[Client]:
    """The SDK's Client of `era` as a host that renders MCP Apps, on a real meta-agent over `transport`, with the
    fault child `f` and a database of the test's own."""
    state = str(tmp_path / "state.sqlite3")
    if transport == "stdio":
        config = tmp_path / "servers.json"
        config.write_text(json.dumps({"mcpServers": {"f": {"command": sys.executable, "args": [str(FAULT_SERVER)]}}}))
        env = openai_env(llm, model="openai:fake-model", base=os.environ, META_AGENT_CONVERSATIONS_DB=state)
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "meta_agent", "serve", "--config", str(config)], env=env
        )
        async with Client(params, mode=ERAS[era], extensions=UI) as client:
            yield client
        return
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "state.sqlite3")
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm))
    async with (
        serving_asgi(lambda _url: http_app(server, host="127.0.0.1"), 60) as url,
        httpx2.AsyncClient(timeout=httpx2.Timeout(60, read=300)) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=ERAS[era], extensions=UI) as client,
    ):
        yield client


def forwarding(client: Client) -> Any:
    """The host's side of the app's tools/call: its own MCP client's call, as it came back."""

    async def call_tool(name: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        result = await client.call_tool(name, arguments)
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    return call_tool


async def view(client: Client, uri: str) -> str:
    (content,) = (await client.read_resource(uri)).contents
    assert isinstance(content, t.TextResourceContents) and content.mime_type == APP_MIME_TYPE
    return content.text


async def tool_definition(client: Client, name: str) -> dict[str, Any]:
    tool = next(tool for tool in (await client.list_tools()).tools if tool.name == name)
    return tool.model_dump(by_alias=True, mode="json", exclude_none=True)


def status(frame: FrameLocator) -> Any:
    return frame.get_by_role("status").first


@pytest.mark.parametrize("era", list(ERAS))
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_run_view_shows_the_hosts_call_live_and_answers_its_approval(
    transport: str, era: str, browser: Browser, llm: FakeLLM, tmp_path: Path
) -> None:
    llm.reply(openai_reply("Let me echo it first.", ("c1", "f__echo", {"text": HOSTILE})))
    llm.reply(openai_reply(None, ("c2", "f__delete_file", {"path": "/tmp/live"})))
    llm.reply(openai_reply("Deleted /tmp/live as asked."))
    results: list[t.CallToolResult] = []
    async with host(transport, era, llm, tmp_path) as client, anyio.create_task_group() as tg:
        agent = await tool_definition(client, "agent")
        assert agent["_meta"]["ui"]["resourceUri"] == "ui://meta-agent/run"
        html = await view(client, "ui://meta-agent/run")
        context = {"toolInfo": {"id": "host-call-1", "tool": agent}, "theme": "light"}

        async def call() -> None:
            with call_ids(client, "host-call-1"):
                results.append(await client.call_tool("agent", {"task": "delete /tmp/live"}))

        tg.start_soon(call)
        async with hosted_app(browser, html, call_tool=forwarding(client), host_context=context) as app:
            frame = app.frame
            await app.tool_input({"task": "delete /tmp/live"})
            # before the run ends: its steps so far, the hostile text as text, and the question
            await expect(frame.get_by_text("Let me echo it first.")).to_be_visible()
            await expect(frame.get_by_text("f.echo", exact=True)).to_be_visible()
            await expect(frame.get_by_text("␛[31mred␛[0m").first).to_be_visible()
            await expect(frame.get_by_role("button", name="Approve")).to_be_visible()
            await expect(status(frame)).to_contain_text("running")
            assert results == []  # the call waits on the view's answer
            if transport == "stdio" and era == "2026-07-28":
                await app.screenshot(IMAGES / "run-view-asking.png")
            await frame.get_by_role("button", name="Approve").click()
            # after: the answer, the call's result, done
            await expect(frame.get_by_text("Deleted /tmp/live as asked.").first).to_be_visible()
            await expect(status(frame)).to_contain_text("done")
            with anyio.fail_after(60):
                while not results:
                    await anyio.sleep(0.05)
            await app.tool_result(results[0].model_dump(by_alias=True, mode="json", exclude_none=True))
            await expect(status(frame)).to_contain_text("done")
            assert await app.frame_eval("window.__pwned === undefined")
            assert app.opened_links == []
            if transport == "stdio" and era == "2026-07-28":
                await app.screenshot(IMAGES / "run-view.png")
    (result,) = results
    assert not result.is_error, result.content
    assert [call["ok"] for call in result.structured_content["steps"][1]["tool_calls"]] == [True]  # type: ignore[index]
    assert tool_message(llm, 2) == "deleted /tmp/live"  # the child's evidence: it ran, once, after the click


@pytest.mark.parametrize("era", list(ERAS))
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_tool_selector_changes_the_next_runs_tools_and_trust(
    transport: str, era: str, browser: Browser, llm: FakeLLM, tmp_path: Path
) -> None:
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/sel"})))
    llm.reply(openai_reply("Done without asking."))
    async with host(transport, era, llm, tmp_path) as client:
        html = await view(client, "ui://meta-agent/tools")
        opener = await tool_definition(client, "tools")
        context = {"toolInfo": {"id": "open-1", "tool": opener}, "theme": "dark"}
        async with hosted_app(browser, html, call_tool=forwarding(client), host_context=context) as app:
            frame = app.frame
            await app.tool_input({})
            echo = frame.get_by_role("checkbox", name="f.echo")
            await expect(echo).to_be_checked()
            await echo.click()
            await expect(echo).not_to_be_checked()
            await frame.get_by_role("combobox", name="trust for f.delete_file").select_option("always")
            await expect(frame.get_by_role("combobox", name="trust for f.delete_file")).to_have_value("always")
            await app.settle()
            if transport == "stdio" and era == "2026-07-28":
                await app.frame_eval("window.scrollTo(0, 0)")
                await app.screenshot(IMAGES / "tools-view.png")
        # the host's next call: f.echo is not offered; f.delete_file runs without a question (none could be answered)
        result = await client.call_tool("agent", {"task": "delete /tmp/sel"})
    offered = {tool["function"]["name"] for tool in llm.requests[0].body["tools"]}
    assert "f__echo" not in offered and "f__delete_file" in offered
    assert result.structured_content["steps"][0]["tool_calls"][0]["ok"] is True  # type: ignore[index]
    assert tool_message(llm) == "deleted /tmp/sel"


async def test_the_task_box_starts_a_run_and_shows_it(browser: Browser, llm: FakeLLM, tmp_path: Path) -> None:
    llm.reply(openai_reply("Planned: 1. look 2. do."))
    async with host("stdio", "2026-07-28", llm, tmp_path) as client:
        html = await view(client, "ui://meta-agent/tools")
        opener = await tool_definition(client, "tools")
        context = {"toolInfo": {"id": "open-2", "tool": opener}}
        async with hosted_app(browser, html, call_tool=forwarding(client), host_context=context) as app:
            frame = app.frame
            await app.tool_input({})
            await frame.get_by_role("combobox", name="mode").select_option("plan")
            await frame.get_by_role("textbox", name="task").fill("make a plan")
            await frame.get_by_role("button", name="Start").click()
            await expect(frame.get_by_text("Planned: 1. look 2. do.").first).to_be_visible()
            await expect(status(frame)).to_contain_text("done")
    assert [call[1]["mode"] for call in app.calls if call[0] == "app_start"] == ["plan"]
    assert llm.requests[0].body["messages"][-1]["content"].startswith("make a plan")


async def test_the_console_with_and_without_credentials(browser: Browser, llm: FakeLLM, tmp_path: Path) -> None:
    llm.reply(openai_reply("Console answer."))
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "s.sqlite3", http_token=TOKEN)
    server = build_server(settings, {}, openai_env(llm))
    async with serving_asgi(lambda _url: http_app(server, host="127.0.0.1", token=TOKEN), 60) as url:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            run_id = (await client.call_tool("ask", {"prompt": "hello"})).structured_content["run_id"]  # type: ignore[index]
        stranger = await browser.new_context()
        try:
            page = await stranger.new_page()
            await page.goto(f"{url}/ui/runs/{run_id}")
            assert page.url.startswith(f"{url}/ui/sign-in")
            await expect(page.get_by_text("Console answer.")).to_have_count(0)
        finally:
            await stranger.close()
        signed = await browser.new_context(extra_http_headers={"Authorization": f"Bearer {TOKEN}"})
        try:
            page = await signed.new_page()
            await page.goto(f"{url}/ui")
            link = page.get_by_role("link", name=run_id)
            await expect(link).to_be_visible()
            await page.screenshot(path=str(IMAGES / "console-runs.png"))
            await link.click()
            await expect(page.get_by_text("Console answer.").first).to_be_visible()
        finally:
            await signed.close()
