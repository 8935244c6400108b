"""Requests naming what the server does not have are protocol errors, as the spec says (issue 47): a tool, a prompt or
a resource that does not exist (or, for a tool, that this host is not offered: the apps' tools to a host that shows
no apps) is the JSON-RPC error -32602, naming it on one line, in both eras, and nothing is logged as a server fault;
a method the server does not declare (completion) is -32601. Through the SDK's real client in memory, and in raw
JSON-RPC over HTTP."""

from __future__ import annotations

import logging
from typing import Any

import mcp.types as t
import pytest
from conftest import openai_env, serving_asgi
from fake_llm import FakeLLM
from mcp import Client
from mcp.shared.exceptions import MCPError
from task_hosts import LEGACY, MODERN, Era, caller
from test_tasks import Raw

from meta_agent.config.settings import Settings
from meta_agent.front.http.app import http_app
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

ERAS = {"2025-11-25": "legacy", "2026-07-28": "2026-07-28"}
# (method, params, code, message): what a request gets, the same in both eras
UNKNOWN: list[tuple[str, dict[str, Any], int, str]] = [
    ("tools/call", {"name": "no_such_tool", "arguments": {}}, t.INVALID_PARAMS, "Unknown tool: no_such_tool"),
    ("tools/call", {"name": "app_run", "arguments": {}}, t.INVALID_PARAMS, "Unknown tool: app_run"),
    ("tools/call", {"name": "tools", "arguments": {}}, t.INVALID_PARAMS, "Unknown tool: tools"),
    ("tools/call", {"name": "a\nb\tc", "arguments": {}}, t.INVALID_PARAMS, "Unknown tool: a b c"),
    ("tools/call", {"name": "x" * 10_000, "arguments": {}}, t.INVALID_PARAMS, f"Unknown tool: {'x' * 199}…"),
    ("prompts/get", {"name": "no_such_prompt"}, t.INVALID_PARAMS, "Unknown prompt: no_such_prompt"),
    ("resources/read", {"uri": "meta-agent://nothing"}, t.INVALID_PARAMS, "Unknown resource: meta-agent://nothing"),
    ("resources/read", {"uri": "meta-agent://runs/NOPE"}, t.INVALID_PARAMS, "unknown run 'NOPE'"),
    (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "no_such_prompt"}, "argument": {"name": "a", "value": "b"}},
        t.METHOD_NOT_FOUND,
        "Method not found",
    ),
]
# 2025-11-25 only: a task-augmented call, and subscriptions (2026-07-28 has neither method)
UNKNOWN_2025: list[tuple[str, dict[str, Any], int, str]] = [
    (
        "tools/call",
        {"name": "no_such_tool", "arguments": {}, "task": {}},
        t.INVALID_PARAMS,
        "Unknown tool: no_such_tool",
    ),
    ("tools/call", {"name": "app_start", "arguments": {}, "task": {}}, t.INVALID_PARAMS, "Unknown tool: app_start"),
    (
        "tools/call",
        {"name": "ask", "arguments": {}, "task": {}},
        t.METHOD_NOT_FOUND,
        "ask does not run as a task: call it without `task`",
    ),
    (
        "resources/subscribe",
        {"uri": "meta-agent://nothing"},
        t.INVALID_PARAMS,
        "Unknown resource: meta-agent://nothing",
    ),
    ("resources/unsubscribe", {"uri": "file:///etc/passwd"}, t.INVALID_PARAMS, "Unknown resource: file:///etc/passwd"),
]


def cases(era: str) -> list[tuple[str, dict[str, Any], int, str]]:
    return UNKNOWN + (UNKNOWN_2025 if era == LEGACY else [])


@pytest.mark.parametrize("era", list(ERAS))
async def test_what_does_not_exist_is_a_protocol_error_and_no_fault(
    era: str, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    server = build_server(Settings(model="openai:fake-model"), {}, openai_env(llm))
    answered: list[tuple[int, str]] = []
    with caplog.at_level(logging.WARNING):
        async with Client(server, mode=ERAS[era]) as client:
            raw = Raw(client, modern=era == MODERN)
            for method, params, _, _ in cases(era):
                error = await raw.error(method, params)
                answered.append((error.code, error.message))
            subscribed = await raw("resources/subscribe", {"uri": "meta-agent://runs/ANY"}) if era == LEGACY else {}
    assert answered == [(code, message) for _, _, code, message in cases(era)]
    assert [record.getMessage() for record in caplog.records] == []  # nothing the server logs as going wrong
    assert subscribed == {}  # a run's resource may be subscribed to, whatever the run


async def test_the_sdks_client_is_told_a_tool_does_not_exist(llm: FakeLLM) -> None:
    """The SDK's own `call_tool` raises the protocol error (it returned an `isError` result before)."""
    server = build_server(Settings(model="openai:fake-model"), {}, openai_env(llm))
    for mode in ERAS.values():
        async with Client(server, mode=mode) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("no_such_tool", {})
            with pytest.raises(MCPError) as prompt:
                await client.get_prompt("no_such_prompt")
        assert (refused.value.error.code, refused.value.error.message) == (
            t.INVALID_PARAMS,
            "Unknown tool: no_such_tool",
        )
        assert (prompt.value.error.code, prompt.value.error.message) == (
            t.INVALID_PARAMS,
            "Unknown prompt: no_such_prompt",
        )


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_over_http_the_errors_are_the_same(era: Era, llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model"), {}, openai_env(llm))
    # 2026-07-28 repeats the name in the Mcp-Name header, which cannot hold a line break
    sent = [case for case in cases(era) if era == LEGACY or "\n" not in str(case[1].get("name"))]
    answered: list[tuple[int, str]] = []
    async with (
        serving_asgi(lambda _url: http_app(server, host="127.0.0.1")) as url,
        caller(f"{url}/mcp", era) as host,
    ):
        for method, params, _, _ in sent:
            error = await host.error(method, params)
            answered.append((error["code"], error["message"]))
    assert answered == [(code, message) for _, _, code, message in sent]
