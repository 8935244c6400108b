"""Provider adapters: the real openai and anthropic SDKs over real HTTP to a fake endpoint on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import fault_entry, free_port, openai_env, time_entry
from fake_llm import FakeLLM, anthropic_reply, error_body, openai_reply
from mcp import Client
from wire_rules import chat_problem, messages_problems

from meta_agent.children.pool import ChildPool
from meta_agent.config.settings import Settings
from meta_agent.core.loop import RunRequest, run
from meta_agent.core.messages import (
    AssistantMessage,
    ImagePart,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolSchema,
    Usage,
    UserMessage,
)
from meta_agent.errors import (
    ModelNotConfigured,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from meta_agent.front.server import build_server
from meta_agent.providers.factory import make_provider, resolve_provider
from meta_agent.providers.wire import DETAIL_SHOWN
from meta_agent.toolbox.build import Toolbox, ToolCaller

pytestmark = [pytest.mark.anyio, pytest.mark.quick]
FAST_RETRY = {"retry_after_ms": "1"}  # both SDKs honour retry-after-ms, so retries in tests take no time
ECHO = ToolSchema(
    name="f__echo", description="Echo.", parameters={"type": "object", "properties": {"text": {"type": "string"}}}
)
TRANSCRIPT = (
    UserMessage.of("look at this"),
    AssistantMessage(
        text="checking",
        tool_calls=(ToolCall(id="c1", name="f__echo", arguments={"text": "x"}),),
        thinking=(ThinkingPart(text="hmm", signature="sig-1"),),
    ),
    ToolMessage(
        results=(
            ToolResult(
                call_id="c1", name="f__echo", parts=(TextPart(text="x"), ImagePart(data="AAAA", mime_type="image/png"))
            ),
        )
    ),
    UserMessage.of("and now?"),
)


def anthropic_env(llm: FakeLLM) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": llm.url, "ANTHROPIC_API_KEY": "sk-ant-test"}


# Both HTTP transports of the vendor SDKs: httpx2 (their default, `meta-agent run`) and aiohttp (`meta-agent serve`).
TRANSPORTS = pytest.mark.parametrize("aiohttp", [False, True], ids=["httpx2", "aiohttp"])


async def ask_once(spec: str, environ: dict[str, str], *, aiohttp: bool = False) -> ModelResponse:
    """One question through a provider made for it, closed afterwards."""
    provider = make_provider(spec, environ, aiohttp=aiohttp)
    try:
        return await provider.complete(ModelRequest(system="s", messages=(UserMessage.of("q"),)))
    finally:
        await provider.aclose()


@TRANSPORTS
async def test_openai_tool_calls_usage_and_request_shape(llm: FakeLLM, aiohttp: bool) -> None:
    llm.reply(openai_reply("calling", ("c1", "f__echo", {"text": "hi"}), ("c2", "f__echo", "{broken"), usage=(30, 4)))
    provider = make_provider("openai:gpt-5.5", openai_env(llm), aiohttp=aiohttp)
    try:
        response = await provider.complete(ModelRequest(system="be brief", messages=TRANSCRIPT, tools=(ECHO,)))
    finally:
        await provider.aclose()
    assert response.text == "calling"
    assert response.tool_calls[0] == ToolCall(id="c1", name="f__echo", arguments={"text": "hi"})
    assert response.tool_calls[1].invalid_arguments and response.tool_calls[1].invalid_arguments.startswith("not JSON")
    assert (response.usage.input_tokens, response.usage.output_tokens) == (30, 4)
    [seen] = llm.requests
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer sk-test"
    body = seen.body
    assert body["model"] == "gpt-5.5"
    assert body["tool_choice"] == "auto"
    assert body["tools"] == [
        {"type": "function", "function": {"name": "f__echo", "description": "Echo.", "parameters": ECHO.parameters}}
    ]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "user", "user"]
    assert body["messages"][2]["tool_calls"][0]["function"] == {"name": "f__echo", "arguments": '{"text": "x"}'}
    assert body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "x\n[1 image(s) from this tool follow in the next message]",
    }
    assert body["messages"][4]["content"] == [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]


async def test_openai_plain_answer_with_reasoning(llm: FakeLLM) -> None:
    llm.reply(openai_reply("42", reasoning="six times seven"))
    provider = make_provider("openai:gpt-5.5", openai_env(llm))
    try:
        response = await provider.complete(
            ModelRequest(system="s", messages=(UserMessage.of("q"),), tool_choice="none")
        )
    finally:
        await provider.aclose()
    assert (response.text, response.tool_calls) == ("42", ())
    assert response.thinking == (ThinkingPart(text="six times seven"),)
    assert "tools" not in llm.requests[0].body  # no tools: no tool fields at all


@pytest.mark.parametrize(
    ("replies", "error", "message", "attempts"),
    [
        (
            [(401, "Incorrect API key")],
            ProviderAuthError,
            "openai:gpt-5.5: the API key was refused (HTTP 401); check OPENAI_API_KEY",
            1,
        ),
        ([(429, "slow down")] * 3, ProviderRateLimited, "openai:gpt-5.5: rate limited (HTTP 429) after retries", 3),
        ([(500, "boom")] * 3, ProviderUnavailable, "openai:gpt-5.5: the provider failed (HTTP 500) after retries", 3),
        (
            [(400, "context too long")],
            ProviderBadRequest,
            "openai:gpt-5.5: the request was refused (HTTP 400): context too long",
            1,
        ),
    ],
)
@TRANSPORTS
async def test_openai_errors_are_typed_one_liners(
    llm: FakeLLM, replies: list, error: type, message: str, attempts: int, aiohttp: bool
) -> None:
    for status, text in replies:
        llm.reply(error_body(text), status, **FAST_RETRY)
    with pytest.raises(error) as caught:
        await ask_once("openai:gpt-5.5", openai_env(llm), aiohttp=aiohttp)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
    assert len(llm.requests) == attempts  # the SDK retried what is transient, and only that


async def test_a_transient_failure_is_retried_by_the_sdk(llm: FakeLLM) -> None:
    llm.reply(error_body("overloaded"), 503, **FAST_RETRY)
    llm.reply(openai_reply("fine"))
    response = await ask_once("openai:gpt-5.5", openai_env(llm))
    assert response.text == "fine"
    assert len(llm.requests) == 2


@TRANSPORTS
async def test_an_unreachable_endpoint(aiohttp: bool) -> None:
    env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1", "OPENAI_API_KEY": "k"}
    with pytest.raises(ProviderUnavailable, match=r"openai:m: cannot connect to http://127\.0\.0\.1:\d+/v1"):
        await ask_once("openai:m", env, aiohttp=aiohttp)


async def test_an_unreachable_endpoint_is_named_without_its_key() -> None:
    """A gateway's key in OPENAI_BASE_URL's user info or query stays out of the error, which is logged and shown."""
    port = free_port()
    env = {"OPENAI_BASE_URL": f"http://gw:s3cr3t@127.0.0.1:{port}/v1?key=s3cr3t", "OPENAI_API_KEY": "k"}
    with pytest.raises(ProviderUnavailable) as raised:
        await ask_once("openai:m", env)
    assert f"cannot connect to http://127.0.0.1:{port}/v1" in str(raised.value)
    assert "s3cr3t" not in str(raised.value)


@TRANSPORTS
async def test_anthropic_tool_use_thinking_and_request_shape(llm: FakeLLM, aiohttp: bool) -> None:
    llm.reply(
        anthropic_reply(
            {"type": "thinking", "thinking": "let me see", "signature": "sig-2"},
            {"type": "text", "text": "on it"},
            {"type": "tool_use", "id": "tu1", "name": "f__echo", "input": {"text": "yo"}},
            usage=(50, 11),
        )
    )
    provider = make_provider("anthropic:claude-sonnet-5-5", anthropic_env(llm), aiohttp=aiohttp)
    try:
        response = await provider.complete(ModelRequest(system="be brief", messages=TRANSCRIPT, tools=(ECHO,)))
    finally:
        await provider.aclose()
    assert response.text == "on it"
    assert response.tool_calls == (ToolCall(id="tu1", name="f__echo", arguments={"text": "yo"}),)
    assert response.thinking == (ThinkingPart(text="let me see", signature="sig-2", origin="anthropic"),)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (50, 11)
    [seen] = llm.requests
    assert seen.path == "/v1/messages"
    assert any("sk-ant-test" in value for value in seen.headers.values())  # the SDK picks the auth header
    body = seen.body
    assert (body["model"], body["system"], body["max_tokens"]) == ("claude-sonnet-5-5", "be brief", 8192)
    assert body["tools"] == [{"name": "f__echo", "description": "Echo.", "input_schema": ECHO.parameters}]
    assert body["tool_choice"] == {"type": "auto"}
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]  # tool results + "and now?" merged
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": "sig-1"},
        {"type": "text", "text": "checking"},
        {"type": "tool_use", "id": "c1", "name": "f__echo", "input": {"text": "x"}},
    ]
    assert body["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "c1",
            "content": [
                {"type": "text", "text": "x"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            ],
            "is_error": False,
        },
        {"type": "text", "text": "and now?"},
    ]


@pytest.mark.parametrize(
    ("status", "error", "message"),
    [
        (401, ProviderAuthError, "check ANTHROPIC_API_KEY"),
        (529, ProviderUnavailable, "the provider failed (HTTP 529) after retries"),
        (400, ProviderBadRequest, "the request was refused (HTTP 400)"),
    ],
)
async def test_anthropic_errors(llm: FakeLLM, status: int, error: type, message: str) -> None:
    for _ in range(3):
        llm.reply(error_body("nope", "overloaded_error" if status == 529 else "error"), status, **FAST_RETRY)
    with pytest.raises(error, match=re.escape(message)):
        await ask_once("anthropic:claude-sonnet-5-5", anthropic_env(llm))


FIELDS = (
    "messages.1.content",
    "messages.1.tool_calls.0.id",
    "messages.1.tool_calls.0.function.arguments",
    "messages.2.content",
    "messages.2.tool_call_id",
    "tools.0.function.parameters",
    "tool_choice",
)
# What llama.cpp's server answers (HTTP 500) to a request its pydantic model refuses: one field on each other line.
PYDANTIC_ERRORS = "7 validation errors:\n" + "".join(
    f"  {field}\n    Input should be a valid string [type=string_type, input_type=NoneType]\n" for field in FIELDS
)
ONE_LINE = " ".join(PYDANTIC_ERRORS.split())


def pydantic_500(llm: FakeLLM, form: str, tries: int = 3) -> None:
    """Queue the 500 for every try, its body the message as an error object, a JSON string, or plain text."""
    for _ in range(tries):
        if form == "error object":
            llm.reply(error_body(PYDANTIC_ERRORS, "server_error"), 500, **FAST_RETRY)
        elif form == "JSON string":
            llm.reply_raw(json.dumps(PYDANTIC_ERRORS).encode(), 500, **FAST_RETRY)
        else:
            llm.reply_raw(PYDANTIC_ERRORS.encode(), 500, content_type="text/plain", **FAST_RETRY)


@pytest.mark.parametrize("form", ["error object", "JSON string", "plain text"])
@pytest.mark.parametrize("spec", ["openai:fake-model", "anthropic:claude-sonnet-5-5"])
async def test_the_servers_whole_message_is_one_line_naming_every_field(llm: FakeLLM, spec: str, form: str) -> None:
    pydantic_500(llm, form)
    with pytest.raises(ProviderUnavailable) as caught:
        await ask_once(spec, anthropic_env(llm) if spec.startswith("anthropic") else openai_env(llm))
    assert str(caught.value) == f"{spec}: the provider failed (HTTP 500) after retries: {ONE_LINE}"
    assert all(field in str(caught.value) for field in FIELDS)


@pytest.mark.parametrize(
    ("status", "body", "detail"),
    [
        (404, {"detail": "Not Found"}, "Not Found"),  # FastAPI, e.g. llama.cpp's server for a path it lacks
        (
            422,
            {"detail": [{"loc": ["body", "messages", 1, "content"], "msg": "Input should be a valid string"}]},
            "body.messages.1.content: Input should be a valid string",
        ),
        (400, {"error": "model 'qwen9' not found"}, "model 'qwen9' not found"),  # Ollama
        (400, {"oops": [1, 2]}, '{"oops": [1, 2]}'),  # a shape nobody told us about: shown as it is
        (400, {"error": {"message": "x" * 3000}}, f"{'x' * (DETAIL_SHOWN - 1)}…"),
    ],
)
async def test_an_error_body_of_any_shape_is_read(llm: FakeLLM, status: int, body: dict[str, Any], detail: str) -> None:
    llm.reply(body, status)
    with pytest.raises(ProviderBadRequest) as caught:
        await ask_once("openai:fake-model", openai_env(llm))
    assert str(caught.value) == f"openai:fake-model: the request was refused (HTTP {status}): {detail}"


@pytest.mark.processes
async def test_the_tool_error_the_trace_and_meta_agent_run_say_the_same_whole_line(
    llm: FakeLLM, tmp_path: Path
) -> None:
    expected = f"openai:fake-model: the provider failed (HTTP 500) after retries: {ONE_LINE}"
    pydantic_500(llm, "error object")
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path)
    async with Client(build_server(settings, {}, openai_env(llm))) as client:
        result = await client.call_tool("agent", {"task": "t"})
    run_id = result.structured_content["run_id"]  # type: ignore[index]
    assert result.is_error and result.content[0].text == f"{expected} (run_id {run_id})"  # type: ignore[union-attr]
    last = json.loads((tmp_path / f"{run_id}.jsonl").read_text().splitlines()[-1])
    assert (last["kind"], last["error"]) == ("run_failed", expected)

    pydantic_500(llm, "error object")
    config = tmp_path / "servers.json"
    config.write_text('{"mcpServers": {}}')
    environ = openai_env(llm, model="openai:fake-model", base=os.environ)
    command = [sys.executable, "-m", "meta_agent", "run", "t", "--config", str(config)]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, env=environ, check=False)
    last_line = done.stderr.decode().splitlines()[-1]
    assert done.returncode == 1 and last_line.startswith(f"meta-agent: {expected} (run_id "), last_line


@pytest.mark.parametrize("spec", ["anthropic:claude-sonnet-5-5", "openai:fake-model"])
@pytest.mark.parametrize("body", [b'{"id": "x", "content": [', b"[1, 2]", b'{"content": "not blocks", "choices": 3}'])
async def test_a_malformed_answer_is_a_provider_error(llm: FakeLLM, spec: str, body: bytes) -> None:
    llm.reply_raw(body)
    environ = anthropic_env(llm) if spec.startswith("anthropic") else openai_env(llm)
    with pytest.raises(ProviderError, match=f"^{re.escape(spec)}: the provider's answer was malformed"):
        await ask_once(spec, environ)


def _choice(message: object) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}


WRONG_SHAPES = [
    ("openai", {"hello": 1}, "no 'choices' (the keys are: hello)"),
    ("openai", {**openai_reply("unused"), "choices": []}, "choices is empty"),
    ("openai", {"choices": [{"index": 0}]}, "choices[0].message is missing; expected an object"),
    ("openai", _choice("hi"), "choices[0].message is a string; expected an object"),
    ("openai", _choice({}), "choices[0].message has neither content nor tool_calls"),
    (
        "openai",
        _choice({"content": 5}),
        "choices[0].message.content is a whole number; expected a string or a list or null",
    ),
    ("openai", _choice({"tool_calls": {}}), "choices[0].message.tool_calls is an object; expected a list or null"),
    (
        "openai",
        _choice({"tool_calls": [{"id": "c1", "type": "function", "function": {"arguments": "{}"}}]}),
        "choices[0].message.tool_calls[0].function.name is missing; expected a string",
    ),
    (
        "openai",
        {**openai_reply("hi"), "usage": {"prompt_tokens": "12"}},
        "usage.prompt_tokens is a string; expected a whole number or null",
    ),
    ("anthropic", {"hello": 1}, "no 'content' (the keys are: hello)"),
    ("anthropic", {**anthropic_reply(), "content": "not blocks"}, "content is a string; expected a list"),
    ("anthropic", anthropic_reply({"type": "text"}), "content[0].text is missing; expected a string"),
    ("anthropic", {**anthropic_reply(), "content": [None]}, "content[0] is null; expected an object"),
    ("anthropic", anthropic_reply({"type": "tool_use", "name": "f"}), "content[0].id is missing; expected a string"),
    (
        "anthropic",
        {**anthropic_reply(), "usage": {"input_tokens": -3}},
        "usage.input_tokens is -3; expected a count of at least 0",
    ),
]


@pytest.mark.parametrize(("vendor", "body", "problem"), WRONG_SHAPES)
async def test_a_200_answer_of_the_wrong_shape_is_a_one_line_provider_error(
    llm: FakeLLM, vendor: str, body: dict[str, Any], problem: str
) -> None:
    """An answer with status 200 that is JSON but not the vendor's wire format names the field that is wrong."""
    llm.reply(body)
    spec = "anthropic:claude-sonnet-5-5" if vendor == "anthropic" else "openai:fake-model"
    with pytest.raises(ProviderError) as caught:
        await ask_once(spec, anthropic_env(llm) if vendor == "anthropic" else openai_env(llm))
    assert str(caught.value) == f"{spec}: the provider's answer was malformed: {problem}"


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
async def test_an_error_body_sent_with_status_200_is_that_error(llm: FakeLLM, vendor: str) -> None:
    llm.reply(error_body("quota exceeded\nfor this month"))  # some proxies answer 200 with the error body
    spec = "anthropic:claude-sonnet-5-5" if vendor == "anthropic" else "openai:fake-model"
    with pytest.raises(ProviderError) as caught:
        await ask_once(spec, anthropic_env(llm) if vendor == "anthropic" else openai_env(llm))
    assert str(caught.value) == f"{spec}: the provider answered with an error: quota exceeded for this month"


async def test_a_text_answer_is_quoted_in_the_error(llm: FakeLLM) -> None:
    llm.reply_raw(b"<html>upstream says hello</html>", content_type="text/html")
    with pytest.raises(ProviderError) as caught:
        await ask_once("openai:fake-model", openai_env(llm))
    assert str(caught.value) == (
        "openai:fake-model: the provider's answer was malformed: expected a JSON object, got text:"
        " '<html>upstream says hello</html>'"
    )


async def test_what_openai_compatible_servers_legitimately_vary_is_read(llm: FakeLLM) -> None:
    """Content null beside tool calls, or a list of parts; calls with no id or type, arguments as an object or
    null; no usage; fields we do not know."""
    calls = [
        {"function": {"name": "f__echo", "arguments": {"text": "as an object"}}},
        {"id": "c2", "type": "function", "function": {"name": "f__echo", "arguments": None}},
        {"id": "c3", "type": "custom", "custom": {"name": "grammar", "input": "x"}},  # never offered: not ours
    ]
    llm.reply({**_choice({"role": "assistant", "content": None, "tool_calls": calls}), "system_fingerprint": "x"})
    parts = [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    llm.reply({**_choice({"role": "assistant", "content": parts}), "usage": None})
    provider = make_provider("openai:fake-model", openai_env(llm))
    request = ModelRequest(system="s", messages=(UserMessage.of("q"),))
    try:
        first, second = await provider.complete(request), await provider.complete(request)
    finally:
        await provider.aclose()
    made_up = first.tool_calls[0].id  # for the call with no id; unique (test_a_conversation_goes_on_with_...)
    assert re.fullmatch(r"call_[0-9a-f]{24}", made_up)
    assert first == ModelResponse(
        tool_calls=(
            ToolCall(id=made_up, name="f__echo", arguments={"text": "as an object"}),
            ToolCall(id="c2", name="f__echo", arguments={}),
        ),
        id="c",  # the response's own id, as the server gave it (for telemetry)
    )
    assert second == ModelResponse(text="ab", id="c")


async def test_anthropic_blocks_we_do_not_use_are_skipped(llm: FakeLLM) -> None:
    llm.reply(
        {
            **anthropic_reply(
                {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                {"type": "text", "text": "found it"},
                {"type": "tool_use", "id": "tu1", "name": "f__echo", "input": "not an object"},
            ),
            "usage": None,
        }
    )
    response = await ask_once("anthropic:claude-sonnet-5-5", anthropic_env(llm))
    assert (response.text, response.usage) == ("found it", Usage())
    assert response.tool_calls == (
        ToolCall(id="tu1", name="f__echo", arguments={}, invalid_arguments="not a JSON object"),
    )


async def test_a_model_that_does_not_answer_is_given_up_after_the_model_timeout(llm: FakeLLM) -> None:
    """META_AGENT_MODEL_TIMEOUT bounds each attempt (the SDK retries twice), so a hung model endpoint ends the call
    with a one-line error instead of holding it for the SDK's 600 s a try."""
    for _ in range(3):
        llm.reply(openai_reply("too late"), delay=30)
    settings = Settings(model="openai:fake-model", model_timeout=0.3)
    async with Client(build_server(settings, {}, openai_env(llm))) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("agent", {"task": "t"})
    assert result.is_error and result.structured_content is not None
    expected = f"openai:fake-model: no answer from {llm.url}/v1/ in time (after retries)"
    run_id = result.structured_content["run_id"]
    assert result.content[0].text == f"{expected} (run_id {run_id})"  # type: ignore[union-attr]
    assert len(llm.requests) == 3  # the first try and the SDK's two retries


async def test_ollama_preset_and_discovery(llm: FakeLLM) -> None:
    env = {"OLLAMA_HOST": llm.url.removeprefix("http://")}  # Ollama's own form: host:port
    provider = await resolve_provider(None, env)
    assert provider.name == "ollama:qwen3:latest"
    llm.reply(openai_reply("from ollama"))
    try:
        assert (
            await provider.complete(ModelRequest(system="s", messages=(UserMessage.of("q"),)))
        ).text == "from ollama"
    finally:
        await provider.aclose()
    assert llm.requests[0].path == "/v1/chat/completions"
    assert llm.requests[0].body["model"] == "qwen3:latest"


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"OPENAI_API_KEY": "k"}, "openai:gpt-5.5"),
        ({"ANTHROPIC_API_KEY": "k"}, "anthropic:claude-sonnet-5-5"),
        ({"GEMINI_API_KEY": "k"}, "gemini:gemini-2.5-flash"),
        ({"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}, "openai:gpt-5.5"),
    ],
)
async def test_default_model_from_the_key_that_is_set(env: dict[str, str], name: str) -> None:
    provider = await resolve_provider(None, env)
    try:
        assert provider.name == name
    finally:
        await provider.aclose()


async def test_no_model_anywhere_says_what_to_set() -> None:
    with pytest.raises(ModelNotConfigured) as caught:
        await resolve_provider(None, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})
    text = str(caught.value)
    assert text.startswith("no model is configured: set META_AGENT_MODEL")
    assert all(word in text for word in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST"))


@pytest.mark.parametrize(
    ("spec", "env", "message"),
    [
        ("mistral:large", {}, "unknown provider 'mistral'"),
        ("openai:", {}, "name the model after the colon"),
        ("openai:gpt-5.5", {}, "openai:gpt-5.5: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)"),
        ("anthropic:claude-sonnet-5-5", {}, "anthropic:claude-sonnet-5-5: set ANTHROPIC_API_KEY"),
        ("gemini:gemini-2.5-flash", {}, "set GEMINI_API_KEY"),
        ("sampling", {}, "META_AGENT_MODEL=sampling: only a host can lend its model"),
    ],
)
async def test_a_model_that_cannot_be_used_says_why(spec: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(ModelNotConfigured) as caught:
        await resolve_provider(spec, env)
    assert message in str(caught.value)


async def test_a_local_openai_compatible_server_needs_no_key(llm: FakeLLM) -> None:
    llm.reply(openai_reply("local"))
    assert (await ask_once("openai:local-model", {"OPENAI_BASE_URL": f"{llm.url}/v1"})).text == "local"


@pytest.mark.processes
async def test_the_loop_over_http_with_a_real_child(llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "time__get_current_time", {"timezone": "Europe/Paris"})))
    llm.reply(openai_reply("It is morning in Paris."))
    provider = make_provider("openai:gpt-5.5", openai_env(llm))
    async with ChildPool({"time": time_entry()}) as pool:
        await pool.wait_settled()
        box = Toolbox.build([], pool)
        request = RunRequest(task="What time is it in Paris?", mode="agent", tools=tuple(box.select()))
        try:
            result = await run(request, provider=provider, tools=ToolCaller(pool.children, []))
        finally:
            await provider.aclose()
    assert (result.answer, result.stop_reason) == ("It is morning in Paris.", "final")
    tool_message = llm.requests[1].body["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "c1"
    assert "Europe/Paris" in tool_message["content"]
    assert result.usage.input_tokens == 24


async def test_anthropic_gets_no_empty_text_blocks(llm: FakeLLM) -> None:
    llm.reply(anthropic_reply({"type": "text", "text": "fine"}))
    transcript = (
        UserMessage(parts=(TextPart(text=""),)),
        AssistantMessage(tool_calls=(ToolCall(id="c1", name="f__echo", arguments={"text": ""}),)),
        ToolMessage(results=(ToolResult(call_id="c1", name="f__echo", parts=(TextPart(text=""),)),)),
    )
    provider = make_provider("anthropic:claude-sonnet-5-5", anthropic_env(llm))
    try:
        await provider.complete(ModelRequest(system="s", messages=transcript, tools=(ECHO,)))
    finally:
        await provider.aclose()
    messages = llm.requests[0].body["messages"]
    assert messages[0]["content"] == [{"type": "text", "text": "(empty message)"}]
    assert messages[2]["content"][0]["content"] == [{"type": "text", "text": "(no output)"}]


# -- a conversation that one vendor began and the other goes on with --------------------------------------------------

# What each vendor's answers put in a transcript that the other must be able to take.
VENDOR_TURNS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "openai": (  # calls with no id in two steps, reasoning without a signature, then an answer with no content
        "openai:fake-model",
        [
            openai_reply(None, (None, "f__echo", {"text": "a"}), (None, "f__echo", {"text": "b"}), reasoning="hm"),
            openai_reply(None, (None, "f__echo", {"text": "c"}), reasoning="and so"),
            openai_reply(None),
        ],
    ),
    "anthropic": (  # signed and redacted thinking beside tool use, then an answer with no content blocks
        "anthropic:claude-sonnet-5-5",
        [
            anthropic_reply(
                {"type": "thinking", "thinking": "hm", "signature": "sig-1"},
                {"type": "tool_use", "id": "toolu_1", "name": "f__echo", "input": {"text": "a"}},
            ),
            anthropic_reply(
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "toolu_2", "name": "f__echo", "input": {"text": "b"}},
            ),
            anthropic_reply(),
        ],
    ),
}


@pytest.mark.processes
async def test_a_run_cut_by_its_step_limit_sends_what_llama_cpp_accepts() -> None:
    """The turn after a tool call and the last turn without tools, against an endpoint as strict as llama.cpp's
    server (an assistant turn with tool calls and no text is sent with content "", never null)."""
    with FakeLLM(strict=True) as llm:
        llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "a"}), ("c2", "f__echo", {"text": "b"})))
        llm.reply(openai_reply(None, ("c3", "f__echo", {"text": "c"})))
        llm.reply(openai_reply("stopped"))
        settings = Settings(model="openai:qwen")
        async with Client(build_server(settings, {"f": fault_entry()}, openai_env(llm))) as client:
            result = await client.call_tool("agent", {"task": "echo", "max_steps": 2})
    assert not result.is_error, result.content
    assert result.structured_content is not None and result.structured_content["stop_reason"] == "max_steps"
    assert result.structured_content["answer"] == "stopped"
    chats = [seen.body for seen in llm.requests]
    assert len(chats) == 3 and chats[-1]["tool_choice"] == "none"
    assert [chat_problem(body) for body in chats] == [None] * 3


@pytest.mark.processes
@pytest.mark.parametrize(("first", "then"), [("openai", "anthropic"), ("anthropic", "openai")])
async def test_a_conversation_goes_on_with_the_other_vendor(tmp_path: Path, first: str, then: str) -> None:
    """Each turn through our real server and a saved conversation; the fake endpoint refuses what the vendors (and
    llama.cpp's server) refuse, and every request it got is checked again here."""
    conversation: dict[str, str] = {}
    with FakeLLM(strict=True) as llm:
        environ = {**openai_env(llm), **anthropic_env(llm)}
        for vendor in (first, then):
            model, replies = VENDOR_TURNS[vendor]
            for reply in replies:
                llm.reply(reply)
            settings = Settings(model=model, conversations_db=tmp_path / "c.sqlite3", trace_dir=tmp_path / "traces")
            async with Client(build_server(settings, {"f": fault_entry()}, environ)) as client:
                result = await client.call_tool("agent", {"task": f"go on with {vendor}", **conversation})
            assert not result.is_error, result.content
            assert result.structured_content is not None and result.structured_content["stop_reason"] == "final"
            conversation = {"conversation_id": result.structured_content["conversation_id"]}
    chats = [seen.body for seen in llm.requests if seen.path == "/v1/chat/completions"]
    messages = [seen.body for seen in llm.requests if seen.path == "/v1/messages"]
    assert (len(chats), len(messages)) == (3, 3)
    assert [chat_problem(body) for body in chats] == [None] * 3
    assert [messages_problems(body) for body in messages] == [[]] * 3
    # The other vendor was sent the whole first turn: every one of its tool calls, answered.
    last = (chats if then == "openai" else messages)[-1]["messages"]
    blocks = [block for m in last if isinstance(m["content"], list) for block in m["content"]]
    results = [m for m in last if m["role"] == "tool"] or [b for b in blocks if b["type"] == "tool_result"]
    assert len(results) == 3 + 2  # three calls of the OpenAI turn, two of the Anthropic one
