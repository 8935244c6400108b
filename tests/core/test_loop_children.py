"""The loop with real child servers (our fault server), for what a child process does under it: dies in the middle
of a call, overruns its timeout, has its call cancelled with the run. The rest of the loop's tests use children in
memory (test_loop.py)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from conftest import fault_entry

from meta_agent.children.pool import ChildPool
from meta_agent.core import events as ev
from meta_agent.core.loop import RunRequest, run
from meta_agent.core.messages import ModelRequest, ModelResponse, ToolCall, ToolMessage, Usage
from meta_agent.core.result import RunResult
from meta_agent.providers.scripted import ScriptedProvider
from meta_agent.toolbox.build import Toolbox, ToolCaller

pytestmark = pytest.mark.anyio
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def pool() -> AsyncIterator[ChildPool]:
    servers = {
        "f": fault_entry(),
        "crashy": fault_entry(trust={"crash": "always"}),
        "slowpoke": fault_entry(timeout=0.5),
    }
    async with ChildPool(servers) as children:
        await children.wait_settled()
        assert all(child.status.state == "ready" for child in children), [c.status for c in children]
        yield children


def call(alias: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"call_{next(_ids)}", name=alias, arguments=arguments)


def reply(text: str = "", *calls: ToolCall) -> ModelResponse:
    return ModelResponse(text=text, tool_calls=calls, usage=Usage(input_tokens=10, output_tokens=5))


def tool_results(request: ModelRequest) -> list[tuple[str, bool]]:
    message = request.messages[-1]
    assert isinstance(message, ToolMessage)
    return [(r.text, r.is_error) for r in message.results]


async def go(pool: ChildPool, script: list[Any]) -> tuple[RunResult, ScriptedProvider]:
    provider = ScriptedProvider(script)
    request = RunRequest(task="do the task", mode="agent", tools=tuple(Toolbox.build([], pool).select()))
    result = await run(request, provider=provider, tools=ToolCaller(pool.children, []))
    provider.assert_done()
    return result, provider


async def test_a_child_crash_mid_run_is_a_tool_error_and_the_run_goes_on(pool: ChildPool) -> None:
    result, provider = await go(pool, [reply("", call("crashy__crash")), reply("it crashed")])
    [(text, is_error)] = tool_results(provider.requests[1])
    assert is_error and "crashy: the server exited during crash (exit status 1)" in text
    assert result.stop_reason == "final"


async def test_a_tool_timeout_is_a_tool_error(pool: ChildPool) -> None:
    _result, provider = await go(pool, [reply("", call("slowpoke__hang")), reply("gave up")])
    assert tool_results(provider.requests[1]) == [("slowpoke: hang took longer than 0.5 s and was cancelled", True)]


async def test_cancellation_stops_the_run_and_its_tool_calls(pool: ChildPool) -> None:
    events: list[ev.Event] = []
    box = Toolbox.build([], pool)
    provider = ScriptedProvider([reply("", call("f__hang"))])
    with anyio.CancelScope() as scope:

        async def emit(event: ev.Event) -> None:
            events.append(event)
            if isinstance(event, ev.ToolCallStarted):
                scope.cancel()

        request = RunRequest(task="t", mode="agent", tools=tuple(box.select()))
        await run(request, provider=provider, tools=ToolCaller(pool.children, []), emit=emit)
    assert scope.cancelled_caught
    finished = [e for e in events if isinstance(e, ev.RunFinished)]
    assert [f.result.stop_reason for f in finished] == ["cancelled"]
    assert "tool_call_finished" not in [e.kind for e in events]
    # The child is fine and answers the next call at once.
    assert (await pool["f"].call("echo", {"text": "still here"})).content[0].text == "still here"  # type: ignore[union-attr]
