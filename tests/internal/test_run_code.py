"""Code mode end to end in one process (internal/run_code.py, core/inner_calls.py): a real engine, our fault server as
the child, the model a fake OpenAI endpoint on 127.0.0.1 driven through the real SDK. Each inner call is a call of the
run: checked, approved, reported and recorded as a direct one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply

from meta_agent.config.settings import Settings
from meta_agent.core import events as ev
from meta_agent.engine import Engine

pytestmark = pytest.mark.anyio


def program(code: str, call_id: str = "c1") -> dict[str, Any]:
    return openai_reply(None, (call_id, "run_code", {"code": code}))


def tool_result(request: Any) -> str:
    """The text of the last tool result the model was sent."""
    message = request.body["messages"][-1]
    assert message["role"] == "tool", message
    return str(message["content"])


def offered(request: Any) -> list[str]:
    return [tool["function"]["name"] for tool in request.body.get("tools", [])]


async def coded(llm: FakeLLM, tmp_path: Path, task: str = "go", **arguments: Any) -> tuple[Any, list[ev.Event]]:
    events: list[ev.Event] = []

    async def keep(event: ev.Event) -> None:
        events.append(event)

    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, code_mode="on")
    async with Engine(settings, {"f": fault_entry(trust={"append": "always"})}, openai_env(llm)) as engine:
        result = await engine.run(task, mode=arguments.pop("mode", "agent"), emit=keep, **arguments)
    return result, events


async def test_a_program_of_thirty_dependent_calls_answers_in_two_model_turns(llm: FakeLLM, tmp_path: Path) -> None:
    code = (
        "total = 0\n"
        "for i in range(30):\n"
        "    said = call_tool('f.echo', {'text': str(i)})['result']\n"
        "    total += int(said)\n"
        "print('total', total)\n"
        "total * 2"
    )
    llm.reply(program(code))
    llm.reply(openai_reply("The total is 435."))
    result, events = await coded(llm, tmp_path)
    assert result.answer == "The total is 435."
    assert offered(llm.requests[0]) == ["run_code", "read_result"]
    assert "f.echo(text: str) -> dict" in llm.requests[0].body["tools"][0]["function"]["description"]
    assert tool_result(llm.requests[1]) == "total 435\n870"
    assert len(llm.requests) == 2
    [step, _] = result.steps
    assert [call.name for call in step.tool_calls] == ["run_code"] + ["f.echo"] * 30
    assert all(call.via == "run_code" for call in step.tool_calls[1:])
    assert result.usage.tool_calls == 31
    started = [event for event in events if isinstance(event, ev.ToolCallStarted)]
    assert [event.name for event in started] == ["run_code"] + ["f.echo"] * 30
    assert started[1].call_id == "c1.1" and started[1].arguments == {"text": "0"}
