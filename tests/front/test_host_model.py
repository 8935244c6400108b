"""The host's own model through MCP sampling (front/host_model.py), with no model set: the SDK's real Client offers
a sampling callback in both protocol eras, in memory and over our real HTTP app; on 2026-07-28 each model turn is a
round of the call. A caller that lends no model is told what it lacks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp.types as t
import pytest
from conftest import ProgressLog, free_port, serving_asgi
from mcp import Client

from meta_agent.config.settings import Settings
from meta_agent.front.http.app import http_app
from meta_agent.front.server import MetaAgentServer, build_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]
ERAS = ["2026-07-28", "legacy"]
WITH_TOOLS = t.SamplingCapability(tools=t.SamplingToolsCapability())
WAIT = 30


def no_model_server() -> MetaAgentServer:
    """A server with no model set, no API key, and no Ollama answering: only the host can lend one."""
    return build_server(Settings(), {}, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})


class HostModel:
    """A host's model, as a sampling callback: it asks for a tool the toolbox does not have, then answers."""

    def __init__(self) -> None:
        self.asked: list[t.CreateMessageRequestParams] = []

    async def __call__(self, _ctx: Any, params: t.CreateMessageRequestParams) -> t.CreateMessageResultWithTools:
        self.asked.append(params)
        if len(self.asked) == 1:
            use = t.ToolUseContent(type="tool_use", id="u1", name="nowhere__nothing", input={})
            return t.CreateMessageResultWithTools(role="assistant", content=[use], model="host", stop_reason="toolUse")
        text = t.TextContent(type="text", text="the host's model answered")
        return t.CreateMessageResultWithTools(role="assistant", content=[text], model="host", stop_reason="endTurn")


def text_of(result: t.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, t.TextContent))


def mode_of(era: str) -> str:
    return "legacy" if era == "legacy" else "2026-07-28"


@asynccontextmanager
async def over_http(server: MetaAgentServer, era: str, **options: Any) -> AsyncIterator[Client]:
    """The SDK's Client talking to our real HTTP app, served in this process on a free port."""
    async with (
        serving_asgi(lambda _url: http_app(server, host="127.0.0.1")) as url,
        Client(f"{url}/mcp", mode=mode_of(era), **options) as client,  # type: ignore[arg-type]
    ):
        yield client


@asynccontextmanager
async def in_memory(server: MetaAgentServer, era: str, **options: Any) -> AsyncIterator[Client]:
    async with Client(server, mode=mode_of(era), **options) as client:  # type: ignore[arg-type]
        yield client


TRANSPORTS: dict[str, Callable[..., Any]] = {"memory": in_memory, "http": over_http}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("era", ERAS)
async def test_the_hosts_model_runs_the_agent_in_either_era(era: str, transport: str) -> None:
    model = HostModel()
    async with TRANSPORTS[transport](
        no_model_server(), era, sampling_callback=model, sampling_capabilities=WITH_TOOLS
    ) as client:
        assert client.protocol_version == ("2025-11-25" if era == "legacy" else "2026-07-28")
        progress = ProgressLog()
        with anyio.fail_after(WAIT):
            result = await client.call_tool("agent", {"task": "hi"}, progress_callback=progress)
    assert not result.is_error, result.content
    assert text_of(result) == "the host's model answered"
    assert result.structured_content and result.structured_content["stop_reason"] == "final"
    assert progress.messages[0].startswith(f"start · run {result.structured_content['run_id']} · agent with sampling")
    assert len(model.asked) == 2
    assert model.asked[0].tools is not None and model.asked[0].tool_choice is not None
    # the second turn carries the first turn's tool call and, after it, its (failed) result under the same id
    used, answered = model.asked[1].messages[-2:]
    assert [block.type for block in used.content_as_list] == ["tool_use"]
    [tool_result] = answered.content_as_list
    assert isinstance(tool_result, t.ToolResultContent) and tool_result.tool_use_id == "u1" and tool_result.is_error


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    ("capabilities", "lacks"),
    [
        (None, "this host declares no MCP sampling"),
        (t.SamplingCapability(), "this host declares MCP sampling but not its tools (the sampling.tools capability)"),
    ],
    ids=["no-sampling", "no-sampling-tools"],
)
async def test_a_caller_that_lends_no_model_is_told_what_it_lacks(
    era: str, transport: str, capabilities: t.SamplingCapability | None, lacks: str
) -> None:
    model = HostModel()
    options: dict[str, Any] = {} if capabilities is None else {"sampling_callback": model}
    if capabilities is not None:
        options["sampling_capabilities"] = capabilities
    async with TRANSPORTS[transport](no_model_server(), era, **options) as client:
        with anyio.fail_after(WAIT):
            result = await client.call_tool("agent", {"task": "hi"})
    assert result.is_error
    told = text_of(result)
    assert told.startswith("no model is configured: set META_AGENT_MODEL"), told
    assert f"or let the host lend its own model: {lacks}, and meta-agent needs sampling with tools" in told
    assert "\n" not in told
    assert model.asked == []


@pytest.mark.parametrize("era", ERAS)
async def test_meta_agent_model_sampling_needs_sampling_with_tools(era: str) -> None:
    """`META_AGENT_MODEL=sampling`: the host's model in either era; a host without it is told what it lacks."""
    model = HostModel()
    server = build_server(Settings(model="sampling"), {}, {})
    async with in_memory(server, era, sampling_callback=model, sampling_capabilities=WITH_TOOLS) as client:
        assert text_of(await client.call_tool("agent", {"task": "hi"})) == "the host's model answered"
    async with in_memory(server, era) as client:
        result = await client.call_tool("agent", {"task": "hi"})
    assert result.is_error
    assert text_of(result).startswith("META_AGENT_MODEL=sampling: only a host can lend its model")
    assert "this host declares no MCP sampling" in text_of(result)


@pytest.mark.parametrize(
    "answer",
    [
        {"sampling": t.ElicitResult(action="accept", content={"decision": "allow_once"})},
        {"other": t.CreateMessageResult(role="assistant", content=t.TextContent(type="text", text="x"), model="m")},
        {},
    ],
    ids=["an-elicit-result", "under-another-key", "nothing"],
)
async def test_a_model_round_answered_with_no_completion_fails_the_run(answer: dict[str, t.InputResponse]) -> None:
    """A 2026-07-28 host that answers the model's round with something else than a completion: the run fails with
    one line, at once (it does not wait for an answer that will not come)."""
    async with Client(no_model_server(), sampling_callback=HostModel(), sampling_capabilities=WITH_TOOLS) as client:
        with anyio.fail_after(WAIT):
            first = await client.session.call_tool("agent", {"task": "hi"}, allow_input_required=True)
            assert isinstance(first, t.InputRequiredResult) and first.input_requests is not None
            [(key, request)] = first.input_requests.items()
            assert key == "sampling" and isinstance(request, t.CreateMessageRequest)
            assert request.params.tools is not None
            result = await client.session.call_tool(
                "agent",
                {"task": "hi"},
                input_responses=answer,
                request_state=first.request_state,
                allow_input_required=True,
            )
    assert isinstance(result, t.CallToolResult) and result.is_error
    assert text_of(result).startswith("sampling: the host gave no completion for the model request (run_id ")


async def test_each_model_turn_is_one_round_and_the_clients_cap_applies() -> None:
    """On 2026-07-28 every model turn is a round of the call: a client capping its rounds caps the run's turns (the
    SDK's Client: `input_required_max_rounds`, 10 by default). Under the cap, the run ends as it would."""
    calls = {"n": 0}

    async def busy_model(_ctx: Any, _params: t.CreateMessageRequestParams) -> t.CreateMessageResultWithTools:
        calls["n"] += 1
        if calls["n"] < 3:
            use = t.ToolUseContent(type="tool_use", id=f"u{calls['n']}", name="nowhere__nothing", input={})
            return t.CreateMessageResultWithTools(role="assistant", content=[use], model="h", stop_reason="toolUse")
        text = t.TextContent(type="text", text="done after three turns")
        return t.CreateMessageResultWithTools(role="assistant", content=[text], model="h", stop_reason="endTurn")

    server = no_model_server()
    options: dict[str, Any] = {"sampling_callback": busy_model, "sampling_capabilities": WITH_TOOLS}
    async with Client(server, input_required_max_rounds=3, **options) as client:
        with anyio.fail_after(WAIT):
            assert text_of(await client.call_tool("agent", {"task": "hi"})) == "done after three turns"
    calls["n"] = 0
    async with Client(server, input_required_max_rounds=2, **options) as client:
        with anyio.fail_after(WAIT), pytest.raises(RuntimeError, match="more than 2 rounds"):
            await client.call_tool("agent", {"task": "hi"})


async def test_a_2026_task_asks_its_model_turns_through_tasks_get() -> None:
    """A call made a task (the tasks extension) with no model set: each model turn is a question of the task,
    `sampling-N` in `tasks/get`, answered with `tasks/update`, as its approvals are."""
    capabilities = {"sampling": {"tools": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    }
    async with Client(no_model_server()) as client:
        send = client.session._dispatcher.send_raw_request

        async def raw(method: str, params: dict[str, Any]) -> dict[str, Any]:
            answer: dict[str, Any] = await send(method, {**params, "_meta": meta}, None)
            return answer

        with anyio.fail_after(WAIT):
            created = await raw("tools/call", {"name": "agent", "arguments": {"task": "hi"}})
            task = {"taskId": created["taskId"]}
            while (got := await raw("tasks/get", task))["status"] != "input_required":
                await anyio.sleep(0.05)  # polled, as a host does (its pollInterval)
            [(key, request)] = got["inputRequests"].items()
            assert key == "sampling-1" and request["method"] == "sampling/createMessage"
            assert request["params"]["messages"][-1]["content"][0]["text"] == "hi"
            text = {"type": "text", "text": "the host's model, as a task"}
            completion = {"role": "assistant", "content": [text], "model": "host", "stopReason": "endTurn"}
            await raw("tasks/update", {**task, "inputResponses": {key: completion}})
            while (got := await raw("tasks/get", task))["status"] != "completed":
                await anyio.sleep(0.05)
    assert got["result"]["content"][0] == text
