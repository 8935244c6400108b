"""A fallback chain in META_AGENT_MODEL: when a model fails as a provider (unreachable, 5xx, 429, its key refused or
not set) the same turn goes to the next one and the run goes on; the host hears the switch in the progress, the
trace records it, the usage counts each model's calls, and the next run starts with the first model again. A
refused request or a malformed answer is no reason to switch. Through the real MCP client, the real SDKs and the
fake endpoint (strict as the vendors are)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ProgressLog, fault_entry, openai_env
from fake_llm import FakeLLM, anthropic_reply, error_body, openai_reply
from mcp.client import Client
from wire_rules import chat_problem, messages_problems

from meta_agent.config.settings import Settings
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]
CHAIN = "anthropic:claude-sonnet-5-5,openai:fake-model"
FAST_RETRY = {"retry_after_ms": "1"}  # both SDKs honour it: their retries take no time
TRIES = 3  # each SDK tries a failing request three times (two retries) before it gives up


def environ(llm: FakeLLM) -> dict[str, str]:
    return {**openai_env(llm), "ANTHROPIC_BASE_URL": llm.url, "ANTHROPIC_API_KEY": "sk-ant"}


def unavailable(llm: FakeLLM, status: int = 503) -> None:
    for _ in range(TRIES):
        llm.reply(error_body("overloaded", "overloaded_error"), status, **FAST_RETRY)


async def agent(client: Client, task: str, progress: ProgressLog | None = None) -> dict[str, Any]:
    result = await client.call_tool("agent", {"task": task}, progress_callback=progress)
    assert result.structured_content is not None, result.content
    return {**result.structured_content, "is_error": result.is_error, "text": result.content[0].text}  # type: ignore[union-attr]


@pytest.mark.processes
async def test_a_provider_failing_mid_run_hands_the_turn_to_the_next(tmp_path: Path) -> None:
    with FakeLLM(strict=True) as llm:
        llm.reply(anthropic_reply({"type": "tool_use", "id": "toolu_1", "name": "f__echo", "input": {"text": "a"}}))
        unavailable(llm)
        llm.reply(openai_reply("echoed a"))
        settings = Settings(model=CHAIN, trace_dir=tmp_path)
        async with Client(build_server(settings, {"f": fault_entry()}, environ(llm))) as client:
            progress = ProgressLog()
            out = await agent(client, "echo a", progress)
            assert not out["is_error"] and out["answer"] == "echoed a"
            # The next run starts with the first model again.
            llm.reply(anthropic_reply({"type": "text", "text": "back with anthropic"}))
            again = await agent(client, "hello")
    assert again["answer"] == "back with anthropic"
    assert again["usage"]["models"] == {"anthropic:claude-sonnet-5-5": 1}
    assert out["usage"]["model_calls"] == 2
    assert out["usage"]["models"] == {"anthropic:claude-sonnet-5-5": 1, "openai:fake-model": 1}
    messages = progress.messages
    first = f"start · run {out['run_id']} · agent with anthropic:claude-sonnet-5-5 (then openai:fake-model) · "
    assert messages[0].startswith(first)
    switch = "step 2 · anthropic:claude-sonnet-5-5 failed (HTTP 503); going on with openai:fake-model"
    assert messages[messages.index("step 2 · model") + 1] == switch
    assert messages[-1] == "done · final (2 model calls, 1 tool call)"
    # The next model got the whole run so far: the tool call and its result, as its vendor wants them.
    paths = [seen.path for seen in llm.requests]
    assert paths == ["/v1/messages"] * (1 + TRIES) + ["/v1/chat/completions", "/v1/messages"]
    chat = next(seen.body for seen in llm.requests if seen.path == "/v1/chat/completions")
    assert chat_problem(chat) is None
    assert [m["content"] for m in chat["messages"] if m["role"] == "tool"] == ["a"]
    assert all(messages_problems(seen.body) == [] for seen in llm.requests if seen.path == "/v1/messages")
    records = [json.loads(line) for line in (tmp_path / f"{out['run_id']}.jsonl").read_text().splitlines()]
    switched = [record for record in records if record["kind"] == "model_switched"]
    assert len(switched) == 1 and switched[0]["failed"] == "anthropic:claude-sonnet-5-5"
    assert switched[0]["next"] == "openai:fake-model" and "HTTP 503" in switched[0]["error"]
    told = subprocess.run(
        [sys.executable, "-m", "meta_agent", "runs", "show", out["run_id"]],
        env={**os.environ, "META_AGENT_TRACE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"{switch.replace('going on', 'went on')}" in told.stdout.splitlines(), told.stdout + told.stderr


@pytest.mark.parametrize("first", ["gemini:gemini-2.5-flash", "sampling"])
async def test_a_model_that_cannot_be_used_here_is_passed_with_a_notice(first: str) -> None:
    """No GEMINI_API_KEY; a caller that cannot sample."""
    with FakeLLM() as llm:
        llm.reply(openai_reply("from the fallback"))
        settings = Settings(model=f"{first}, openai:fake-model")
        async with Client(build_server(settings, {}, openai_env(llm))) as client:
            progress = ProgressLog()
            out = await agent(client, "hi", progress)
    assert out["answer"] == "from the fallback" and out["usage"]["models"] == {"openai:fake-model": 1}
    notice = f"step 1 · {first} failed (not configured); going on with openai:fake-model"
    assert notice in progress.messages


@pytest.mark.parametrize(
    ("first_answer", "status", "error"),
    [
        (error_body("prompt is too long"), 400, "the request was refused (HTTP 400): prompt is too long"),
        ({"id": "msg", "content": "not blocks"}, 200, "the provider's answer was malformed"),
    ],
)
async def test_a_refused_request_or_a_malformed_answer_ends_the_run_without_switching(
    first_answer: dict[str, Any], status: int, error: str
) -> None:
    with FakeLLM() as llm:
        llm.reply(first_answer, status)
        llm.reply(openai_reply("never asked"))
        settings = Settings(model=CHAIN)
        async with Client(build_server(settings, {}, environ(llm))) as client:
            out = await agent(client, "hi")
    assert out["is_error"] and out["stop_reason"] == "error"
    assert out["text"].startswith(f"anthropic:claude-sonnet-5-5: {error}")
    assert [seen.path for seen in llm.requests] == ["/v1/messages"]


async def test_when_every_model_fails_the_run_ends_with_the_last_ones_error() -> None:
    with FakeLLM() as llm:
        unavailable(llm, 502)
        unavailable(llm, 503)
        settings = Settings(model=CHAIN)
        async with Client(build_server(settings, {}, environ(llm))) as client:
            progress = ProgressLog()
            out = await agent(client, "hi", progress)
    assert out["is_error"] and out["text"].startswith("openai:fake-model: the provider failed (HTTP 503) after retries")
    assert (
        "step 1 · anthropic:claude-sonnet-5-5 failed (HTTP 502); going on with openai:fake-model" in progress.messages
    )
    assert out["usage"]["model_calls"] == 0


@pytest.mark.parametrize(
    ("chain", "error"),
    [
        ("openai:a,,ollama:b", "an empty entry in the fallback chain; separate the models with single commas"),
        ("openai:a,bogus:b", "unknown provider 'bogus'"),
    ],
)
async def test_a_malformed_chain_is_a_tool_error_that_names_the_setting(chain: str, error: str) -> None:
    async with Client(build_server(Settings(model=chain), {}, {"OPENAI_API_KEY": "sk"})) as client:
        result = await client.call_tool("agent", {"task": "hi"})
    assert result.is_error and "META_AGENT_MODEL=" in result.content[0].text  # type: ignore[union-attr]
    assert error in result.content[0].text  # type: ignore[union-attr]
