"""Webhooks of servers.json as tools, against a real HTTP receiver on 127.0.0.1 (fixtures/webhook_receiver.py): what
each call sends and what comes back, an agent run through the MCP front with the user asked, trust and modes, the
toolbox resource, a reload, and `meta-agent tools` / `check` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp.types as t
import pytest
from conftest import free_port, openai_env
from fake_llm import FakeLLM, openai_reply
from host_doubles import Heard, User, accept, subscribe, tool_message, toolbox, until_toolbox
from mcp import Client
from webhook_receiver import Receiver

from meta_agent import Engine
from meta_agent.children.webhooks import MAX_ANSWER_BYTES, Webhooks
from meta_agent.config.servers import Servers, WebhookEntry, load_servers, parse_servers
from meta_agent.config.settings import Settings
from meta_agent.core.messages import ModelResponse, ToolCall
from meta_agent.errors import ChildError, ChildTimeout, ChildUnavailable
from meta_agent.front.server import build_server
from meta_agent.providers.scripted import ScriptedProvider

pytestmark = [pytest.mark.anyio, pytest.mark.quick]
HOOK_VALUE = "hv-7d0c2f55e1"  # a header value with no secret-looking variable name: only the webhook makes it one
NOTIFY_PARAMETERS = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


@pytest.fixture
def hooks() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


def notify(hooks: Receiver, **extra: Any) -> dict[str, Any]:
    """The brief's example entry, pointed at the receiver."""
    return {
        "url": f"{hooks.url}/notify",
        "headers": {"X-Hook-Key": "${HOOK_VALUE}"},
        "description": "Post a message to the team channel",
        "parameters": NOTIFY_PARAMETERS,
        **extra,
    }


def loaded(webhooks: dict[str, Any], servers: dict[str, Any] | None = None) -> Servers:
    """A servers.json text read as meta-agent reads it (its `${VAR}`s expanded)."""
    text = json.dumps({"mcpServers": servers or {}, "webhooks": webhooks})
    return parse_servers(text, "servers.json", {"HOOK_VALUE": HOOK_VALUE})


@asynccontextmanager
async def webhooks_of(entries: dict[str, Any]) -> AsyncIterator[Webhooks]:
    hooks = Webhooks(loaded(entries).webhooks)
    try:
        yield hooks
    finally:
        await hooks.aclose()


def text_of(result: t.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, t.TextContent), result
    return block.text


# -- one call: what is sent, what comes back ---------------------------------------------------------------------


async def test_a_post_sends_the_arguments_as_json_with_the_expanded_headers_and_returns_the_json(
    hooks: Receiver,
) -> None:
    hooks.answer({"posted": True, "id": 7})
    async with webhooks_of({"notify": notify(hooks)}) as webhooks:
        result = await webhooks.call("notify", {"text": "deploy done"})
    assert not result.is_error
    assert json.loads(text_of(result)) == {"posted": True, "id": 7}
    [seen] = hooks.received
    assert (seen.method, seen.path, seen.json) == ("POST", "/notify", {"text": "deploy done"})
    assert seen.headers["x-hook-key"] == HOOK_VALUE
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["user-agent"].startswith("meta-agent/")


async def test_a_get_sends_the_arguments_as_query_parameters_beside_those_of_its_url(hooks: Receiver) -> None:
    hooks.answer("3 results", content_type="text/plain; charset=utf-8")
    entry = {"url": f"{hooks.url}/search?source=ci", "method": "get"}
    async with webhooks_of({"search": entry}) as webhooks:
        result = await webhooks.call("search", {"q": "a b&c", "n": 3, "tags": ["x", "y"], "exact": True, "none": None})
    assert text_of(result) == "3 results"
    [seen] = hooks.received
    assert (seen.method, seen.body) == ("GET", b"")
    assert seen.query == [("source", "ci"), ("q", "a b&c"), ("n", "3"), ("tags", "x"), ("tags", "y"), ("exact", "true")]


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
async def test_other_methods_send_a_json_body(hooks: Receiver, method: str) -> None:
    hooks.answer(b"", status=204, content_type="")
    async with webhooks_of({"change": {"url": f"{hooks.url}/items/1", "method": method}}) as webhooks:
        result = await webhooks.call("change", {"state": "closed"})
    assert text_of(result) == "(HTTP 204, no content)"
    assert (hooks.received[0].method, hooks.received[0].json) == (method, {"state": "closed"})


async def test_an_answer_other_than_2xx_is_a_tool_error_with_the_status_and_the_start_of_the_body(
    hooks: Receiver,
) -> None:
    hooks.answer("upstream down\n" + "detail " * 100, status=503)
    hooks.answer({"error": "no such channel"}, status=404)
    async with webhooks_of({"notify": notify(hooks)}) as webhooks:
        down = await webhooks.call("notify", {"text": "x"})
        missing = await webhooks.call("notify", {"text": "x"})
    assert down.is_error and missing.is_error
    said = text_of(down)
    assert said.startswith("the webhook answered HTTP 503 Service Unavailable: upstream down detail detail")
    assert "\n" not in said and len(said) < 300 and said.endswith("…")
    assert text_of(missing) == 'the webhook answered HTTP 404 Not Found: {"error": "no such channel"}'


async def test_a_redirect_is_not_followed(hooks: Receiver) -> None:
    hooks.answer("", status=302, location=f"{hooks.url}/elsewhere")
    async with webhooks_of({"notify": notify(hooks)}) as webhooks:
        result = await webhooks.call("notify", {"text": "x"})
    assert result.is_error
    assert text_of(result).startswith("the webhook answered HTTP 302 Found (a redirect, not followed")
    assert [seen.path for seen in hooks.received] == ["/notify"]


async def test_an_image_comes_back_as_an_image_and_other_binary_is_described(hooks: Receiver) -> None:
    hooks.answer(b"\x89PNG\r\n\x1a\nfake", content_type="image/png")
    hooks.answer(b"\x00\x01\x02", content_type="application/octet-stream")
    async with webhooks_of({"chart": {"url": f"{hooks.url}/chart"}}) as webhooks:
        image = await webhooks.call("chart", {})
        binary = await webhooks.call("chart", {})
    block = image.content[0]
    assert isinstance(block, t.ImageContent) and block.mime_type == "image/png"
    assert text_of(binary) == "[answer: application/octet-stream, 3 bytes, not shown]"


async def test_a_webhook_that_answers_too_late_is_a_timeout_and_the_request_is_abandoned(hooks: Receiver) -> None:
    hooks.answer({"late": True}, hold=True)
    async with webhooks_of({"notify": notify(hooks, timeout=0.5)}) as webhooks:
        with pytest.raises(ChildTimeout) as caught:
            await webhooks.call("notify", {"text": "x"})
    assert str(caught.value) == "webhooks: notify did not answer within 0.5 s; the request was abandoned"
    assert hooks.arrived.is_set()  # it was sent: the receiver held its answer


async def test_a_refused_connection_is_one_line_naming_the_host_and_nothing_was_sent() -> None:
    port = free_port()
    entry = {"url": f"http://127.0.0.1:{port}/hook"}
    async with webhooks_of({"gone": entry}) as webhooks:
        with pytest.raises(ChildUnavailable) as caught:
            await webhooks.call("gone", {})
    message = str(caught.value)
    assert message.startswith(f"webhooks: gone: cannot connect to 127.0.0.1:{port}: ")
    assert message.endswith("; nothing was sent")
    assert "\n" not in message and "/hook" not in message


@pytest.mark.parametrize("chunked", [False, True], ids=["announced", "streamed"])
async def test_an_answer_too_large_is_dropped(hooks: Receiver, chunked: bool) -> None:
    hooks.answer(b"x" * (MAX_ANSWER_BYTES + 1), chunked=chunked)
    async with webhooks_of({"big": {"url": f"{hooks.url}/big"}}) as webhooks:
        with pytest.raises(ChildError) as caught:
            await webhooks.call("big", {})
    assert str(caught.value) == f"webhooks: big answered more than {MAX_ANSWER_BYTES:,} bytes; the answer was dropped"


async def test_a_webhook_removed_or_disabled_by_a_reload_is_not_called(hooks: Receiver) -> None:
    async with webhooks_of({"notify": notify(hooks)}) as webhooks:
        changed = webhooks.update(loaded({"other": notify(hooks), "off": {**notify(hooks), "disabled": True}}).webhooks)
        assert changed == ("notify", "off", "other")
        with pytest.raises(ChildUnavailable, match="notify was removed from the configuration"):
            await webhooks.call("notify", {"text": "x"})
        with pytest.raises(ChildUnavailable, match=r"off is disabled in servers\.json"):
            await webhooks.call("off", {"text": "x"})
    assert hooks.received == []


# -- in a run: trust, modes, the MCP front -----------------------------------------------------------------------


def call_step(alias: str, arguments: dict[str, Any]) -> ModelResponse:
    return ModelResponse(tool_calls=(ToolCall(id="c1", name=alias, arguments=arguments),))


async def test_plan_and_ask_never_see_a_webhook_and_trust_applies_as_to_a_childs_tool(
    hooks: Receiver, tmp_path: Path
) -> None:
    servers = loaded(
        {
            "notify": notify(hooks),
            "deploy": {"url": f"{hooks.url}/deploy", "trust": "always"},
            "wipe": {"url": f"{hooks.url}/wipe", "trust": "never"},
        }
    )
    provider = ScriptedProvider(
        [
            call_step("webhooks__deploy", {"ref": "main"}),
            ModelResponse(text="deployed"),
            call_step("webhooks__wipe", {}),
            ModelResponse(text="not wiped"),
            call_step("webhooks__notify", {"text": "hi"}),
            ModelResponse(text="not told"),
        ]
    )
    settings = Settings(internal_tools="", trace_dir=tmp_path)
    async with Engine(settings, servers, {}, provider=provider) as engine:
        assert engine.toolbox.select(None, "plan") == [] and engine.toolbox.select(None, "ask") == []
        agent = {spec.name: spec for spec in engine.toolbox.select(None, "agent")}
        assert {name: spec.trust for name, spec in agent.items()} == {
            "webhooks.notify": "ask",
            "webhooks.deploy": "always",
            "webhooks.wipe": "never",
        }
        assert agent["webhooks.notify"].description == "Post a message to the team channel"
        assert agent["webhooks.deploy"].description == "Calls the deploy webhook (POST)."
        deployed = await engine.run("deploy", mode="agent")  # always: runs, though nobody can be asked
        wiped = await engine.run("wipe", mode="agent")
        told = await engine.run("tell", mode="agent")  # ask, and this caller cannot be asked
    assert deployed.steps[0].tool_calls[0].ok and deployed.answer == "deployed"
    wipe_error, tell_error = wiped.steps[0].tool_calls[0].error or "", told.steps[0].tool_calls[0].error or ""
    assert "webhooks.wipe is blocked (trust level never" in wipe_error
    assert wipe_error.endswith('a user can allow it with "trust" of webhook "wipe" in servers.json')
    assert "webhooks.notify needs the user's approval" in tell_error
    assert 'set "always" in "trust" of webhook "notify" in servers.json' in tell_error
    assert [(seen.path, seen.json) for seen in hooks.received] == [("/deploy", {"ref": "main"})]


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_an_agent_run_calls_the_webhook_once_the_user_allows_it(
    hooks: Receiver, llm: FakeLLM, tmp_path: Path, era: str
) -> None:
    hooks.answer({"posted": True, "key_seen": HOOK_VALUE})  # an answer that repeats the secret: traces hide it
    server = build_server(
        Settings(model="openai:fake-model", trace_dir=tmp_path), loaded({"notify": notify(hooks)}), openai_env(llm)
    )
    llm.reply(openai_reply(None, ("c1", "webhooks__notify", {"text": "deploy done"})))
    llm.reply(openai_reply("posted"))
    user = User(accept("allow_once"))
    async with Client(server, mode=era, elicitation_callback=user) as client:
        result = await client.call_tool("agent", {"task": "tell the team"})
    assert not result.is_error and result.structured_content
    assert user.asked == [
        'meta-agent wants to run webhooks.notify (open-world) with {"text": "deploy done"}. Allow it?'
    ]
    [seen] = hooks.received
    assert seen.json == {"text": "deploy done"} and seen.headers["x-hook-key"] == HOOK_VALUE
    # the model got the answer, the secret it repeats hidden (the webhook's header values are never shown to it)
    assert json.loads(tool_message(llm)) == {"posted": True, "key_seen": "[redacted]"}
    sent = llm.requests[0].body["tools"]
    offered = next(tool["function"] for tool in sent if tool["function"]["name"] == "webhooks__notify")
    assert offered["parameters"] == NOTIFY_PARAMETERS
    trace = (tmp_path / f"{result.structured_content['run_id']}.jsonl").read_text()
    assert HOOK_VALUE not in trace and "[redacted]" in trace


async def test_a_denied_webhook_is_never_called(hooks: Receiver, llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model"), loaded({"notify": notify(hooks)}), openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "webhooks__notify", {"text": "x"})))
    llm.reply(openai_reply("did not"))
    async with Client(server, mode="legacy", elicitation_callback=User(accept("deny"))) as client:
        await client.call_tool("agent", {"task": "tell the team"})
    assert tool_message(llm).startswith("[error] the user did not allow webhooks.notify (denied)")
    assert hooks.received == []


async def test_the_toolbox_resource_lists_the_webhooks(hooks: Receiver, llm: FakeLLM) -> None:
    servers = loaded({"notify": notify(hooks, timeout=30), "old": {"url": "${UNSET_HOOK_URL}", "disabled": True}})
    server = build_server(Settings(model="openai:fake-model"), servers, openai_env(llm))
    async with Client(server, mode="legacy") as client:
        box = await toolbox(client)
    tools = {tool["name"]: tool for tool in box["tools"] if tool["server"] == "webhooks"}
    assert tools["webhooks.notify"]["enabled"] and tools["webhooks.notify"]["trust"] == "ask"
    assert tools["webhooks.notify"]["alias"] == "webhooks__notify"
    assert tools["webhooks.notify"]["annotations"]["readOnlyHint"] is False
    assert tools["webhooks.old"]["enabled"] is False and tools["webhooks.old"]["withheld"] == "disabled in servers.json"
    origin = hooks.url  # the path is not shown: it may be the webhook's secret
    assert box["webhooks"] == [
        {
            "name": "notify",
            "tool": "webhooks.notify",
            "method": "POST",
            "origin": origin,
            "timeout": 30,
            "enabled": True,
        },
        {"name": "old", "tool": "webhooks.old", "method": "POST", "origin": None, "timeout": 60, "enabled": False},
    ]


def names(box: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in box["tools"] if tool["enabled"]}


async def test_a_reload_that_adds_a_webhook_changes_the_toolbox_and_subscribers_hear_it(
    hooks: Receiver, llm: FakeLLM, tmp_path: Path
) -> None:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {}}))
    env = {**os.environ, "HOOK_VALUE": HOOK_VALUE}
    server = build_server(
        Settings(model="openai:fake-model"), load_servers(path, env), openai_env(llm, base=env), config_file=path
    )
    heard = Heard()
    async with Client(server, mode="legacy", message_handler=heard) as client:
        await subscribe(client)
        assert "webhooks.notify" not in names(await toolbox(client))
        path.write_text(json.dumps({"mcpServers": {}, "webhooks": {"notify": notify(hooks)}}))
        await until_toolbox(client, lambda box: "webhooks.notify" in names(box), heard)
        assert server.engine is not None
        result = await server.engine.pool.children["webhooks"].call("notify", {"text": "x"})
        assert not result.is_error and hooks.received[0].headers["x-hook-key"] == HOOK_VALUE
        path.write_text(json.dumps({"mcpServers": {}}))
        await until_toolbox(client, lambda box: "webhooks.notify" not in names(box), heard)


# -- the command line --------------------------------------------------------------------------------------------


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meta_agent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


@pytest.mark.processes
def test_tools_and_check_show_the_webhooks(hooks: Receiver, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    webhooks = {
        "notify": notify(hooks, timeout=30),
        "deploy": {"url": f"{hooks.url}/deploy/secret-path?key=1", "method": "get", "trust": "always"},
        "old": {"url": "${UNSET_HOOK_URL}", "disabled": True},
    }
    config.write_text(json.dumps({"webhooks": webhooks}))
    env = {"HOOK_VALUE": HOOK_VALUE, "META_AGENT_INTERNAL_TOOLS": ""}

    tools = run_cli("tools", "--config", str(config), env=env)
    assert tools.returncode == 0, tools.stderr
    lines = tools.stdout.splitlines()
    start = lines.index("webhooks · 3 webhooks")
    assert lines[start + 1].split() == ["webhooks.notify", "open-world", "ask", "(not", "read-only)"]
    assert lines[start + 2].split() == ["webhooks.deploy", "open-world", "always", "(trust", "'deploy')"]
    assert lines[start + 3] == "  webhooks.old  withheld: disabled in servers.json"

    check = run_cli("check", "--config", str(config), env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    lines = check.stdout.splitlines()
    assert lines[0] == f"{config}: 0 servers, 3 webhooks"
    assert lines[1].split() == [
        "webhooks.notify",
        "valid",
        "POST",
        hooks.url,
        "timeout",
        "30",
        "s",
        "trust",
        "ask",
        "(default)",
    ]
    assert lines[2].split() == ["webhooks.deploy", "valid", "GET", hooks.url, "timeout", "60", "s", "trust", "always"]
    assert lines[3].split() == ["webhooks.old", "disabled"]
    assert "secret-path" not in check.stdout
    assert hooks.received == []  # check validates, never calls


@pytest.mark.processes
def test_a_bad_webhook_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"webhooks": {"notify": {"url": "http://127.0.0.1:9/x", "metod": "GET"}}}))
    result = run_cli("check", "--config", str(config), env={})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"meta-agent: {config}: webhooks.notify.metod: unknown key 'metod' (did you mean 'method'?)"
    )


def test_an_entry_holds_the_defaults() -> None:
    entry = WebhookEntry(url="https://hooks.example/x")
    assert (entry.method, entry.timeout, entry.trust, entry.disabled) == ("POST", 60.0, None, False)
    assert entry.parameters == {"type": "object", "properties": {}}
    assert WebhookEntry(url="https://u:p@hooks.example:8443/a/b?c=d").origin == "https://hooks.example:8443"
    [tool] = Webhooks({"x": entry}).tools
    assert tool.annotations == t.ToolAnnotations(read_only_hint=False, open_world_hint=True)
