"""OpenTelemetry spans of a real run, caught by the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from meta_agent.config.settings import Settings
from meta_agent.engine import Engine

pytestmark = pytest.mark.anyio
EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> Iterator[None]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(tracer_provider)  # the process's one provider; only this module configures one
    yield
    tracer_provider.shutdown()


async def test_a_run_a_model_call_and_a_tool_call_are_spans(tmp_path: Path, llm: FakeLLM) -> None:
    EXPORTER.clear()
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "hi"}), ("c2", "f__echo", {"text": 5})))
    llm.reply(openai_reply("done", usage=(40, 4)))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path)
    async with Engine(settings, {"f": fault_entry()}, openai_env(llm)) as engine:
        result = await engine.run("t", mode="agent")
    spans = EXPORTER.get_finished_spans()
    by_name: dict[str, list] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    [run] = by_name["meta_agent.run"]
    assert run.attributes["meta_agent.run_id"] == result.run_id
    assert run.attributes["meta_agent.stop_reason"] == "final"
    assert len(by_name["meta_agent.model"]) == 2
    assert by_name["meta_agent.model"][1].attributes["gen_ai.usage.input_tokens"] == 40
    tools = by_name["meta_agent.tool"]
    assert sorted(t.attributes["meta_agent.ok"] for t in tools) == [False, True]  # the bad argument failed
    ours = [span for span in spans if span.name.startswith("meta_agent.")]
    assert all(span.context.trace_id == run.context.trace_id for span in ours)
    assert all(
        span.parent is not None and span.parent.span_id == run.context.span_id for span in ours if span is not run
    )


async def test_a_model_turn_the_deadline_cuts_ends_its_span(tmp_path: Path, llm: FakeLLM) -> None:
    EXPORTER.clear()
    llm.reply(openai_reply("too late"), delay=30)  # answered only once the client has gone away
    llm.reply(openai_reply("out of time"))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, time_limit=0.5)
    async with Engine(settings, {}, openai_env(llm)) as engine:
        result = await engine.run("t", mode="agent")
    assert result.stop_reason == "deadline"
    cut, last = [span for span in EXPORTER.get_finished_spans() if span.name == "meta_agent.model"]
    assert (cut.status.status_code, cut.status.description) == (StatusCode.ERROR, "cut: deadline")
    assert (last.attributes["meta_agent.final"], last.status.status_code) == (True, StatusCode.UNSET)
