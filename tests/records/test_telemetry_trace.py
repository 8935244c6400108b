"""One trace per run, end to end: the host's traceparent (in the request's `_meta`) is the run's parent, and a child
built on the MCP SDK, recording spans of its own, records them in that same trace; a malformed one starts a trace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import FAULT_SERVER, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp.client import Client
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
