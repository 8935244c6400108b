"""OpenTelemetry spans of a real run by the GenAI conventions, caught by the SDK's in-memory exporter: names, kinds and
attributes of the agent, model (a fallback chain's each call) and tool spans; contents only on opting in, redacted and
bounded."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, anthropic_reply, error_body, openai_reply
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from span_capture import install

from meta_agent.config.settings import Settings
from meta_agent.core import events as ev
from meta_agent.core.messages import ModelRequest, ModelResponse, TextPart, UserMessage
from meta_agent.engine import Engine
from meta_agent.records.telemetry import MAX_ATTRIBUTE_CHARS, Spans, capture_content, parent_context
from meta_agent.records.traces import Redactor

pytestmark = pytest.mark.anyio
EXPORTER = install()
CHAIN = "anthropic:claude-sonnet-5-5,openai:fake-model"


def by_name(spans: Any) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def check(span: ReadableSpan, expected: dict[str, Any]) -> None:
    """The span's attributes that `expected` names are as it says."""
    attributes = dict(span.attributes or {})
    assert {key: attributes.get(key) for key in expected} == expected


async def test_an_agent_run_with_a_child_call_and_a_fallback(tmp_path: Path, llm: FakeLLM) -> None:
    EXPORTER.clear()
    llm.reply(anthropic_reply({"type": "tool_use", "id": "toolu_1", "name": "f__echo", "input": {"text": "a"}}))
    for _ in range(3):  # the SDK's three tries: the model is unavailable
        llm.reply(error_body("overloaded", "overloaded_error"), 503, retry_after_ms="1")
    llm.reply(openai_reply("echoed a", usage=(40, 4)))
    settings = Settings(model=CHAIN, trace_dir=tmp_path)
    environ = {**openai_env(llm), "ANTHROPIC_BASE_URL": llm.url, "ANTHROPIC_API_KEY": "sk-ant"}
    async with Engine(settings, {"f": fault_entry()}, environ) as engine:
        result = await engine.run("echo a", mode="agent")
    assert result.answer == "echoed a"
    spans = by_name(EXPORTER.get_finished_spans())
    [run] = spans["invoke_agent meta-agent"]
    assert run.kind == SpanKind.INTERNAL
    check(
        run,
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "meta-agent",
            "gen_ai.conversation.id": result.conversation_id,
            "meta_agent.run_id": result.run_id,
            "meta_agent.mode": "agent",
            "meta_agent.stop_reason": "final",
        },
    )
    answered, failed = spans["chat claude-sonnet-5-5"]
    [fallback] = spans["chat fake-model"]
    assert {span.kind for span in (answered, failed, fallback)} == {SpanKind.CLIENT}
    check(
        answered,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": "claude-sonnet-5-5",
            "gen_ai.response.model": "fake",
            "gen_ai.response.id": "msg_fake",
            "gen_ai.response.finish_reasons": ("tool_use",),
            "gen_ai.usage.input_tokens": 20,
            "gen_ai.usage.output_tokens": 9,
        },
    )
    assert failed.status.status_code == StatusCode.ERROR and "HTTP 503" in (failed.status.description or "")
    assert (failed.attributes or {})["error.type"] == "ProviderUnavailable"
    assert "gen_ai.response.id" not in (failed.attributes or {})
    check(
        fallback,
        {
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "fake-model",
            "gen_ai.response.id": "chatcmpl-fake",
            "gen_ai.response.finish_reasons": ("stop",),
            "gen_ai.usage.input_tokens": 40,
        },
    )
    [tool] = [span for name, each in spans.items() if name.startswith("execute_tool ") for span in each]
    assert tool.kind == SpanKind.INTERNAL
    check(
        tool,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.call.id": "toolu_1",
            "gen_ai.tool.type": "extension",
            "mcp.method.name": "tools/call",
            "meta_agent.server": "f",
        },
    )
    assert tool.name.removeprefix("execute_tool ") == (tool.attributes or {})["gen_ai.tool.name"] == "f.echo"
    # the MCP SDK's span of the child's call is the tool span's child: the run's trace goes on to the child
    [sent] = [span for span in EXPORTER.get_finished_spans() if span.name.startswith("MCP send tools/call")]
    assert sent.parent is not None and sent.parent.span_id == tool.context.span_id
    ours = [answered, failed, fallback, tool]
    assert all(span.parent is not None and span.parent.span_id == run.context.span_id for span in ours)
    assert {span.context.trace_id for span in (*ours, sent)} == {run.context.trace_id}
    assert not any(key.startswith("gen_ai.input") for span in ours for key in (span.attributes or {}))  # off


async def test_a_model_turn_the_deadline_cuts_ends_its_span(tmp_path: Path, llm: FakeLLM) -> None:
    EXPORTER.clear()
    llm.reply(openai_reply("too late"), delay=30)  # answered only once the client has gone away
    llm.reply(openai_reply("out of time"))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, time_limit=0.5)
    async with Engine(settings, {}, openai_env(llm)) as engine:
        result = await engine.run("t", mode="agent")
    assert result.stop_reason == "deadline"
    cut, last = by_name(EXPORTER.get_finished_spans())["chat fake-model"]
    assert (cut.status.status_code, cut.status.description) == (StatusCode.ERROR, "cut: deadline")
    assert (cut.attributes or {})["error.type"] == "deadline"
    assert (last.attributes or {})["meta_agent.final"] is True and last.status.status_code == StatusCode.UNSET


def test_content_capture_is_off_unless_opted_in() -> None:
    assert not capture_content({})
    assert not capture_content({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false"})
    assert capture_content({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "True"})


async def a_run(spans: Spans, *, argument: str, result: str, error: str | None = None) -> None:
    """The events of a run with one model call and one tool call, into `spans`."""
    await spans(ev.RunStarted(run_id="r1", mode="agent", task=f"use {argument}", model="openai:m", tools=("k.t",)))
    await spans(ev.ModelTurnStarted(step=1))
    request = ModelRequest(system="be brief", messages=(UserMessage.of(f"use {argument}"),))
    await spans(ev.ModelRequested(step=1, request=request))
    response = ModelResponse(text=f"ok {argument}", model="m-1", id="resp-1", finish_reasons=("stop",))
    await spans(
        ev.ModelResponded(
            step=1, text="", tool_calls=(), input_tokens=1, output_tokens=1, duration_ms=1, response=response
        )
    )
    await spans(ev.ToolCallStarted(step=2, call_id="c1", name="k.t", arguments={"key": argument}, server="k"))
    parts = (TextPart(text=result),)
    await spans(
        ev.ToolCallFinished(
            step=2, call_id="c1", name="k.t", ok=error is None, duration_ms=1, error=error, result=parts
        )
    )
    await spans(ev.RunFailed(run_id="r1", error=f"gave up on {argument}", error_type="ProviderError"))


async def test_contents_when_opted_in_are_redacted_and_bounded() -> None:
    EXPORTER.clear()
    secret = "s3cr3t-value-of-the-key"
    spans = Spans(redact=Redactor([secret]), capture=True)
    huge = "x" * 1_000_000
    await a_run(spans, argument=secret, result=huge + secret, error=f"failed with {secret} " + huge)
    finished = EXPORTER.get_finished_spans()
    values = [value for span in finished for value in (span.attributes or {}).values()]
    values += [span.status.description or "" for span in finished]
    texts = [value for value in values if isinstance(value, str)]
    assert not any(secret in text for text in texts)
    assert all(len(text) <= MAX_ATTRIBUTE_CHARS for text in texts)
    named = by_name(finished)
    [chat] = named["chat m"]
    attributes = chat.attributes or {}
    assert "[redacted]" in str(attributes["gen_ai.input.messages"]) and "be brief" in str(
        attributes["gen_ai.system_instructions"]
    )
    assert "ok [redacted]" in str(attributes["gen_ai.output.messages"])
    [tool] = named["execute_tool k.t"]
    assert str((tool.attributes or {})["gen_ai.tool.call.arguments"]) == '{"key": "[redacted]"}'
    assert str((tool.attributes or {})["gen_ai.tool.call.result"]).endswith("…")


class _Untouchable(tuple[Any, ...]):
    """Parts that fail the test if anything walks them."""

    def __iter__(self) -> Any:
        raise AssertionError("a message past the attribute's bound was walked")


async def test_a_long_transcript_is_cut_before_it_is_encoded() -> None:
    """A model call's 200,000 messages of 100,000 characters each (20 GB, were they encoded) give an attribute of the
    bound, holding the first message; the messages past the bound are never walked."""
    EXPORTER.clear()
    spans = Spans(capture=True)
    await spans(ev.RunStarted(run_id="r1", mode="agent", task="t", model="openai:m", tools=()))
    await spans(ev.ModelTurnStarted(step=1))
    long = UserMessage.of("y" * 100_000)
    past = UserMessage(parts=_Untouchable())
    messages = (UserMessage.of("first"), long, *(past,) * 200_000)
    await spans(ev.ModelRequested(step=1, request=ModelRequest(system="s", messages=messages)))
    await spans(ev.RunFailed(run_id="r1", error="stopped", error_type="ProviderError"))
    [chat] = by_name(EXPORTER.get_finished_spans())["chat m"]
    sent = str((chat.attributes or {})["gen_ai.input.messages"])
    assert len(sent) == MAX_ATTRIBUTE_CHARS and sent.endswith("…")
    assert sent.startswith('[{"role": "user", "parts": [{"type": "text", "content": "first"}]}, ')


async def test_no_contents_without_opting_in() -> None:
    EXPORTER.clear()
    await a_run(Spans(capture=False), argument="visible", result="result text")
    values = [str(value) for span in EXPORTER.get_finished_spans() for value in (span.attributes or {}).values()]
    assert not any("visible" in value or "result text" in value for value in values)


@pytest.mark.parametrize(
    "traceparent",
    ["", "garbage", "00-zzzz-0000-01", "00-00000000000000000000000000000000-0000000000000000-01", "00-" + "a" * 5000],
)
def test_a_malformed_traceparent_names_no_parent(traceparent: str) -> None:
    assert parent_context(traceparent) is None


def test_a_traceparent_names_its_trace() -> None:
    context = parent_context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v")
    assert context is not None


async def test_a_huge_tool_name_is_bounded_in_the_span() -> None:
    """A model that calls a tool of a name of a megabyte (no such tool), or a child that lists one: the span's name
    and attributes are bounded as any."""
    EXPORTER.clear()
    spans = Spans(capture=False)
    huge = "n" * 1_000_000
    await spans(ev.RunStarted(run_id="r1", mode="agent", task="t", model="openai:m", tools=("k.t",)))
    for call_id, server in (("c1", None), ("c2", "k" * 1_000_000)):
        await spans(ev.ToolCallStarted(step=1, call_id=call_id, name=huge, arguments={}, server=server))
        await spans(ev.ToolCallFinished(step=1, call_id=call_id, name=huge, ok=False, duration_ms=1, error="no"))
    await spans(ev.RunFinished(result=SimpleNamespace(stop_reason="final")))  # type: ignore[arg-type]
    finished = EXPORTER.get_finished_spans()
    assert len(finished) == 3
    assert all(len(span.name) <= len("execute_tool ") + MAX_ATTRIBUTE_CHARS for span in finished)
    values = [value for span in finished for value in (span.attributes or {}).values() if isinstance(value, str)]
    assert all(len(value) <= MAX_ATTRIBUTE_CHARS for value in values)


async def test_a_secret_with_quotes_and_accents_is_redacted_in_contents() -> None:
    """A password of non-ASCII letters and a quote or backslash: the content attributes are JSON that keeps the
    letters as they are and escapes the quote, which is neither form of the secret the redactor knew."""
    EXPORTER.clear()
    secret = 'pässwört"\\12345'
    spans = Spans(redact=Redactor([secret]), capture=True)
    await a_run(spans, argument=secret, result=secret, error=secret)
    finished = EXPORTER.get_finished_spans()
    texts = [str(value) for span in finished for value in (span.attributes or {}).values()]
    texts += [span.status.description or "" for span in finished]
    assert not any("pässwört" in text for text in texts)


async def test_the_run_span_ends_when_the_callers_sink_fails(tmp_path: Path, llm: FakeLLM) -> None:
    """A caller's sink that raises (a host gone while its progress is sent): the run ends with the error, and its
    span and the model call's end with it, not left open for good."""
    EXPORTER.clear()
    llm.reply(openai_reply("never read"))

    async def gone(event: ev.Event) -> None:
        if not isinstance(event, ev.RunStarted):
            raise RuntimeError("the host went away")

    async with Engine(Settings(model="openai:fake-model", trace_dir=tmp_path), {}, openai_env(llm)) as engine:
        with pytest.raises(RuntimeError):
            await engine.run("t", mode="agent", emit=gone)
    [run] = by_name(EXPORTER.get_finished_spans())["invoke_agent meta-agent"]
    assert run.status.status_code == StatusCode.ERROR


async def test_a_lone_surrogate_does_not_sink_the_export() -> None:
    """A model endpoint's JSON may escape half a character ("\\ud800"), which Python decodes as a lone surrogate, in
    a tool's name or its response's model: OTLP cannot encode that, and a span name it cannot encode failed the whole
    batch, the other runs' spans with it. What goes out is valid UTF-8."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    EXPORTER.clear()
    spans = Spans(capture=True)
    half = "\ud800"
    await spans(ev.RunStarted(run_id="r1", mode="agent", task=f"t{half}", model="openai:m", tools=()))
    await spans(ev.ModelTurnStarted(step=1))
    response = ModelResponse(text=f"a{half}", model=f"m{half}", id=f"i{half}", finish_reasons=(f"s{half}",))
    await spans(
        ev.ModelResponded(
            step=1, text="", tool_calls=(), input_tokens=1, output_tokens=1, duration_ms=1, response=response
        )
    )
    await spans(ev.ToolCallStarted(step=2, call_id=f"c{half}", name=f"t{half}", arguments={f"k{half}": half}))
    await spans(ev.ToolCallFinished(step=2, call_id=f"c{half}", name=f"t{half}", ok=False, duration_ms=1, error=half))
    await spans(ev.RunFailed(run_id="r1", error=f"failed {half}", error_type="ProviderError"))
    finished = EXPORTER.get_finished_spans()
    encode_spans(finished).SerializeToString()  # raises where a span's name or status cannot be encoded
    for span in finished:
        for value in (span.name, span.status.description or "", *map(str, (span.attributes or {}).values())):
            value.encode("utf-8")


async def test_two_calls_of_one_id_each_end_their_span() -> None:
    """A model that gives two calls of a step the same id (nothing makes ids unique): both spans end, neither is
    left open for good."""
    EXPORTER.clear()
    spans = Spans(capture=False)
    await spans(ev.RunStarted(run_id="r1", mode="agent", task="t", model="openai:m", tools=("k.a", "k.b")))
    for name in ("k.a", "k.b"):
        await spans(ev.ToolCallStarted(step=1, call_id="same", name=name, arguments={}, server="k"))
    for name in ("k.a", "k.b"):
        await spans(ev.ToolCallFinished(step=1, call_id="same", name=name, ok=True, duration_ms=1))
    await spans(ev.RunFinished(result=SimpleNamespace(stop_reason="final")))  # type: ignore[arg-type]
    named = by_name(EXPORTER.get_finished_spans())
    assert len(named["execute_tool k.a"]) == len(named["execute_tool k.b"]) == 1


@pytest.mark.parametrize("before", [3000, 3900, 4090])
async def test_a_long_secret_at_the_cut_is_redacted_whole(before: int) -> None:
    """A secret longer than the redaction's margin (a JWT, a private key in a server's env) where the attribute is
    cut: no piece of it goes out."""
    EXPORTER.clear()
    secret = "".join(f"{index:04d}" for index in range(500))  # 2,000 characters, no run of them repeated
    spans = Spans(redact=Redactor([secret]), capture=True)
    await a_run(spans, argument="a", result="x" * before + secret, error="x" * before + secret)
    finished = EXPORTER.get_finished_spans()
    texts = [str(value) for span in finished for value in (span.attributes or {}).values()]
    texts += [span.status.description or "" for span in finished]
    pieces = {secret[start : start + 40] for start in range(0, len(secret) - 40, 20)}
    assert not [text for text in texts if any(piece in text for piece in pieces)]


async def test_each_call_of_a_program_is_an_execute_tool_span_under_the_programs(tmp_path: Path, llm: FakeLLM) -> None:
    EXPORTER.clear()
    code = "[call_tool('f.echo', {'text': word})['result'] for word in ('a', 'b')]"
    llm.reply(openai_reply(None, ("c1", "run_code", {"code": code})))
    llm.reply(openai_reply("a b"))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, code_mode="on")
    async with Engine(settings, {"f": fault_entry()}, openai_env(llm)) as engine:
        await engine.run("echo a and b", mode="agent")
    spans = by_name(EXPORTER.get_finished_spans())
    [run] = spans["invoke_agent meta-agent"]
    [program] = spans["execute_tool run_code"]
    echoes = spans["execute_tool f.echo"]
    assert [(span.attributes or {})["gen_ai.tool.call.id"] for span in echoes] == ["c1.1", "c1.2"]
    assert program.parent is not None and program.parent.span_id == run.context.span_id
    assert all(span.parent is not None and span.parent.span_id == program.context.span_id for span in echoes)
    assert {span.context.trace_id for span in (program, *echoes)} == {run.context.trace_id}
