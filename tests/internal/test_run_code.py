"""Code mode end to end in one process (internal/run_code.py, core/inner_calls.py): a real engine, our fault server as
the child, the model a fake OpenAI endpoint on 127.0.0.1 driven through the real SDK. Each inner call is a call of the
run: checked, approved, reported and recorded as a direct one."""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import TESTS, fault_entry, named_tool, openai_env
from fake_llm import FakeLLM, openai_reply

from meta_agent.config.servers import ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.core import events as ev
from meta_agent.core.code_mode import CodeSetting, code_on
from meta_agent.core.inner_calls import InnerCalls
from meta_agent.core.messages import ToolCall
from meta_agent.core.result import Mode
from meta_agent.engine import Engine
from meta_agent.internal.run_code import line_of

pytestmark = pytest.mark.anyio
MANY = TESTS / "fixtures" / "many_tools.py"


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
    assert (
        "- f.echo(text: str) -> {result: str}: Return the text unchanged."
        in llm.requests[0].body["tools"][0]["function"]["description"]
    )
    assert tool_result(llm.requests[1]) == "total 435\n870"
    assert len(llm.requests) == 2
    [step, _] = result.steps
    assert [call.name for call in step.tool_calls] == ["run_code"] + ["f.echo"] * 30
    assert all(call.via == "run_code" for call in step.tool_calls[1:])
    assert result.usage.tool_calls == 31
    started = [event for event in events if isinstance(event, ev.ToolCallStarted)]
    assert [event.name for event in started] == ["run_code"] + ["f.echo"] * 30
    assert started[1].call_id == "c1.1" and started[1].arguments == {"text": "0"}


async def test_cancelling_the_run_cancels_the_call_a_program_waits_for(llm: FakeLLM, tmp_path: Path) -> None:
    cancel_file = tmp_path / "cancelled"
    code = f"try:\n    call_tool('f.hang', {{'cancel_file': {str(cancel_file)!r}}})\nexcept BaseException:\n    pass\n1"
    llm.reply(program(code))
    waiting = anyio.Event()

    async def note(event: ev.Event) -> None:
        if isinstance(event, ev.ChildProgress) and event.message == "hanging":
            waiting.set()

    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, code_mode="on")
    async with Engine(settings, {"f": fault_entry()}, openai_env(llm)) as engine:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(engine.run, "hang", mode="agent", emit=note))
                await waiting.wait()  # the program is in its call, which the child reports as hanging
                tg.cancel_scope.cancel()
            while not cancel_file.exists():  # the child's call was cancelled: it wrote the time of its cancel
                await anyio.sleep(0.02)
    assert len(llm.requests) == 1  # the program never went on to another model turn


@pytest.mark.quick
@pytest.mark.parametrize(
    ("setting", "asked", "mode", "selected", "kind"),
    [
        ("off", None, "agent", 5, "off"),
        ("off", True, "plan", 5, "only"),
        ("on", None, "agent", 5, "only"),
        ("on", False, "agent", 5, "off"),
        ("auto", None, "agent", 30, "beside"),
        ("auto", None, "agent", 31, "only"),
        ("on", True, "ask", 5, "off"),
    ],
)
def test_how_a_run_offers_code_mode(
    setting: CodeSetting, asked: bool | None, mode: Mode, selected: int, kind: str
) -> None:
    assert code_on(setting, asked, mode, selected) == kind


@pytest.mark.quick
@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        (["text"], "the arguments are a list, no JSON object"),
        ({"text": {1, 2}}, "a set is not JSON"),
        ({"text": float("nan")}, "Out of range float values are not JSON compliant"),
        ({1: "x"}, "a key is not a string"),
        (functools.reduce(lambda inner, _: {"a": inner}, range(70), {}), "nested more than 64 levels deep"),
    ],
)
def test_arguments_of_a_call_from_code_must_be_a_json_object(arguments: Any, refusal: str) -> None:
    calls = InnerCalls([named_tool("f.echo")], "agent")
    _, refused = calls.call_of(ToolCall(id="c1", name="run_code", arguments={}), "f.echo", arguments)
    assert refused is not None and refused.is_error and refusal in refused.parts[0].text  # type: ignore[union-attr]


@pytest.mark.quick
def test_a_call_from_code_is_named_as_the_model_would_have_called_it() -> None:
    calls = InnerCalls([named_tool("f.echo"), named_tool("run_code")], "plan")
    program_call = ToolCall(id="c1", name="run_code", arguments={})
    call, refused = calls.call_of(program_call, "f.echo", {"text": "x"})
    assert refused is None and (call.id, call.name, call.arguments) == ("c1.1", "f__echo", {"text": "x"})
    _, refused = calls.call_of(program_call, "run_code", {"code": "1"})
    assert refused is not None
    assert refused.parts[0].text == (  # type: ignore[union-attr]
        "call_tool: 'run_code' is not a tool of this run; plan mode offers read-only tools only; its tools are: f.echo"
    )


async def test_auto_on_a_big_toolbox_offers_run_code_and_find_tools_and_a_program_calls_what_was_found(
    llm: FakeLLM, tmp_path: Path
) -> None:
    """60 tools: `auto` gives the model run_code beside find_tools (and read_result) only; run_code's description lists
    the tools shown from the start, and a program calls a tool it was never shown, by its full name."""
    many = ServerEntry(command=sys.executable, args=(str(MANY), "--count", "60"), trust={"*": "always"})
    llm.reply(program("call_tool('m.restore_shipment', {'shipment_id': 's1'})"))
    llm.reply(openai_reply("created"))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, code_mode="auto")
    async with Engine(settings, {"m": many}, openai_env(llm)) as engine:
        result = await engine.run("restore the shipment", mode="agent")
    assert offered(llm.requests[0]) == ["find_tools", "run_code", "read_result"]
    description = llm.requests[0].body["tools"][1]["function"]["description"]
    assert "Find more tools with find_tools" in description and "m.restore_shipment" not in description
    assert [call.name for call in result.steps[0].tool_calls] == ["run_code", "m.restore_shipment"], result.steps
    assert result.steps[0].tool_calls[1].ok


@pytest.mark.quick
def test_run_codes_description_gives_each_tool_a_python_signature() -> None:
    spec = dataclasses.replace(
        named_tool("shop.get_order", "Look up an order."),
        input_schema={
            "type": "object",
            "properties": {"id": {"type": "string"}, "lines": {"type": "integer"}, "state": {"enum": ["a", "b"]}},
            "required": ["id"],
        },
        output_schema={
            "type": "object",
            "properties": {
                "next": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
            },
        },
    )
    plain = dataclasses.replace(spec, name="shop.note", output_schema=None, input_schema={"type": "object"})
    assert line_of(spec) == (
        "- shop.get_order(id: str, lines?: int, state?: 'a'|'b') -> {next: str|None, lines: dict[]}: Look up an order."
    )
    assert line_of(plain) == "- shop.note() -> str: Look up an order."


@pytest.mark.parametrize("program_first", [True, False], ids=["program-first", "direct-first"])
async def test_a_program_and_the_models_own_changes_run_in_the_order_the_model_gave(
    program_first: bool, llm: FakeLLM, tmp_path: Path
) -> None:
    """Calls that may change things run one at a time per server, in the model's order; a program may change things
    on any server, so it waits for the model's changes before it, and those after it wait for it."""
    changes = tmp_path / "changes.txt"
    code = f"for i in range(3):\n    call_tool('f.append', {{'path': {str(changes)!r}, 'text': f'program {{i}}'}})"
    run_code = ("c1", "run_code", {"code": code})
    direct = ("c2", "f__append", {"path": str(changes), "text": "direct"})
    llm.reply(openai_reply(None, *((run_code, direct) if program_first else (direct, run_code))))
    llm.reply(openai_reply("done"))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, code_mode="auto")
    async with Engine(settings, {"f": fault_entry(trust={"append": "always"})}, openai_env(llm)) as engine:
        await engine.run("change it", mode="agent")
    program_lines = ["program 0", "program 1", "program 2"]
    expected = [*program_lines, "direct"] if program_first else ["direct", *program_lines]
    assert changes.read_text().splitlines() == expected
