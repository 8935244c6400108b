"""`meta-agent serve` exporting, as a host starts it: the host's trace context (the request's `_meta` on stdio in both
protocol eras, the HTTP `traceparent` header over HTTP) is the parent of the run, whose fallback chain's model calls
and child call follow it, and a child built on the MCP SDK, exporting spans of its own, records them in the same
trace; over OTLP/HTTP and over OTLP/gRPC, each to a receiver of the tests' own."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import FAULT_SERVER, http_serving, openai_env, without_otel
from fake_llm import FakeLLM, anthropic_reply, error_body, openai_reply
from otlp_receiver import GrpcReceiver, OtlpReceiver, ReceivedSpan
from raw_stdio import ENVELOPE, Era, raw_serving

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="the otel extra is not installed")
pytestmark = [pytest.mark.anyio, pytest.mark.processes]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
HOST_SPAN = "00f067aa0ba902b7"  # the host's span: the parent it names
TRACEPARENT = f"00-{TRACE_ID}-{HOST_SPAN}-01"
CHAIN = "anthropic:claude-sonnet-5-5,openai:fake-model"
SERVICE = "meta-agent-under-test"
CHILD_SERVICE = "traced-child"
TRACED_CHILD = FAULT_SERVER.with_name("traced_child.py")
BOUND = 60.0  # seconds for a whole served run on a loaded machine
CLIENT = 3  # OTLP's SpanKind.CLIENT


def servers_json(tmp_path: Path, child_endpoint: str | None = None) -> Path:
    """One child, `kid`, the traced child: exporting to `child_endpoint` over OTLP/HTTP, where given."""
    entry: dict[str, Any] = {"command": sys.executable, "args": [str(TRACED_CHILD)]}
    if child_endpoint:
        entry["env"] = {"OTEL_EXPORTER_OTLP_ENDPOINT": child_endpoint, "OTEL_SERVICE_NAME": CHILD_SERVICE}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"kid": entry}}))
    return path


def environ(llm: FakeLLM, **otel: str) -> dict[str, str]:
    """meta-agent's environment: the fallback chain at the fake model, and the `OTEL_*` variables `otel` only."""
    clean = without_otel()
    return openai_env(
        llm,
        model=CHAIN,
        base=clean,
        ANTHROPIC_BASE_URL=llm.url,
        ANTHROPIC_API_KEY="sk-ant",
        OTEL_SERVICE_NAME=SERVICE,
        **otel,
    )


def script(llm: FakeLLM) -> None:
    """The model's part: Claude asks for the child's whoami, is then unavailable, and the fallback answers."""
    llm.reply(anthropic_reply({"type": "tool_use", "id": "toolu_1", "name": "kid__whoami", "input": {}}))
    for _ in range(3):  # the Anthropic SDK's three tries
        llm.reply(error_body("overloaded", "overloaded_error"), 503, retry_after_ms="1")
    llm.reply(openai_reply("I am traced."))


def what_the_child_saw(llm: FakeLLM) -> dict[str, str]:
    [tool_message] = [m for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    seen: dict[str, str] = json.loads(tool_message["content"])
    return seen


def named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name == name]


def check_the_run(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    """meta-agent's spans of the run, all in the host's trace and under the host's span; by name, the run's and the
    tool call's."""
    ours = [span for span in spans if span.service == SERVICE]
    assert ours, [(span.service, span.name) for span in spans]
    [run] = named(ours, "invoke_agent meta-agent")
    assert run.trace_id == TRACE_ID
    by_id = {span.span_id: span for span in ours}
    top = run
    while top.parent_span_id in by_id:  # up through the MCP SDK's span of the request
        top = by_id[top.parent_span_id]
    assert top.parent_span_id == HOST_SPAN, (top.name, top.parent_span_id)
    assert {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "meta-agent",
    }.items() <= run.attributes.items()
    # the fallback chain: Claude's two calls (the second failed) and the fallback's one, each its own CLIENT span
    claude, fallback = named(ours, "chat claude-sonnet-5-5"), named(ours, "chat fake-model")
    assert len(claude) == 2 and len(fallback) == 1, [span.name for span in ours]
    for span in [*claude, *fallback]:
        assert span.kind == CLIENT and span.trace_id == TRACE_ID and span.parent_span_id == run.span_id
    assert [span.attributes.get("gen_ai.provider.name") for span in claude] == ["anthropic", "anthropic"]
    assert sorted(str(span.attributes.get("error.type")) for span in claude) == ["None", "ProviderUnavailable"]
    assert fallback[0].attributes["gen_ai.provider.name"] == "openai"
    assert fallback[0].attributes["gen_ai.usage.input_tokens"] == 12
    [tool] = named(ours, "execute_tool kid.whoami")
    assert tool.parent_span_id == run.span_id
    expected = {"gen_ai.tool.name": "kid.whoami", "gen_ai.tool.call.id": "toolu_1", "mcp.method.name": "tools/call"}
    assert expected.items() <= tool.attributes.items()
    [sent] = named(ours, "MCP send tools/call whoami")
    assert sent.parent_span_id == tool.span_id and sent.trace_id == TRACE_ID
    return {"run": run, "tool": tool, "sent": sent}


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_serve_on_stdio_exports_the_run_in_the_hosts_trace(llm: FakeLLM, tmp_path: Path, era: Era) -> None:
    """Over OTLP/HTTP: the run, its model calls and its tool call, the SDK's call to the child and the child's own
    spans, one trace, the host's; and the metrics of the model calls and of the request."""
    script(llm)
    with OtlpReceiver() as receiver:
        env = environ(llm, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url)
        async with raw_serving(tmp_path, era, env, servers_json(tmp_path, receiver.url)) as host:
            await host.handshake()
            params = {"name": "agent", "arguments": {"task": "who are you?"}, "_meta": {"traceparent": TRACEPARENT}}
            answer = await host.request("tools/call", params)
            assert answer["result"]["content"][0]["text"] == "I am traced.", answer
            await host.process.stdin.aclose()  # type: ignore[union-attr]  # the host goes: serve ends, flushed
            assert await host.exit_code() == 0, (tmp_path / "stderr.log").read_text()
        spans = receiver.spans
        run = check_the_run(spans)
        # the child's own spans, exported by its own SDK: in the host's trace, under the call meta-agent sent
        theirs = [span for span in spans if span.service == CHILD_SERVICE]
        [work] = named(theirs, "child work")
        assert work.trace_id == TRACE_ID
        [handled] = [span for span in theirs if span.span_id == work.parent_span_id]
        assert handled.parent_span_id == run["sent"].span_id
        assert what_the_child_saw(llm)["caller_span_id"] == run["sent"].span_id
        # the metrics: each model of the chain its own series, the failed call's with its error; the request's
        calls = {
            (point.attributes["gen_ai.request.model"], point.attributes.get("error.type")): point.count
            for point in receiver.points("gen_ai.client.operation.duration")
        }
        assert calls == {
            ("claude-sonnet-5-5", None): 1,
            ("claude-sonnet-5-5", "ProviderUnavailable"): 1,
            ("fake-model", None): 1,
        }
        served = {point.attributes["mcp.method.name"] for point in receiver.points("mcp.server.operation.duration")}
        assert "tools/call" in served


async def test_serve_over_http_takes_the_traceparent_header_and_exports_over_grpc(llm: FakeLLM, tmp_path: Path) -> None:
    """A host that traces its HTTP requests, not its MCP messages: the header parents the run; OTLP/gRPC."""
    script(llm)
    with GrpcReceiver() as receiver:
        env = environ(llm, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
        with http_serving(servers_json(tmp_path), env) as (base, _):
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "agent", "arguments": {"task": "who are you?"}, "_meta": ENVELOPE},
            }
            headers = {
                "Accept": "application/json, text/event-stream",
                "Mcp-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/call",
                "Mcp-Name": "agent",
                "traceparent": TRACEPARENT,
            }
            async with httpx2.AsyncClient(timeout=BOUND) as http:
                answer = (await http.post(f"{base}/mcp", json=body, headers=headers)).json()
            assert answer["result"]["content"][0]["text"] == "I am traced.", answer
        # stopped (SIGTERM): the last spans and metrics were flushed on the way out
        run = check_the_run(receiver.spans)
        seen = what_the_child_saw(llm)  # the child's SDK, not exporting here, says where its spans went
        assert (seen["trace_id"], seen["caller_span_id"]) == (TRACE_ID, run["sent"].span_id)
        tokens = {point.attributes["gen_ai.token.type"] for point in receiver.points("gen_ai.client.token.usage")}
        assert tokens == {"input", "output"}
