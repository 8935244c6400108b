"""One trace per run, end to end: the host's traceparent (in the request's `_meta`) is the run's parent, and a child
built on the MCP SDK, recording spans of its own, records them in that same trace; a malformed one starts a trace;
a model call goes out with its `chat` span current, so what the call's client traces joins the run's trace."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FAULT_SERVER, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import types as t
from mcp.client import Client
from opentelemetry import context as otel_context
from opentelemetry import propagate
from span_capture import install

from meta_agent.config.servers import ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.processes]
EXPORTER = install()
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
KID = ServerEntry(command=sys.executable, args=(str(FAULT_SERVER.with_name("traced_child.py")),))


async def run_with(tmp_path: Path, llm: FakeLLM, traceparent: str) -> dict[str, str]:
    """An agent run that calls the child's whoami, started with `traceparent`: what the child saw."""
    llm.reply(openai_reply(None, ("c1", "kid__whoami", {})))
    llm.reply(openai_reply("done"))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path)
    async with Client(build_server(settings, {"kid": KID}, openai_env(llm))) as client:
        result = await client.call_tool("agent", {"task": "who"}, meta={"traceparent": traceparent})
    assert not result.is_error, result.content
    [tool_message] = [m for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    seen: dict[str, str] = json.loads(tool_message["content"])
    return seen


async def test_the_hosts_trace_goes_through_the_run_to_the_child(tmp_path: Path, llm: FakeLLM) -> None:
    EXPORTER.clear()
    seen = await run_with(tmp_path, llm, TRACEPARENT)
    assert seen["trace_id"] == TRACE_ID
    spans = EXPORTER.get_finished_spans()
    [run] = [span for span in spans if span.name == "invoke_agent meta-agent"]
    assert format(run.context.trace_id, "032x") == TRACE_ID
    [sent] = [span for span in spans if span.name == "MCP send tools/call whoami"]
    # the child's span of the request is the child of our SDK's span of the call, itself the tool span's
    assert format(sent.context.span_id, "016x") == seen["caller_span_id"]
    [tool] = [span for span in spans if span.name == "execute_tool kid.whoami"]
    assert sent.parent is not None and sent.parent.span_id == tool.context.span_id


async def test_a_malformed_traceparent_starts_a_trace(tmp_path: Path, llm: FakeLLM) -> None:
    EXPORTER.clear()
    seen = await run_with(tmp_path, llm, "00-not-a-trace-01")
    [run] = [span for span in EXPORTER.get_finished_spans() if span.name == "invoke_agent meta-agent"]
    assert seen["trace_id"] == format(run.context.trace_id, "032x") != TRACE_ID


async def test_a_model_call_goes_out_in_its_chat_span(tmp_path: Path) -> None:
    """The host's model through sampling: the MCP SDK's request to the host, traced as it goes out, is a child of the
    run's `chat` span (as an HTTP client's span of a provider's call would be), in the host's trace."""
    asked: list[t.CreateMessageRequestParams] = []

    async def sample(_ctx: Any, params: t.CreateMessageRequestParams) -> t.CreateMessageResultWithTools:
        asked.append(params)
        text = t.TextContent(type="text", text="sampled")
        return t.CreateMessageResultWithTools(role="assistant", content=[text], model="host", stop_reason="endTurn")

    EXPORTER.clear()
    caps = t.SamplingCapability(tools=t.SamplingToolsCapability())
    server = build_server(Settings(model="sampling", trace_dir=tmp_path), {}, {})
    # the host's trace is its current context: its SDK's span of the call, sent in `_meta`, is in TRACE_ID's trace
    host = otel_context.attach(propagate.extract({"traceparent": TRACEPARENT}))
    try:
        async with Client(server, mode="legacy", sampling_callback=sample, sampling_capabilities=caps) as client:
            result = await client.call_tool("agent", {"task": "hi"})
    finally:
        otel_context.detach(host)
    assert not result.is_error, result.content
    spans = EXPORTER.get_finished_spans()
    [chat] = [span for span in spans if span.name.startswith("chat ")]
    [sent] = [span for span in spans if span.name == "MCP send sampling/createMessage"]
    assert sent.parent is not None and sent.parent.span_id == chat.context.span_id
    assert format(chat.context.trace_id, "032x") == TRACE_ID
    [params] = asked
    assert params.meta is not None
    sent_on = str(params.meta.get("traceparent") if isinstance(params.meta, dict) else params.meta.traceparent)
    assert sent_on.split("-")[1:3] == [TRACE_ID, format(sent.context.span_id, "016x")]


async def test_a_task_runs_in_the_trace_of_the_call_that_made_it(tmp_path: Path, llm: FakeLLM) -> None:
    """A 2025-11-25 task runs on in a task group of the server's, long after its call answered: its run, and the
    child's spans, are in the host's trace all the same."""
    llm.reply(openai_reply(None, ("c1", "kid__whoami", {})))
    llm.reply(openai_reply("done"))
    EXPORTER.clear()
    server = build_server(Settings(model="openai:fake-model", trace_dir=tmp_path), {"kid": KID}, openai_env(llm))
    async with Client(server, mode="legacy") as client:  # connected outside the host's trace: only the call is in it
        send = client.session._dispatcher.send_raw_request
        params = {"name": "agent", "arguments": {"task": "who"}, "task": {}}
        host = otel_context.attach(propagate.extract({"traceparent": TRACEPARENT}))
        try:
            created = await send("tools/call", params, None)
        finally:
            otel_context.detach(host)
        result = await send("tasks/result", {"taskId": created["task"]["taskId"]}, None)
    assert not result.get("isError"), result
    [run] = [span for span in EXPORTER.get_finished_spans() if span.name == "invoke_agent meta-agent"]
    assert format(run.context.trace_id, "032x") == TRACE_ID
    [tool_message] = [m for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    assert json.loads(tool_message["content"])["trace_id"] == TRACE_ID
