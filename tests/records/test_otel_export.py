"""`meta-agent run` as a process exporting over OTLP/HTTP to the tests' own receiver: the SDK is set up from the
OTEL_* variables alone, the metrics arrive named and attributed by the conventions, and a collector that is down,
never answers, answers garbage or trickles its answers costs the run nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from collector_front import CollectorFront
from conftest import TIME_COMMAND, free_port, openai_env, without_otel
from fake_llm import FakeLLM, openai_reply
from otlp_receiver import ENDLESS_BYTES, GrpcReceiver, OtlpReceiver

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra is not installed")

META_AGENT = [sys.executable, "-m", "meta_agent"]
# The exporters' timeouts in these runs, in milliseconds: the sum of both is far above what a run may take with a
# bad collector.
EXPORT_TIMEOUT_MS = 20_000
BOUND_S = 15.0  # a generous bound on a whole run's process, well under the exporters' timeouts together


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"time": TIME_COMMAND}}))
    return path


def exported_run(
    llm: FakeLLM, config: Path, endpoint: str, protocol: str = "http/protobuf"
) -> tuple[subprocess.CompletedProcess[str], float]:
    """One run calling the time tool once, exporting to `endpoint` over `protocol`; the process and how long it
    took."""
    llm.reply(openai_reply(None, ("c1", "time__get_current_time", {"timezone": "Asia/Tokyo"})))
    llm.reply(openai_reply("It is evening in Tokyo."))
    clean = without_otel()
    environ = openai_env(
        llm,
        model="openai:fake-model",
        base=clean,
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_EXPORTER_OTLP_TIMEOUT=str(EXPORT_TIMEOUT_MS),
        OTEL_SERVICE_NAME="meta-agent-under-test",
    )
    started = time.monotonic()
    result = subprocess.run(
        [*META_AGENT, "run", "What time is it in Tokyo?", "--config", str(config)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    return result, time.monotonic() - started


def test_a_run_exports_its_spans_and_metrics(llm: FakeLLM, config: Path) -> None:
    with OtlpReceiver() as receiver:
        result, _ = exported_run(llm, config, receiver.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "It is evening in Tokyo.\n"
    spans = receiver.spans
    assert spans, "no span arrived"
    assert {span.service for span in spans} == {"meta-agent-under-test"}
    ours = [
        span
        for span in spans
        if span.attributes.get("meta_agent.run_id") or "gen_ai.usage.input_tokens" in span.attributes
    ]
    assert ours, [span.name for span in spans]

    calls = receiver.points("gen_ai.client.operation.duration")
    assert receiver.received.units["gen_ai.client.operation.duration"] == "s"
    assert len(calls) == 1 and calls[0].count == 2  # two model calls, one model: one series
    expected = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "fake-model"}
    assert expected.items() <= calls[0].attributes.items() and "error.type" not in calls[0].attributes
    assert 0 < calls[0].value < 60

    tokens = {point.attributes["gen_ai.token.type"]: point for point in receiver.points("gen_ai.client.token.usage")}
    assert receiver.received.units["gen_ai.client.token.usage"] == "{token}"
    assert (tokens["input"].value, tokens["input"].count) == (24, 2)  # the fake model's 12 in and 7 out, twice
    assert (tokens["output"].value, tokens["output"].count) == (14, 2)

    [runs] = receiver.points("meta_agent.runs")
    assert runs.attributes["meta_agent.stop_reason"] == "final" and runs.value == 1
    [tools] = receiver.points("meta_agent.tool_calls")
    assert tools.attributes == {"gen_ai.tool.name": "time.get_current_time", "meta_agent.outcome": "ok"}
    assert tools.value == 1
    [child] = receiver.points("mcp.client.operation.duration")
    assert child.attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "get_current_time",
        "meta_agent.server": "time",
    }
    assert child.count == 1 and 0 < child.value < 60


@pytest.mark.parametrize(
    ("behaviour", "protocol"),
    [
        ("down", "http/protobuf"),
        ("slow", "http/protobuf"),
        ("garbage", "http/protobuf"),
        ("trickle", "http/protobuf"),
        ("down", "grpc"),
        ("slow", "grpc"),
        ("trickle", "grpc"),
    ],
)
def test_a_bad_collector_costs_the_run_nothing(llm: FakeLLM, config: Path, behaviour: str, protocol: str) -> None:
    """Down (nothing listens), slow (never answers), garbage, or trickling its answers a byte at a time, over HTTP
    or gRPC: the run succeeds and ends within the bound."""
    if behaviour == "down":
        result, took = exported_run(llm, config, f"http://127.0.0.1:{free_port()}", protocol)
    elif behaviour == "trickle":
        receiving = GrpcReceiver() if protocol == "grpc" else OtlpReceiver()
        with receiving as receiver, CollectorFront(receiver.url, "trickle") as front:
            result, took = exported_run(llm, config, front.url, protocol)
            assert front.trickling.is_set()  # it was tried, and met the trickle
    else:
        receiving = GrpcReceiver(behaviour) if protocol == "grpc" else OtlpReceiver(behaviour)  # type: ignore[arg-type]
        with receiving as receiver:
            result, took = exported_run(llm, config, receiver.url, protocol)
            assert receiver.received.requests > 0  # it was tried
    assert result.returncode == 0, result.stderr
    assert result.stdout == "It is evening in Tokyo.\n"
    assert took < BOUND_S, f"the run took {took:.1f} s with a {behaviour} collector"


def test_an_endless_answer_is_not_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collector (or whatever listens there) answering an export with HTTP 200 and a body of hundreds of MB, or an
    endless one: the exporter's thread reads only a bound of it, not all of it into memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from meta_agent.records import otel_sdk

    with OtlpReceiver("endless") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.url}/v1/traces")
        provider = TracerProvider(shutdown_on_exit=False)
        provider.add_span_processor(SimpleSpanProcessor(otel_sdk._span_exporter("http/protobuf", 5.0)))
        provider.get_tracer("t").start_span("s").end()  # exported here, in this thread
        provider.shutdown()
        assert receiver.received.requests == 1
        assert receiver.sent < ENDLESS_BYTES // 4
