"""The MCP front, driven by the SDK's real Client in memory in both protocol eras, with real children and the real
openai SDK talking to a fake model endpoint on 127.0.0.1."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import mcp.types as t
import pytest
import structlog
from conftest import ProgressLog, fault_entry, free_port, openai_env, time_entry
from fake_llm import FakeLLM, error_body, images_reply, openai_reply
from fault_server import TINY_PNG
from mcp import Client

from meta_agent.config import Settings
from meta_agent.messages import ModelResponse
from meta_agent.providers.scripted import ScriptedProvider
from meta_agent.server import build_server

pytestmark = pytest.mark.anyio
ERAS = ["2026-07-28", "legacy"]
PNG = base64.b64encode(TINY_PNG).decode()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


SERVERS = {
    "f": fault_entry(trust={"delete_file": "never"}),
    "time": time_entry(),
}


@pytest.fixture(scope="module", params=ERAS)
async def client(request: pytest.FixtureRequest, llm: FakeLLM) -> AsyncIterator[Client]:
    """One server (its children started once) per era for the module."""
    server = build_server(Settings(model="openai:fake-model"), SERVERS, openai_env(llm))
    mode = "legacy" if request.param == "legacy" else "auto"
    async with Client(server, mode=mode) as connected:
        assert connected.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        yield connected


def text_of(result: t.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, t.TextContent))


async def test_the_tools_and_their_annotations(client: Client) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"ask", "plan", "agent", "image_gen"}
    agent = tools["agent"]
    assert agent.title == "Run an agent"
    assert agent.annotations and agent.annotations.read_only_hint is False and agent.annotations.destructive_hint
    assert tools["plan"].annotations and tools["plan"].annotations.read_only_hint is True
    assert set(agent.input_schema["properties"]) == {
        "task",
        "tools",
        "max_steps",
        "token_budget",
        "plan",
        "conversation_id",
    }
    assert agent.input_schema["required"] == ["task"]
    assert agent.output_schema and {"answer", "stop_reason", "run_id", "steps", "usage"} <= set(
        agent.output_schema["properties"]
    )


async def test_agent_answers_with_text_structure_and_progress(client: Client, llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "time__get_current_time", {"timezone": "Asia/Tokyo"})))
    llm.reply(openai_reply("It is evening in Tokyo.", usage=(40, 8)))
    progress = ProgressLog()
    result = await client.call_tool("agent", {"task": "What time is it in Tokyo?"}, progress_callback=progress)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "It is evening in Tokyo."
    structured = result.structured_content
    assert structured is not None
    assert (structured["answer"], structured["stop_reason"]) == ("It is evening in Tokyo.", "final")
    assert len(structured["run_id"]) == 26
    [call] = structured["steps"][0]["tool_calls"]
    assert (call["name"], call["arguments"], call["ok"]) == ("time.get_current_time", {"timezone": "Asia/Tokyo"}, True)
    usage = structured["usage"]
    assert {k: usage[k] for k in ("model_calls", "tool_calls", "input_tokens", "output_tokens")} == {
        "model_calls": 2,
        "tool_calls": 1,
        "input_tokens": 52,
        "output_tokens": 15,
    }
    assert set(usage["tool_ms"]) == {"time.get_current_time"} and usage["errors"] == {}
    messages = progress.messages
    assert messages[0].startswith("start · agent with openai:fake-model · ")
    assert messages[1:3] == ["step 1 · model", 'step 1 · call time.get_current_time {"timezone": "Asia/Tokyo"}']
    assert messages[3].startswith("step 1 · time.get_current_time ok (")
    assert messages[4:] == ["step 2 · model", "done · final (2 model calls, 1 tool call)"]
    assert [p for p, _, _ in progress.seen] == list(range(1, 7))  # one counter, counting up
    assert all(total is None for _, total, _ in progress.seen)
    # Nothing follows the result: a full round trip later, the log has not grown.
    await client.list_tools()
    assert len(progress.seen) == 6


async def test_child_progress_and_a_failed_tool_in_progress(client: Client, llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "f__slow", {"seconds": 0.2, "steps": 2}), ("c2", "f__echo", {"text": 5})))
    llm.reply(openai_reply("done"))
    progress = ProgressLog()
    result = await client.call_tool("agent", {"task": "t", "tools": ["f.*"]}, progress_callback=progress)
    assert text_of(result) == "done"
    messages = progress.messages
    assert "step 1 · f.slow: step 1 of 2" in messages and "step 1 · f.slow: step 2 of 2" in messages
    assert any(m.startswith("step 1 · f.echo error (") and "5 is not of type 'string'" in m for m in messages)
    assert progress.seen[-1][2] == "done · final (2 model calls, 2 tool calls)"
    # the per-call selector: only f's tools were offered to the model
    offered = {tool["function"]["name"] for tool in llm.requests[-1].body["tools"]}
    assert offered and all(name.startswith("f__") for name in offered)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"task": "t", "tools": ["nope.*"]},
            "tools: pattern 'nope.*' matches no tool (the tools are: image_gen, f.echo",
        ),
        ({"task": "t", "tools": ["bad pattern"]}, "bad pattern 'bad pattern'"),
        ({"task": "t", "max_steps": 500}, "max_steps: 500 is outside 1..50 (META_AGENT_MAX_STEPS_CEILING)"),
        ({"task": "t", "conversation_id": "c-1"}, "conversation_id: unknown conversation 'c-1'"),
    ],
)
async def test_bad_arguments_are_one_line_tool_errors(client: Client, arguments: dict, message: str) -> None:
    result = await client.call_tool("agent", arguments)
    assert result.is_error
    assert text_of(result).startswith(message)
    assert "\n" not in text_of(result)


async def test_a_provider_outage_is_a_tool_error(client: Client, llm: FakeLLM) -> None:
    for _ in range(3):
        llm.reply(error_body("upstream exploded"), 500, retry_after_ms="1")
    progress = ProgressLog()
    result = await client.call_tool("agent", {"task": "t"}, progress_callback=progress)
    assert result.is_error
    assert text_of(result) == "openai:fake-model: the provider failed (HTTP 500) after retries: upstream exploded"
    assert progress.messages[-1].startswith("failed · openai:fake-model: the provider failed")


async def test_plan_offers_read_only_tools_only(client: Client, llm: FakeLLM) -> None:
    llm.reply(openai_reply("1. Check the time.\n2. Report it."))
    result = await client.call_tool("plan", {"task": "plan it"})
    assert text_of(result) == "1. Check the time.\n2. Report it."
    offered = {tool["function"]["name"] for tool in llm.requests[-1].body["tools"]}
    assert {"f__echo", "time__get_current_time", "image_gen"} <= offered
    assert not offered & {"f__crash", "f__delete_file", "f__mutate"}


async def test_the_toolbox_resource(client: Client) -> None:
    result = await client.read_resource("meta-agent://toolbox")
    box = json.loads(result.contents[0].text)  # type: ignore[union-attr]
    assert {s["name"]: s["status"] for s in box["servers"]} == {"f": "ready", "time": "ready"}
    tools = {tool["name"]: tool for tool in box["tools"]}
    assert tools["f.delete_file"]["trust"] == "never"
    assert tools["time.get_current_time"]["annotations"]["readOnlyHint"] is True
    assert tools["image_gen"]["server"] is None


# In memory only the legacy era: the SDK's in-memory 2026-07-28 dispatcher does not pass a caller's cancel on to
# the handler (over HTTP it does; tests/test_transports.py checks that era there).
@pytest.mark.parametrize("era", ["legacy"])
async def test_cancelling_the_call_cancels_the_child_call(era: str, llm: FakeLLM) -> None:
    """The caller cancels while the loop waits on a child: the child's handler is cancelled too."""
    seen = anyio.Event()

    def watch(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("event") == "child_stderr" and "hang cancelled" in event.get("line", ""):
            seen.set()
        raise structlog.DropEvent

    llm.reply(openai_reply(None, ("c1", "f__hang", {})))
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    old = structlog.get_config()
    structlog.configure(processors=[watch])
    try:
        async with Client(server, mode="legacy" if era == "legacy" else "auto") as client:
            progress = ProgressLog()
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    await client.call_tool("agent", {"task": "hang"}, progress_callback=progress)

                tg.start_soon(call)
                await progress.until("call f.hang")
                tg.cancel_scope.cancel()
            with anyio.fail_after(10):
                await seen.wait()
            assert not any(m.startswith("done") for m in progress.messages)  # no result, no "done" after a cancel
    finally:
        structlog.configure(**old)


async def test_image_gen_directly_and_through_ask(llm: FakeLLM) -> None:
    server = build_server(
        Settings(model="openai:fake-model", image_model="openai:gpt-image-2.5-flare"), {}, openai_env(llm)
    )
    async with Client(server) as client:
        llm.reply(images_reply(PNG))
        direct = await client.call_tool("image_gen", {"prompt": "a red dot", "size": "1024x1024"})
        assert not direct.is_error, text_of(direct)
        kinds = [block.type for block in direct.content]
        assert kinds == ["text", "image"]
        image = direct.content[1]
        assert isinstance(image, t.ImageContent) and image.mime_type == "image/png"
        assert base64.b64decode(image.data) == TINY_PNG
        assert llm.requests[-1].body["prompt"] == "a red dot"

        bad = await client.call_tool("image_gen", {"prompt": "x", "size": "7x7"})
        assert bad.is_error and text_of(bad).startswith("image_gen: size '7x7' is not one of")

        # ask: one model turn; the model calls image_gen once; the image reaches the host; no second turn.
        before = len(llm.requests)
        llm.reply(openai_reply("Here it is.", ("c1", "image_gen", {"prompt": "a blue dot"})))
        llm.reply(images_reply(PNG))
        asked = await client.call_tool("ask", {"prompt": "draw a blue dot"})
        assert not asked.is_error, text_of(asked)
        assert [block.type for block in asked.content] == ["text", "image"]
        assert text_of(asked).startswith("Here it is.\n\ngenerated 1 image")
        assert [seen.path for seen in llm.requests[before:]] == ["/v1/chat/completions", "/v1/images/generations"]
        assert asked.structured_content and asked.structured_content["usage"]["model_calls"] == 1


async def test_no_model_configured_says_what_to_set() -> None:
    server = build_server(Settings(), {}, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})
    async with Client(server) as client:
        result = await client.call_tool("agent", {"task": "t"})
    assert result.is_error
    assert text_of(result).startswith("no model is configured: set META_AGENT_MODEL")


async def test_no_image_backend_is_a_clear_error() -> None:
    server = build_server(Settings(), {}, {})
    async with Client(server) as client:
        result = await client.call_tool("image_gen", {"prompt": "x"})
    assert result.is_error
    assert "OPENAI_API_KEY" in text_of(result) and "\n" not in text_of(result)


async def test_internal_tools_can_be_switched_off() -> None:
    server = build_server(Settings(internal_tools=""), {}, {})
    async with Client(server) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == {"ask", "plan", "agent"}


async def test_the_hosts_model_through_sampling_on_a_legacy_session() -> None:
    asked: list[t.CreateMessageRequestParams] = []

    async def sample(_ctx: Any, params: t.CreateMessageRequestParams) -> t.CreateMessageResultWithTools:
        asked.append(params)
        if len(asked) == 1:
            use = t.ToolUseContent(type="tool_use", id="u1", name="time__get_current_time", input={"timezone": "UTC"})
            return t.CreateMessageResultWithTools(
                role="assistant", content=[use], model="host-model", stop_reason="toolUse"
            )
        text = t.TextContent(type="text", text="It is noon (UTC), says the host's model.")
        return t.CreateMessageResultWithTools(
            role="assistant", content=[text], model="host-model", stop_reason="endTurn"
        )

    server = build_server(Settings(), {"time": time_entry()}, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})
    caps = t.SamplingCapability(tools=t.SamplingToolsCapability())
    async with Client(server, mode="legacy", sampling_callback=sample, sampling_capabilities=caps) as client:
        progress = ProgressLog()
        result = await client.call_tool("agent", {"task": "time?"}, progress_callback=progress)
    assert text_of(result) == "It is noon (UTC), says the host's model."
    assert progress.messages[0].startswith("start · agent with sampling")
    assert asked[0].tools and "time__get_current_time" in {tool.name for tool in asked[0].tools}
    last = asked[1].messages[-1]
    assert last.role == "user"
    results = last.content if isinstance(last.content, list) else [last.content]
    assert isinstance(results[0], t.ToolResultContent) and results[0].tool_use_id == "u1"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_meta_agent_model_sampling_uses_the_hosts_model_or_says_why_not(mode: str) -> None:
    async def sample(_ctx: Any, params: t.CreateMessageRequestParams) -> t.CreateMessageResultWithTools:
        text = t.TextContent(type="text", text="the host's model answered")
        return t.CreateMessageResultWithTools(role="assistant", content=[text], model="host", stop_reason="endTurn")

    server = build_server(Settings(model="sampling"), {}, {})
    caps = t.SamplingCapability(tools=t.SamplingToolsCapability())
    async with Client(server, mode=mode, sampling_callback=sample, sampling_capabilities=caps) as client:
        result = await client.call_tool("agent", {"task": "hi"})
    if mode == "legacy":
        assert text_of(result) == "the host's model answered"
    else:  # 2026-07-28 has no back-channel to sample through
        assert result.is_error and text_of(result).startswith("META_AGENT_MODEL=sampling: this caller cannot sample")


async def test_the_time_limit_setting_bounds_a_run(llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model", time_limit=0.5), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__hang", {})))
    llm.reply(openai_reply("ran out of time"))
    async with Client(server) as client:
        result = await client.call_tool("agent", {"task": "t"})
    assert result.structured_content and result.structured_content["stop_reason"] == "deadline"
    assert text_of(result) == "ran out of time"


async def test_a_given_provider_is_the_model_of_every_run() -> None:
    """build_server(provider=...) (benchmarks, embedding): no model setting, no key, no sampling needed."""
    given = ScriptedProvider([ModelResponse(text="from the given model")])
    async with Client(build_server(Settings(), {}, {}, provider=given)) as client:
        result = await client.call_tool("agent", {"task": "t"})
    assert not result.is_error, result
    assert text_of(result) == "from the given model"
    given.assert_done()
