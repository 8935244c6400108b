"""OpenAI's Responses API: which OpenAI-compatible models speak it, the turns of a run with reasoning items carried
from turn to turn (encrypted, nothing stored), reasoning summaries as thinking, reasoning tokens in the usage, and
answers that are not the wire format. Through the real openai SDK against the fake endpoint, strict as OpenAI is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, anthropic_reply, error_body, responses_reply
from mcp.client import Client
from wire_rules import messages_problems, responses_problems

from meta_agent.config.settings import Settings
from meta_agent.core.messages import ModelRequest, UserMessage
from meta_agent.errors import ProviderError, ProviderRateLimited, ProviderUnavailable
from meta_agent.front.server import build_server
from meta_agent.providers.factory import make_provider
from meta_agent.providers.openai import OpenAIProvider
from meta_agent.providers.openai_responses import OpenAIResponsesProvider
from meta_agent.records.transcripts import decode

pytestmark = [pytest.mark.anyio, pytest.mark.quick]
THINKING_TURNS = [
    responses_reply(
        "let me look",
        ("call_1", "f__echo", {"text": "a"}),
        ("call_2", "f__echo", {"text": "b"}),
        reasoning=(("I should echo twice.", "ENC-1"),),
        usage=(40, 20, 12),
    ),
    responses_reply(None, ("call_3", "f__echo", {"text": "c"}), reasoning=(("", "ENC-2"),), usage=(60, 10, 4)),
    responses_reply("echoed a, b and c", reasoning=(("All three are back.", "ENC-3"),), usage=(80, 6, 2)),
]


@pytest.mark.parametrize(
    ("spec", "environ", "forced", "expected"),
    [
        ("openai:gpt-5.5", {"OPENAI_API_KEY": "sk-x"}, None, OpenAIResponsesProvider),
        (
            "openai:gpt-5.5",
            {"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "https://api.openai.com/v1"},
            None,
            OpenAIResponsesProvider,
        ),
        ("openai:qwen", {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}, None, OpenAIProvider),
        ("openai:qwen", {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}, "responses", OpenAIResponsesProvider),
        ("openai:gpt-5.5", {"OPENAI_API_KEY": "sk-x"}, "chat", OpenAIProvider),
        ("ollama:qwen3", {}, None, OpenAIProvider),
        ("ollama:qwen3", {}, "responses", OpenAIProvider),  # the setting is openai:'s
        ("gemini:gemini-2.5-flash", {"GEMINI_API_KEY": "g"}, None, OpenAIProvider),
    ],
)
async def test_openai_itself_speaks_responses_and_other_servers_chat_unless_told(
    spec: str, environ: dict[str, str], forced: Any, expected: type
) -> None:
    provider = make_provider(spec, environ, openai_api=forced)
    try:
        assert type(provider) is expected
    finally:
        await provider.aclose()


@pytest.mark.processes
async def test_reasoning_items_go_back_encrypted_and_summaries_are_thinking(tmp_path: Path) -> None:
    with FakeLLM(strict=True) as llm:
        for reply in THINKING_TURNS:
            llm.reply(reply)
        settings = Settings(model="openai:gpt-5.5", openai_api="responses", trace_dir=tmp_path)
        async with Client(build_server(settings, {"f": fault_entry()}, openai_env(llm))) as client:
            progress: list[str] = []

            async def heard(_p: float, _t: float | None, message: str | None) -> None:
                progress.append(message or "")

            result = await client.call_tool("agent", {"task": "echo a, b, c"}, progress_callback=heard)
    assert not result.is_error, result.content
    out = result.structured_content
    assert out is not None and out["answer"] == "echoed a, b and c"
    assert out["usage"]["reasoning_tokens"] == 12 + 4 + 2
    assert (out["usage"]["input_tokens"], out["usage"]["output_tokens"]) == (180, 36)
    assert out["usage"]["models"] == {"openai:gpt-5.5": 3}
    assert "step 1 · thinking: I should echo twice." in progress
    assert "step 3 · thinking: All three are back." in progress
    bodies = [seen.body for seen in llm.requests]
    assert [seen.path for seen in llm.requests] == ["/v1/responses"] * 3
    assert [responses_problems(body) for body in bodies] == [[]] * 3
    first, _, last = bodies
    assert first["store"] is False and first["include"] == ["reasoning.encrypted_content"]
    echo = next(tool for tool in first["tools"] if tool["name"] == "f__echo")
    assert first["instructions"] and echo["type"] == "function" and echo["parameters"]["type"] == "object"
    kinds = [item.get("type", item.get("role")) for item in last["input"]]
    assert kinds == [
        "user",
        "reasoning",
        "assistant",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    reasoning = [item for item in last["input"] if item.get("type") == "reasoning"]
    assert reasoning == [
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "I should echo twice."}],
            "encrypted_content": "ENC-1",
        },
        {"type": "reasoning", "summary": [], "encrypted_content": "ENC-2"},
    ]
    outputs = [item["output"] for item in last["input"] if item.get("type") == "function_call_output"]
    assert outputs == ["a", "b", "c"]


@pytest.mark.processes
async def test_a_conversation_sends_each_vendor_only_its_own_reasoning(tmp_path: Path) -> None:
    """Responses, then Anthropic, then Responses again on one conversation: encrypted reasoning never goes to
    Anthropic, Anthropic's signed thinking never to OpenAI; both endpoints refuse what their vendors refuse."""
    conversation: dict[str, str] = {}
    with FakeLLM(strict=True) as llm:
        environ = {**openai_env(llm), "ANTHROPIC_BASE_URL": llm.url, "ANTHROPIC_API_KEY": "sk-ant"}
        turns = [
            ("openai:gpt-5.5", [THINKING_TURNS[0], responses_reply("done", reasoning=(("ok", "ENC-9"),))]),
            (
                "anthropic:claude-sonnet-5-5",
                [
                    anthropic_reply(
                        {"type": "thinking", "thinking": "hm", "signature": "SIG-1"},
                        {"type": "tool_use", "id": "toolu_1", "name": "f__echo", "input": {"text": "z"}},
                    ),
                    anthropic_reply({"type": "text", "text": "fine"}),
                ],
            ),
            ("openai:gpt-5.5", [responses_reply("all done")]),
        ]
        for model, replies in turns:
            for reply in replies:
                llm.reply(reply)
            settings = Settings(
                model=model, openai_api="responses", conversations_db=tmp_path / "c.db", trace_dir=tmp_path
            )
            async with Client(build_server(settings, {"f": fault_entry()}, environ)) as client:
                result = await client.call_tool("agent", {"task": f"go on with {model}", **conversation})
            assert not result.is_error, result.content
            assert result.structured_content is not None
            conversation = {"conversation_id": result.structured_content["conversation_id"]}
    responses = [seen.body for seen in llm.requests if seen.path == "/v1/responses"]
    messages = [seen.body for seen in llm.requests if seen.path == "/v1/messages"]
    assert [responses_problems(body) for body in responses] == [[]] * 3
    assert [messages_problems(body) for body in messages] == [[]] * 2
    assert "ENC-" not in str(messages)
    assert "SIG-1" not in str(responses[-1])
    encrypted = [item["encrypted_content"] for item in responses[-1]["input"] if item.get("type") == "reasoning"]
    assert encrypted == ["ENC-1", "ENC-9"]
    signed = [b for m in messages[-1]["messages"] if isinstance(m["content"], list) for b in m["content"]]
    assert [b["signature"] for b in signed if b["type"] == "thinking"] == ["SIG-1"]


def test_a_conversation_saved_before_origins_were_recorded_still_loads() -> None:
    stored = (
        '[{"role": "user", "parts": [{"text": "hi", "kind": "text"}]},'
        ' {"role": "assistant", "text": "hello", "tool_calls": [],'
        ' "thinking": [{"text": "hm", "signature": "sig", "redacted": false, "kind": "thinking"}]}]'
    )
    transcript = decode("01K00000000000000000000000", stored)
    thinking = transcript[1].thinking  # type: ignore[union-attr]
    assert thinking[0].signature == "sig" and thinking[0].origin is None


async def ask(llm: FakeLLM, model: str = "gpt-5.5") -> Any:
    provider = make_provider(f"openai:{model}", openai_env(llm), openai_api="responses")
    try:
        return await provider.complete(ModelRequest(system="s", messages=(UserMessage.of("q"),)))
    finally:
        await provider.aclose()


async def test_a_model_without_reasoning_is_not_asked_for_it(llm: FakeLLM) -> None:
    llm.reply(responses_reply("hi", usage=(3, 2, 0)))
    response = await ask(llm, "gpt-4.1")
    assert response.text == "hi" and response.usage.reasoning_tokens == 0
    body = llm.requests[0].body
    assert "reasoning" not in body and "include" not in body


@pytest.mark.parametrize(
    ("error", "kind", "text"),
    [
        ({"code": "server_error", "message": "boom"}, ProviderUnavailable, "the response failed (server_error): boom"),
        ({"code": "rate_limit_exceeded", "message": "slow down"}, ProviderRateLimited, "rate limited: slow down"),
        ({"code": "invalid_prompt", "message": "no"}, ProviderError, "the response failed (invalid_prompt): no"),
    ],
)
async def test_a_failed_response_is_the_providers_error(
    llm: FakeLLM, error: dict[str, str], kind: type, text: str
) -> None:
    llm.reply({**responses_reply(None), "status": "failed", "error": error})
    with pytest.raises(kind) as caught:
        await ask(llm)
    assert type(caught.value) is kind and str(caught.value) == f"openai:gpt-5.5: {text}"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"id": "r"}, "no 'output' (the keys are: id)"),
        ({"output": {"type": "message"}}, "output is an object; expected a list"),
        ({"output": [{"type": "function_call", "arguments": "{}"}]}, "output[0].name is missing; expected a string"),
        (
            {"output": [{"type": "message", "content": [{"type": "output_text"}]}]},
            "output[0].content[0].text is missing",
        ),
        ({"output": [], "usage": {"input_tokens": -1}}, "usage.input_tokens is -1"),
    ],
)
async def test_an_answer_that_is_not_the_wire_format_says_where(
    llm: FakeLLM, body: dict[str, Any], problem: str
) -> None:
    llm.reply(body)
    with pytest.raises(ProviderError) as caught:
        await ask(llm)
    assert str(caught.value).startswith("openai:gpt-5.5: the provider's answer was malformed: ")
    assert problem in str(caught.value)


async def test_a_refusal_is_what_the_model_said_and_built_in_tool_items_are_skipped(llm: FakeLLM) -> None:
    message = {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}
    llm.reply({"output": [{"type": "web_search_call", "id": "ws"}, message]})
    response = await ask(llm)
    assert response.text == "I can't." and response.tool_calls == ()


async def test_an_http_error_is_named_as_for_chat(llm: FakeLLM) -> None:
    llm.reply(error_body("model gpt-9 does not exist"), 404)
    with pytest.raises(ProviderError) as caught:
        await ask(llm, "gpt-9")
    assert str(caught.value) == "openai:gpt-9: the request was refused (HTTP 404): model gpt-9 does not exist"
