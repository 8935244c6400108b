"""Loop overhead per tool step: one agent run whose scripted model calls `echo.echo` 200 times, next to the same 200
calls made directly with the SDK client and the same script run by pydantic-ai's agent (its function model and its
MCP toolset), interleaved round by round on the same stdio child.

A step's time is the gap between two consecutive model calls: everything the loop does around one tool call.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import ECHO, ECHO_ENTRY, clock, echo_client, gaps_ms, spread

from meta_agent import Engine, ModelRequest, ModelResponse, ScriptedProvider, ServerEntry, Settings, ToolCall, Usage

STEPS = 200
USAGE = (10, 5)  # the tokens every scripted reply reports, as a real model's reply would


async def direct(steps: int = STEPS) -> list[float]:
    async with echo_client() as client:
        await client.call_tool("echo", {"text": "warm-up"})
        stamps = [clock()]
        for i in range(steps):
            await client.call_tool("echo", {"text": f"call {i}"})
            stamps.append(clock())
    return gaps_ms(stamps)


async def meta_agent(steps: int = STEPS) -> list[float]:
    stamps: list[float] = []

    async def model(request: ModelRequest) -> ModelResponse:
        stamps.append(clock())
        n = len(stamps)
        usage = Usage(input_tokens=USAGE[0], output_tokens=USAGE[1])
        if n > steps:
            return ModelResponse(text="done", usage=usage)
        call = ToolCall(id=f"c{n}", name="echo__echo", arguments={"text": f"call {n}"})
        return ModelResponse(tool_calls=(call,), usage=usage)

    with tempfile.TemporaryDirectory() as state:
        settings = Settings(
            model="scripted",
            max_steps=steps + 1,
            max_steps_ceiling=steps + 1,
            trace_dir=Path(state) / "traces",
            conversations_db=Path(state) / "conversations.db",
        )
        servers = {"echo": ServerEntry.model_validate(ECHO_ENTRY)}
        provider = ScriptedProvider([model] * (steps + 1))
        async with Engine(settings, servers, {}, provider=provider) as engine:
            await engine.pool.wait_settled()
            await engine.pool.children["echo"].call("echo", {"text": "warm-up"})
            result = await engine.run("echo 200 times", mode="agent")
    assert result.stop_reason == "final" and result.usage.tool_calls == steps, result.to_json()
    return gaps_ms(stamps)


async def pydantic_ai(steps: int = STEPS) -> list[float]:
    """pydantic-ai's agent with its `FunctionModel`, given an `async` function that reports usage as ours does: a
    plain `def` would run in a thread executor each step, and a reply without usage makes pydantic-ai estimate it
    by reading the whole history each step, which measures the test double, not the loop."""
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart
    from pydantic_ai.messages import ModelResponse as PaiResponse
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage, UsageLimits

    stamps: list[float] = []

    async def model(_messages: list[ModelMessage], _info: AgentInfo) -> PaiResponse:
        stamps.append(clock())
        n = len(stamps)
        usage = RequestUsage(input_tokens=USAGE[0], output_tokens=USAGE[1])
        if n > steps:
            return PaiResponse(parts=[TextPart("done")], usage=usage)
        return PaiResponse(parts=[ToolCallPart("echo", {"text": f"call {n}"}, tool_call_id=f"c{n}")], usage=usage)

    toolset = MCPToolset(StdioTransport(command=sys.executable, args=[str(ECHO)]))
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    async with agent:
        await toolset.direct_call_tool("echo", {"text": "warm-up"})
        result = await agent.run("echo 200 times", usage_limits=UsageLimits(request_limit=steps + 1))
    assert result.output == "done", result.output
    assert result.usage.tool_calls == steps, result.usage
    return gaps_ms(stamps)


async def openai_agents(steps: int = STEPS) -> list[float]:
    """The OpenAI Agents SDK's runner with a scripted `Model` (replies with usage, in the Responses format it
    reads) and its `MCPServerStdio` with the tool list cached, as ours is. Its tracing, which would export to
    OpenAI's servers, is switched off: nothing here can reach them."""
    from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
    from agents.mcp import MCPServerStdio
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)
    stamps: list[float] = []

    class Scripted(Model):
        async def get_response(self, *_args: Any, **_kwargs: Any) -> ModelResponse:
            stamps.append(clock())
            n = len(stamps)
            usage = Usage(requests=1, input_tokens=USAGE[0], output_tokens=USAGE[1], total_tokens=sum(USAGE))
            if n > steps:
                text = ResponseOutputText(type="output_text", text="done", annotations=[])
                done = ResponseOutputMessage(
                    id=f"m{n}", type="message", role="assistant", status="completed", content=[text]
                )
                return ModelResponse(output=[done], usage=usage, response_id=None)
            arguments = json.dumps({"text": f"call {n}"})
            call = ResponseFunctionToolCall(
                type="function_call", id=f"f{n}", call_id=f"c{n}", name="echo", arguments=arguments
            )
            return ModelResponse(output=[call], usage=usage, response_id=None)

        def stream_response(self, *_args: Any, **_kwargs: Any) -> Any:
            raise NotImplementedError

    params = {"command": sys.executable, "args": [str(ECHO)]}
    async with MCPServerStdio(params, cache_tools_list=True, client_session_timeout_seconds=60) as server:
        await server.call_tool("echo", {"text": "warm-up"})
        agent = Agent(name="bench", model=Scripted(), mcp_servers=[server])
        result = await Runner.run(agent, "echo 200 times", max_turns=steps + 1)
    assert result.final_output == "done", result.final_output
    return gaps_ms(stamps)


SYSTEMS = {
    "direct SDK call": direct,
    "meta-agent": meta_agent,
    "pydantic-ai": pydantic_ai,
    "OpenAI Agents SDK": openai_agents,
}


async def measure(rounds: int) -> dict[str, Any]:
    """Per system: the median step of each round over all steps, over the first 20 and over the last 20; and, per
    round, what each system adds to the direct call of the same round (the drift of a shared machine cancels)."""
    per: dict[str, dict[str, list[float]]] = {name: {"all": [], "first 20": [], "last 20": []} for name in SYSTEMS}
    added: dict[str, list[float]] = {name: [] for name in SYSTEMS if name != "direct SDK call"}
    for _ in range(rounds):
        medians = {}
        for name, system in SYSTEMS.items():
            gaps = await system()
            assert len(gaps) == STEPS, (name, len(gaps))
            medians[name] = spread(gaps)["median"]
            per[name]["all"].append(medians[name])
            per[name]["first 20"].append(spread(gaps[:20])["median"])
            per[name]["last 20"].append(spread(gaps[-20:])["median"])
        for name, values in added.items():
            values.append(medians[name] - medians["direct SDK call"])
    figures: dict[str, Any] = {name: {part: spread(v) for part, v in parts.items()} for name, parts in per.items()}
    return figures | {"added per step": {name: spread(values) for name, values in added.items()}}
