"""The MCP front, driven by the SDK's real Client in memory in both protocol eras, with real children and the real
openai SDK talking to a fake model endpoint on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import re
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as t
import pytest
from conftest import ProgressLog, cancel_while_hanging, fault_entry, free_port, openai_env, processes_with, time_entry
from fake_llm import FakeLLM, anthropic_reply, error_body, images_reply, openai_reply
from fault_server import TINY_PNG
from mcp import Client
from structlog.testing import capture_logs

from meta_agent.children import pool
from meta_agent.config.servers import ServerEntry, ToolFilter
from meta_agent.config.settings import Settings
from meta_agent.core.messages import MAX_ARGUMENT_CHARS, ModelResponse
from meta_agent.front.server import build_server
from meta_agent.providers import openai as openai_provider
from meta_agent.providers.scripted import ScriptedProvider
from meta_agent.records import run_history
from meta_agent.store import trustfile
from meta_agent.toolbox.build import definition_of

pytestmark = pytest.mark.anyio
ERAS = ["2026-07-28", "legacy"]
PNG = base64.b64encode(TINY_PNG).decode()
# The fake endpoint is a local server: there image_gen is offered only with an image model set explicitly.
IMAGE_MODEL = "openai:gpt-image-2.5-flare"


SERVERS = {
    "f": fault_entry(trust={"delete_file": "never"}),
    "time": time_entry(),
}


@pytest.fixture(scope="module", params=ERAS)
async def client(request: pytest.FixtureRequest, llm_endpoint: FakeLLM) -> AsyncIterator[Client]:
    """One server (its children started once) per era for the module."""
    settings = Settings(model="openai:fake-model", image_model=IMAGE_MODEL)
    server = build_server(settings, SERVERS, openai_env(llm_endpoint))
    mode = "legacy" if request.param == "legacy" else "auto"
    async with Client(server, mode=mode) as connected:
        assert connected.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        assert server.engine is not None
        await server.engine.pool.wait_settled()  # every test starts with the children up, whichever runs first
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
        "code",
    }
    assert agent.input_schema["required"] == ["task"]
    assert agent.input_schema["properties"]["task"] == {
        "type": "string",
        "pattern": "\\S",
        "description": "The task to carry out.",
        "title": "Task",
    }
    assert agent.output_schema and {"answer", "stop_reason", "run_id", "steps", "usage"} <= set(
        agent.output_schema["properties"]
    )


async def test_a_tool_added_or_removed_later_is_called_as_listed(tmp_path: Path) -> None:
    """Calls look their tool up among those listed, made once: a tool added after a call is found by the next one,
    and one removed is an unknown tool again."""
    server = build_server(Settings(model="openai:fake-model", trace_dir=tmp_path), {})
    async with Client(server) as client:
        assert (await client.call_tool("agent", {})).is_error  # a call: the tools listed for it are kept
        server.add_tool(lambda: "late", name="late")
        assert (await client.call_tool("late", {})).content[0].text == "late"  # type: ignore[union-attr]
        server.remove_tool("late")
        with pytest.raises(Exception, match="late"):
            await client.call_tool("late", {})


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
    assert messages[0].startswith(f"start · run {structured['run_id']} · agent with openai:fake-model · ")
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
            "tools: pattern 'nope.*' matches no tool (the tools are: image_gen, describe_image, read_result, f.echo",
        ),
        ({"task": "t", "tools": ["bad pattern"]}, "tools: bad pattern 'bad pattern'"),
        ({"task": "t", "tools": ["["]}, "tools: bad pattern '[': unbalanced [ ]"),
        ({"task": "t", "tools": ["f__echo"]}, "tools: pattern 'f__echo' matches no tool (tools are named SERVER.TOOL"),
        (
            {"task": "t", "tools": ["echo"]},
            "tools: pattern 'echo' matches no tool (a server's tools are named SERVER.TOOL, as `meta-agent tools` lists"
            " them: did you mean 'f.echo'?)",
        ),
        ({"task": "t", "max_steps": True}, "max_steps: expected a whole number, got true"),
        ({"task": "t", "token_budget": 2.5}, "token_budget: expected a whole number, got 2.5"),
        ({"task": "t", "max_steps": 500}, "max_steps: 500 is outside 1..50 (META_AGENT_MAX_STEPS_CEILING)"),
        ({"task": "t", "conversation_id": "c-1"}, "conversation_id: unknown conversation 'c-1'"),
    ],
)
async def test_bad_arguments_are_one_line_tool_errors(client: Client, arguments: dict, message: str) -> None:
    result = await client.call_tool("agent", arguments)
    assert result.is_error
    assert text_of(result).startswith(message)
    assert "\n" not in text_of(result)


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("agent", {}, "task: required argument of agent is missing"),
        ("plan", {"tools": ["f.*"]}, "task: required argument of plan is missing"),
        ("ask", {}, "prompt: required argument of ask is missing"),
        ("image_gen", {"size": "auto"}, "prompt: required argument of image_gen is missing"),
        ("agent", {"task": 3}, "task: expected a string, got 3"),
        ("agent", {"task": " \n"}, "task: empty: say what to do"),
        ("ask", {"prompt": ""}, "prompt: empty: say what to do"),
        ("agent", {"task": "t", "tools": [1]}, "tools[0]: expected a string, got 1"),
        ("plan", {"task": "t", "tools": "f.*"}, 'tools: expected a list, got "f.*"'),
        (
            "agent",
            {"task": "t", "max_steps": "many"},
            'max_steps: expected a whole number, got "many"',
        ),
        (
            "image_gen",
            {"prompt": "p", "n": "x" * 100},  # a long value is cut
            f'n: expected a whole number, got "{"x" * 38}…',
        ),
        ("agent", {"task": "t", "max_step": 3}, "max_step: unknown argument of agent (did you mean 'max_steps'?)"),
        ("ask", {"prompt": "p", "color": "red"}, "color: unknown argument of ask (its arguments: prompt, tools)"),
        ("ask", {"prompt": "p", "a\nb": 1}, '"a\\nb": unknown argument of ask (its arguments: prompt, tools)'),
        (
            "plan",
            {"tools": 5, "max_steps": None},
            "task: required argument of plan is missing; tools: expected a list, got 5",
        ),
    ],
)
async def test_every_argument_error_is_one_line_naming_the_argument(
    client: Client, tool: str, arguments: dict[str, Any], message: str
) -> None:
    """Missing, mistyped or unknown: one line that names the argument (not pydantic's multi-line text and URL)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert text_of(result) == message


async def test_our_result_failing_its_own_schema_is_no_argument_error(
    client: Client, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection (a bug cannot be had for real): a structured result of ours that breaks the output schema is
    the SDK's crash report, not an error blaming the caller's arguments."""
    from meta_agent.front import calls as front

    def broken(result: Any) -> t.CallToolResult:
        return t.CallToolResult(content=[t.TextContent(type="text", text="x")], structured_content={"answer": 1})

    monkeypatch.setattr(front, "run_result", broken)  # as the front looks it up
    llm.reply(openai_reply("fine"))
    result = await client.call_tool("agent", {"task": "t"})
    assert result.is_error and text_of(result) == "Error executing tool agent"


async def test_a_provider_outage_is_a_tool_error_naming_the_run(client: Client, llm: FakeLLM) -> None:
    """One line naming the run (to find its trace), and the structured result with stop reason `error`: neither era's
    client checks an error's structured result against the output schema."""
    for _ in range(3):
        llm.reply(error_body("upstream exploded"), 500, retry_after_ms="1")
    progress = ProgressLog()
    result = await client.call_tool("agent", {"task": "t"}, progress_callback=progress)
    assert result.is_error and result.structured_content is not None
    structured = result.structured_content
    assert (structured["stop_reason"], structured["steps"], structured["usage"]["model_calls"]) == ("error", [], 0)
    failure = "openai:fake-model: the provider failed (HTTP 500) after retries: upstream exploded"
    assert text_of(result) == f"{failure} (run_id {structured['run_id']})"
    assert progress.messages[-1].startswith("failed · openai:fake-model: the provider failed")


async def test_a_failed_run_ends_its_trace_with_stop_reason_error(tmp_path: Path, llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "first"})))
    for _ in range(3):
        llm.reply(error_body("upstream exploded"), 500, retry_after_ms="1")
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path)
    async with Client(build_server(settings, {"f": fault_entry()}, openai_env(llm))) as client:
        result = await client.call_tool("agent", {"task": "t"})
    run_id = result.structured_content["run_id"] if result.structured_content else None
    assert result.is_error and text_of(result).endswith(f" (run_id {run_id})")
    last = json.loads((tmp_path / f"{run_id}.jsonl").read_text().splitlines()[-1])
    assert (last["kind"], last["error"]) == ("run_failed", text_of(result).removesuffix(f" (run_id {run_id})"))
    assert last["result"]["stop_reason"] == "error"
    assert [call["name"] for call in last["result"]["steps"][0]["tool_calls"]] == ["f.echo"]  # what it had done
    [summary] = run_history.recent(tmp_path).runs  # `meta-agent runs` reads it
    assert (summary.run_id, summary.stop_reason) == (run_id, "error")


async def test_a_bug_of_ours_is_no_malformed_answer(
    client: Client, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in converting a well-formed answer stays a bug: logged with its traceback, told as ours, naming the run."""

    def broken(_usage: object) -> None:
        raise TypeError("a bug in the conversion")

    monkeypatch.setattr(openai_provider, "_usage", broken)
    llm.reply(openai_reply("fine"))
    with capture_logs() as logged:
        result = await client.call_tool("agent", {"task": "t"})
    assert result.is_error and result.structured_content is not None
    run_id = result.structured_content["run_id"]
    assert text_of(result) == (
        f"meta-agent failed: TypeError: a bug in the conversion (the server log has details) (run_id {run_id})"
    )
    [crash] = [entry for entry in logged if entry["event"] == "run_crashed"]
    assert crash["exc_info"] is True


async def test_tool_arguments_of_100_mb_are_refused_unread_and_never_sent_back(client: Client, llm: FakeLLM) -> None:
    """A model's 100 MB data URL: the call is an error the model sees, and what later turns send, the structured
    result and the conversation hold its empty arguments, not 100 MB each."""
    huge = json.dumps({"text": "data:image/png;base64," + "A" * 100_000_000})
    llm.reply(openai_reply(None, ("c1", "f__echo", huge)))
    llm.reply(openai_reply("carried on"))
    result = await client.call_tool("agent", {"task": "t"})
    assert result.structured_content is not None and text_of(result) == "carried on"
    refusal = f"the arguments for f__echo were over {MAX_ARGUMENT_CHARS:,} characters long; send less"
    [record] = result.structured_content["steps"][0]["tool_calls"]
    assert (record["arguments"], record["ok"], record["error"]) == ({}, False, refusal)
    later = llm.requests[-1].body["messages"]
    assert [m["content"] for m in later if m["role"] == "tool"] == [f"[error] {refusal}"]
    assert len(json.dumps(later)) < 10_000


async def test_tool_arguments_nested_thousands_deep_are_an_error_the_model_sees(client: Client, llm: FakeLLM) -> None:
    """Deeper than Python's JSON reader goes (as JSON text), or than pydantic's JSON writes (as an object in the
    body): each is an invalid-arguments error the model sees, and the run and its structured result go on."""
    body = openai_reply(
        None,
        ("c1", "f__echo", '{"text": ' + "[" * 5000 + "]" * 5000 + "}"),
        ("c2", "f__echo", "{}"),
        ("c3", "f__echo", {"text": "fine"}),
    )
    deep: list[Any] = []
    for _ in range(300):
        deep = [deep]
    body["choices"][0]["message"]["tool_calls"][1]["function"]["arguments"] = {"text": deep}  # an object, not text
    llm.reply(body)
    llm.reply(openai_reply("carried on"))
    result = await client.call_tool("agent", {"task": "t"})
    assert not result.is_error and result.structured_content is not None, text_of(result)
    assert (text_of(result), result.structured_content["stop_reason"]) == ("carried on", "final")
    refusal = "the arguments for f__echo were nested more than 64 levels deep; send a JSON object"
    records = result.structured_content["steps"][0]["tool_calls"]
    assert [(r["arguments"], r["ok"], r.get("error")) for r in records] == [
        ({}, False, refusal),
        ({}, False, refusal),
        ({"text": "fine"}, True, None),
    ]
    told = [m["content"] for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    assert told == [f"[error] {refusal}", f"[error] {refusal}", "fine"]


async def test_plan_offers_read_only_tools_only(client: Client, llm: FakeLLM) -> None:
    llm.reply(openai_reply("1. Check the time.\n2. Report it."))
    result = await client.call_tool("plan", {"task": "plan it"})
    assert text_of(result) == "1. Check the time.\n2. Report it."
    offered = {tool["function"]["name"] for tool in llm.requests[-1].body["tools"]}
    assert {"f__echo", "time__get_current_time", "image_gen"} <= offered
    assert not offered & {"f__crash", "f__delete_file", "f__mutate"}


async def test_plan_says_when_a_pattern_picks_only_tools_it_withholds(client: Client, llm: FakeLLM) -> None:
    """A selector that leaves plan no tool is refused in one line, not run with nothing selected."""
    requests = len(llm.requests)
    result = await client.call_tool("plan", {"task": "plan it", "tools": ["f.delete_*"]})
    assert result.is_error and text_of(result) == (
        "tools: pattern 'f.delete_*' matches only tools plan mode withholds, as they may change things "
        "(f.delete_file); plan uses read-only tools"
    )
    assert len(llm.requests) == requests  # the model was not asked


async def test_the_toolbox_resource(client: Client) -> None:
    result = await client.read_resource("meta-agent://toolbox")
    box = json.loads(result.contents[0].text)  # type: ignore[union-attr]
    assert {s["name"]: s["status"] for s in box["servers"]} == {"f": "ready", "time": "ready"}
    tools = {tool["name"]: tool for tool in box["tools"]}
    assert tools["f.delete_file"]["trust"] == "never"
    assert tools["time.get_current_time"]["annotations"]["readOnlyHint"] is True
    assert tools["image_gen"]["server"] is None


CRASH_DENIED = "denied by tools.deny pattern 'crash'"


async def test_the_toolbox_resource_lists_withheld_tools_the_model_never_gets(llm: FakeLLM) -> None:
    """A tool `tools.deny` filters out is listed greyed out (enabled false, with why), a disabled server has no tool
    rows, and a model that calls a withheld tool anyway hears it is unknown: the child is never asked."""
    servers = {"f": fault_entry(tools=ToolFilter(deny=("crash", "delete_*"))), "off": fault_entry(disabled=True)}
    server = build_server(Settings(model="openai:fake-model", internal_tools=""), servers, openai_env(llm))
    async with Client(server) as client:
        assert server.engine is not None
        await server.engine.pool.wait_settled()
        box = json.loads((await client.read_resource("meta-agent://toolbox")).contents[0].text)  # type: ignore[union-attr]
        llm.reply(openai_reply(None, ("c1", "f__crash", {})))
        llm.reply(openai_reply("it is not there"))
        result = await client.call_tool("agent", {"task": "crash it"})
        after = server.engine.pool["f"].status
    assert {s["name"]: (s["status"], s["tool_count"]) for s in box["servers"]} == {
        "f": ("ready", after.tool_count),
        "off": ("disabled", 0),
    }
    tools = {tool["name"]: tool for tool in box["tools"]}
    assert all(isinstance(tool["enabled"], bool) for tool in tools.values())
    assert (tools["f.echo"]["enabled"], tools["f.echo"]["withheld"]) == (True, None)
    assert (tools["f.crash"]["enabled"], tools["f.crash"]["withheld"]) == (False, CRASH_DENIED)
    assert tools["f.delete_file"]["withheld"] == "denied by tools.deny pattern 'delete_*'"
    assert tools["f.delete_file"]["annotations"]["destructiveHint"] is True
    assert not any(tool["server"] == "off" for tool in tools.values())
    assert text_of(result) == "it is not there"
    offered = {tool["function"]["name"] for tool in llm.requests[0].body["tools"]}
    assert "f__echo" in offered and not offered & {"f__crash", "f__delete_file"}
    [told] = [m["content"] for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    assert told.startswith("[error] unknown tool 'f__crash'; the tools are: f__append, f__confirm, f__echo,")
    assert "f__crash" not in told.split("the tools are: ")[1]
    assert (after.state, after.restarts) == ("ready", 0)  # crash was never called: the child is still up


# In memory only the legacy era: the SDK's in-memory 2026-07-28 dispatcher does not pass a caller's cancel on to
# the handler (over HTTP it does; tests/front/test_transports.py checks that era there).
@pytest.mark.parametrize("era", ["legacy"])
async def test_cancelling_the_call_cancels_the_child_call(era: str, llm: FakeLLM, tmp_path: Path) -> None:
    """The caller cancels while the loop waits on a child: the child's handler is cancelled too (the child writes
    the file when it is; a log line would not do: a logger cached by an earlier test keeps that test's chain)."""
    cancelled = tmp_path / "cancelled"
    llm.reply(openai_reply(None, ("c1", "f__hang", {"cancel_file": str(cancelled)})))
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    async with Client(server, mode="legacy" if era == "legacy" else "auto") as client:
        progress = await cancel_while_hanging(client)
        with anyio.fail_after(30):
            while not cancelled.exists():
                await anyio.sleep(0.05)  # polling a file the child writes
        assert not any(m.startswith("done") for m in progress.messages)  # no result, no "done" after a cancel


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


async def test_without_an_image_backend_image_gen_is_withheld_saying_why() -> None:
    server = build_server(Settings(), {}, {})
    async with Client(server) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == {"ask", "plan", "agent"}
        resource = await client.read_resource("meta-agent://toolbox")
    tools = {tool["name"]: tool for tool in json.loads(resource.contents[0].text)["tools"]}  # type: ignore[union-attr]
    image_gen = tools["image_gen"]
    assert image_gen["enabled"] is False and tools["describe_image"]["enabled"] is True
    assert "OPENAI_API_KEY" in image_gen["withheld"] and "\n" not in image_gen["withheld"]


async def test_internal_tools_can_be_switched_off() -> None:
    server = build_server(Settings(internal_tools=""), {}, {})
    async with Client(server) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == {"ask", "plan", "agent"}


@pytest.mark.parametrize("era", ERAS)
async def test_the_hosts_model_through_sampling_calls_a_childs_tool(era: str) -> None:
    """No model set: the host's model, on its session (2025-11-25) or in rounds of the call (2026-07-28)."""
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
    mode = "legacy" if era == "legacy" else "auto"
    async with Client(server, mode=mode, sampling_callback=sample, sampling_capabilities=caps) as client:
        progress = ProgressLog()
        result = await client.call_tool("agent", {"task": "time?"}, progress_callback=progress)
    assert text_of(result) == "It is noon (UTC), says the host's model."
    assert result.structured_content and result.structured_content["steps"][0]["tool_calls"][0]["ok"] is True
    assert progress.messages[0].startswith(f"start · run {result.structured_content['run_id']} · agent with sampling")  # type: ignore[index]
    assert asked[0].tools and "time__get_current_time" in {tool.name for tool in asked[0].tools}
    last = asked[1].messages[-1]
    assert last.role == "user"
    results = last.content if isinstance(last.content, list) else [last.content]
    assert isinstance(results[0], t.ToolResultContent) and results[0].tool_use_id == "u1"


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


@contextmanager
def never_answering_url() -> Iterator[str]:
    """A /mcp URL on a TCP port that accepts connections (the kernel completes them) and never says a word."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"


async def child_states(client: Client) -> dict[str, str]:
    box = json.loads((await client.read_resource("meta-agent://toolbox")).contents[0].text)  # type: ignore[union-attr]
    return {server["name"]: server["status"] for server in box["servers"]}


# Longer than any run below takes; a run that waited for the mute child would see it give up first.
PATIENT_START = 20.0


@pytest.mark.parametrize("era", ERAS)
async def test_a_run_waits_only_for_the_children_its_tools_need(era: str, llm: FakeLLM) -> None:
    """A child that accepts connections but never answers holds up no run whose tools leave it out: each answers
    while that child is still starting (it would have given up by then, had the run waited for it)."""
    with never_answering_url() as url:
        servers = {"f": fault_entry(), "mute": ServerEntry(url=url)}
        settings = Settings(model="openai:fake-model", image_model=IMAGE_MODEL)
        server = build_server(settings, servers, openai_env(llm), start_timeout=PATIENT_START)
        async with Client(server, mode="legacy" if era == "legacy" else "auto") as client:
            for tool, arguments in [
                ("ask", {"prompt": "hi"}),  # ask uses internal tools only: it needs no child
                ("ask", {"prompt": "hi", "tools": ["image_gen"]}),
                ("agent", {"task": "t", "tools": ["f.*"]}),
                ("agent", {"task": "t", "tools": ["f*", "image_gen"]}),  # a glob over server names that f matches
                ("plan", {"task": "t", "tools": ["[f].echo"]}),
            ]:
                llm.reply(openai_reply("fine"))
                result = await client.call_tool(tool, arguments)
                assert text_of(result) == "fine", (tool, arguments, text_of(result))
                assert (await child_states(client))["mute"] == "starting", (tool, arguments)
            asked = await client.call_tool("ask", {"prompt": "hi", "tools": ["mute.*"]})
            assert text_of(asked) == (
                "tools: pattern 'mute.*' matches no tool of ask mode, which uses internal tools only (image_gen, describe_image)"
            )


async def test_held_children_start_as_soon_as_a_run_needs_them(monkeypatch: pytest.MonkeyPatch, llm: FakeLLM) -> None:
    """A server that holds its children (`serve` on stdio, until its host has had a first answer) holds them until a
    run needs them, then they start and the run's call of the child goes through (held, it would have waited out the
    start timeout and failed)."""
    monkeypatch.setattr(pool, "HOLD_AT_MOST", 600.0)  # not started by the bound while the test runs
    settings = Settings(model="openai:fake-model")
    environ = openai_env(llm)
    server = build_server(settings, {"f": fault_entry()}, environ, start_timeout=PATIENT_START, hold_children=True)
    async with Client(server) as client:
        await anyio.wait_all_tasks_blocked()
        assert server.engine is not None
        assert server.engine.pool["f"].start_deadline is None  # its supervisor has not begun a start
        llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "hi"})))
        llm.reply(openai_reply("done"))
        with anyio.fail_after(PATIENT_START / 2):
            result = await client.call_tool("agent", {"task": "t", "tools": ["f.*"]})
        assert result.structured_content is not None, text_of(result)
        (call,) = result.structured_content["steps"][0]["tool_calls"]
        assert (call["name"], call["ok"]) == ("f.echo", True), call


async def test_a_run_that_needs_a_never_answering_child_waits_its_start_timeout_then_says_why(llm: FakeLLM) -> None:
    with never_answering_url() as url:
        servers = {"mute": ServerEntry(url=url)}
        settings = Settings(model="openai:fake-model", image_model=IMAGE_MODEL)
        server = build_server(settings, servers, openai_env(llm), start_timeout=1)
        async with Client(server) as client:
            for pattern in ["mute.*", "m*.*", "*e.nothing"]:
                result = await client.call_tool("agent", {"task": "t", "tools": [pattern]})
                assert result.is_error
                assert text_of(result) == (
                    f"tools: pattern {pattern!r} matches no tool (server 'mute' is restarting: no answer within 1 s)"
                )
            # Without patterns a run needs every child: it waited for mute, then goes on without its tools, and says so.
            llm.reply(openai_reply("fine"))
            result = await client.call_tool("agent", {"task": "t"})
            assert [block.text for block in result.content if isinstance(block, t.TextContent)] == [
                "fine",
                "Servers not ready, their tools left out of this run: mute (restarting: no answer within 1 s)",
            ]
            assert [tool["function"]["name"] for tool in llm.requests[-1].body["tools"]] == [
                "image_gen",
                "describe_image",
                "read_result",
            ]


async def test_a_failed_start_is_told_at_the_start_timeout_not_once_the_child_is_stopped(llm: FakeLLM) -> None:
    """A child that never answers and ignores SIGTERM takes seconds to stop after giving up its start (stdin closed,
    SIGTERM, then SIGKILL, 2 s apart): the run hears of the failed start at the timeout, while the child is still
    being stopped, so it waits no longer than the start timeout."""
    marker = f"marker-{uuid.uuid4().hex}"
    servers = {"mute": fault_entry("--never-start", "--stubborn", "--name", marker)}
    server = build_server(Settings(model="openai:fake-model"), servers, openai_env(llm), start_timeout=1)
    async with Client(server) as client:
        result = await client.call_tool("agent", {"task": "t", "tools": ["mute.*"]})
        assert processes_with(marker), "the run waited until the child was stopped"
        assert text_of(result) == (
            "tools: pattern 'mute.*' matches no tool (server 'mute' is restarting: no answer within 1 s)"
        )


# -- conversations and trust: state that must not be lost or trusted wrongly ------------------------------------------


class HeldUser:
    """An elicitation callback that allows the call, but only once the test lets it answer."""

    def __init__(self) -> None:
        self.asked = anyio.Event()
        self.may_answer = anyio.Event()

    async def __call__(self, _ctx: Any, _params: Any) -> t.ElicitResult:
        self.asked.set()
        await self.may_answer.wait()
        return t.ElicitResult(action="accept", content={"decision": "allow_once"})


def chat_of(llm: FakeLLM, tag: str) -> list[tuple[str, str]]:
    """(role, text) of the messages of the last model request that mentions `tag`, the system prompt left out."""
    body = next(seen.body for seen in reversed(llm.requests) if tag in json.dumps(seen.body))
    return [(m["role"], m.get("content") or "") for m in body["messages"][1:]]


async def test_concurrent_turns_of_one_conversation_are_serialised(llm: FakeLLM, tmp_path: Path) -> None:
    """A call that continues a conversation while a turn of it runs (here: waiting for the user's approval) waits for
    that turn and starts from it; both turns are in the conversation, in order."""
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "c.sqlite3")
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm))
    user = HeldUser()
    results: dict[str, t.CallToolResult] = {}
    async with Client(server, mode="legacy", elicitation_callback=user) as client:
        llm.reply(openai_reply("noted"), match="<t0>")
        first = await client.call_tool("agent", {"task": "remember <t0>"})
        conversation = first.structured_content["conversation_id"]  # type: ignore[index]

        waiting = ProgressLog()
        assert server.engine is not None
        server.engine.conversations.wait_notice = 0.05

        async def turn(tag: str) -> None:
            arguments = {"task": f"turn {tag}", "conversation_id": conversation}
            progress = waiting if tag == "<B>" else None
            results[tag] = await client.call_tool("agent", arguments, progress_callback=progress)

        llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/a"})), match="<A>")
        llm.reply(openai_reply("A done"), match="<A>")
        llm.reply(openai_reply("B done"), match="<B>")
        with capture_logs() as logs, anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(turn, "<A>")
                await user.asked.wait()  # turn A holds the conversation, waiting for the user
                tg.start_soon(turn, "<B>")
                while not any(e["event"] == "conversation_waiting" for e in logs) and not any(
                    "<B>" in json.dumps(seen.body) for seen in llm.requests
                ):
                    await anyio.sleep(0.01)  # until B waits for A (or, wrongly, runs beside it)
                await waiting.until("for the conversation's previous turn")  # B's caller hears it waits
                assert re.match(r"waiting · run [0-9A-Z]{26} · for ", waiting.messages[0]), waiting.messages
                user.may_answer.set()
        assert [text_of(results[tag]) for tag in ("<A>", "<B>")] == ["A done", "B done"]
        turn_a = [("user", "turn <A>"), ("assistant", ""), ("tool", "deleted /a"), ("assistant", "A done")]
        assert chat_of(llm, "<B>") == [("user", "remember <t0>"), ("assistant", "noted"), *turn_a, ("user", "turn <B>")]

        llm.reply(openai_reply("C done"), match="<C>")
        await turn("<C>")
        assert [text for role, text in chat_of(llm, "<C>") if role == "user"] == [
            "remember <t0>",
            "turn <A>",
            "turn <B>",
            "turn <C>",
        ]


def unanswered_openai(messages: list[dict[str, Any]]) -> list[str]:
    """Tool call ids of assistant messages that the tool messages right after them do not answer."""
    missing: list[str] = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        after = messages[i + 1 : i + 1 + len(message["tool_calls"])]
        answered = {m.get("tool_call_id") for m in after if m["role"] == "tool"}
        missing += [call["id"] for call in message["tool_calls"] if call["id"] not in answered]
    return missing


def unanswered_anthropic(messages: list[dict[str, Any]]) -> list[str]:
    """tool_use ids of assistant messages that the user message right after them does not answer."""
    missing: list[str] = []
    for i, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        uses = [block["id"] for block in blocks if block["type"] == "tool_use"]
        if message["role"] != "assistant" or not uses:
            continue
        after = messages[i + 1]["content"] if i + 1 < len(messages) else []
        answered = {block.get("tool_use_id") for block in after if isinstance(block, dict)}
        missing += [use for use in uses if use not in answered]
    return missing


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
async def test_ask_with_two_tool_calls_saves_a_transcript_every_provider_accepts(
    vendor: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """ask runs the first of two calls; the saved transcript answers both, so continuing it with agent sends every
    provider a request in which each tool call has its result."""
    model = {"openai": "openai:fake-model", "anthropic": "anthropic:claude-sonnet-5-5"}[vendor]
    env = openai_env(llm, ANTHROPIC_BASE_URL=llm.url, ANTHROPIC_API_KEY="sk-ant-test")
    settings = Settings(model=model, image_model="openai:gpt-image-2.5-flare", conversations_db=tmp_path / "c.db")
    tag = f"<two-calls-{vendor}>"
    prompts = [{"prompt": f"a red dot {tag}"}, {"prompt": f"a blue dot {tag}"}]
    if vendor == "openai":
        llm.reply(openai_reply("Two.", ("c1", "image_gen", prompts[0]), ("c2", "image_gen", prompts[1])), match=tag)
    else:
        uses = [{"type": "tool_use", "id": f"t{i}", "name": "image_gen", "input": p} for i, p in enumerate(prompts)]
        llm.reply(anthropic_reply({"type": "text", "text": "Two."}, *uses), match=tag)
    llm.reply(images_reply(PNG), match="a red dot")
    continued = f"<continued-{vendor}>"
    llm.reply(
        openai_reply("Continued.") if vendor == "openai" else anthropic_reply({"type": "text", "text": "Continued."}),
        match=continued,
    )
    async with Client(build_server(settings, {}, env)) as client:
        asked = await client.call_tool("ask", {"prompt": f"draw two dots {tag}"})
        assert not asked.is_error, text_of(asked)
        conversation = asked.structured_content["conversation_id"]  # type: ignore[index]
        result = await client.call_tool("agent", {"task": f"and now? {continued}", "conversation_id": conversation})
    assert text_of(result) == "Continued."
    sent = next(seen.body for seen in reversed(llm.requests) if continued in json.dumps(seen.body))
    unanswered = unanswered_openai if vendor == "openai" else unanswered_anthropic
    assert len(json.dumps(sent).split("image_gen")) > 2 and unanswered(sent["messages"]) == []
    assert "not run: ask runs one tool call, the first one asked for" in json.dumps(sent)


async def test_a_trust_file_broken_while_serving_fails_closed(llm: FakeLLM, tmp_path: Path) -> None:
    """A recorded `always` lets a destructive tool run unasked; a stray comma in the trust file (the server running)
    makes it ask-level again, so a caller that cannot be asked has it refused, and the toolbox says why."""
    path = tmp_path / "servers.trust.json"
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm), trust_file=path)
    async with Client(server) as client:  # declares no elicitation: an ask-level tool is refused
        engine = server.engine
        assert engine is not None
        await engine.pool.wait_settled()
        spec = engine.toolbox().by_name["f.delete_file"]
        record = trustfile.Recorded(level="always", definition=definition_of(spec), recorded="then")
        trustfile.save(path, {spec.name: record})

        async def delete(tag: str) -> dict[str, Any]:
            llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/x"})), match=tag)
            llm.reply(openai_reply("over"), match=tag)
            result = await client.call_tool("agent", {"task": f"delete /x {tag}"})
            return result.structured_content["steps"][0]["tool_calls"][0]  # type: ignore[index]

        assert (await delete("<trusted>"))["ok"]
        path.write_text(path.read_text().replace('"level": "always",', '"level": "always",,'))
        refused = await delete("<broken>")
        assert not refused["ok"] and "servers.json" in refused["error"], refused
        box = json.loads((await client.read_resource("meta-agent://toolbox")).contents[0].text)  # type: ignore[union-attr]
        problem = box["problems"][0]
        assert problem.startswith(f"{path}:") and "invalid JSON" in problem and "\n" not in problem
        assert box["trust_file"] == {"path": str(path), "problem": problem}
        tool = next(tool for tool in box["tools"] if tool["name"] == "f.delete_file")
        assert tool["trust"] == "ask" and tool["trust_source"].endswith("does not apply: the trust file cannot be read")

        trustfile.save(path, {spec.name: record})  # fixed
        assert (await delete("<fixed>"))["ok"]
